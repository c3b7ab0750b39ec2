package boltstore_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// benchTurn is a typical turn: a user message and a ~400-byte reply.
func benchTurn(session string, n int64) memory.TurnRecord {
	key := fmt.Sprintf("%s:%d", session, n)
	return memory.TurnRecord{
		Session: session,
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, InboundID: key, Blocks: []memory.Block{{Type: memory.BlockText, Text: "what is on my calendar today?"}}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: strings.Repeat("lorem ipsum ", 35)}}},
		},
		Receipt: memory.Receipt{Key: key, Final: json.RawMessage(`{"v":1,"kind":"reply","final":true}`)},
	}
}

func benchOpen(b *testing.B, opts boltstore.Options) *boltstore.Store {
	s, err := boltstore.Open(filepath.Join(b.TempDir(), "bench.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkCommitTurnSerial is one durable commit at a time (a lone writer
// skips the batch delay).
func BenchmarkCommitTurnSerial(b *testing.B) {
	s := benchOpen(b, boltstore.Options{})
	ctx := b.Context()
	b.ReportAllocs()
	var i int64
	for b.Loop() {
		i++
		if err := s.CommitTurn(ctx, benchTurn("bench/serial", i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitTurnParallel is many sessions committing durably at once;
// group commit shares transactions and fsyncs between them.
func BenchmarkCommitTurnParallel(b *testing.B) {
	s := benchOpen(b, boltstore.Options{})
	ctx := b.Context()
	var sessions, seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		sess := fmt.Sprintf("bench/%d", sessions.Add(1))
		for pb.Next() {
			if err := s.CommitTurn(ctx, benchTurn(sess, seq.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLoad30TurnsOf10000 loads the last 30 turns of a session holding
// 10,000 messages.
func BenchmarkLoad30TurnsOf10000(b *testing.B) {
	s := benchOpen(b, boltstore.Options{NoSync: true})
	ctx := b.Context()
	const sess = "bench/load"
	// 100 records of 50 turns (100 messages) each.
	for r := range int64(100) {
		rec := benchTurn(sess, r)
		rec.Messages = nil
		for range 50 {
			rec.Messages = append(rec.Messages, benchTurn(sess, r).Messages...)
		}
		if err := s.CommitTurn(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		snap, err := s.Load(ctx, sess, 30)
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Messages) != 60 || snap.Turns != 5000 {
			b.Fatalf("Load = %d messages, %d turns; want 60, 5000", len(snap.Messages), snap.Turns)
		}
	}
}
