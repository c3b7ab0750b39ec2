package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/scripted"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// TestDemoUsesAToolOnlyWhenAsked (issue 21): `switchboard demo` answers
// "hello" with text, without a tool call, and lists the workspace with
// list_dir when asked to "list my files", as its footer says. The user
// types each line after the previous answer, as at a terminal.
func TestDemoUsesAToolOnlyWhenAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := &syncbuf.Buffer{}
	stdin, typed := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, nil, stdin, out, io.Discard) }()
	answers := func(n int) {
		t.Helper()
		polltest.Until(t, time.Minute, 10*time.Millisecond, func() bool { return strings.Count(out.String(), scripted.DemoFooter) >= n },
			func() string { return "demo output:\n" + out.String() })
	}
	const toolLine = `list_dir {"path":"."}`
	answers(1) // the demo's own first message asks about the workspace
	if n := strings.Count(out.String(), toolLine); n != 1 {
		t.Fatalf("first answer: %d list_dir calls, want 1:\n%s", n, out.String())
	}
	before := len(out.String())
	if _, err := io.WriteString(typed, "hello\n"); err != nil {
		t.Fatal(err)
	}
	answers(2)
	hello := out.String()[before:]
	if strings.Contains(hello, toolLine) || !strings.Contains(hello, "Hello! This is the Switchboard demo") {
		t.Fatalf("answer to hello:\n%s", hello)
	}
	before = len(out.String())
	if _, err := io.WriteString(typed, "list my files\n"); err != nil {
		t.Fatal(err)
	}
	answers(3)
	if files := out.String()[before:]; !strings.Contains(files, toolLine) || !strings.Contains(files, "AGENT.md") {
		t.Fatalf("answer to list my files:\n%s", files)
	}
	typed.Close()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
}
