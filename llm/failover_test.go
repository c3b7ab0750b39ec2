package llm

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"
)

type stubStreamer struct {
	name   string
	calls  int
	err    error
	resp   *Response
	stream string // streamed to onDelta first, when set
}

func (s *stubStreamer) Model() string { return s.name }
func (s *stubStreamer) Stream(_ context.Context, _ Request, onDelta func(Delta)) (*Response, error) {
	s.calls++
	if s.stream != "" && onDelta != nil {
		onDelta(Delta{Text: s.stream})
	}
	if s.err != nil {
		return s.resp, s.err
	}
	return &Response{Text: s.name}, nil
}

func TestFailoverSwitchesAndReturns(t *testing.T) {
	primary := &stubStreamer{name: "primary", err: &APIError{Status: 503, Message: "down"}}
	backup := &stubStreamer{name: "backup"}
	f := NewFailover(nil, time.Minute, primary, backup)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }

	resp, err := f.Stream(t.Context(), Request{}, nil)
	if err != nil || resp.Text != "backup" || primary.calls != 1 {
		t.Fatalf("first call: %+v %v (primary calls %d)", resp, err, primary.calls)
	}
	// During the cool-down the primary is not tried first.
	if resp, _ := f.Stream(t.Context(), Request{}, nil); resp.Text != "backup" || primary.calls != 1 {
		t.Fatalf("cool-down: %+v, primary calls %d", resp, primary.calls)
	}
	// After it, requests return to the (now healthy) primary.
	now = now.Add(2 * time.Minute)
	primary.err = nil
	if resp, _ := f.Stream(t.Context(), Request{}, nil); resp.Text != "primary" {
		t.Fatalf("after cool-down: %+v", resp)
	}
}

func TestFailoverKeepsNonEndpointErrors(t *testing.T) {
	for _, err := range []error{
		&APIError{Status: http.StatusBadRequest, Message: "bad"},
		&APIError{Status: 400, Err: ErrContextOverflow},
	} {
		primary := &stubStreamer{name: "p", err: err}
		backup := &stubStreamer{name: "b"}
		if _, got := NewFailover(nil, time.Minute, primary, backup).Stream(t.Context(), Request{}, nil); !errors.Is(got, err) || backup.calls != 0 {
			t.Fatalf("%v: got %v, backup calls %d", err, got, backup.calls)
		}
	}
	// A failure after text was streamed goes to the next endpoint too; the
	// consumer is told to drop what it got.
	primary := &stubStreamer{name: "p", err: ErrIdle, resp: &Response{Text: "part"}, stream: "part"}
	backup := &stubStreamer{name: "b", stream: "b"}
	var got []Delta
	resp, err := NewFailover(nil, time.Minute, primary, backup).Stream(t.Context(), Request{}, func(d Delta) { got = append(got, d) })
	if err != nil || resp.Text != "b" || backup.calls != 1 {
		t.Fatalf("partial: %+v %v, backup calls %d", resp, err, backup.calls)
	}
	if want := []Delta{{Text: "part"}, {Restart: true}, {Text: "b"}}; !slices.Equal(got, want) {
		t.Errorf("deltas %+v, want %+v", got, want)
	}
	// All failing: every error is reported.
	a, b := &stubStreamer{name: "a", err: ErrIdle}, &stubStreamer{name: "b", err: ErrTruncated}
	if _, err := NewFailover(nil, time.Minute, a, b).Stream(t.Context(), Request{}, nil); !errors.Is(err, ErrIdle) || !errors.Is(err, ErrTruncated) {
		t.Fatalf("all failing: %v", err)
	}
}
