package agenttest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/agent/agenttest"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBusConformance checks the in-memory bus against the suite the NATS
// bus (bus/natsbus) passes, so that agent tests run on the semantics of the
// real bus.
func TestBusConformance(t *testing.T) {
	bustest.RunSourcePublisher(t, func(t *testing.T) bustest.Harness {
		return &memHarness{Bus: agenttest.NewBus()}
	})
}

// memHarness drives an agenttest.Bus from outside through its own API:
// SendRaw to inject, All to read what was published, Redeliver to stand
// for a restart.
type memHarness struct {
	*agenttest.Bus

	mu        sync.Mutex
	delivered []*agenttest.Delivery // handed out since the last Restart
}

// Consume records the deliveries it hands out, for Restart.
func (h *memHarness) Consume(ctx context.Context, handler func(bus.Delivery)) error {
	return h.Bus.Consume(ctx, func(d bus.Delivery) {
		h.mu.Lock()
		h.delivered = append(h.delivered, d.(*agenttest.Delivery))
		h.mu.Unlock()
		handler(d)
	})
}

func (h *memHarness) Inject(_ testing.TB, subject string, data []byte) { h.SendRaw(subject, data) }

// Stored is what the bus holds durably: the durable publishes on subject
// that the bus stored.
func (h *memHarness) Stored(_ testing.TB, subject string) [][]byte {
	var out [][]byte
	for _, p := range h.All() {
		if p.Durable && !p.Duplicate && p.Subject == subject {
			out = append(out, p.Data)
		}
	}
	return out
}

func (h *memHarness) WatchCore(t testing.TB, subject string) func(n int) [][]byte {
	from := len(h.All())
	core := func() [][]byte {
		var out [][]byte
		for _, p := range h.All()[from:] {
			if !p.Durable && !p.Duplicate && p.Subject == subject {
				out = append(out, p.Data)
			}
		}
		return out
	}
	return func(n int) [][]byte {
		t.Helper()
		h.Wait(t, 10*time.Second, func() bool { return len(core()) >= n }, "core publishes")
		return core()
	}
}

// Restart delivers again every message handed out and not settled (a
// message handed back with NakWithDelay is already due again).
func (h *memHarness) Restart(testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.delivered {
		acked, termed := d.State()
		if !acked && !termed && !d.Nakked() {
			h.Redeliver(d)
		}
	}
	h.delivered = nil
}
