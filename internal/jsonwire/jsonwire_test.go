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

// TestAppendValue: the hand-written values and the json.Marshal fallback
// give encoding/json's bytes; its errors are encoding/json's.
func TestAppendValue(t *testing.T) {
	type named string
	for _, v := range []any{nil, "<a&b>", true, false, 0, -12, int64(1) << 62, int32(-5), uint64(1) << 63, 1.5, 1e-7,
		named("n"), []string{"x"}, map[string]any(nil), map[string]any{}, map[string]string{"b": "1", "a": "2"},
		map[string]any{"b": 1, "a": map[string]any{"\u2028": "x", "<": nil}, "c": []any{1, "2"}}} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendValue([]byte("x"), v)
		if err != nil || !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("AppendValue(%#v) = %s, %v; want %s", v, got, err, want)
		}
	}
	got, err := AppendValue(nil, map[string]any{"b": selfWritten(7), "a": selfWritten(-1)})
	if want := `{"a":{"n":-1},"b":{"n":7}}`; err != nil || string(got) != want {
		t.Errorf("AppendValue of Appenders = %s, %v; want %s", got, err, want)
	}
	if _, err := AppendValue(nil, map[string]any{"a": 1, "b": make(chan int)}); err == nil {
		t.Error("AppendValue accepted a channel")
	}
}

// FuzzAppendValue checks maps of strings, numbers and bools, and string
// maps, against encoding/json.
func FuzzAppendValue(f *testing.F) {
	f.Add("k", "v<>&", int64(-3), true)
	f.Add("\xff", "\u2028", int64(0), false)
	f.Fuzz(func(t *testing.T, k, s string, n int64, flag bool) {
		v := map[string]any{k: s, s: n, "flag": flag, "inner": map[string]any{k: int(n), "s": s}}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := AppendValue(nil, v); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("AppendValue = %s, %v; want %s", got, err, want)
		}
		m := map[string]string{k: s, s: k}
		if want, _ := json.Marshal(m); !bytes.Equal(AppendStringMap(nil, m), want) {
			t.Fatalf("AppendStringMap = %s, want %s", AppendStringMap(nil, m), want)
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

// selfWritten writes its own JSON, {"n":<n>}.
type selfWritten int

func (s selfWritten) AppendJSON(b []byte) []byte { return append(AppendInt(b, `{"n":`, int64(s)), '}') }
