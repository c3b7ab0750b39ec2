package agent

import (
	"github.com/switchboard-chat/switchboard/internal/jsonwire"
	"github.com/switchboard-chat/switchboard/llm"
)

// The data of the events every turn publishes, as types that write their
// own JSON (jsonwire.Appender): the bytes json.Marshal writes for them,
// which are those of the maps other events use (keys sorted). A value of
// one costs one allocation where a map costs one per field.

// turnStartData is a turn_start event's data for one message (a collected
// batch's has a map with its ids).
type turnStartData struct {
	ID string `json:"id"`
}

func (d turnStartData) AppendJSON(b []byte) []byte {
	return append(jsonwire.AppendKeyString(b, `{"id":`, d.ID), '}')
}

// turnEndData is a turn_end event's data.
type turnEndData struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Steps      int       `json:"steps"`
	StopReason string    `json:"stop_reason"`
	Usage      llm.Usage `json:"usage"`
}

func (d turnEndData) AppendJSON(b []byte) []byte {
	b = jsonwire.AppendKeyString(b, `{"id":`, d.ID)
	b = jsonwire.AppendKeyString(b, `,"kind":`, d.Kind)
	b = jsonwire.AppendInt(b, `,"steps":`, int64(d.Steps))
	b = jsonwire.AppendKeyString(b, `,"stop_reason":`, d.StopReason)
	b = jsonwire.AppendInt(b, `,"usage":{"prompt_tokens":`, int64(d.Usage.PromptTokens))
	b = jsonwire.AppendInt(b, `,"completion_tokens":`, int64(d.Usage.CompletionTokens))
	b = jsonwire.AppendInt(b, `,"total_tokens":`, int64(d.Usage.TotalTokens))
	return append(b, '}', '}')
}

// deltaData is an llm_delta event's data.
type deltaData struct {
	Text string `json:"text"`
}

func (d deltaData) AppendJSON(b []byte) []byte {
	return append(jsonwire.AppendKeyString(b, `{"text":`, d.Text), '}')
}
