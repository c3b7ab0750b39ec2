package setup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/term"
)

// asker asks the questions on out and reads the answers from in; with
// yes it asks nothing and takes the defaults.
type asker struct {
	in  *bufio.Reader
	out io.Writer
	yes bool
	fd  int // the terminal of in, for answers not echoed; -1 when in is none
}

func (q *asker) say(format string, args ...any) { fmt.Fprintf(q.out, format+"\n", args...) }

// read runs one blocking read of an answer, and gives up when ctx ends
// (Ctrl-C): the read cannot be interrupted, its goroutine ends with the
// input (the process exits then).
func read(ctx context.Context, f func() (string, error)) (string, error) {
	type answer struct {
		s   string
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		s, err := f()
		ch <- answer{s, err}
	}()
	select {
	case <-ctx.Done():
		return "", fmt.Errorf("init: stopped before every question was answered, nothing written: %w", context.Cause(ctx))
	case a := <-ch:
		return a.s, a.err
	}
}

// ask asks one question; an empty answer keeps def.
func (q *asker) ask(ctx context.Context, question, def string) (string, error) {
	if q.yes {
		return def, nil
	}
	fmt.Fprintf(q.out, "%s [%s]: ", question, def)
	line, err := read(ctx, func() (string, error) { return q.in.ReadString('\n') })
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		if errors.Is(err, io.EOF) {
			return "", errors.New("init: the input ended before every question was answered, nothing written (use --yes with flags for scripts)")
		}
		if ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("init: read the answer: %w", err)
	}
	if line = strings.TrimSpace(line); line != "" {
		return line, nil
	}
	return def, nil
}

// secret asks for a key or token; on a terminal it is not echoed (and
// the echo is back when ctx ends during the question), and the default
// is shown masked.
func (q *asker) secret(ctx context.Context, question, def string) (string, error) {
	switch {
	case q.yes:
		return def, nil
	case q.fd < 0:
		answer, err := q.ask(ctx, question, mask(def))
		if answer == mask(def) {
			answer = def
		}
		return answer, err
	}
	state, err := term.GetState(q.fd)
	if err != nil {
		return "", fmt.Errorf("init: terminal: %w", err)
	}
	fmt.Fprintf(q.out, "%s [%s]: ", question, mask(def))
	answer, err := read(ctx, func() (string, error) { b, err := term.ReadPassword(q.fd); return string(b), err })
	fmt.Fprintln(q.out)
	if ctx.Err() != nil {
		_ = term.Restore(q.fd, state)
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("init: read the answer: %w", err)
	}
	if s := strings.TrimSpace(answer); s != "" {
		return s, nil
	}
	return def, nil
}

// mask shows that a secret is set without showing it.
func mask(s string) string {
	switch {
	case s == "":
		return ""
	case len(s) <= 8:
		return "set"
	}
	return s[:4] + "…" + s[len(s)-2:]
}

// yesNo asks a yes/no question.
func (q *asker) yesNo(ctx context.Context, question string, def bool) (bool, error) {
	d := "y/N"
	if def {
		d = "Y/n"
	}
	answer, err := q.ask(ctx, question, d)
	if err != nil {
		return false, err
	}
	switch strings.ToLower(answer) {
	case "y", "yes":
		return true, nil
	case "n", "no":
		return false, nil
	}
	return def, nil
}
