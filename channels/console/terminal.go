package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/term"
)

const (
	// prompt is the prompt of the terminal front end when no turn runs.
	prompt = "> "
	// pastePrompt is the prompt after a pasted block, until Enter sends it.
	pastePrompt = "… "
	// historyKeep is how many lines the history file keeps.
	historyKeep = 1000
	// ctrlC is the byte the terminal sends for Ctrl-C in raw mode.
	ctrlC = 0x03
)

// DefaultHistoryFile returns the default of [Options.HistoryFile]:
// $XDG_STATE_HOME/switchboard/chat_history, or
// ~/.local/state/switchboard/chat_history; "" when neither is known.
func DefaultHistoryFile() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "switchboard", "chat_history")
}

// RunStdio runs the terminal front end ([Client.RunTerminal]) when stdin
// is a terminal (putting it in raw mode for the session and restoring it
// after), else [Client.Run] on stdin. NO_COLOR (any value) or TERM=dumb
// turns colours off.
func (c *Client) RunStdio(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return c.Run(ctx, stdin)
	}
	fd := int(f.Fd())
	state, err := term.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("chat: terminal raw mode: %w", err)
	}
	defer func() { _ = term.Restore(fd, state) }()
	if _, ok := os.LookupEnv("NO_COLOR"); ok || os.Getenv("TERM") == "dumb" {
		c.opts.NoColor = true
	}
	return c.runTerminal(ctx, struct {
		io.Reader
		io.Writer
	}{f, stdout}, fd)
}

// RunTerminal is the interactive front end over tty, a terminal in raw
// mode (or a fake one: what a user types goes to its reader, what they
// see comes from its writer). See the package doc for the keys. It
// returns nil when the user quits or ctx ends, and an error when the
// subscription or a publication fails. Like Run, it does not join the
// goroutine blocked reading tty.
func (c *Client) RunTerminal(ctx context.Context, tty io.ReadWriter) error {
	return c.runTerminal(ctx, tty, -1)
}

// runTerminal is RunTerminal; fd, when not -1, is the terminal's, whose
// size the line editor follows.
func (c *Client) runTerminal(ctx context.Context, tty io.ReadWriter, fd int) error {
	hits := make(chan struct{}, 2)
	keys := &interceptor{r: tty, busy: c.busy, hits: hits}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{keys, tty}, prompt)
	if fd >= 0 {
		defer watchResize(fd, t)()
	}
	t.SetBracketedPasteMode(true)
	defer t.SetBracketedPasteMode(false)
	hist, warn := openHistory(c.opts.HistoryFile)
	t.History = hist
	c.tty = &screen{t: t, plain: c.opts.NoColor}
	c.out = t
	if warn != nil {
		fmt.Fprintf(t, "%s\n", c.paint(colourError, "history not kept: "+warn.Error()))
	}
	return c.session(ctx, func(ctx context.Context, inputs chan<- input) error {
		return c.readTerminal(ctx, t, hist, hits, inputs)
	}, false)
}

