package boltstore_test

import (
	"fmt"
	"testing"

	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// BenchmarkLoadContext loads the context for a session's next request
// (its summary and last 30 turns) from a session holding 100 messages and
// from one holding 100,000 messages. Loading walks back from the session's
// last message, so the two must cost about the same.
func BenchmarkLoadContext(b *testing.B) {
	for _, total := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("messages=%d", total), func(b *testing.B) {
			s := benchOpen(b, boltstore.Options{NoSync: true})
			ctx := b.Context()
			const sess = "bench/context"
			// Another session's messages sort after this one's, so the
			// walk back cannot simply start at the end of the bucket.
			if err := s.CommitTurn(ctx, benchTurn("bench/other", 0)); err != nil {
				b.Fatal(err)
			}
			turns := total / 2
			for r := 0; r*500 < turns; r++ {
				rec := benchTurn(sess, int64(r))
				rec.Messages = nil
				for range min(500, turns-r*500) {
					rec.Messages = append(rec.Messages, benchTurn(sess, int64(r)).Messages...)
				}
				if err := s.CommitTurn(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.SetSummary(ctx, sess, "- earlier: the user planned a trip"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				snap, err := s.Load(ctx, sess, 30)
				if err != nil {
					b.Fatal(err)
				}
				if len(snap.Messages) != 60 || snap.Turns != turns || snap.Summary == "" {
					b.Fatalf("Load = %d messages, %d turns; want 60, %d", len(snap.Messages), snap.Turns, turns)
				}
			}
		})
	}
}
