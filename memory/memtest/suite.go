package memtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/memory"
)

// Run is the conformance suite for [memory.Store] implementations. open
// must return a fresh, empty store for each call; Run closes it (stores
// must tolerate a second Close, e.g. from a t.Cleanup in open). Optional
// capabilities ([memory.Compactor], [memory.ReceiptPruner],
// [memory.SessionResetter]) are tested when the store implements them.
func Run(t *testing.T, open func(t *testing.T) memory.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s memory.Store)
	}{
		{"LoadUnknownSession", testLoadUnknownSession},
		{"RoundTrip", testRoundTrip},
		{"LastTurns", testLastTurns},
		{"TurnSpanningCommits", testTurnSpanningCommits},
		{"Fresh", testFresh},
		{"Duplicate", testDuplicate},
		{"Receipts", testReceipts},
		{"CollectedReceipts", testCollectedReceipts},
		{"InvalidRecords", testInvalidRecords},
		{"InvalidArguments", testInvalidArguments},
		{"SessionsIsolated", testSessionsIsolated},
		{"ConcurrentCommits", testConcurrentCommits},
		{"CanceledContext", testCanceledContext},
		{"ValuesAreCopies", testValuesAreCopies},
		{"Compact", testCompact},
		{"PruneReceipts", testPruneReceipts},
		{"ResetRemovesReceipts", testResetRemovesReceipts},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			defer func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close() = %v", err)
				}
			}()
			tt.fn(t, s)
		})
	}
}

// Turn builds a simple two-message turn (user text, assistant text) for
// session with receipt key "<session>:<id>".
func Turn(session, id, user, reply string) memory.TurnRecord {
	key := session + ":" + id
	return memory.TurnRecord{
		Session: session,
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, InboundID: key, Blocks: []memory.Block{{Type: memory.BlockText, Text: user}}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: reply}}},
		},
		Receipt: memory.Receipt{Key: key, Final: json.RawMessage(fmt.Sprintf(`{"text":%q}`, reply))},
	}
}

// toolTurn is a four-message turn with a tool call.
func toolTurn(session string, n int) memory.TurnRecord {
	id := fmt.Sprintf("call-%d", n)
	return memory.TurnRecord{
		Session: session,
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, Blocks: []memory.Block{{Type: memory.BlockText, Text: fmt.Sprintf("q%d", n)}}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockToolUse, ToolID: id, ToolName: "read_file", Input: json.RawMessage(`{"path":"a.txt"}`)}}},
			{Role: memory.RoleTool, Blocks: []memory.Block{{Type: memory.BlockToolResult, ToolID: id, Text: "content"}}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: fmt.Sprintf("a%d", n)}}},
		},
		Receipt: memory.Receipt{Key: fmt.Sprintf("%s:%d", session, n), Final: json.RawMessage(`{}`)},
	}
}

func mustCommit(t *testing.T, s memory.Store, rec memory.TurnRecord) {
	t.Helper()
	if err := s.CommitTurn(t.Context(), rec); err != nil {
		t.Fatalf("CommitTurn(%q) = %v", rec.Receipt.Key, err)
	}
}

func mustLoad(t *testing.T, s memory.Store, session string, maxTurns int) memory.Snapshot {
	t.Helper()
	snap, err := s.Load(t.Context(), session, maxTurns)
	if err != nil {
		t.Fatalf("Load(%q, %d) = %v", session, maxTurns, err)
	}
	return snap
}

// texts returns the first text of each message, "" for none.
func texts(msgs []memory.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		for _, b := range m.Blocks {
			if b.Type == memory.BlockText {
				out[i] = b.Text
				break
			}
		}
	}
	return out
}

func testLoadUnknownSession(t *testing.T, s memory.Store) {
	snap := mustLoad(t, s, "telegram/none", 10)
	if diff := cmp.Diff(memory.Snapshot{}, snap); diff != "" {
		t.Errorf("Load of unknown session (-want +got):\n%s", diff)
	}
}

