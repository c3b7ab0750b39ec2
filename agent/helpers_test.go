package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// Test helpers shared by this package's tests; agent/loop's tests have
// their own (test helpers are not exported across packages).

// fakeTool is a configurable tool.
type fakeTool struct {
	name string
	run  func(ctx context.Context, c tools.Call) (tools.Result, error)
}

func (f *fakeTool) Name() string            { return f.name }
func (f *fakeTool) Description() string     { return "fake tool " + f.name }
func (f *fakeTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (f *fakeTool) Permission() string      { return tools.PermRead }
func (f *fakeTool) ParallelSafe() bool      { return false }
func (f *fakeTool) Run(ctx context.Context, c tools.Call) (tools.Result, error) {
	return f.run(ctx, c)
}

func userMsg(s string) memory.Message {
	return memory.Message{Role: memory.RoleUser, TurnStart: true, Blocks: []memory.Block{{Type: memory.BlockText, Text: s}}}
}

// validForOpenAI checks the API's rules on a converted request: every
// assistant tool call is answered by tool messages right after it, in
// order, each with content, and no tool message stands anywhere else.
func validForOpenAI(msgs []llm.Message) error {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == llm.RoleTool {
			return fmt.Errorf("orphan tool message at %d", i)
		}
		if m.Role != llm.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		for j, c := range m.ToolCalls {
			k := i + 1 + j
			if k >= len(msgs) || msgs[k].Role != llm.RoleTool || msgs[k].ToolID != c.ID || msgs[k].Content == "" {
				return fmt.Errorf("call %s at %d not answered at %d", c.ID, i, k)
			}
		}
		i += len(m.ToolCalls)
	}
	return nil
}

// TestSanitizeProperty builds random histories with holes (missing,
// duplicated, misplaced and orphaned results, broken tool_use blocks) and
// checks the sanitised output is always valid for the OpenAI API and keeps
// every user message.
