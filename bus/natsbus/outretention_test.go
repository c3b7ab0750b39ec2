package natsbus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// TestOutStreamDeduplicatesOverItsRetention: CHAT_OUT's de-duplication
// window is its retention (bus.out_retention), by default 24 h, so a final
// re-published with the same Nats-Msg-Id long after the first publish (a
// crash between publish and ack, restarted later) is not stored twice.
// With a short retention the window ends exactly when the first copy is
// gone: a republish within it is a duplicate, one after it is stored.
func TestOutStreamDeduplicatesOverItsRetention(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		b := open(t, inProcessConfig(), t.TempDir())
		info, err := b.JetStream().Stream(t.Context(), b.Streams().Out)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.CachedInfo().Config
		if cfg.MaxAge != 24*time.Hour || cfg.Duplicates != cfg.MaxAge {
			t.Fatalf("CHAT_OUT MaxAge %s, Duplicates %s; want both 24h", cfg.MaxAge, cfg.Duplicates)
		}
	})

	t.Run("existing stream updated", func(t *testing.T) {
		dir := t.TempDir()
		cfg := inProcessConfig()
		b := open(t, cfg, dir)
		// The stream as older versions created it: a 2-minute window.
		old := natsbus.StreamConfigs("chat")[1]
		old.Duplicates = 2 * time.Minute
		if _, err := b.JetStream().UpdateStream(t.Context(), old); err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		cfg.OutRetention = time.Hour
		b = open(t, cfg, dir)
		s, err := b.JetStream().Stream(t.Context(), b.Streams().Out)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo().Config
		if got.MaxAge != time.Hour || got.Duplicates != time.Hour {
			t.Fatalf("after restart with out_retention 1h: MaxAge %s, Duplicates %s", got.MaxAge, got.Duplicates)
		}
	})

	t.Run("short retention", func(t *testing.T) {
		cfg := inProcessConfig()
		cfg.OutRetention = 3 * time.Second
		b := open(t, cfg, t.TempDir())
		js := b.JetStream()
		subject := b.Subjects().Out("console", "demo")
		data := []byte(`{"v":1,"id":"o1","channel":"console","chat_id":"demo","kind":"reply","text":"hi","seq":1,"final":true}`)
		ack, err := js.Publish(t.Context(), subject, data, jetstream.WithMsgID("o1"))
		if err != nil || ack.Duplicate {
			t.Fatalf("first publish: %+v, %v", ack, err)
		}
		ack, err = js.Publish(t.Context(), subject, data, jetstream.WithMsgID("o1"))
		if err != nil || !ack.Duplicate {
			t.Fatalf("republish within out_retention: %+v, %v; want a duplicate", ack, err)
		}
		stream, err := js.Stream(t.Context(), b.Streams().Out)
		if err != nil {
			t.Fatal(err)
		}
		// Wait (on the stream's state, bounded) until the first copy aged out.
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := stream.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CHAT_OUT still holds %d messages", info.State.Msgs)
			}
			waitTick(t)
		}
		ack, err = js.Publish(t.Context(), subject, data, jetstream.WithMsgID("o1"))
		if err != nil || ack.Duplicate {
			t.Fatalf("republish after the message aged out: %+v, %v; want it stored", ack, err)
		}
	})

	t.Run("validation", func(t *testing.T) {
		cfg := inProcessConfig()
		cfg.OutRetention = 500 * time.Millisecond
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "bus.out_retention: must be at least 1s") {
			t.Fatalf("Validate: %v", err)
		}
		cfg.OutRetention = 0
		if err := cfg.Validate(); err != nil {
			t.Fatalf("0 (the default): %v", err)
		}
	})
}

// waitTick pauses briefly between two polls of a condition.
func waitTick(t *testing.T) {
	t.Helper()
	select {
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	case <-time.After(50 * time.Millisecond):
	}
}
