package scripted

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestDemoTranscript (issue 21): the demo model answers "hello" with text
// and uses list_dir only when asked about files, as its footer says. The
// transcript of a conversation, with the tools the daemon offers, is
// compared to testdata/demo.golden.
func TestDemoTranscript(t *testing.T) {
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "list_dir"}},
		{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file"}}}
	var msgs []openai.ChatCompletionMessage
	var b strings.Builder
	say := func(m openai.ChatCompletionMessage) {
		msgs = append(msgs, m)
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content)
		for {
			r := DemoResponder(&llmtest.Request{Body: openai.ChatCompletionRequest{Messages: msgs, Tools: tools}})
			if len(r.ToolCalls) == 0 {
				fmt.Fprintf(&b, "model: %s\n\n", r.Text)
				msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: r.Text})
				return
			}
			c := r.ToolCalls[0]
			fmt.Fprintf(&b, "model calls %s %s\n", c.Name, c.Arguments)
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}}}})
			result := "AGENT.md\nMEMORY.md\nRULE.md\nUSER.md"
			fmt.Fprintf(&b, "tool: %q\n", result)
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "c", Content: result})
		}
	}
	for _, text := range []string{"hello", "Hi there!", "list my files", "What is in your workspace?", "tell me a joke"} {
		say(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text})
	}
	got := b.String()
	golden := filepath.Join("testdata", "demo.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Fatalf("transcript differs from %s:\n%s", golden, got)
	}
	// The promise itself, beyond the golden file: no tool call before the
	// first request about files.
	if i := strings.Index(got, "model calls"); i < strings.Index(got, "user: list my files") {
		t.Fatalf("a tool was called before the user asked:\n%s", got)
	}
}
