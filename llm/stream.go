package llm

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// callAcc accumulates one streamed tool call.
type callAcc struct {
	index int    // the wire index (or the one assigned when it was missing)
	seq   int    // order of first appearance
	id    string // may stay empty until the end
	name  string
	args  strings.Builder
}

// assembler builds a Response from stream chunks. It is used by one
// goroutine.
type assembler struct {
	text      strings.Builder
	reasoning strings.Builder
	finish    string
	usage     Usage
	calls     []*callAcc
	byIndex   map[int]*callAcc // the current call at each wire index
	maxIndex  int              // highest index seen, -1 when none
	last      *callAcc         // the call the latest fragment went to
}

func newAssembler() *assembler {
	return &assembler{maxIndex: -1}
}

// add folds one chunk in and returns the caller-visible delta it carried.
func (a *assembler) add(chunk *openai.ChatCompletionStreamResponse) Delta {
	if chunk.Usage != nil {
		a.usage = Usage{
			PromptTokens:     chunk.Usage.PromptTokens,
			CompletionTokens: chunk.Usage.CompletionTokens,
			TotalTokens:      chunk.Usage.TotalTokens,
		}
	}
	var d Delta
	for i := range chunk.Choices {
		ch := &chunk.Choices[i]
		if ch.Index != 0 {
			continue // n is always 1; ignore stray choices
		}
		text := ch.Delta.Content + ch.Delta.Refusal
		if text != "" {
			a.text.WriteString(text)
			d.Text += text
		}
		if r := ch.Delta.ReasoningContent; r != "" {
			a.reasoning.WriteString(r)
			d.Reasoning += r
		}
		for j := range ch.Delta.ToolCalls {
			a.addCall(&ch.Delta.ToolCalls[j])
		}
		if ch.FinishReason != "" {
			a.finish = string(ch.FinishReason)
		}
	}
	return d
}

// addCall folds one tool call fragment in. Fragments are matched by index;
// a new non-empty id at an index already holding another id starts a new
// call (Ollama sends every call at index 0); a fragment without an index
// continues the call the previous fragment went to, unless it brings a new
// id (then it starts a call after the highest index seen).
func (a *assembler) addCall(tc *openai.ToolCall) {
	var acc *callAcc
	if tc.Index != nil {
		idx := *tc.Index
		acc = a.byIndex[idx]
		if acc != nil && tc.ID != "" && acc.id != "" && tc.ID != acc.id {
			acc = nil
		}
		if acc == nil {
			acc = a.newCall(idx)
		}
	} else {
		if last := a.last; last != nil && (tc.ID == "" || last.id == "" || tc.ID == last.id) {
			acc = last
		}
		if acc == nil {
			acc = a.newCall(a.maxIndex + 1)
		}
	}
	if tc.ID != "" && acc.id == "" {
		acc.id = tc.ID
	}
	if n := tc.Function.Name; n != "" && n != acc.name {
		// Some servers repeat the whole name on every fragment; others
		// (rarely) split it. Append only what is new.
		if !strings.HasPrefix(n, acc.name) || acc.name == "" {
			acc.name += n
		} else {
			acc.name = n
		}
	}
	acc.args.WriteString(tc.Function.Arguments)
	a.last = acc
}

func (a *assembler) newCall(idx int) *callAcc {
	acc := &callAcc{index: idx, seq: len(a.calls)}
	a.calls = append(a.calls, acc)
	if a.byIndex == nil {
		a.byIndex = make(map[int]*callAcc, 2)
	}
	a.byIndex[idx] = acc
	if idx > a.maxIndex {
		a.maxIndex = idx
	}
	return acc
}

// response returns the assembled response. Tool calls come in index order
// (ties in order of appearance); a call the server sent without an id gets
// one. When tool calls were assembled they are authoritative: a finish
// reason of "stop" or none is reported as "tool_calls".
func (a *assembler) response() *Response {
	resp := &Response{
		Text:         a.text.String(),
		Reasoning:    a.reasoning.String(),
		FinishReason: a.finish,
		Usage:        a.usage,
	}
	if len(a.calls) == 0 {
		return resp
	}
	calls := slices.Clone(a.calls)
	slices.SortStableFunc(calls, func(x, y *callAcc) int {
		return cmp.Or(cmp.Compare(x.index, y.index), cmp.Compare(x.seq, y.seq))
	})
	resp.ToolCalls = make([]ToolCall, len(calls))
	for i, c := range calls {
		id := c.id
		if id == "" {
			id = newCallID()
		}
		resp.ToolCalls[i] = ToolCall{ID: id, Name: c.name, Arguments: c.args.String()}
	}
	if resp.FinishReason == FinishStop || resp.FinishReason == "" {
		resp.FinishReason = FinishToolCalls
	}
	return resp
}

// newCallID returns "call_" and 24 random hex digits.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it aborts the program instead)
	return "call_" + hex.EncodeToString(b[:])
}
