package provision

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/clustertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDoRetriesOnlyUnansweredAttempts(t *testing.T) {
	calls := 0
	err := Do(t.Context(), nil, "test", 10*time.Millisecond, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			<-ctx.Done() // the server never answers this attempt
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want nil after 3", err, calls)
	}

	refused := errors.New("stream name already in use with a different configuration")
	calls = 0
	if err := Do(t.Context(), nil, "test", time.Second, func(context.Context) error { calls++; return refused }); !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want the refusal after 1", err, calls)
	}

	calls = 0
	err = Do(t.Context(), nil, "test", time.Millisecond, func(ctx context.Context) error { calls++; <-ctx.Done(); return ctx.Err() })
	if !errors.Is(err, context.DeadlineExceeded) || calls != Attempts {
		t.Fatalf("Do = %v after %d calls, want a timeout after %d", err, calls, Attempts)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = Do(ctx, nil, "test", time.Second, func(context.Context) error { calls++; cancel(); return context.Canceled })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want the cancellation after 1", err, calls)
	}
}

// TestConcurrentCreatesOnACluster: three clients, one on each node of a
// 3-node cluster, create the same replicated stream and key-value bucket
// at the same moment, as three instances starting together do. Each
// gets its answer through Do (without it the server answers none of
// them within the request timeout: nats-server#3677).
func TestConcurrentCreatesOnACluster(t *testing.T) {
	c := clustertest.Start(t, 3)
	errs := make(chan error, 2*len(c.Nodes))
	for _, nd := range c.Nodes {
		nc := nd.Connect(t)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			errs <- Do(t.Context(), nil, "stream S", 0, func(ctx context.Context) error {
				_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
				return err
			})
			errs <- Do(t.Context(), nil, "bucket B", 0, func(ctx context.Context) error {
				_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", Replicas: 3})
				return err
			})
		}()
	}
	for range 2 * len(c.Nodes) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
