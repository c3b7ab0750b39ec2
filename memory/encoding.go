package memory

import (
	"encoding/json"
	"fmt"
	"time"
)

// The stored form of history, shared by every Store implementation (the
// bbolt store and the memtest fake): each message and each receipt is its
// JSON encoding, one value per message or receipt. A store that keeps
// these bytes reads back exactly what it was given.

// EncodedTurn is a [TurnRecord] in its stored form ([EncodeTurn]).
type EncodedTurn struct {
	// Messages are the encoded rec.Messages, in order.
	Messages [][]byte
	// Turns is how many of the messages start a turn.
	Turns int
	// Receipts are rec.Receipt and then rec.Also, encoded.
	Receipts []EncodedReceipt
}

// EncodedReceipt is one receipt in its stored form, with its key.
type EncodedReceipt struct {
	Key   string
	Value []byte
}

// EncodeTurn returns rec in its stored form. A zero message or receipt
// time becomes now; every receipt carries rec.Session. It does not
// validate rec ([TurnRecord.Validate] does); its errors name the part that
// could not be encoded ("encode messages[2]: ...").
func EncodeTurn(rec TurnRecord, now time.Time) (EncodedTurn, error) {
	enc := EncodedTurn{Messages: make([][]byte, len(rec.Messages)), Receipts: make([]EncodedReceipt, 0, 1+len(rec.Also))}
	for i, m := range rec.Messages {
		if m.Time.IsZero() {
			m.Time = now
		}
		if m.TurnStart {
			enc.Turns++
		}
		b, err := json.Marshal(m)
		if err != nil {
			return EncodedTurn{}, fmt.Errorf("encode messages[%d]: %w", i, err)
		}
		enc.Messages[i] = b
	}
	for _, r := range append([]Receipt{rec.Receipt}, rec.Also...) {
		r.Session = rec.Session
		if r.Time.IsZero() {
			r.Time = now
		}
		b, err := EncodeReceipt(r)
		if err != nil {
			return EncodedTurn{}, err
		}
		enc.Receipts = append(enc.Receipts, EncodedReceipt{Key: r.Key, Value: b})
	}
	return enc, nil
}

// EncodeReceipt returns the stored form of r.
func EncodeReceipt(r Receipt) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode receipt %q: %w", r.Key, err)
	}
	return b, nil
}

// DecodeReceipt reads a receipt in its stored form; bytes that are not one
// give an error wrapping [ErrInvalid].
func DecodeReceipt(b []byte) (Receipt, error) {
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return Receipt{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return r, nil
}

// DecodeMessage reads a message in its stored form; bytes that are not
// one give an error wrapping [ErrInvalid].
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return m, nil
}
