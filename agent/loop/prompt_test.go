package loop

import "testing"

// FuzzSystemTokens checks that the estimate of a prompt in two parts is
// the estimate of the joined prompt, wherever the split falls.
func FuzzSystemTokens(f *testing.F) {
	for _, s := range []string{"", "abc", "## Tools\n\n", "é日本\n", "\xe2\x82\xac", "bad\xffutf8\xc3", "\xf0\x9f\x98\x80!", "abcdefg"} {
		for i := 0; i <= len(s); i++ {
			f.Add(s[:i], s[i:])
		}
	}
	if SystemTokens(nil, "abcd") != TextTokens("abcd") || (*Prompt)(nil).Text() != "" {
		f.Fatal("a nil head is not empty")
	}
	f.Fuzz(func(t *testing.T, head, tail string) {
		if got, want := SystemTokens(NewPrompt(head), tail), TextTokens(head+tail); got != want {
			t.Fatalf("SystemTokens(%q, %q) = %d, want %d", head, tail, got, want)
		}
	})
}
