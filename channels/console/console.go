// Package console is the terminal client of Switchboard (`switchboard chat`,
// and the demo): a channel adapter for one chat of the channel "console",
// built on the bridge kit (package bus/bridge) like every other adapter.
//
// A [Client] reads messages and publishes each non-blank one as an inbound
// envelope through [bridge.Client.PublishInbound] (a fresh id, the kit's
// de-duplication header, the runtime's validation). It shows what comes
// back through one [bridge.Client.Subscribe] narrowed to its chat:
// outbound envelopes (streamed deltas print only the part not yet printed;
// notices as "[notice] text"; a refusal or failure as "[error] text"; a
// final the daemon publishes again after a crash is shown once, by the kit)
// and the agent's tool calls and results ("  [tool] name args", "  [tool]
// name -> ok: first line"). Tools of the post-turn stages are not shown.
//
// It has two front ends. [Client.Run] reads lines from any io.Reader (a
// pipe, a script): each non-blank line is one message, its indentation
// kept; when the input ends (or a line is "/quit") it waits until every
// message sent has its final answer (bounded by [Options.Wait]), so a
// script piped into `switchboard chat` prints all its answers before it
// exits. [Client.RunTerminal] drives an interactive terminal with
// golang.org/x/term's line editor: arrow keys, Home/End, Ctrl-A/E/K/U/W/L
// edit the line, Up and Down recall the history (kept in
// [Options.HistoryFile]), a bracketed paste of several lines is one
// message (sent by Enter, indentation kept), the prompt shows the turn's
// status ("thinking…", "calling list_dir…") from `typing` and tool events,
// tool lines are coloured unless NO_COLOR is set, Ctrl-C during a running
// turn sends /stop (a second one, or Ctrl-C or Ctrl-D at the prompt, or
// "/quit", quits at once: the answers stay in the history).
// [Client.RunStdio] picks the front end: the terminal one when stdin is a
// terminal, else Run.
//
// An envelope the kit refuses before sending (a text over
// bus.max_text_bytes) is reported and the session goes on. The console
// subscribes with core NATS: what is published while it is not running is
// not shown (the history keeps it). It authenticates as the operator of
// the bus; see [Dial].
package console

import (
	"bufio"
	"context"
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
	// quitCommand ends the session; it is the client's, not sent.
	quitCommand = "/quit"
	// stopCommand is the daemon's command Ctrl-C sends.
	stopCommand = "/stop"
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
	// HistoryFile is where RunTerminal keeps the lines typed, one a line
	// (default [DefaultHistoryFile]; "-" keeps none). Run does not use it.
	HistoryFile string
	// NoColor turns the colours of RunTerminal off (RunStdio sets it when
	// $NO_COLOR is set or $TERM is "dumb").
	NoColor bool
}

// Client is the terminal client of one chat. Use it for one Run.
type Client struct {
	br   *bridge.Client
	opts Options
	out  io.Writer
	tty  *screen // the interactive front end, nil for Run

	mu       sync.Mutex
	printed  map[string]string // in_reply_to -> text printed so far
	pending  map[string]bool   // inbound ids without a final answer
	changed  chan struct{}     // signalled when pending shrinks
	stopping bool              // Ctrl-C sent /stop for the running turn
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

// input is what a front end hands the session loop: a message, or a
// Ctrl-C (interrupt).
type input struct {
	text      string
	interrupt bool
}

// Run subscribes to the chat, then publishes every non-blank line read
// from in (trailing blanks cut, indentation kept) and prints the answers,
// until in ends or a line is "/quit" (then it waits for the outstanding
// answers) or ctx is cancelled (then it returns nil at once). It returns
// an error when the subscription or a publication fails, when reading in
// fails, or when answers are still missing after Options.Wait. The
// goroutine reading in is not joined when ctx ends first: a blocked read
// cannot be interrupted; it ends with in.
func (c *Client) Run(ctx context.Context, in io.Reader) error {
	return c.session(ctx, func(ctx context.Context, inputs chan<- input) error {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), maxLineBytes)
		for sc.Scan() {
			select {
			case inputs <- input{text: sc.Text()}:
			case <-ctx.Done():
				return nil
			}
		}
		return sc.Err()
	}, true)
}

// session runs the subscription and the loop that publishes what read
// sends on its channel. read runs in a goroutine that is not joined (see
// Run); its return ends the input. drain tells whether the end of the
// input waits for the outstanding answers (Run) or returns at once
// (RunTerminal).
func (c *Client) session(ctx context.Context, read func(context.Context, chan<- input) error, drain bool) error {
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

	inputs := make(chan input)
	readErr := make(chan error, 1)
	go func() { readErr <- read(ctx, inputs) }() // ends with its input; not joined (see Run)
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
			if !drain {
				return nil
			}
			return c.drain(ctx, subErr)
		case in := <-inputs:
			text := strings.TrimRight(in.text, " \t\r\n")
			switch {
			case in.interrupt:
				stop, quit := c.interrupt()
				if quit {
					return nil
				}
				if !stop {
					continue
				}
				text = stopCommand
			case strings.TrimSpace(text) == "":
				continue
			case strings.TrimSpace(text) == quitCommand:
				if !drain {
					return nil
				}
				return c.drain(ctx, subErr)
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

// busy tells whether a message sent has no final answer yet.
func (c *Client) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) > 0
}

// interrupt handles a Ctrl-C the interceptor caught while a turn ran:
// stop when /stop is to be sent (the first for this turn), quit for the
// second; neither when the turn ended meanwhile.
func (c *Client) interrupt() (stop, quit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(c.pending) == 0:
		return false, false
	case c.stopping:
		return false, true
	}
	c.stopping = true
	fmt.Fprintf(c.out, "%s\n", c.paint(colourNotice, "^C: stopping the turn (Ctrl-C again quits)"))
	return true, false
}

// send publishes one message. A refusal by the kit's validation is printed
// and the session goes on; any other failure ends it.
func (c *Client) send(ctx context.Context, text string) error {
	in := bus.Inbound{V: bus.Version, ID: nuid.Next(), Channel: Channel, ChatID: c.opts.ChatID, UserID: c.opts.UserID,
		UserName: c.opts.UserID, Text: text, TS: time.Now().UTC().Format(time.RFC3339)}
	c.mu.Lock()
	c.pending[in.ID] = true
	c.status("thinking…")
	c.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	err := c.br.PublishInbound(pctx, in)
	if errors.Is(err, bus.ErrInvalid) || errors.Is(err, bus.ErrTooLarge) {
		c.mu.Lock()
		c.answered(in.ID)
		fmt.Fprintf(c.out, "%s\n", c.paint(colourError, "[error] not sent: "+err.Error()))
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("chat: publish (is the daemon running?): %w", err)
	}
	return nil
}

// answered forgets a pending message (c.mu held) and, when none is left,
// clears the status and the Ctrl-C state.
func (c *Client) answered(id string) {
	if !c.pending[id] {
		return
	}
	delete(c.pending, id)
	select {
	case c.changed <- struct{}{}:
	default:
	}
	if len(c.pending) == 0 {
		c.stopping = false
		c.status("")
	}
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
