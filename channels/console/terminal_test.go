package console_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels/console"
)

// fakeTTY is the terminal of a RunTerminal: keys the test types go to its
// reader, what the user would see comes out on out.
type fakeTTY struct {
	io.Reader
	io.Writer
}

// typing is a RunTerminal in a goroutine over a fake terminal.
type typing struct {
	keys *io.PipeWriter
	out  *watched
	done chan error
}

func runTerminal(t *testing.T, br *bridge.Client, opts console.Options) *typing {
	t.Helper()
	out := newWatched()
	c, err := console.New(br, opts, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	r := &typing{keys: pw, out: out, done: make(chan error, 1)}
	go func() { r.done <- c.RunTerminal(ctx, fakeTTY{pr, out}) }()
	t.Cleanup(func() {
		cancel()
		_ = pw.Close()
		select {
		case <-r.done:
		case <-time.After(wait):
			t.Error("RunTerminal did not return")
		}
	})
	out.waitFor(t, "> ")
	return r
}

func (r *typing) press(t *testing.T, keys string) {
	t.Helper()
	if _, err := io.WriteString(r.keys, keys); err != nil {
		t.Fatal(err)
	}
}

// returned waits for RunTerminal to return and gives its result.
func (r *typing) returned(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatalf("RunTerminal did not return:\n%q", r.out.String())
		return nil
	}
}

const (
	left  = "\x1b[D"
	up    = "\x1b[A"
	enter = "\r"
	ctrlA = "\x01" // to the start of the line
	ctrlL = "\x0c" // clear the screen
)

// TestTerminalEditsAndRecalls: the arrow keys edit the line (no escape
// sequence reaches the daemon), Up recalls the line sent before, and the
// history is kept in Options.HistoryFile for the next session.
func TestTerminalEditsAndRecalls(t *testing.T) {
	d, br := setup(t, 0)
	histFile := filepath.Join(t.TempDir(), "state", "chat_history")
	r := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: histFile, NoColor: true})
	r.press(t, "elo"+left+"l"+ctrlA+"h"+ctrlL+enter)
	in := d.inbound(t, 1)
	if in.Text != "hello" {
		t.Fatalf("inbound text %q, want %q (the line as edited)", in.Text, "hello")
	}
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindReply, Text: "hi ann", Seq: 1, Final: true})
	r.out.waitFor(t, "hi ann")
	r.press(t, up+"!"+enter)
	if in := d.inbound(t, 2); in.Text != "hello!" {
		t.Fatalf("inbound text %q, want the recalled line with the key typed after it", in.Text)
	}
	data, err := os.ReadFile(histFile)
	if err != nil || string(data) != "hello\nhello!\n" {
		t.Fatalf("history file = %q, %v", data, err)
	}

	r.press(t, "\x04") // Ctrl-D at the prompt quits at once
	if err := r.returned(t); err != nil {
		t.Fatalf("RunTerminal = %v", err)
	}
	r2 := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: histFile, NoColor: true})
	r2.press(t, up+up+enter)
	if in := d.inbound(t, 3); in.Text != "hello" {
		t.Fatalf("inbound text %q, want the line of the last session recalled", in.Text)
	}
}

// TestTerminalPasteIsOneMessage: a bracketed paste of four lines (one
// blank, indented ones) is one message, sent by Enter, its indentation
// kept; a pasted block is not put in the history line by line.
func TestTerminalPasteIsOneMessage(t *testing.T) {
	d, br := setup(t, 0)
	r := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: "-", NoColor: true})
	block := "def f():\n    return 1\n\n  # done"
	r.press(t, "\x1b[200~"+block+"\x1b[201~")
	r.press(t, enter)
	in := d.inbound(t, 1)
	if in.Text != block {
		t.Fatalf("inbound text %q, want the pasted block %q", in.Text, block)
	}
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindReply, Text: "ok", Seq: 1, Final: true})
	r.out.waitFor(t, "ok")
	r.press(t, "\x1b[200~one\ntwo\n\x1b[201~"+enter) // a block ending in a line end
	if in := d.inbound(t, 2); in.Text != "one\ntwo" {
		t.Fatalf("inbound text %q, want %q", in.Text, "one\ntwo")
	}
	if n := len(d.in.All()); n != 2 {
		t.Fatalf("%d inbound envelopes, want 2", n)
	}
}

