package jsonwire

import (
	"bytes"
	"encoding/json"
	"strings"
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

// FuzzAppendJoined checks that two halves encode as their concatenation
// does, wherever the split falls (inside a character too).
func FuzzAppendJoined(f *testing.F) {
	for _, s := range []string{"", "plain", "€uro", "a\u2028b", "\xe2\x82\xac", "bad\xffutf8\xc3", "日本語", "\xf0\x9f\x98\x80!"} {
		for i := 0; i <= len(s); i++ {
			f.Add(s[:i], s[i:])
		}
	}
	f.Fuzz(func(t *testing.T, head, tail string) {
		want := AppendString([]byte("x"), head+tail)
		if got := AppendJoined([]byte("x"), head, tail); !bytes.Equal(got, want) {
			t.Fatalf("AppendJoined(%q, %q) = %s, want %s", head, tail, got, want)
		}
	})
}

// TestAppendJoinedAllocates checks that halves split at a whole character
// are not joined into a new string.
func TestAppendJoinedAllocates(t *testing.T) {
	head, tail := strings.Repeat("système ", 1000)+"\n", "tail\u2028"
	b := make([]byte, 0, 64<<10)
	if n := testing.AllocsPerRun(10, func() { b = AppendJoined(b[:0], head, tail) }); n != 0 {
		t.Fatalf("AppendJoined allocates %v times per call, want 0", n)
	}
}
