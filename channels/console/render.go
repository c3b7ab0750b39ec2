package console

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/bus"
)

// colours of the terminal front end (SGR codes); Run prints plain text.
const (
	colourTool   = "36" // cyan: a tool call
	colourOK     = "32" // green: a tool result
	colourError  = "31" // red: a failed tool, a refused message
	colourNotice = "33" // yellow: notices
	colourStatus = "2"  // dim: the status in the prompt
)

// paint wraps s in the colour code when the terminal front end shows
// colours, and returns s as it is otherwise.
func (c *Client) paint(code, s string) string {
	if c.tty == nil || c.opts.NoColor {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// status shows s ("thinking…", "calling list_dir…"; "" when idle) in the
// prompt of the terminal front end (c.mu held); Run shows none.
func (c *Client) status(s string) {
	if c.tty != nil {
		c.tty.status(s)
	}
}

// onEvent prints tool calls and results as they happen, so the user sees
// what the agent does between streamed texts.
func (c *Client) onEvent(_ context.Context, ev bus.Event) {
	var data struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Error     bool   `json:"error"`
		Text      string `json:"text"`
		Stage     string `json:"stage"`
	}
	if err := json.Unmarshal(ev.Data, &data); err != nil || data.Stage != "" {
		return // post-turn tools are bookkeeping, not the agent's actions
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Type {
	case bus.EventToolCall:
		fmt.Fprintf(c.out, "  %s\n", c.paint(colourTool, "[tool] "+data.Name+" "+data.Arguments))
		c.status("calling " + data.Name + "…")
	case bus.EventToolResult:
		status, code := "ok", colourOK
		if data.Error {
			status, code = "error", colourError
		}
		first, _, _ := strings.Cut(data.Text, "\n")
		fmt.Fprintf(c.out, "  %s\n", c.paint(code, "[tool] "+data.Name+" -> "+status+": "+first))
		c.status("thinking…")
	}
}

// onOutbound prints one outbound envelope. Deltas carry the whole text so
// far: only the part not yet printed is written (the terminal front end
// writes whole lines only, the rest with the final, so the prompt stays
// on a line of its own). (A final shown already is dropped by the kit
// before it gets here.)
func (c *Client) onOutbound(_ context.Context, o bus.Outbound) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.printed[o.InReplyTo]
	switch o.Kind {
	case bus.KindTyping:
		c.status("thinking…")
		return nil
	case bus.KindDelta, bus.KindReply:
		add, now := "\n"+o.Text, o.Text
		if strings.HasPrefix(o.Text, prev) {
			add = o.Text[len(prev):]
		} else if c.tty != nil {
			add = o.Text // what was printed ends with a line end
		}
		if c.tty != nil && !o.Final {
			i := strings.LastIndexByte(add, '\n')
			add = add[:i+1]
			now = prev + add
			if !strings.HasPrefix(o.Text, prev) {
				now = add
			}
		}
		fmt.Fprint(c.out, add)
		c.printed[o.InReplyTo] = now
		if !o.Final {
			c.status("writing…")
		}
	default:
		if prev != "" && !strings.HasSuffix(prev, "\n") {
			fmt.Fprintln(c.out)
		}
		text := "[" + o.Kind + "] " + o.Text
		switch o.Kind {
		case bus.KindError:
			text = c.paint(colourError, text)
		case bus.KindNotice:
			text = c.paint(colourNotice, text)
		}
		fmt.Fprint(c.out, text)
	}
	if o.Final {
		fmt.Fprintln(c.out)
		delete(c.printed, o.InReplyTo)
		c.answered(o.InReplyTo)
	}
	return nil
}
