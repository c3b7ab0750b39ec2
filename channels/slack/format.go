package slack

import (
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/markdown"
)

// Rendering of outbound text.
const (
	// placeholderText is the status message shown while the agent works
	// where assistant.threads.setStatus is unavailable.
	placeholderText = ":hourglass_flowing_sand: thinking…"
	// statusText is the assistant thread status.
	statusText = "is thinking…"
	// errorPrefix marks a user-visible failure.
	errorPrefix = ":warning: "
)

// measureMrkdwn is what Slack counts of a piece of Markdown: the
// characters of its mrkdwn rendering.
func measureMrkdwn(md string) int { return utf8.RuneCountInString(markdown.SlackMrkdwn(md)) }

// renderPieces renders an outbound text as Slack mrkdwn messages of at
// most about pieceLimit characters each (split on paragraph, line and
// word boundaries, never inside a code block). Errors are marked with a
// warning sign. Blank text gives no pieces.
func renderPieces(kind, md string) []string {
	var out []string
	for _, p := range markdown.Split(md, pieceLimit, measureMrkdwn) {
		if r := strings.TrimSpace(markdown.SlackMrkdwn(p)); r != "" {
			out = append(out, r)
		}
	}
	if kind == bus.KindError && len(out) > 0 {
		out[0] = errorPrefix + out[0]
	}
	return out
}

// slackToText turns the text of a Slack message into plain text:
//
//   - <@U123> and <@U123|name> become "@name" (name from resolve, else
//     the label, else the id); mentions of bot (the bot's own user id)
//     are removed;
//   - <#C123|general> becomes "#general";
//   - <!here>, <!channel>, <!everyone> become "@here"...; other special
//     tokens (<!subteam^S1|@team>, <!date^...|fallback>) their label;
//   - <https://x|label> becomes "label (https://x)", <https://x> the URL,
//     <mailto:a@b|a@b> the address;
//   - &amp; &lt; &gt; are unescaped.
//
// Surrounding white space is trimmed.
func slackToText(s, bot string, resolve func(id string) string) string {
	if bot != "" {
		for _, m := range []string{"<@" + bot + "> ", "<@" + bot + ">"} {
			s = strings.ReplaceAll(s, m, "")
		}
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			b.WriteString(unescape(s))
			break
		}
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			b.WriteString(unescape(s))
			break
		}
		b.WriteString(unescape(s[:i]))
		b.WriteString(slackToken(s[i+1:i+j], bot, resolve))
		s = s[i+j+1:]
	}
	return strings.TrimSpace(b.String())
}

// slackToken renders the inside of one <...> token.
func slackToken(tok, bot string, resolve func(string) string) string {
	target, label, hasLabel := strings.Cut(tok, "|")
	label = unescape(label)
	switch {
	case strings.HasPrefix(target, "@"):
		id := target[1:]
		if id == bot {
			return ""
		}
		name := ""
		if resolve != nil {
			name = resolve(id)
		}
		if name == "" {
			name = label
		}
		if name == "" {
			name = id
		}
		return "@" + name
	case strings.HasPrefix(target, "#"):
		if hasLabel && label != "" {
			return "#" + label
		}
		return target
	case strings.HasPrefix(target, "!"):
		switch target {
		case "!here", "!channel", "!everyone":
			return "@" + target[1:]
		}
		if hasLabel {
			return label
		}
		return ""
	}
	url := unescape(target)
	if !hasLabel || label == "" || label == url {
		return url
	}
	if strings.HasPrefix(url, "mailto:") && label == strings.TrimPrefix(url, "mailto:") {
		return label
	}
	return label + " (" + url + ")"
}

// unescape undoes Slack's escaping of &, < and >.
func unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return slackUnescaper.Replace(s)
}

var slackUnescaper = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")
