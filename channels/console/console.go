// Package console is the terminal client of Switchboard (`switchboard chat`,
// and the demo): a channel adapter for one chat of the channel "console",
// built on the bridge kit (package bus/bridge) like every other adapter.
//
// A [Client] reads lines from an io.Reader and publishes each non-blank one
// as an inbound envelope through [bridge.Client.PublishInbound] (a fresh
// id, the kit's de-duplication header, the runtime's validation). It shows
// what comes back on an io.Writer, through one [bridge.Client.Subscribe]
// narrowed to its chat: outbound envelopes (streamed deltas print only the
// part not yet printed; notices and errors as "[kind] text"; a final the
// daemon publishes again after a crash is shown once, by the kit) and the
// agent's tool calls and results ("  [tool] name args", "  [tool] name ->
// ok: first line"). Tools of the post-turn stages are not shown.
//
// When the input ends, [Client.Run] waits until every message sent has its
// final answer (bounded by [Options.Wait]), so a script piped into
// `switchboard chat` prints all its answers before it exits. An envelope
// the kit refuses before sending (a text over bus.max_text_bytes) is
// reported on the writer and the session goes on.
//
// The console subscribes with core NATS: what is published while it is not
// running is not shown (the history keeps it). It authenticates as the
// operator of the bus; see [Dial].
package console

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nuid"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
)

// Channel is the channel name the terminal client speaks for.
const Channel = "console"

const (
	// DefaultWait is the default of [Options.Wait].
	DefaultWait = 10 * time.Minute
	// dialTimeout bounds [Dial] when ctx has no earlier deadline.
	dialTimeout = 3 * time.Second
	// publishTimeout bounds the publication of one line.
	publishTimeout = 10 * time.Second
	// maxLineBytes bounds one input line.
	maxLineBytes = 1 << 20
)

// Dial connects to the bus at url as the console channel (the credentials
// may be in url, or in creds: the operator's, natsbus.Operator) and returns
// the bridge client, which owns the connection. opts.Channel defaults to
// [Channel]; set opts.SubjectPrefix and opts.MaxTextBytes to the daemon's
// bus.subject_prefix and bus.max_text_bytes. The connection attempt is
// bounded to 3 s.
func Dial(ctx context.Context, url string, creds bridge.Credentials, opts bridge.Options) (*bridge.Client, error) {
	if opts.Channel == "" {
		opts.Channel = Channel
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	br, err := bridge.Dial(dctx, url, creds, opts)
	if err != nil {
		return nil, fmt.Errorf("chat: connect to the bus at %s (is `switchboard serve` running?): %w", bus.RedactURL(url), err)
	}
	return br, nil
}

// Options configures a [Client].
type Options struct {
	// UserID is the user id and name of the inbound envelopes (default
	// "console"; `switchboard chat` passes $USER).
	UserID string
	// ChatID is the chat the client speaks in (default "console-" +
	// UserID).
	ChatID string
	// Wait is the longest time Run waits for outstanding answers after
	// the input ends (default [DefaultWait]).
	Wait time.Duration
}

// Client is the terminal client of one chat. Use it for one Run.
type Client struct {
	br   *bridge.Client
	opts Options
	out  io.Writer

	mu      sync.Mutex
	printed map[string]string // in_reply_to -> text printed so far
	pending map[string]bool   // inbound ids without a final answer
	changed chan struct{}     // signalled when pending shrinks
}

// New returns a client over br, a bridge client of channel [Channel]
// (from [Dial], or bridge.New over a connection the caller owns), that
// prints to out. It does no I/O.
func New(br *bridge.Client, opts Options, out io.Writer) (*Client, error) {
	var errs []error
	if br == nil {
		errs = append(errs, errors.New("bridge client is nil"))
	} else if br.Channel() != Channel {
		errs = append(errs, fmt.Errorf("bridge client speaks for channel %q, want %q", br.Channel(), Channel))
	}
	if opts.Wait < 0 {
		errs = append(errs, fmt.Errorf("Options.Wait: must not be negative, got %s", opts.Wait))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	if opts.UserID == "" {
		opts.UserID = "console"
	}
	if opts.ChatID == "" {
		opts.ChatID = "console-" + opts.UserID
	}
	return &Client{br: br, opts: opts, out: out, printed: map[string]string{}, pending: map[string]bool{},
		changed: make(chan struct{}, 1)}, nil
}

// ChatID returns the chat the client speaks in.
func (c *Client) ChatID() string { return c.opts.ChatID }

// Run subscribes to the chat, then publishes every non-blank line read
// from in and prints the answers, until in ends (then it waits for the
// outstanding answers) or ctx is cancelled (then it returns nil at once).
// It returns an error when the subscription or a publication fails, when
// reading in fails, or when answers are still missing after Options.Wait.
// The goroutine reading in is not joined when ctx ends first: a blocked
// terminal read cannot be interrupted; it ends with in.
func (c *Client) Run(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	subErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		subErr <- c.br.Subscribe(ctx, bridge.Subscription{ChatID: c.opts.ChatID, Outbound: c.onOutbound,
			Events: c.onEvent, Ready: func() { close(ready) }})
	})
	select {
	case <-ready:
	case err := <-subErr:
		if err == nil {
			return nil // ctx ended
		}
		return fmt.Errorf("chat: %w", err)
	}

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() { // ends when in ends; not joined (see above)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), maxLineBytes)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-subErr:
			if err == nil {
				return nil
			}
			return fmt.Errorf("chat: %w", err)
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("chat: read input: %w", err)
			}
			return c.drain(ctx, subErr)
		case line := <-lines:
			text := strings.TrimSpace(line)
			if text == "" {
				continue
			}
			if err := c.send(ctx, text); err != nil {
				if ctx.Err() != nil {
					return nil // cancelled while publishing
				}
				return err
			}
		}
	}
}

