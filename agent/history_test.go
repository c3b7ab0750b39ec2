package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
)

// A chat that never goes quiet does not keep every turn it answered in
// memory until it does: after maxUnnotedTurns turns the conversation so far
// goes into the daily notes (as when the chat goes quiet) and a new note
// begins, so a session holds a bounded number of turns.
func TestLongChatNotesConversationBeforeIdle(t *testing.T) {
	mem := fakeMemory{notes: make(chan string, 4*maxUnnotedTurns)}
	sm := funcSummarizer(func(_ context.Context, _, _ string, dropped []memory.Message) (string, error) {
		return fmt.Sprintf("- %d messages", len(dropped)), nil
	})
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.SessionIdle = time.Hour // never idle during the test
		hc.summarizer = sm
		hc.memory = mem
	})
	for i := range maxUnnotedTurns {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	want := fmt.Sprintf("u1|Conversation|- %d messages", 2*maxUnnotedTurns)
	deadline := time.After(wait)
	for {
		select {
		case n := <-mem.notes:
			if strings.Contains(n, "|Conversation|") {
				if n != want {
					t.Fatalf("conversation note = %q, want %q", n, want)
				}
				return
			}
		case <-deadline:
			t.Fatalf("no conversation note after %d turns of a chat that never went quiet", maxUnnotedTurns)
		}
	}
}
