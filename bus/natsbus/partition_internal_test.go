package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// TestPartitionHeldCount: every message a partition delivers is counted
// as held until the handler settles it (the balance releases only a
// partition holding none).
func TestPartitionHeldCount(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = ""
	cfg.Partitions = 4
	b, err := Open(t.Context(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var got atomic.Int64
	go func() {
		done <- b.Consume(ctx, func(d bus.Delivery) {
			got.Add(1)
			if err := d.Ack(); err != nil {
				t.Error(err)
			}
		})
	}()
	const n = 40
	for i := range n {
		in := bus.Inbound{V: 1, ID: fmt.Sprint(i), Channel: "console", ChatID: fmt.Sprint("chat", i), UserID: "u", Text: "hi"}
		data, _ := json.Marshal(in)
		if _, err := b.js.Publish(t.Context(), b.subj.In(in.Channel, in.ChatID), data); err != nil {
			t.Fatal(err)
		}
	}
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool { return got.Load() == n },
		func() string { return fmt.Sprintf("%d of %d delivered", got.Load(), n) })
	for _, p := range *b.parts.Load() {
		if h := p.held.Load(); h != 0 {
			t.Errorf("%s: held %d after every message was acknowledged", p.name, h)
		}
	}
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := b.js.Stream(t.Context(), b.streams.In)
		return err == nil && s.CachedInfo().State.Msgs == 0
	}, func() string { return "acknowledged messages stay in the work-queue stream" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
