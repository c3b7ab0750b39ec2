package loop

import "testing"

// Behaviour 7: the reply never carries think blocks, markup or nudges.
func TestCleanReply(t *testing.T) {
	isTool := func(n string) bool { return n == "echo" }
	for in, want := range map[string]string{
		"<think>x</think>Hello":                                     "Hello",
		"Answer <tool_call>{\"name\":\"echo\"}":                     "Answer",
		"A ```json\n{\"name\": \"echo\", \"arguments\": {}}\n``` B": "A  B",
		"Keep {\"name\": \"other\", \"arguments\": 1}":              "Keep {\"name\": \"other\", \"arguments\": 1}",
		"Done. " + NudgePrompt:                                      "Done.",
		"x [TOOL_CALLS] [{...}]":                                    "x",
	} {
		if got := cleanReply(in, isTool); got != want {
			t.Errorf("cleanReply(%q) = %q, want %q", in, got, want)
		}
	}
}