func testRoundTrip(t *testing.T, s memory.Store) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	rec := memory.TurnRecord{
		Session: "slack/C1/171.5",
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, InboundID: "slack:m1", Time: at, Blocks: []memory.Block{
				{Type: memory.BlockText, Text: "[ann] look"},
				{Type: memory.BlockImage, MIME: "image/png", Data: "aGVsbG8="},
				{Type: memory.BlockImage, MIME: "image/jpeg", URL: "https://example.com/x.jpg"},
			}},
			{Role: memory.RoleAssistant, Time: at, Blocks: []memory.Block{
				{Type: memory.BlockThinking, Text: "hmm"},
				{Type: memory.BlockText, Text: "checking"},
				{Type: memory.BlockToolUse, ToolID: "c1", ToolName: "list_dir", Input: json.RawMessage(`{"path":"."}`)},
				{Type: memory.BlockToolUse, ToolID: "c2", ToolName: "clock"},
			}},
			{Role: memory.RoleTool, Time: at, Blocks: []memory.Block{
				{Type: memory.BlockToolResult, ToolID: "c1", Text: "a.txt"},
				{Type: memory.BlockToolResult, ToolID: "c2", Text: "Error: boom", IsError: true},
			}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: "done"}}},
		},
		Receipt: memory.Receipt{Key: "slack:m1", Final: json.RawMessage(`{"kind":"reply","text":"done"}`)},
	}
	before := time.Now()
	mustCommit(t, s, rec)
	snap := mustLoad(t, s, rec.Session, 5)

	want := rec.Messages[:3]
	if diff := cmp.Diff(want, snap.Messages[:3]); diff != "" {
		t.Errorf("loaded messages (-want +got):\n%s", diff)
	}
	if len(snap.Messages) != 4 {
		t.Fatalf("Load returned %d messages, want 4", len(snap.Messages))
	}
	if got := snap.Messages[3].Time; got.Before(before.Add(-time.Second)) || got.IsZero() {
		t.Errorf("zero message time was not filled with the commit time: %v", got)
	}
	if snap.Turns != 1 {
		t.Errorf("Turns = %d, want 1", snap.Turns)
	}
	if snap.LastActive.IsZero() {
		t.Error("LastActive is zero after a commit")
	}
	r, ok, err := s.Receipt(t.Context(), "slack:m1")
	if err != nil || !ok {
		t.Fatalf("Receipt = _, %v, %v; want ok", ok, err)
	}
	if r.Session != rec.Session || r.Key != "slack:m1" || r.Published || r.Time.IsZero() {
		t.Errorf("Receipt = %+v; want session %q, key slack:m1, not published, time set", r, rec.Session)
	}
	var got, wantFinal any
	if err := json.Unmarshal(r.Final, &got); err != nil {
		t.Fatalf("receipt final is not JSON: %v", err)
	}
	_ = json.Unmarshal(rec.Receipt.Final, &wantFinal)
	if diff := cmp.Diff(wantFinal, got); diff != "" {
		t.Errorf("receipt final (-want +got):\n%s", diff)
	}
}

func testLastTurns(t *testing.T, s memory.Store) {
	const sess = "telegram/42"
	for i := 1; i <= 10; i++ {
		mustCommit(t, s, toolTurn(sess, i))
	}
	snap := mustLoad(t, s, sess, 3)
	if len(snap.Messages) != 12 {
		t.Fatalf("Load(3 turns) returned %d messages, want 12", len(snap.Messages))
	}
	if got := texts(snap.Messages); got[0] != "q8" || got[11] != "a10" {
		t.Errorf("Load(3 turns) texts = %q; want q8 ... a10", got)
	}
	if !snap.Messages[0].TurnStart {
		t.Error("first loaded message does not start a turn")
	}
	if snap.Turns != 10 {
		t.Errorf("Turns = %d, want 10", snap.Turns)
	}
	if n := len(mustLoad(t, s, sess, 100).Messages); n != 40 {
		t.Errorf("Load(100 turns) returned %d messages, want 40", n)
	}
	snap = mustLoad(t, s, sess, 0)
	if len(snap.Messages) != 0 || snap.Turns != 10 {
		t.Errorf("Load(0 turns) = %d messages, %d turns; want 0, 10", len(snap.Messages), snap.Turns)
	}
}

