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

// A busy chat does not hold every turn it answered in memory until it goes
// quiet: the daily note written then covers its last maxUnnotedTurns turns
// (older ones left the context long before and are in the note of what was
// trimmed), so a session holds a bounded number of turns.
func TestLongChatHoldsBoundedTurnsForItsNote(t *testing.T) {
	const turns = maxUnnotedTurns + 5
	mem := fakeMemory{notes: make(chan string, 4*turns)}
	sm := funcSummarizer(func(_ context.Context, _, _ string, dropped []memory.Message) (string, error) {
		return fmt.Sprintf("%d messages, first %q, last %q", len(dropped), dropped[0].Text(), dropped[len(dropped)-1].Text()), nil
	})
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.SessionIdle = time.Second
		hc.summarizer = sm
		hc.memory = mem
	})
	for i := range turns {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	last := fmt.Sprintf("last %q", fmt.Sprintf("answer %d", turns-1))
	deadline := time.After(wait)
	for {
		select {
		case n := <-mem.notes:
			if !strings.Contains(n, "|Conversation|") {
				continue
			}
			var count int
			if _, err := fmt.Sscanf(strings.SplitN(n, "|", 3)[2], "%d messages", &count); err != nil {
				t.Fatalf("conversation note %q: %v", n, err)
			}
			if count > 2*maxUnnotedTurns {
				t.Fatalf("the conversation note covers %d messages, want at most the last %d turns (%d messages): %s", count, maxUnnotedTurns, 2*maxUnnotedTurns, n)
			}
			if strings.Contains(n, last) {
				first := fmt.Sprintf("first %q", fmt.Sprintf("question %d", turns-maxUnnotedTurns))
				if !strings.Contains(n, first) {
					t.Errorf("conversation note = %q, want it to start at %s", n, first)
				}
				return
			}
		case <-deadline:
			t.Fatal("no conversation note with the last turn after the chat went quiet")
		}
	}
}
