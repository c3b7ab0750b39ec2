package loop

import (
	"strconv"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
	"github.com/switchboard-chat/switchboard/llm"
)

// The data of the events every turn publishes, as types that write their
// own JSON (jsonwire.Appender): the bytes json.Marshal writes for them,
// which are those of the maps other events use (keys sorted). A value of
// one costs one allocation where a map costs one per field.

// usageData is a usage event's data.
type usageData llm.Usage

func (u usageData) AppendJSON(b []byte) []byte {
	b = jsonwire.AppendInt(b, `{"prompt_tokens":`, int64(u.PromptTokens))
	b = jsonwire.AppendInt(b, `,"completion_tokens":`, int64(u.CompletionTokens))
	b = jsonwire.AppendInt(b, `,"total_tokens":`, int64(u.TotalTokens))
	return append(b, '}')
}

// stepEndData is a step_end event's data (a steered step's has a map).
type stepEndData struct {
	Step      int `json:"step"`
	ToolCalls int `json:"tool_calls"`
}

func (d stepEndData) AppendJSON(b []byte) []byte {
	b = jsonwire.AppendInt(b, `{"step":`, int64(d.Step))
	b = jsonwire.AppendInt(b, `,"tool_calls":`, int64(d.ToolCalls))
	return append(b, '}')
}

// postResultData is the tool_result event's data of a post-turn tool.
type postResultData struct {
	Error bool   `json:"error"`
	Name  string `json:"name"`
	Stage string `json:"stage"`
	Text  string `json:"text"`
}

func (d postResultData) AppendJSON(b []byte) []byte {
	b = strconv.AppendBool(append(b, `{"error":`...), d.Error)
	b = jsonwire.AppendKeyString(b, `,"name":`, d.Name)
	b = jsonwire.AppendKeyString(b, `,"stage":`, d.Stage)
	b = jsonwire.AppendKeyString(b, `,"text":`, d.Text)
	return append(b, '}')
}
