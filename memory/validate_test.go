package memory_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/memory"
)

func TestValidateAcceptsEveryBlockKind(t *testing.T) {
	rec := memory.TurnRecord{
		Session: "telegram/1",
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, Blocks: []memory.Block{
				{Type: memory.BlockText, Text: "hi"},
				{Type: memory.BlockImage, MIME: "image/png", URL: "https://x/y.png"},
			}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{
				{Type: memory.BlockThinking, Text: "..."},
				{Type: memory.BlockText},
				{Type: memory.BlockToolUse, ToolID: "c1", ToolName: "t", Input: json.RawMessage(` {"a":1} `)},
				{Type: memory.BlockToolUse, ToolID: "c2", ToolName: "t"},
			}},
			{Role: memory.RoleTool, Blocks: []memory.Block{{Type: memory.BlockToolResult, ToolID: "c1"}}},
		},
		Receipt: memory.Receipt{Key: "telegram:1", Session: "telegram/1", Final: json.RawMessage(`{"final":true}`)},
	}
	if err := rec.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	// A command turn writes no messages.
	rec.Messages = nil
	if err := rec.Validate(); err != nil {
		t.Fatalf("Validate() without messages = %v", err)
	}
}

func TestValidateKeys(t *testing.T) {
	for _, s := range []string{"", "a\x00", strings.Repeat("k", memory.MaxKeyLen+1)} {
		if err := memory.ValidateSession(s); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("ValidateSession(%q) = %v, want ErrInvalid", s, err)
		}
		if err := memory.ValidateReceiptKey(s); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("ValidateReceiptKey(%q) = %v, want ErrInvalid", s, err)
		}
	}
	if err := memory.ValidateSession(strings.Repeat("k", memory.MaxKeyLen)); err != nil {
		t.Errorf("ValidateSession(max length) = %v", err)
	}
}

func TestValidateMessageFieldPath(t *testing.T) {
	rec := memory.TurnRecord{
		Session: "s",
		Messages: []memory.Message{
			{Role: memory.RoleUser, Blocks: []memory.Block{{Type: memory.BlockText}}},
			{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText}, {Type: memory.BlockToolUse, ToolName: "t"}}},
		},
		Receipt: memory.Receipt{Key: "k", Final: json.RawMessage(`{}`)},
	}
	err := rec.Validate()
	if !errors.Is(err, memory.ErrInvalid) || !strings.HasPrefix(err.Error(), "messages[1].blocks[1].tool_id: ") {
		t.Errorf("Validate() = %v, want ErrInvalid starting with messages[1].blocks[1].tool_id", err)
	}
}
