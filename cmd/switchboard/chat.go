package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
)

// consoleChannel is the channel name the terminal client speaks for.
const consoleChannel = "console"

func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	chatID := fs.String("chat", "", "chat id (default: console-<your user name>)")
	busURL := urlFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	url, opts, err := operatorDial(cfg, *busURL)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	nc, err := nats.Connect(url, append(opts, nats.Name("switchboard-chat"), nats.Timeout(3*time.Second))...)
	if err != nil {
		return fmt.Errorf("chat: connect to the bus at %s (is `switchboard serve` running?): %w", bus.RedactURL(url), err)
	}
	defer nc.Close()
	user := os.Getenv("USER")
	if user == "" {
		user = "console"
	}
	id := *chatID
	if id == "" {
		id = "console-" + user
	}
	c := &chatClient{nc: nc, subj: bus.Subjects{Prefix: cfg.Bus.SubjectPrefix}, chatID: id, userID: user, out: stdout}
	fmt.Fprintf(stdout, "Connected to %s as chat %q. Type a message, /help for commands, Ctrl-D to quit.\n", bus.RedactURL(url), id)
	return c.run(ctx, stdin)
}

// urlFlag registers --url on fs: the bus of `chat` and `bus tail` when it is
// not the configuration's.
func urlFlag(fs *flag.FlagSet) *string {
	return fs.String("url", "", "NATS URL of the bus, credentials in it (nats://TOKEN@host:4222, nats://user:password@host:4222); default: the configuration's bus, as an operator")
}

// operatorDial returns how `chat` and `bus tail` connect: to busURL as given
// (its credentials in it) when it is set, else as the operator of the
// configuration's bus (natsbus.Config.OperatorDial: bus.url, or the embedded
// listener with bus.admin or the daemon's generated credential in
// data_dir).
func operatorDial(cfg Config, busURL string) (string, []nats.Option, error) {
	if busURL != "" {
		return busURL, nil, nil
	}
	return cfg.Bus.OperatorDial(cfg.DataDir)
}

// chatClient is the terminal client: it publishes each input line as an
// inbound envelope on chat.in.console.<chat> and prints the outbound
// messages of chat.out.console.<chat> as they arrive, streaming deltas.
type chatClient struct {
	nc     *nats.Conn
	subj   bus.Subjects
	chatID string
	userID string
	out    io.Writer
	// wait is the longest time to wait for outstanding answers after the
	// input ends (default 10 minutes).
	wait time.Duration

	mu      sync.Mutex
	printed map[string]string // in_reply_to -> text printed so far
	pending map[string]bool   // inbound ids without a final answer
	changed chan struct{}     // signalled when pending shrinks
	// shown remembers the ids of the finals, replies, notices and errors
	// printed: the daemon may publish a final again with the same id after
	// a crash, and a core subscriber receives every copy.
	shown *bridge.SeenSet
}

func (c *chatClient) run(ctx context.Context, stdin io.Reader) error {
	c.printed = map[string]string{}
	c.pending = map[string]bool{}
	c.changed = make(chan struct{}, 1)
	c.shown = bridge.NewSeenSet(0, 0)
	if c.wait == 0 {
		c.wait = 10 * time.Minute
	}
	sub, err := c.nc.Subscribe(c.subj.Out(consoleChannel, c.chatID), c.onOutbound)
	if err != nil {
		return fmt.Errorf("chat: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	evsub, err := c.nc.Subscribe(c.subj.Event(consoleChannel, c.chatID), c.onEvent)
	if err != nil {
		return fmt.Errorf("chat: subscribe: %w", err)
	}
	defer evsub.Unsubscribe()
	js, err := jetstream.New(c.nc)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() { // ends when stdin ends; not joined, as a blocked terminal read cannot be interrupted
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
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
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("chat: read input: %w", err)
			}
			return c.drain(ctx)
		case line := <-lines:
			text := strings.TrimSpace(line)
			if text == "" {
				continue
			}
			if err := c.send(ctx, js, text); err != nil {
				return err
			}
		}
	}
}

func (c *chatClient) send(ctx context.Context, js jetstream.JetStream, text string) error {
	in := bus.Inbound{V: bus.Version, ID: nuid.Next(), Channel: consoleChannel, ChatID: c.chatID, UserID: c.userID,
		UserName: c.userID, Text: text, TS: time.Now().UTC().Format(time.RFC3339)}
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("chat: encode: %w", err)
	}
	c.mu.Lock()
	c.pending[in.ID] = true
	c.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.Publish(pctx, c.subj.In(consoleChannel, c.chatID), data, jetstream.WithMsgID(in.DedupKey())); err != nil {
		return fmt.Errorf("chat: publish (is the daemon running?): %w", err)
	}
	return nil
}

// drain waits until every sent message has its final answer.
func (c *chatClient) drain(ctx context.Context) error {
	deadline := time.NewTimer(c.wait)
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
		case <-deadline.C:
			return fmt.Errorf("chat: %d message(s) still unanswered after %s", n, c.wait)
		case <-c.changed:
		}
	}
}

// onEvent prints tool calls and results as they happen, so the user sees
// what the agent does between streamed texts.
func (c *chatClient) onEvent(msg *nats.Msg) {
	var ev bus.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		return
	}
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
// far: only the part not yet printed is written. An envelope whose id was
// already printed is dropped.
func (c *chatClient) onOutbound(msg *nats.Msg) {
	var o bus.Outbound
	if err := json.Unmarshal(msg.Data, &o); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if bridge.Remembered(&o) && !c.shown.Add(o.ID) {
		return // shown already: a final re-published after a crash
	}
	prev := c.printed[o.InReplyTo]
	switch o.Kind {
	case bus.KindTyping:
		return
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
}