func testTurnSpanningCommits(t *testing.T, s memory.Store) {
	const sess = "wechat/g1"
	mustCommit(t, s, Turn(sess, "1", "u1", "r1"))
	mustCommit(t, s, Turn(sess, "2", "u2", "r2"))
	// A continuation of turn 2 committed separately (no TurnStart).
	mustCommit(t, s, memory.TurnRecord{
		Session:  sess,
		Messages: []memory.Message{{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: "r2b"}}}},
		Receipt:  memory.Receipt{Key: sess + ":2b", Final: json.RawMessage(`{}`)},
	})
	snap := mustLoad(t, s, sess, 1)
	if diff := cmp.Diff([]string{"u2", "r2", "r2b"}, texts(snap.Messages)); diff != "" {
		t.Errorf("Load(1 turn) (-want +got):\n%s", diff)
	}
	if snap.Turns != 2 {
		t.Errorf("Turns = %d, want 2", snap.Turns)
	}
}

func testFresh(t *testing.T, s memory.Store) {
	const sess = "console/me"
	mustCommit(t, s, Turn(sess, "1", "u1", "r1"))
	mustCommit(t, s, Turn(sess, "2", "u2", "r2"))

	// /new with no messages: context becomes empty.
	mustCommit(t, s, memory.TurnRecord{Session: sess, Fresh: true, Receipt: memory.Receipt{Key: sess + ":new", Final: json.RawMessage(`{"text":"fresh"}`)}})
	snap := mustLoad(t, s, sess, 10)
	if len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Fatalf("after Fresh: %d messages, %d turns; want 0, 0", len(snap.Messages), snap.Turns)
	}

	mustCommit(t, s, Turn(sess, "3", "u3", "r3"))
	rec := Turn(sess, "4", "u4", "r4")
	rec.Fresh = true
	mustCommit(t, s, rec)
	snap = mustLoad(t, s, sess, 10)
	if diff := cmp.Diff([]string{"u4", "r4"}, texts(snap.Messages)); diff != "" {
		t.Errorf("Load after Fresh turn (-want +got):\n%s", diff)
	}
	if snap.Turns != 1 {
		t.Errorf("Turns = %d, want 1", snap.Turns)
	}
	// Old receipts survive a fresh context.
	if _, ok, err := s.Receipt(t.Context(), sess+":1"); err != nil || !ok {
		t.Errorf("Receipt of a turn before Fresh = %v, %v; want kept", ok, err)
	}
}

func testDuplicate(t *testing.T, s memory.Store) {
	const sess = "telegram/7"
	mustCommit(t, s, Turn(sess, "1", "hello", "hi"))
	before := mustLoad(t, s, sess, 10)

	dup := Turn(sess, "1", "hello again", "something else")
	dup.Fresh = true
	if err := s.CommitTurn(t.Context(), dup); !errors.Is(err, memory.ErrDuplicate) {
		t.Fatalf("second CommitTurn with the same key = %v, want ErrDuplicate", err)
	}
	// The same key in another session is a duplicate too.
	other := Turn("telegram/8", "x", "a", "b")
	other.Receipt.Key = sess + ":1"
	if err := s.CommitTurn(t.Context(), other); !errors.Is(err, memory.ErrDuplicate) {
		t.Fatalf("CommitTurn with a key used by another session = %v, want ErrDuplicate", err)
	}
	after := mustLoad(t, s, sess, 10)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("history changed by a duplicate (-before +after):\n%s", diff)
	}
	if snap := mustLoad(t, s, "telegram/8", 10); len(snap.Messages) != 0 || !snap.LastActive.IsZero() {
		t.Errorf("duplicate wrote to another session: %+v", snap)
	}
	r, _, err := s.Receipt(t.Context(), sess+":1")
	if err != nil || !strings.Contains(string(r.Final), `"hi"`) || r.Session != sess {
		t.Errorf("receipt after duplicate = %+v, %v; want the first one", r, err)
	}
}