// TestTerminalCtrlCStopsTheTurn: Ctrl-C while a turn runs sends /stop and
// the session goes on; a second Ctrl-C during the same turn quits.
func TestTerminalCtrlCStopsTheTurn(t *testing.T) {
	d, br := setup(t, 0)
	r := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: "-", NoColor: true})
	r.press(t, "write a long story"+enter)
	in := d.inbound(t, 1)
	r.press(t, "\x03")
	stop := d.inbound(t, 2)
	if stop.Text != "/stop" {
		t.Fatalf("after Ctrl-C the inbound text is %q, want /stop", stop.Text)
	}
	r.out.waitFor(t, "stopping the turn")
	d.out(t, "t1", bus.Outbound{ID: "s1", InReplyTo: stop.ID, Kind: bus.KindNotice, Text: "Stopping the running request.", Seq: 1, Final: true})
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindNotice, Text: "cancelled", Seq: 1, Final: true})
	r.out.waitFor(t, "[notice] cancelled")

	r.press(t, "again"+enter)
	d.inbound(t, 3)
	r.press(t, "\x03")
	if stop := d.inbound(t, 4); stop.Text != "/stop" {
		t.Fatalf("after Ctrl-C the inbound text is %q, want /stop", stop.Text)
	}
	r.press(t, "\x03")
	if err := r.returned(t); err != nil {
		t.Fatalf("RunTerminal after a second Ctrl-C = %v", err)
	}
	if got := r.out.String(); !strings.Contains(got, "(thinking…) > ") || strings.Contains(got, "\x1b[2m") || strings.Contains(got, "\x1b[33m") {
		t.Fatalf("with NoColor, want the status plain and no colours:\n%q", got)
	}
}

// TestTerminalQuits: Ctrl-C at an idle prompt quits, and so does /quit,
// which is not sent.
func TestTerminalQuits(t *testing.T) {
	d, br := setup(t, 0)
	r := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: "-", NoColor: true})
	r.press(t, "half a line\x03")
	if err := r.returned(t); err != nil {
		t.Fatalf("RunTerminal after Ctrl-C at the prompt = %v", err)
	}
	r2 := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: "-", NoColor: true})
	r2.press(t, "/quit"+enter)
	if err := r2.returned(t); err != nil {
		t.Fatalf("RunTerminal after /quit = %v", err)
	}
	if n := len(d.in.All()); n != 0 {
		t.Fatalf("%d inbound envelopes, want none", n)
	}
}

// TestTerminalStatusAndColours: the prompt shows "thinking…" from typing
// and "calling NAME…" from a tool call, and goes back to the plain prompt
// with the final; tool lines and a refusal (an error final) are coloured;
// streamed text is printed line by line.
func TestTerminalStatusAndColours(t *testing.T) {
	d, br := setup(t, 0)
	r := runTerminal(t, br, console.Options{ChatID: "t1", UserID: "ann", HistoryFile: "-"})
	r.press(t, "list my files"+enter)
	in := d.inbound(t, 1)
	d.out(t, "t1", bus.Outbound{ID: "o0", InReplyTo: in.ID, Kind: bus.KindTyping, Seq: 1})
	r.out.waitFor(t, "(thinking…)")
	d.event(t, "t1", bus.EventToolCall, `{"name":"list_dir","arguments":"{}"}`)
	r.out.waitFor(t, "(calling list_dir…)")
	r.out.waitFor(t, "\x1b[36m[tool] list_dir {}\x1b[0m")
	d.event(t, "t1", bus.EventToolResult, `{"name":"list_dir","error":true,"text":"denied"}`)
	r.out.waitFor(t, "\x1b[31m[tool] list_dir -> error: denied\x1b[0m")
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindDelta, Text: "first line\nsecond", Seq: 2})
	r.out.waitFor(t, "first line")
	d.out(t, "t1", bus.Outbound{ID: "o2", InReplyTo: in.ID, Kind: bus.KindReply, Text: "first line\nsecond line", Seq: 3, Final: true})
	r.out.waitFor(t, "second line")
	if got := r.out.String(); strings.Count(got, "first line") != 1 || strings.Contains(got, "second\x1b") {
		t.Fatalf("streamed text not printed once, line by line:\n%q", got)
	}

	r.press(t, strings.Repeat("x", 10)+enter)
	big := d.inbound(t, 2)
	d.out(t, "t1", bus.Outbound{ID: "o3", InReplyTo: big.ID, Kind: bus.KindError, Text: "message refused: too large", Seq: 1, Final: true})
	r.out.waitFor(t, "\x1b[31m[error] message refused: too large\x1b[0m")
	r.press(t, "/quit"+enter)
	if err := r.returned(t); err != nil {
		t.Fatalf("RunTerminal = %v", err)
	}
}

// TestRunQuits: a piped "/quit" is not sent; Run waits for the answers
// outstanding and returns, the input still open.
func TestRunQuits(t *testing.T) {
	d, br := setup(t, 0)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann"})
	r.send(t, "hi")
	in := d.inbound(t, 1)
	r.send(t, "/quit")
	r.send(t, "not sent")
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindReply, Text: "bye", Seq: 1, Final: true})
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run after /quit = %v", err)
		}
	case <-time.After(wait):
		t.Fatalf("Run did not return after /quit:\n%s", r.out.String())
	}
	if n := len(d.in.All()); n != 1 {
		t.Fatalf("%d inbound envelopes, want only the one before /quit", n)
	}
	if got := r.out.String(); !strings.HasSuffix(got, "bye\n") {
		t.Fatalf("output %q, want the answer before the end", got)
	}
}

// TestRunKeepsIndentation: a piped line keeps its leading blanks.
func TestRunKeepsIndentation(t *testing.T) {
	d, br := setup(t, 0)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann"})
	r.send(t, "    indented code\t ")
	if in := d.inbound(t, 1); in.Text != "    indented code" {
		t.Fatalf("inbound text %q, want the indentation kept", in.Text)
	}
}
