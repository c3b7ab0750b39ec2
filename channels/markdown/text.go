package markdown

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/util"
)

// unescape resolves what CommonMark resolves in text: backslash escapes of
// ASCII punctuation and entity references (&amp;, &#35;, &#x23;).
func unescape(v []byte) string {
	if !containsAny(v, '\\', '&') {
		return string(v)
	}
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' && i+1 < len(v) && util.IsPunct(v[i+1]):
			b.WriteByte(v[i+1])
			i++
		case c == '&':
			if r, n := entity(v[i:]); n > 0 {
				b.WriteString(r)
				i += n - 1
				continue
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func containsAny(v []byte, chars ...byte) bool {
	for _, c := range v {
		for _, x := range chars {
			if c == x {
				return true
			}
		}
	}
	return false
}

// entity decodes the entity reference at the start of v ("&...;") and
// returns its characters and length, or n = 0 when v does not start with a
// valid reference.
func entity(v []byte) (string, int) {
	end := -1
	for i := 1; i < len(v) && i < 40; i++ {
		if v[i] == ';' {
			end = i
			break
		}
	}
	if end < 2 {
		return "", 0
	}
	body := string(v[1:end])
	if body[0] == '#' {
		num, base := body[1:], 10
		if len(num) > 0 && (num[0] == 'x' || num[0] == 'X') {
			num, base = num[1:], 16
		}
		if num == "" || len(num) > 7 {
			return "", 0
		}
		cp, err := strconv.ParseUint(num, base, 32)
		if err != nil {
			return "", 0
		}
		r := rune(cp)
		if r == 0 || !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		return string(r), end + 1
	}
	for i := 0; i < len(body); i++ {
		if !util.IsAlphaNumeric(body[i]) {
			return "", 0
		}
	}
	if e, ok := util.LookUpHTML5EntityByName(body); ok {
		return string(e.Characters), end + 1
	}
	return "", 0
}

// escapeHTML escapes text for Telegram HTML: &, <, >.
func escapeHTML(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return htmlEscaper.Replace(s)
}

// escapeAttr escapes an attribute value for Telegram HTML: &, <, >, ".
func escapeAttr(s string) string {
	if !strings.ContainsAny(s, "&<>\"") {
		return s
	}
	return attrEscaper.Replace(s)
}

// escapeSlack escapes text for Slack mrkdwn: &, <, >.
func escapeSlack(s string) string { return escapeHTML(s) }

var (
	htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	slackURLEsc = strings.NewReplacer("&", "&amp;", "<", "%3C", ">", "%3E", "|", "%7C")
)

// resolveURL turns a link destination into a URL: escapes and entity
// references resolved, unsafe characters percent-encoded.
func resolveURL(dest []byte) string { return string(util.URLEscape(dest, true)) }

// escapeURL percent-encodes the unsafe characters of an autolink's URL.
func escapeURL(u string) string { return string(util.URLEscape([]byte(u), false)) }

// slackURL makes u safe inside Slack's <url|text>.
func slackURL(u string) string { return slackURLEsc.Replace(u) }

// allowedURL reports whether u has a scheme the target may link to:
// http, https and mailto everywhere, tg (Telegram deep links) for Telegram
// and plain text.
func allowedURL(u string, t target) bool {
	scheme, rest, ok := strings.Cut(u, ":")
	if !ok || rest == "" {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		return strings.HasPrefix(rest, "//") && len(rest) > 2
	case "mailto":
		return true
	case "tg":
		return t != slack
	}
	return false
}

// sanitizeLang keeps a code block's language name safe for a class
// attribute: letters, digits and _+#.- only, at most 32 bytes.
func sanitizeLang(lang string) string {
	var b strings.Builder
	for i := 0; i < len(lang) && b.Len() < 32; i++ {
		c := lang[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_+#.-", c) >= 0 {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// displayWidth approximates the columns s takes in a monospace font: wide
// East Asian characters and emoji take 2, combining marks and joiners 0.
func displayWidth(s string) int {
	w := 0
	for _, r := range s {
		w += runeWidth(r)
	}
	return w
}

func runeWidth(r rune) int {
	switch {
	case r == 0x200D || (r >= 0xFE00 && r <= 0xFE0F) || (r >= 0x1F3FB && r <= 0x1F3FF):
		return 0 // zero-width joiner, variation selectors, skin tones
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		return 0
	case r >= 0x1F1E6 && r <= 0x1F1FF:
		return 1 // regional indicator: a flag is a pair, 2 columns
	case r >= 0x1100 && r <= 0x115F, r >= 0x2E80 && r <= 0x303E, r >= 0x3041 && r <= 0x33FF,
		r >= 0x3400 && r <= 0x4DBF, r >= 0x4E00 && r <= 0x9FFF, r >= 0xA000 && r <= 0xA4CF,
		r >= 0xAC00 && r <= 0xD7A3, r >= 0xF900 && r <= 0xFAFF, r >= 0xFE30 && r <= 0xFE4F,
		r >= 0xFF00 && r <= 0xFF60, r >= 0xFFE0 && r <= 0xFFE6,
		r >= 0x1F000 && r <= 0x1FAFF, r >= 0x20000 && r <= 0x3FFFD:
		return 2
	case r >= 0x2300 && r <= 0x2BFF:
		return wideSymbol(r)
	}
	return 1
}

// wideSymbols lists the symbols of U+2300–U+2BFF that East Asian Width
// classifies as wide (they display as emoji).
var wideSymbols = [...][2]rune{
	{0x231A, 0x231B}, {0x2329, 0x232A}, {0x23E9, 0x23EC}, {0x23F0, 0x23F0}, {0x23F3, 0x23F3},
	{0x25FD, 0x25FE}, {0x2614, 0x2615}, {0x2648, 0x2653}, {0x267F, 0x267F}, {0x2693, 0x2693},
	{0x26A1, 0x26A1}, {0x26AA, 0x26AB}, {0x26BD, 0x26BE}, {0x26C4, 0x26C5}, {0x26CE, 0x26CE},
	{0x26D4, 0x26D4}, {0x26EA, 0x26EA}, {0x26F2, 0x26F3}, {0x26F5, 0x26F5}, {0x26FA, 0x26FA},
	{0x26FD, 0x26FD}, {0x2705, 0x2705}, {0x270A, 0x270B}, {0x2728, 0x2728}, {0x274C, 0x274C},
	{0x274E, 0x274E}, {0x2753, 0x2755}, {0x2757, 0x2757}, {0x2795, 0x2797}, {0x27B0, 0x27B0},
	{0x27BF, 0x27BF}, {0x2B1B, 0x2B1C}, {0x2B50, 0x2B50}, {0x2B55, 0x2B55},
}

func wideSymbol(r rune) int {
	for _, rg := range wideSymbols {
		if r >= rg[0] && r <= rg[1] {
			return 2
		}
	}
	return 1
}