func testReceipts(t *testing.T, s memory.Store) {
	ctx := t.Context()
	if _, ok, err := s.Receipt(ctx, "telegram:none"); ok || err != nil {
		t.Errorf("Receipt(unknown) = ok %v, err %v; want false, nil", ok, err)
	}
	if err := s.MarkPublished(ctx, "telegram:none"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("MarkPublished(unknown) = %v, want ErrNotFound", err)
	}
	mustCommit(t, s, Turn("telegram/1", "5", "q", "a"))
	r, ok, err := s.Receipt(ctx, "telegram/1:5")
	if err != nil || !ok || r.Published {
		t.Fatalf("Receipt = %+v, %v, %v; want unpublished", r, ok, err)
	}
	for range 2 { // idempotent
		if err := s.MarkPublished(ctx, "telegram/1:5"); err != nil {
			t.Fatalf("MarkPublished = %v", err)
		}
	}
	r2, ok, err := s.Receipt(ctx, "telegram/1:5")
	if err != nil || !ok || !r2.Published {
		t.Fatalf("Receipt after MarkPublished = %+v, %v, %v; want published", r2, ok, err)
	}
	if r2.Session != r.Session || string(r2.Final) != string(r.Final) || !r2.Time.Equal(r.Time) {
		t.Errorf("MarkPublished changed other fields: %+v -> %+v", r, r2)
	}
}

func testInvalidRecords(t *testing.T, s memory.Store) {
	good := func() memory.TurnRecord { return toolTurn("telegram/9", 1) }
	tests := []struct {
		name   string
		mutate func(r *memory.TurnRecord)
		field  string
	}{
		{"empty session", func(r *memory.TurnRecord) { r.Session = "" }, "session"},
		{"NUL in session", func(r *memory.TurnRecord) { r.Session = "a\x00b" }, "session"},
		{"long session", func(r *memory.TurnRecord) { r.Session = strings.Repeat("s", memory.MaxKeyLen+1) }, "session"},
		{"empty receipt key", func(r *memory.TurnRecord) { r.Receipt.Key = "" }, "receipt key"},
		{"receipt session mismatch", func(r *memory.TurnRecord) { r.Receipt.Session = "other" }, "receipt.session"},
		{"empty final", func(r *memory.TurnRecord) { r.Receipt.Final = nil }, "receipt.final"},
		{"invalid final", func(r *memory.TurnRecord) { r.Receipt.Final = json.RawMessage(`{"a":`) }, "receipt.final"},
		{"bad role", func(r *memory.TurnRecord) { r.Messages[0].Role = "system" }, "messages[0].role"},
		{"empty role", func(r *memory.TurnRecord) { r.Messages[1].Role = "" }, "messages[1].role"},
		{"no blocks", func(r *memory.TurnRecord) { r.Messages[0].Blocks = nil }, "messages[0].blocks"},
		{"unknown block", func(r *memory.TurnRecord) { r.Messages[0].Blocks[0].Type = "video" }, "messages[0].blocks[0].type"},
		{"tool_use without id", func(r *memory.TurnRecord) { r.Messages[1].Blocks[0].ToolID = "" }, "messages[1].blocks[0].tool_id"},
		{"tool_use without name", func(r *memory.TurnRecord) { r.Messages[1].Blocks[0].ToolName = "" }, "messages[1].blocks[0].tool_name"},
		{"tool_use input not object", func(r *memory.TurnRecord) { r.Messages[1].Blocks[0].Input = json.RawMessage(`[1]`) }, "messages[1].blocks[0].input"},
		{"tool_use in user message", func(r *memory.TurnRecord) { r.Messages[0].Blocks[0] = r.Messages[1].Blocks[0] }, "messages[0].blocks[0].type"},
		{"tool_result without id", func(r *memory.TurnRecord) { r.Messages[2].Blocks[0].ToolID = "" }, "messages[2].blocks[0].tool_id"},
		{"text in tool message", func(r *memory.TurnRecord) { r.Messages[2].Blocks[0].Type = memory.BlockText }, "messages[2].blocks[0].type"},
		{"tool_result in assistant message", func(r *memory.TurnRecord) { r.Messages[3].Blocks[0] = r.Messages[2].Blocks[0] }, "messages[3].blocks[0].type"},
		{"image without data", func(r *memory.TurnRecord) {
			r.Messages[0].Blocks[0] = memory.Block{Type: memory.BlockImage, MIME: "image/png"}
		}, "messages[0].blocks[0].url"},
		{"image without mime", func(r *memory.TurnRecord) {
			r.Messages[0].Blocks[0] = memory.Block{Type: memory.BlockImage, URL: "https://x/y.png"}
		}, "messages[0].blocks[0].mime"},
	}
	for _, tt := range tests {
		rec := good()
		tt.mutate(&rec)
		err := s.CommitTurn(t.Context(), rec)
		if !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%s: CommitTurn = %v, want ErrInvalid", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: error %q does not name %q", tt.name, err, tt.field)
		}
	}
	if snap := mustLoad(t, s, "telegram/9", 10); len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Errorf("invalid records wrote history: %+v", snap)
	}
	if _, ok, _ := s.Receipt(t.Context(), good().Receipt.Key); ok {
		t.Error("invalid records wrote a receipt")
	}
}

