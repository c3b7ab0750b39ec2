package natsbus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestRetryDelay(t *testing.T) {
	for n, want := range map[uint64]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second,
		6: natsbus.AckWait, 1000: natsbus.AckWait} {
		if got := natsbus.RetryDelay(n); got != want {
			t.Errorf("RetryDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestDeliveryRetry: a delivery the runtime could not answer for now asks
// to be retried and comes back after RetryDelay(1), before AckWait.
func TestDeliveryRetry(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	agent := startConsume(t, b)
	publishInbound(t, b, bus.Inbound{V: 1, ID: "r1", Channel: "console", ChatID: "c", UserID: "u", Text: "hi"})
	d := agent.next(t)
	r, ok := d.(interface{ Retry() error })
	if !ok {
		t.Fatalf("delivery %T cannot be retried", d)
	}
	if err := r.Retry(); err != nil {
		t.Fatal(err)
	}
	again := agent.next(t) // waits less than AckWait
	md, err := again.(jetstream.Msg).Metadata()
	if err != nil || md.NumDelivered != 2 {
		t.Fatalf("redelivery metadata = %+v, %v; want the second delivery", md, err)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
}
