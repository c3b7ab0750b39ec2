package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MaxKeyLen is the longest session key or receipt key a Store accepts, in
// bytes. It is above the longest key the bus's envelope rules let through
// (a session "<channel>/<chat_id>/<thread_id>" of 32+1+512+1+512 bytes), so
// that no valid inbound message can be refused for its key.
const MaxKeyLen = 2048

// ValidateSession reports whether s can be used as a session key: non-empty,
// at most [MaxKeyLen] bytes and free of NUL bytes. The error wraps
// [ErrInvalid].
func ValidateSession(s string) error {
	return validateKey("session", s)
}

// ValidateReceiptKey reports whether k can be used as a receipt key, with
// the same rules as [ValidateSession]. The error wraps [ErrInvalid].
func ValidateReceiptKey(k string) error {
	return validateKey("receipt key", k)
}

func validateKey(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	case len(s) > MaxKeyLen:
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, field, len(s), MaxKeyLen)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s %q contains a NUL byte", ErrInvalid, field, s)
	}
	return nil
}

// Validate checks a turn record before it is committed. The rules:
//
//   - Session and Receipt.Key pass [ValidateSession] and [ValidateReceiptKey];
//     Receipt.Session is empty or equal to Session.
//   - Receipt.Final is non-empty valid JSON.
//   - Every message passes [Message.Validate].
//
// The error wraps [ErrInvalid] and names the offending field, e.g.
// "messages[2].blocks[0].tool_id".
func (rec *TurnRecord) Validate() error {
	if err := ValidateSession(rec.Session); err != nil {
		return err
	}
	if err := rec.Receipt.validate("receipt", rec.Session); err != nil {
		return err
	}
	seen := map[string]bool{rec.Receipt.Key: true}
	for i := range rec.Also {
		name := fmt.Sprintf("also[%d]", i)
		if err := rec.Also[i].validate(name, rec.Session); err != nil {
			return err
		}
		if seen[rec.Also[i].Key] {
			return fmt.Errorf("%w: %s.key %q appears twice in the turn", ErrInvalid, name, rec.Also[i].Key)
		}
		seen[rec.Also[i].Key] = true
	}
	for i := range rec.Messages {
		if err := rec.Messages[i].Validate(); err != nil {
			return fmt.Errorf("messages[%d].%w", i, err)
		}
	}
	return nil
}

// validate checks one receipt of a turn record, named name in errors.
func (r *Receipt) validate(name, session string) error {
	if err := ValidateReceiptKey(r.Key); err != nil {
		return err
	}
	if r.Session != "" && r.Session != session {
		return fmt.Errorf("%w: %s.session %q differs from session %q", ErrInvalid, name, r.Session, session)
	}
	if len(bytes.TrimSpace(r.Final)) == 0 {
		return fmt.Errorf("%w: %s.final is empty", ErrInvalid, name)
	}
	if !json.Valid(r.Final) {
		return fmt.Errorf("%w: %s.final is not valid JSON", ErrInvalid, name)
	}
	return nil
}

// Validate checks one message:
//
//   - Role is user, assistant or tool, and there is at least one block.
//   - Block types are known; text and thinking blocks carry text.
//   - tool_use blocks appear only in assistant messages and have tool_id,
//     tool_name and, when present, an Input that is a JSON object.
//   - tool messages hold only tool_result blocks; tool_result blocks appear
//     only in tool messages and have a tool_id.
//   - image blocks have a mime type and a url or data.
//
// The error wraps [ErrInvalid]; its text starts with the field path
// ("role", "blocks[1].tool_id", ...) so callers can prefix a location.
func (m *Message) Validate() error {
	switch m.Role {
	case RoleUser, RoleAssistant, RoleTool:
	case "":
		return fmt.Errorf("role: %w: empty", ErrInvalid)
	default:
		return fmt.Errorf("role: %w: %q is not one of user, assistant, tool", ErrInvalid, m.Role)
	}
	if len(m.Blocks) == 0 {
		return fmt.Errorf("blocks: %w: a message needs at least one block", ErrInvalid)
	}
	for i := range m.Blocks {
		if err := m.validateBlock(&m.Blocks[i]); err != nil {
			return fmt.Errorf("blocks[%d].%w", i, err)
		}
	}
	return nil
}

func (m *Message) validateBlock(b *Block) error {
	if m.Role == RoleTool && b.Type != BlockToolResult {
		return fmt.Errorf("type: %w: a tool message holds only tool_result blocks, got %q", ErrInvalid, b.Type)
	}
	switch b.Type {
	case BlockText, BlockThinking:
		// Empty text is allowed: a reply may legitimately be blank.
	case BlockToolUse:
		if m.Role != RoleAssistant {
			return fmt.Errorf("type: %w: tool_use blocks belong to assistant messages, not %s", ErrInvalid, m.Role)
		}
		if b.ToolID == "" {
			return fmt.Errorf("tool_id: %w: tool_use block has no tool_id", ErrInvalid)
		}
		if b.ToolName == "" {
			return fmt.Errorf("tool_name: %w: tool_use block %q has no tool_name", ErrInvalid, b.ToolID)
		}
		if len(b.Input) > 0 && !isJSONObject(b.Input) {
			return fmt.Errorf("input: %w: tool_use block %q input is not a JSON object", ErrInvalid, b.ToolID)
		}
	case BlockToolResult:
		if m.Role != RoleTool {
			return fmt.Errorf("type: %w: tool_result blocks belong to tool messages, not %s", ErrInvalid, m.Role)
		}
		if b.ToolID == "" {
			return fmt.Errorf("tool_id: %w: tool_result block has no tool_id", ErrInvalid)
		}
	case BlockImage:
		if b.MIME == "" {
			return fmt.Errorf("mime: %w: image block has no mime type", ErrInvalid)
		}
		if b.URL == "" && b.Data == "" {
			return fmt.Errorf("url: %w: image block has neither url nor data", ErrInvalid)
		}
	case "":
		return fmt.Errorf("type: %w: empty", ErrInvalid)
	default:
		return fmt.Errorf("type: %w: unknown block type %q", ErrInvalid, b.Type)
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var v map[string]json.RawMessage
	return json.Unmarshal(t, &v) == nil
}