func testInvalidArguments(t *testing.T, s memory.Store) {
	ctx := t.Context()
	if _, err := s.Load(ctx, "", 1); err == nil {
		t.Error(`Load("") succeeded`)
	}
	if _, err := s.Load(ctx, "a", -1); err == nil {
		t.Error("Load(maxTurns -1) succeeded")
	}
	if _, _, err := s.Receipt(ctx, ""); err == nil {
		t.Error(`Receipt("") succeeded`)
	}
	if err := s.MarkPublished(ctx, ""); err == nil {
		t.Error(`MarkPublished("") succeeded`)
	}
}

func testSessionsIsolated(t *testing.T, s memory.Store) {
	// Keys that share prefixes must not bleed into each other.
	names := []string{"a", "ab", "a/b", "a b", "b"}
	for i, n := range names {
		mustCommit(t, s, Turn(n, "1", "u-"+n, fmt.Sprint("r", i)))
	}
	for i, n := range names {
		got := texts(mustLoad(t, s, n, 10).Messages)
		if diff := cmp.Diff([]string{"u-" + n, fmt.Sprint("r", i)}, got); diff != "" {
			t.Errorf("session %q (-want +got):\n%s", n, diff)
		}
	}
}

func testConcurrentCommits(t *testing.T, s memory.Store) {
	const (
		workers = 8
		each    = 15
	)
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*each)
	for w := range workers {
		// One session per worker, committed in order.
		wg.Go(func() {
			sess := fmt.Sprintf("load/%d", w)
			for i := range each {
				if err := s.CommitTurn(context.Background(), Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
					errs <- err
				}
			}
		})
		// All workers also share one session.
		wg.Go(func() {
			for i := range each {
				if err := s.CommitTurn(context.Background(), Turn("load/shared", fmt.Sprintf("%d-%d", w, i), "u", "r")); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent CommitTurn = %v", err)
	}
	for w := range workers {
		snap := mustLoad(t, s, fmt.Sprintf("load/%d", w), 1000)
		var want []string
		for i := range each {
			want = append(want, fmt.Sprint("u", i), fmt.Sprint("r", i))
		}
		if diff := cmp.Diff(want, texts(snap.Messages)); diff != "" {
			t.Errorf("session load/%d order (-want +got):\n%s", w, diff)
		}
	}
	shared := mustLoad(t, s, "load/shared", 1000)
	if shared.Turns != workers*each || len(shared.Messages) != 2*workers*each {
		t.Errorf("shared session has %d turns, %d messages; want %d, %d", shared.Turns, len(shared.Messages), workers*each, 2*workers*each)
	}
	for i := 0; i+1 < len(shared.Messages); i += 2 { // turns never interleave
		if !shared.Messages[i].TurnStart || shared.Messages[i+1].TurnStart {
			t.Fatalf("shared session: turns interleaved at message %d", i)
		}
	}
}

func testCanceledContext(t *testing.T, s memory.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.CommitTurn(ctx, Turn("c/1", "1", "u", "r")); !errors.Is(err, context.Canceled) {
		t.Errorf("CommitTurn(canceled) = %v, want context.Canceled", err)
	}
	if _, err := s.Load(ctx, "c/1", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Load(canceled) = %v, want context.Canceled", err)
	}
	if snap := mustLoad(t, s, "c/1", 10); len(snap.Messages) != 0 {
		t.Errorf("canceled CommitTurn wrote %d messages", len(snap.Messages))
	}
}

func testValuesAreCopies(t *testing.T, s memory.Store) {
	rec := toolTurn("copy/1", 1)
	mustCommit(t, s, rec)
	rec.Messages[0].Blocks[0].Text = "mutated input"
	snap := mustLoad(t, s, "copy/1", 1)
	snap.Messages[0].Blocks[0].Text = "mutated output"
	snap.Messages[1].Blocks[0].Input[2] = 'X'
	again := mustLoad(t, s, "copy/1", 1)
	if got := again.Messages[0].Blocks[0].Text; got != "q1" {
		t.Errorf("stored text = %q, want q1 (store shares memory with callers)", got)
	}
	if got := string(again.Messages[1].Blocks[0].Input); got != `{"path":"a.txt"}` {
		t.Errorf("stored input = %s, want unchanged", got)
	}
}

func testCompact(t *testing.T, s memory.Store) {
	c, ok := s.(memory.Compactor)
	if !ok {
		t.Skip("store does not implement memory.Compactor")
	}
	ctx := t.Context()
	if err := c.Compact(ctx, "cmp/none", "x", 1); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Compact(unknown session) = %v, want ErrNotFound", err)
	}
	if err := c.Compact(ctx, "cmp/1", "x", -1); err == nil {
		t.Error("Compact(keepTurns -1) succeeded")
	}
	for i := 1; i <= 5; i++ {
		mustCommit(t, s, toolTurn("cmp/1", i))
	}
	if err := c.Compact(ctx, "cmp/1", "earlier: q1..q3", 2); err != nil {
		t.Fatalf("Compact = %v", err)
	}
	snap := mustLoad(t, s, "cmp/1", 100)
	if snap.Summary != "earlier: q1..q3" || snap.Turns != 2 || len(snap.Messages) != 8 || texts(snap.Messages)[0] != "q4" {
		t.Errorf("after Compact(keep 2): summary %q, turns %d, %d messages starting %q; want summary, 2, 8, q4",
			snap.Summary, snap.Turns, len(snap.Messages), texts(snap.Messages)[0])
	}
	// Keeping more turns than exist only sets the summary.
	if err := c.Compact(ctx, "cmp/1", "s2", 10); err != nil {
		t.Fatalf("Compact = %v", err)
	}
	if snap := mustLoad(t, s, "cmp/1", 100); snap.Summary != "s2" || snap.Turns != 2 || len(snap.Messages) != 8 {
		t.Errorf("after Compact(keep 10): summary %q, turns %d, %d messages; want s2, 2, 8", snap.Summary, snap.Turns, len(snap.Messages))
	}
	mustCommit(t, s, toolTurn("cmp/1", 6))
	if snap := mustLoad(t, s, "cmp/1", 100); snap.Summary != "s2" || snap.Turns != 3 {
		t.Errorf("summary %q, turns %d after another turn; want s2, 3", snap.Summary, snap.Turns)
	}
	if err := c.Compact(ctx, "cmp/1", "all", 0); err != nil {
		t.Fatalf("Compact(keep 0) = %v", err)
	}
	if snap := mustLoad(t, s, "cmp/1", 100); snap.Summary != "all" || snap.Turns != 0 || len(snap.Messages) != 0 {
		t.Errorf("after Compact(keep 0): %+v", snap)
	}
	fresh := toolTurn("cmp/1", 7)
	fresh.Fresh = true
	mustCommit(t, s, fresh)
	if snap := mustLoad(t, s, "cmp/1", 100); snap.Summary != "" {
		t.Errorf("Fresh kept the summary %q", snap.Summary)
	}
}

func testPruneReceipts(t *testing.T, s memory.Store) {
	p, ok := s.(memory.ReceiptPruner)
	if !ok {
		t.Skip("store does not implement memory.ReceiptPruner")
	}
	old := time.Now().Add(-48 * time.Hour)
	for i := range 5 {
		rec := Turn("prune/1", fmt.Sprint("old", i), "u", "r")
		rec.Receipt.Time = old
		mustCommit(t, s, rec)
	}
	mustCommit(t, s, Turn("prune/1", "new", "u", "r"))
	n, err := p.PruneReceipts(t.Context(), time.Now().Add(-24*time.Hour))
	if err != nil || n != 5 {
		t.Fatalf("PruneReceipts = %d, %v; want 5, nil", n, err)
	}
	if _, ok, _ := s.Receipt(t.Context(), "prune/1:old0"); ok {
		t.Error("old receipt survived PruneReceipts")
	}
	if _, ok, _ := s.Receipt(t.Context(), "prune/1:new"); !ok {
		t.Error("new receipt was pruned")
	}
	if snap := mustLoad(t, s, "prune/1", 100); snap.Turns != 6 {
		t.Errorf("PruneReceipts touched history: %d turns, want 6", snap.Turns)
	}
	if n, err := p.PruneReceipts(t.Context(), time.Now().Add(-24*time.Hour)); n != 0 || err != nil {
		t.Errorf("second PruneReceipts = %d, %v; want 0, nil", n, err)
	}
}

func testResetRemovesReceipts(t *testing.T, s memory.Store) {
	r, ok := s.(memory.SessionResetter)
	if !ok {
		t.Skip("store does not implement memory.SessionResetter")
	}
	ctx := t.Context()
	mustCommit(t, s, Turn("reset/1", "a", "u", "r"))
	mustCommit(t, s, Turn("reset/1", "b", "u", "r"))
	mustCommit(t, s, Turn("reset/2", "a", "u", "r"))
	// A session whose history is gone but whose receipt stays is known.
	only := Turn("reset/3", "a", "u", "r")
	only.Messages = nil
	mustCommit(t, s, only)
	if err := r.Reset(ctx, "reset/1"); err != nil {
		t.Fatalf("Reset = %v", err)
	}
	for _, key := range []string{"reset/1:a", "reset/1:b"} {
		if _, ok, err := s.Receipt(ctx, key); ok || err != nil {
			t.Errorf("Receipt(%q) after Reset = %v, %v; want gone", key, ok, err)
		}
	}
	if _, ok, _ := s.Receipt(ctx, "reset/2:a"); !ok {
		t.Error("Reset removed another session's receipt")
	}
	if snap := mustLoad(t, s, "reset/1", 100); len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Errorf("history after Reset: %d messages, %d turns", len(snap.Messages), snap.Turns)
	}
	// The stored answer is gone: the same message is answered as new.
	mustCommit(t, s, Turn("reset/1", "a", "again", "new answer"))
	if snap := mustLoad(t, s, "reset/1", 100); snap.Turns != 1 || texts(snap.Messages)[0] != "again" {
		t.Errorf("after Reset and a new turn: %+v", snap)
	}
	if err := r.Reset(ctx, "reset/3"); err != nil {
		t.Errorf("Reset of a session with only a receipt = %v", err)
	}
	if _, ok, _ := s.Receipt(ctx, "reset/3:a"); ok {
		t.Error("receipt of reset/3 survived Reset")
	}
	if err := r.Reset(ctx, "reset/none"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Reset(unknown) = %v, want ErrNotFound", err)
	}
	if err := r.Reset(ctx, ""); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Reset(\"\") = %v, want ErrInvalid", err)
	}
}