// send publishes one line. A refusal by the kit's validation is printed
// and the session goes on; any other failure ends it.
func (c *Client) send(ctx context.Context, text string) error {
	in := bus.Inbound{V: bus.Version, ID: nuid.Next(), Channel: Channel, ChatID: c.opts.ChatID, UserID: c.opts.UserID,
		UserName: c.opts.UserID, Text: text, TS: time.Now().UTC().Format(time.RFC3339)}
	c.mu.Lock()
	c.pending[in.ID] = true
	c.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	err := c.br.PublishInbound(pctx, in)
	if errors.Is(err, bus.ErrInvalid) || errors.Is(err, bus.ErrTooLarge) {
		c.mu.Lock()
		delete(c.pending, in.ID)
		fmt.Fprintf(c.out, "[error] not sent: %v\n", err)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("chat: publish (is the daemon running?): %w", err)
	}
	return nil
}

// drain waits until every sent message has its final answer.
func (c *Client) drain(ctx context.Context, subErr <-chan error) error {
	deadline := time.NewTimer(c.opts.Wait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-subErr:
			if err == nil {
				return nil
			}
			return fmt.Errorf("chat: %w", err)
		case <-deadline.C:
			return fmt.Errorf("chat: %d message(s) still unanswered after %s", n, c.opts.Wait)
		case <-c.changed:
		}
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
		fmt.Fprintf(c.out, "  [tool] %s %s\n", data.Name, data.Arguments)
	case bus.EventToolResult:
		status := "ok"
		if data.Error {
			status = "error"
		}
		first, _, _ := strings.Cut(data.Text, "\n")
		fmt.Fprintf(c.out, "  [tool] %s -> %s: %s\n", data.Name, status, first)
	}
}

// onOutbound prints one outbound envelope. Deltas carry the whole text so
// far: only the part not yet printed is written. (A final shown already is
// dropped by the kit before it gets here.)
func (c *Client) onOutbound(_ context.Context, o bus.Outbound) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.printed[o.InReplyTo]
	switch o.Kind {
	case bus.KindTyping:
		return nil
	case bus.KindDelta, bus.KindReply:
		if strings.HasPrefix(o.Text, prev) {
			fmt.Fprint(c.out, o.Text[len(prev):])
		} else {
			fmt.Fprint(c.out, "\n"+o.Text)
		}
		c.printed[o.InReplyTo] = o.Text
	default:
		if prev != "" {
			fmt.Fprintln(c.out)
		}
		fmt.Fprintf(c.out, "[%s] %s", o.Kind, o.Text)
	}
	if o.Final {
		fmt.Fprintln(c.out)
		delete(c.printed, o.InReplyTo)
		if c.pending[o.InReplyTo] {
			delete(c.pending, o.InReplyTo)
			select {
			case c.changed <- struct{}{}:
			default:
			}
		}
	}
	return nil
}
