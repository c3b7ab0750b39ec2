package bus

import "time"

// Delivery is the agent runtime's view of one inbound message taken from the
// CHAT_IN stream. natsbus passes a wrapped jetstream.Msg; tests may pass a
// fake.
//
// Acknowledgement contract (DESIGN.md §4): call exactly one of Ack (the final
// outbound of the turn is persisted and published, or the message was a
// duplicate) or Term (the message is invalid and was dead-lettered; it is
// removed and never redelivered), or hand it back with NakWithDelay (the
// runtime cannot hold it now; the bus redelivers it after the delay). Until
// then call InProgress more often than the consumer's AckWait (30 s) so the
// message is not redelivered mid-turn. A message that is neither acked nor
// terminated is redelivered after AckWait, or at once when the embedded bus
// restarts.
//
// The methods send to the server and do not wait for it to confirm; they
// return an error only when the message cannot be acknowledged (e.g. it was
// already acked or the connection is closed). A Delivery is safe for
// concurrent use.
type Delivery interface {
	// Subject is the subject the message was published on,
	// "<p>.in.<channel>.<chat>".
	Subject() string
	// Data is the raw payload (the inbound envelope as JSON). The caller
	// must not modify it.
	Data() []byte
	// Info is the bus's bookkeeping of this delivery.
	Info() DeliveryInfo
	// Ack removes the message from the stream: it was handled.
	Ack() error
	// InProgress resets the redelivery timer.
	InProgress() error
	// NakWithDelay hands the message back: the bus delivers it again after
	// delay (and may deliver later messages of the stream before it).
	NakWithDelay(delay time.Duration) error
	// Term removes the message without redelivery: it can never be handled.
	Term() error
}

// DeliveryInfo is what the bus knows about a delivery.
type DeliveryInfo struct {
	// Sequence is the message's position in the stream (its order of
	// arrival); 0 when unknown. A redelivery keeps the sequence.
	Sequence uint64
	// NumDelivered counts the deliveries of the message, this one included:
	// 1 the first time, more when it is delivered again (after an expired
	// AckWait or a NakWithDelay). The count is the consumer's: the embedded
	// bus creates its consumer afresh at start-up, so a message redelivered
	// after a restart counts 1 again (its Sequence is kept).
	NumDelivered uint64
}
