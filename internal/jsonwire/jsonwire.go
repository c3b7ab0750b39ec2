// Package jsonwire writes JSON by hand where encoding/json costs too much
// on a hot path (the model request, the scripted model's stream, the bus
// envelopes and agent events of package bus): the one string encoder of
// the module, and the event values' encoder, byte for byte what
// encoding/json writes.
package jsonwire

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// jsonSafe marks the ASCII bytes encoding/json writes unescaped when it
// escapes HTML: printable, not '"', '\\', '<', '>' or '&'.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendString appends s as a JSON string exactly as encoding/json does
// with HTML escaping: invalid UTF-8 becomes U+FFFD, U+2028 and U+2029 are
// escaped.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendChars(b, s)
	return append(b, '"')
}

// appendChars appends the characters of s as AppendString writes them
// between the quotes.
func appendChars(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

// AppendJoined appends head+tail as one JSON string, the bytes
// AppendString(b, head+tail) appends, without joining the two into a new
// string. Split at a complete character (the usual case: head ends with an
// ASCII byte or a whole UTF-8 sequence) the two halves are encoded in place;
// a head that ends inside a character is joined first, so an invalid or
// split sequence is read as in the joined string.
func AppendJoined(b []byte, head, tail string) []byte {
	if tail == "" {
		return AppendString(b, head)
	}
	if head == "" {
		return AppendString(b, tail)
	}
	if !endsWhole(head) {
		return AppendString(b, head+tail)
	}
	b = append(b, '"')
	b = appendChars(b, head)
	b = appendChars(b, tail)
	return append(b, '"')
}

// endsWhole reports whether s ends with an ASCII byte or a complete, valid
// UTF-8 sequence: the encoding of s then reads no byte past its end, and
// s's last character is the same whatever follows.
func endsWhole(s string) bool {
	if s[len(s)-1] < utf8.RuneSelf {
		return true
	}
	r, size := utf8.DecodeLastRuneInString(s)
	return r != utf8.RuneError || size > 1
}

// Appender is a value that writes its own JSON: AppendJSON appends what
// json.Marshal writes for it (a test of the type proves it).
type Appender interface {
	AppendJSON(b []byte) []byte
}

// AppendValue appends v exactly as json.Marshal encodes it. The values of
// agent events are written by hand: an Appender, nil, strings, bools, the
// integer types and map[string]any of those (keys sorted, like
// encoding/json); anything else (floats, structs, named types that may have
// their own MarshalJSON) is appended from json.Marshal. The error is
// json.Marshal's.
func AppendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case Appender:
		return v.AppendJSON(b), nil
	case nil:
		return append(b, "null"...), nil
	case string:
		return AppendString(b, v), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	case map[string]any:
		return appendMap(b, v)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, raw...), nil
}

// appendMap appends m with its keys sorted, as encoding/json does; a nil
// map is null.
func appendMap(b []byte, m map[string]any) ([]byte, error) {
	return appendSorted(b, m, AppendValue)
}

// AppendStringMap appends m with its keys sorted, as json.Marshal encodes
// a map[string]string; a nil map is null.
func AppendStringMap(b []byte, m map[string]string) []byte {
	b, _ = appendSorted(b, m, func(b []byte, s string) ([]byte, error) { return AppendString(b, s), nil })
	return b
}

// appendSorted appends m as a JSON object with its keys sorted (null when
// nil), each value written by value; the first error ends it.
func appendSorted[V any](b []byte, m map[string]V, value func([]byte, V) ([]byte, error)) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	var arr [16]string
	b = append(b, '{')
	for i, k := range sortedKeys(m, arr[:0]) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendString(b, k), ':')
		var err error
		if b, err = value(b, m[k]); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// sortedKeys appends m's keys to keys (room on the caller's stack for a
// few) in the order encoding/json writes them.
func sortedKeys[V any](m map[string]V, keys []string) []string {
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// AppendInt appends a key (with its leading punctuation, e.g. `,"steps":`)
// and n.
func AppendInt(b []byte, key string, n int64) []byte {
	return strconv.AppendInt(append(b, key...), n, 10)
}

// AppendKeyString appends a key (with its leading punctuation) and s as a
// JSON string.
func AppendKeyString(b []byte, key, s string) []byte {
	return AppendString(append(b, key...), s)
}
