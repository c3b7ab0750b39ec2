package logging

import (
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	var th Throttle
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at       time.Duration
		n, count int
		wantLog  bool
	}{
		{0, 1, 1, true},
		{time.Second, 1, 0, false},
		{9 * time.Second, 3, 0, false},
		{10 * time.Second, 1, 5, true},
		{15 * time.Second, 2, 0, false},
		{25 * time.Second, 0, 2, true},
	}
	for _, s := range steps {
		count, log := th.Note(t0.Add(s.at), s.n)
		if count != s.count || log != s.wantLog {
			t.Errorf("at %s: Note(%d) = %d, %v; want %d, %v", s.at, s.n, count, log, s.count, s.wantLog)
		}
	}
	th30 := Throttle{Every: 30 * time.Second}
	th30.Note(t0, 1)
	if _, log := th30.Note(t0.Add(20*time.Second), 1); log {
		t.Error("a 30 s throttle logged after 20 s")
	}
}
