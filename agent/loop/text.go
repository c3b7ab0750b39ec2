package loop

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// StripThink removes <think>...</think> sections, and an unfinished one at
// the end, from model text.
func StripThink(s string) string {
	for {
		i := strings.Index(s, "<think>")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "</think>")
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + s[i+j+len("</think>"):]
	}
}

// TruncateMiddle keeps the head and tail of s within max bytes (cut on rune
// boundaries) with a note of what was left out.
func TruncateMiddle(s string, max int) string {
	if len(s) <= max {
		return s
	}
	h, ts := max/2, len(s)-max/2
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for ts < len(s) && !utf8.RuneStart(s[ts]) {
		ts++
	}
	head, tail := s[:h], s[ts:]
	return fmt.Sprintf("%s\n\n... [%d bytes omitted] ...\n\n%s", head, len(s)-len(head)-len(tail), tail)
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
