// Package jsonwire writes JSON by hand where encoding/json costs too much
// on a hot path (the model request, the scripted model's stream): the one
// string encoder of the module, byte for byte what encoding/json writes.
package jsonwire

import "unicode/utf8"

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