// readTerminal reads lines from t and sends them on inputs, a pasted
// block (the lines ReadLine marks as pasted, and the line Enter ends
// after them) as one message; it sends an interrupt for each Ctrl-C the
// interceptor caught. Ctrl-D (and Ctrl-C at the prompt: x/term reads it
// as the end) ends the input with nil.
func (c *Client) readTerminal(ctx context.Context, t *term.Terminal, hist *history, hits <-chan struct{}, inputs chan<- input) error {
	lines := make(chan input)
	done := make(chan error, 1)
	go func() { // ends with tty, like the caller
		var block []string
		for {
			line, err := t.ReadLine()
			if errors.Is(err, term.ErrPasteIndicator) {
				block = append(block, line)
				c.tty.paste(true)
				continue
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
			if len(block) > 0 {
				if line != "" {
					block = append(block, line)
				}
				line, block = strings.Join(block, "\n"), nil
				c.tty.paste(false)
			} else {
				hist.add(line)
			}
			select {
			case lines <- input{text: line}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var in input
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			return err
		case <-hits:
			in = input{interrupt: true}
		case in = <-lines:
		}
		select {
		case inputs <- in:
		case <-ctx.Done():
			return nil
		}
	}
}

// setSize sets t's size to the terminal fd's, when it has one.
func setSize(fd int, t *term.Terminal) {
	if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
		_ = t.SetSize(w, h)
	}
}

// screen is the prompt of the terminal front end: the status of the
// running turn, or the paste marker.
type screen struct {
	t     *term.Terminal
	plain bool // no colours

	mu      sync.Mutex
	current string // status shown, "" when idle
	pasting bool
}

// status shows s before the prompt ("" when idle) and repaints it.
func (s *screen) status(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == text {
		return
	}
	s.current = text
	s.repaint()
}

// paste switches the prompt to the paste marker and back.
func (s *screen) paste(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pasting = on
	s.repaint()
}

// repaint sets the prompt (s.mu held); an empty Write redraws it with the
// line being edited.
func (s *screen) repaint() {
	p := prompt
	switch {
	case s.pasting:
		p = pastePrompt
	case s.current != "" && s.plain:
		p = "(" + s.current + ") " + prompt
	case s.current != "":
		p = "\x1b[" + colourStatus + "m(" + s.current + ")\x1b[0m " + prompt
	}
	s.t.SetPrompt(p)
	_, _ = s.t.Write(nil)
}

// interceptor takes the Ctrl-C bytes out of what the terminal reads while
// a turn runs (busy), and reports each on hits; at the prompt they go
// through and x/term ends the input.
type interceptor struct {
	r    io.Reader
	busy func() bool
	hits chan<- struct{}
}

func (f *interceptor) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		if n == 0 || !f.busy() {
			return n, err
		}
		kept := p[:0]
		for _, b := range p[:n] {
			if b != ctrlC {
				kept = append(kept, b)
				continue
			}
			select {
			case f.hits <- struct{}{}:
			default: // two pending are enough to quit
			}
		}
		if len(kept) > 0 || err != nil {
			return len(kept), err
		}
	}
}

// history is the x/term history of the terminal front end, kept in a
// file. x/term adds every line it reads (pasted ones too): its Add does
// nothing, readTerminal adds the lines typed with add.
type history struct {
	file    *os.File // nil: not kept
	entries []string // oldest first
}

// openHistory loads the history file at path ("" the default, "-" none)
// and opens it for appending. A file that cannot be kept gives an empty
// history and the reason.
func openHistory(path string) (*history, error) {
	h := &history{}
	if path == "" {
		path = DefaultHistoryFile()
	}
	if path == "" || path == "-" {
		return h, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return h, fmt.Errorf("history: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return h, fmt.Errorf("history: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), maxLineBytes)
	for sc.Scan() {
		if line := sc.Text(); strings.TrimSpace(line) != "" {
			h.entries = append(h.entries, line)
		}
	}
	if len(h.entries) > historyKeep {
		h.entries = h.entries[len(h.entries)-historyKeep:]
	}
	h.file = f
	return h, nil
}

// add records a line typed (not blank, not the same as the last one) and
// appends it to the file.
func (h *history) add(line string) {
	if strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\r\n") ||
		(len(h.entries) > 0 && h.entries[len(h.entries)-1] == line) {
		return
	}
	h.entries = append(h.entries, line)
	if len(h.entries) > historyKeep {
		h.entries = h.entries[1:]
	}
	if h.file != nil {
		_, _ = h.file.WriteString(line + "\n")
	}
}

// Add implements term.History: nothing (see history).
func (h *history) Add(string) {}

// Len implements term.History.
func (h *history) Len() int { return len(h.entries) }

// At implements term.History: 0 is the newest.
func (h *history) At(i int) string { return h.entries[len(h.entries)-1-i] }
