//go:build linux

package natsbus_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// tryPublish publishes an inbound message for chat and returns the
// error, waiting at most a second for the stream's answer (a stream with
// a write error does not answer).
func tryPublish(b *natsbus.Bus, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	data := []byte(`{"v":1,"id":"` + id + `","channel":"console","chat_id":"demo","user_id":"me","text":"hi"}`)
	return b.Publish(ctx, b.Subjects().In("console", "demo"), data, "console:"+id)
}

// TestStoreHealthFullStream: CHAT_IN at its max_bytes (it refuses new
// messages) is reported, naming the stream, until it has room again.
func TestStoreHealthFullStream(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	if err := b.StoreHealth(t.Context()); err != nil {
		t.Fatalf("a fresh bus: %v", err)
	}
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	small := cfg
	small.MaxBytes = 100
	if _, err := js.UpdateStream(t.Context(), small); err != nil {
		t.Fatal(err)
	}
	err = b.StoreHealth(t.Context())
	if err == nil || !strings.Contains(err.Error(), "stream CHAT_IN cannot store new messages: it is full") {
		t.Fatalf("CHAT_IN with max_bytes 100: StoreHealth = %v, want it full", err)
	}
	if perr := tryPublish(b, "full-1"); perr == nil {
		t.Fatal("a publish to the full stream was stored")
	}
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := b.StoreHealth(t.Context()); err != nil {
		t.Fatalf("CHAT_IN with its bounds back: %v", err)
	}
	if err := tryPublish(b, "full-2"); err != nil {
		t.Fatalf("a publish once there is room: %v", err)
	}
}

// TestStoreHealthWriteError: a write error of the embedded server's store
// (here: files may not grow, RLIMIT_FSIZE, as a full disk or a process out
// of descriptors fails a write) breaks the stream for good; StoreHealth
// reports it until the daemon restarts with the cause gone, and a restart
// stores again.
func TestStoreHealthWriteError(t *testing.T) {
	dir := t.TempDir()
	b, err := natsbus.Open(t.Context(), inProcessConfig(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := tryPublish(b, "w-0"); err != nil {
		t.Fatal(err)
	}
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
			t.Fatal(err)
		}
	}
	tiny := was
	tiny.Cur = 1
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &tiny); err != nil {
		t.Skip("cannot lower RLIMIT_FSIZE:", err)
	}
	defer restore()
	var last error
	n := 0
	polltest.Until(t, wait, time.Millisecond, func() bool {
		n++
		_ = tryPublish(b, "w-"+strings.Repeat("x", n))
		last = b.StoreHealth(t.Context())
		return last != nil
	}, func() string { return "StoreHealth found nothing while the store could not write" })
	restore()
	t.Logf("StoreHealth while the store cannot write: %v", last)
	if !strings.Contains(last.Error(), "stream CHAT_IN cannot store new messages") || !strings.Contains(last.Error(), "write error") ||
		!strings.Contains(last.Error(), "restart the daemon") {
		t.Fatalf("StoreHealth = %v, want CHAT_IN's write error and what to do", last)
	}
	if err := b.StoreHealth(t.Context()); err == nil {
		t.Fatal("the write error was forgotten while the server still refuses to write")
	}
	if err := tryPublish(b, "w-after"); err == nil {
		t.Fatal("the broken stream stored a message")
	}
	_ = b.Close()

	b2 := open(t, inProcessConfig(), dir)
	if err := b2.StoreHealth(t.Context()); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if err := tryPublish(b2, "w-restarted"); err != nil {
		t.Fatalf("a publish after the restart: %v", err)
	}
}
