package natsbus_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// TestSourcePublisherConformance runs the bus conformance suite against the
// embedded NATS bus (the same suite agenttest.Bus passes).
func TestSourcePublisherConformance(t *testing.T) {
	bustest.RunSourcePublisher(t, func(t *testing.T) bustest.Harness {
		h := &natsHarness{dir: t.TempDir()}
		h.Bus = open(t, inProcessConfig(), h.dir)
		return h
	})
}

// TestSourcePublisherConformancePartitioned: the same suite with
// agent.partitions 4 (the in stream's subject transform, one pinned
// consumer per partition): deliveries keep their published subject.
func TestSourcePublisherConformancePartitioned(t *testing.T) {
	bustest.RunSourcePublisher(t, func(t *testing.T) bustest.Harness {
		h := &natsHarness{dir: t.TempDir(), partitions: 4}
		cfg := inProcessConfig()
		cfg.Partitions = h.partitions
		h.Bus = open(t, cfg, h.dir)
		return partitionedHarness{h}
	})
}

// partitionedHarness is a natsHarness whose chats may sit in different
// partitions: the order holds within each chat.
type partitionedHarness struct{ *natsHarness }

func (partitionedHarness) PerChatOrder() bool { return true }

// natsHarness drives a natsbus.Bus from outside: it injects and reads
// through JetStream, subscribes with core NATS, and restarts by closing
// the bus and opening it again on the same store.
type natsHarness struct {
	*natsbus.Bus
	dir        string
	partitions int // reopened with the same agent.partitions
}

func (h *natsHarness) Inject(t testing.TB, subject string, data []byte) {
	t.Helper()
	if _, err := h.JetStream().Publish(t.Context(), subject, data); err != nil {
		t.Fatalf("inject on %s: %v", subject, err)
	}
}

func (h *natsHarness) Stored(t testing.TB, subject string) [][]byte {
	t.Helper()
	js := h.JetStream()
	name, err := js.StreamNameBySubject(t.Context(), subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // no stream captures the subject
	}
	if err != nil {
		t.Fatalf("stream of %s: %v", subject, err)
	}
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	n := int(info.State.Subjects[subject])
	if n == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatalf("reader of %s: %v", name, err)
	}
	var out [][]byte
	for len(out) < n {
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatalf("read %s: %v", subject, err)
		}
		for m := range batch.Messages() {
			out = append(out, m.Data())
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("read %s: %v", subject, err)
		}
	}
	return out
}

func (h *natsHarness) WatchCore(t testing.TB, subject string) func(n int) [][]byte {
	t.Helper()
	var mu sync.Mutex
	var got [][]byte
	changed := make(chan struct{}, 1)
	sub, err := h.Conn().Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		got = append(got, m.Data)
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := h.Conn().Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func(n int) [][]byte {
		t.Helper()
		deadline := time.After(wait)
		for {
			mu.Lock()
			if len(got) >= n {
				defer mu.Unlock()
				return append([][]byte(nil), got...)
			}
			mu.Unlock()
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("core subscriber of %s: fewer than %d messages within %s", subject, n, wait)
			}
		}
	}
}

// Restart closes the bus and opens it again on the same store, as the
// daemon does after a crash.
func (h *natsHarness) Restart(t testing.TB) {
	t.Helper()
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	cfg := inProcessConfig()
	cfg.Partitions = h.partitions
	h.Bus = open(t, cfg, h.dir)
}
