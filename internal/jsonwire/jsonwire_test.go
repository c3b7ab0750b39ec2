package jsonwire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString checks the string encoder against encoding/json: the
// same bytes for every string, valid UTF-8 or not.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<>&", "\u2028\u2029", "\xff\xfe", "bad\xffutf8\xc3", "\x00\x1f\x7f\b\f",
		"quote\" back\\slash", "nl\n\r\t", "é日本\"\\", "ünï ✓ 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}
