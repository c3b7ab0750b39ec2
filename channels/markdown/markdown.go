// Package markdown turns the Markdown a model writes into what chat
// platforms display, and splits long replies into platform-sized pieces.
//
// The input is CommonMark with the GitHub extensions models use
// (strikethrough, tables, task lists), parsed with goldmark. Three renderers
// share one walk over the syntax tree:
//
//   - [TelegramHTML]: Telegram's HTML subset (parse_mode "HTML");
//   - [SlackMrkdwn]: Slack's mrkdwn;
//   - [Plain]: readable text without markup, for streaming previews and as
//     the fallback when a platform rejects the markup.
//
// Chat platforms have no headings, tables, nested lists or images, so those
// are approximated the same way everywhere: headings become a bold line,
// lists become "• item" or "1. item" lines indented by nesting level, tables
// become aligned preformatted text, images become links. Raw HTML in the
// input is shown as text, never passed through. Links are kept only for
// safe URL schemes (http, https, mailto, and tg for Telegram); others are
// reduced to their text.
//
// [Split] cuts Markdown source into pieces that fit a platform's message
// limit without breaking code blocks.
//
// Every function is pure, safe for concurrent use, and accepts any input
// (invalid UTF-8 is replaced by U+FFFD); none panics.
package markdown

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// newParser returns the goldmark parser shared by all calls; goldmark
// parsers keep no per-parse state and are safe for concurrent use.
var newParser = sync.OnceValue(func() goldmark.Markdown {
	return goldmark.New(goldmark.WithExtensions(extension.Strikethrough, extension.Table, extension.TaskList))
})

// parse normalises md (valid UTF-8, no NUL, "\n" line ends) and parses it.
func parse(md string) (ast.Node, []byte) {
	src := []byte(normalize(md))
	return newParser().Parser().Parse(text.NewReader(src)), src
}

// normalize makes md valid UTF-8 without NUL bytes and with "\n" line ends.
func normalize(md string) string {
	if !utf8.ValidString(md) {
		md = strings.ToValidUTF8(md, "\uFFFD")
	}
	if strings.IndexByte(md, 0) >= 0 {
		md = strings.ReplaceAll(md, "\x00", "\uFFFD")
	}
	if strings.IndexByte(md, '\r') >= 0 {
		md = strings.ReplaceAll(md, "\r\n", "\n")
		md = strings.ReplaceAll(md, "\r", "\n")
	}
	return md
}

// TelegramHTML renders md in Telegram's HTML subset, for sendMessage with
// parse_mode "HTML":
//
//   - text is escaped (&, <, >; also " inside attributes);
//   - **bold** → <b>, *italic* and _italic_ → <i>, ~~strike~~ → <s>,
//     `code` → <code>;
//   - fenced and indented code → <pre><code class="language-x"> (the class
//     only when the fence names a language), tables → <pre> with aligned
//     columns;
//   - [text](url) → <a href="url">text</a> for http, https, tg and mailto
//     URLs, else the text alone; images → a link with the alt text;
//   - headings → a bold line; lists → "• item" / "1. item" lines, nested
//     lists indented; blockquotes → <blockquote>; thematic breaks → "———";
//   - raw HTML is escaped and shown as text;
//   - blocks are separated by a blank line.
//
// The result is always well-formed: every tag is closed, in order.
func TelegramHTML(md string) string { return render(md, telegram) }

// SlackMrkdwn renders md as Slack mrkdwn: *bold*, _italic_, ~strike~,
// `code`, ``` code blocks ``` (and tables as code blocks), links as
// <url|text> (http, https and mailto only; else the text), headings as a bold
// line, lists as in [TelegramHTML], blockquotes as "> " lines, and &, <, >
// escaped in text.
func SlackMrkdwn(md string) string { return render(md, slack) }

// Plain renders md as readable text without markup: emphasis and headings
// reduced to their text, code kept verbatim (without fences or backticks),
// links as "text (url)", images as "alt (url)", lists as in
// [TelegramHTML], blockquotes as "> " lines, tables as aligned text.
func Plain(md string) string { return render(md, plain) }

// UTF16Len returns the length of s in UTF-16 code units, the unit Telegram
// counts message length and entity offsets in: 2 for a character outside
// the Basic Multilingual Plane (most emoji), else 1. An invalid UTF-8 byte
// counts 1, as the U+FFFD it decodes to.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
