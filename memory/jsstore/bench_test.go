package jsstore_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// BenchmarkTurn is one turn of a session as the agent does it: Load the
// last 20 turns, then CommitTurn a two-message turn with its receipt.
func BenchmarkTurn(b *testing.B) {
	b.Run("jsstore", func(b *testing.B) {
		srv := startServer(b, b.TempDir())
		benchTurn(b, openStore(b, connect(b, srv.ClientURL()), jsstore.Options{}))
	})
	b.Run("jsstore-R3", func(b *testing.B) {
		servers := startCluster(b, 3)
		benchTurn(b, openStore(b, connect(b, servers[0].ClientURL()), jsstore.Options{Replicas: 3}))
	})
	b.Run("boltstore", func(b *testing.B) {
		st, err := boltstore.Open(filepath.Join(b.TempDir(), "history.db"), boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		benchTurn(b, st)
	})
}

func benchTurn(b *testing.B, st memory.Store) {
	const sess = "telegram/bench"
	ctx := b.Context()
	for i := range 20 {
		if err := st.CommitTurn(ctx, memtest.Turn(sess, fmt.Sprint("warm", i), "hello there", "general kenobi")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := st.Load(ctx, sess, 20); err != nil {
			b.Fatal(err)
		}
		if err := st.CommitTurn(ctx, memtest.Turn(sess, fmt.Sprint(i), "hello there", "general kenobi")); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCommit is CommitTurn alone, one session.
func BenchmarkCommit(b *testing.B) {
	srv := startServer(b, b.TempDir())
	st := openStore(b, connect(b, srv.ClientURL()), jsstore.Options{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := st.CommitTurn(b.Context(), memtest.Turn("s", fmt.Sprint(i), "u", "r")); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkParallelTurns is BenchmarkTurn from many sessions at once (one
// per goroutine, 8 goroutines per core): what group commit is for.
func BenchmarkParallelTurns(b *testing.B) {
	run := func(b *testing.B, st memory.Store) {
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			sess := fmt.Sprint("telegram/p", n.Add(1))
			i := 0
			for pb.Next() {
				if _, err := st.Load(b.Context(), sess, 20); err != nil {
					b.Error(err)
					return
				}
				if err := st.CommitTurn(b.Context(), memtest.Turn(sess, fmt.Sprint(i), "hello there", "general kenobi")); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	}
	b.Run("jsstore", func(b *testing.B) {
		srv := startServer(b, b.TempDir())
		run(b, openStore(b, connect(b, srv.ClientURL()), jsstore.Options{}))
	})
	b.Run("jsstore-R3", func(b *testing.B) {
		servers := startCluster(b, 3)
		run(b, openStore(b, connect(b, servers[0].ClientURL()), jsstore.Options{Replicas: 3}))
	})
	b.Run("boltstore", func(b *testing.B) {
		st, err := boltstore.Open(filepath.Join(b.TempDir(), "history.db"), boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		run(b, st)
	})
}