func testClosed(t *testing.T, s memory.Store) {
	mustCommit(t, s, Turn("closed/1", "1", "u", "r"))
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
	}
	ctx := t.Context()
	if err := s.CommitTurn(ctx, Turn("closed/1", "2", "u", "r")); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("CommitTurn after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Load(ctx, "closed/1", 1); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Load after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.Receipt(ctx, "closed/1:1"); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Receipt after Close = %v, want ErrClosed", err)
	}
	if err := s.MarkPublished(ctx, "closed/1:1"); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("MarkPublished after Close = %v, want ErrClosed", err)
	}
	if c, ok := s.(memory.Compactor); ok {
		if err := c.Compact(ctx, "closed/1", "", 0); !errors.Is(err, memory.ErrClosed) {
			t.Errorf("Compact after Close = %v, want ErrClosed", err)
		}
	}
	if p, ok := s.(memory.ReceiptPruner); ok {
		if _, err := p.PruneReceipts(ctx, time.Now()); !errors.Is(err, memory.ErrClosed) {
			t.Errorf("PruneReceipts after Close = %v, want ErrClosed", err)
		}
	}
}

// testCollectedReceipts: a turn answering several inbound messages stores
// every receipt in its one transaction, and a later commit touching any of
// those keys is a duplicate that writes nothing.
func testCollectedReceipts(t *testing.T, s memory.Store) {
	sess := "telegram/collect"
	rec := Turn(sess, "3", "third", "answer")
	rec.Also = []memory.Receipt{
		{Key: sess + ":1", Final: json.RawMessage(`{"kind":"notice"}`)},
		{Key: sess + ":2", Final: json.RawMessage(`{"kind":"notice"}`)},
	}
	mustCommit(t, s, rec)
	for _, k := range []string{sess + ":1", sess + ":2", sess + ":3"} {
		r, ok, err := s.Receipt(t.Context(), k)
		if err != nil || !ok || r.Session != sess || r.Time.IsZero() {
			t.Errorf("Receipt(%q) = %+v, %v, %v; want stored with session and time", k, r, ok, err)
		}
	}
	again := Turn(sess, "4", "fourth", "other")
	again.Also = []memory.Receipt{{Key: sess + ":2", Final: json.RawMessage(`{}`)}}
	if err := s.CommitTurn(t.Context(), again); !errors.Is(err, memory.ErrDuplicate) {
		t.Fatalf("commit with a collected key already stored = %v; want ErrDuplicate", err)
	}
	if _, ok, _ := s.Receipt(t.Context(), sess+":4"); ok {
		t.Error("a duplicate commit stored its main receipt")
	}
	if snap := mustLoad(t, s, sess, 10); len(snap.Messages) != 2 {
		t.Errorf("history holds %d messages after a duplicate commit; want 2", len(snap.Messages))
	}
	twice := Turn(sess, "5", "fifth", "x")
	twice.Also = []memory.Receipt{{Key: sess + ":5", Final: json.RawMessage(`{}`)}}
	if err := s.CommitTurn(t.Context(), twice); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("commit naming one key twice = %v; want ErrInvalid", err)
	}
}
