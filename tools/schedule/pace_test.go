package schedule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
)

// bridgeUser is a session of a made-up user of the bridge channel wechat.
func bridgeUser(i int) tools.Session {
	id := fmt.Sprintf("wxid_%d", i)
	return tools.Session{Key: "wechat/" + id, Speaker: bus.Speaker{Channel: "wechat", ChatID: id, UserID: id}}
}

// TestChannelCapBoundsMadeUpUsers: a bridge names its users, so each new
// user id brings a fresh per-user quota; the channel's cap bounds them all
// together, tells the model why, and leaves other channels alone.
func TestChannelCapBoundsMadeUpUsers(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	defer db.Close()
	s := newScheduler(t, db, newFakeBus(), tools.ScheduleConfig{MaxPerUser: 2, MaxPerChannel: 5})
	created := 0
	var refused tools.Result
	for i := range 10 {
		for range 2 {
			r := call(t, s, bridgeUser(i), `{"action":"create","prompt":"p","every":"1m"}`)
			if r.IsError {
				refused = r
				continue
			}
			created++
		}
	}
	if created != 5 {
		t.Errorf("%d tasks created on the channel, want the cap of 5", created)
	}
	if !refused.Denied || !strings.Contains(refused.Text, "the users of channel wechat already have 5 scheduled tasks together") ||
		!strings.Contains(refused.Text, "tools.schedule.max_per_channel") {
		t.Errorf("refusal = %+v", refused)
	}
	if r := call(t, s, ann, `{"action":"create","prompt":"p","every":"1m"}`); r.IsError {
		t.Errorf("another channel's user was refused: %+v", r)
	}
	// A deleted task makes room again.
	id := s.Tasks(bridgeUser(0))[0].ID
	if r := call(t, s, bridgeUser(0), `{"action":"delete","id":"`+id+`"}`); r.IsError {
		t.Fatalf("delete: %+v", r)
	}
	if r := call(t, s, bridgeUser(9), `{"action":"create","prompt":"p","every":"1m"}`); r.IsError {
		t.Errorf("create after a delete: %+v", r)
	}
}

// TestPaceDefersRunsNotDrops: 20 recurring tasks of a paced channel (2 runs
// a second) fall due every minute at once, over two schedulers sharing the
// pace (two agents). At no moment of (fake) time have more of a due time's
// runs been published than the bucket plus the rate since it; each
// minute every task runs once, the ones over the rate late, none dropped;
// an unpaced channel's task due at the same times is never held up.
func TestPaceDefersRunsNotDrops(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		const perSec, tasks, minutes = 2, 20, 3
		pace := NewPace(map[string]float64{"wechat": perSec})
		b := newFakeBus()
		var scheds []*Scheduler
		for k := range 2 {
			db := openDB(t, filepath.Join(dir, fmt.Sprint(k, ".db")))
			defer db.Close()
			s, err := New(db, b, subj, tools.ScheduleConfig{Timezone: "UTC"}, nil, WithPace(pace))
			if err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
			for i := range tasks / 2 {
				taskID(t, call(t, s, bridgeUser(k*100+i), `{"action":"create","prompt":"p","every":"1m"}`))
			}
		}
		taskID(t, call(t, scheds[0], ann, `{"action":"create","prompt":"telegram's","every":"1m"}`))
		first := time.Now().Add(time.Minute)
		for _, s := range scheds {
			stop := running(s)
			defer stop()
		}
		count := func() (wechat, telegram int) {
			for _, in := range b.all() {
				if in.Channel == "wechat" {
					wechat++
				} else {
					telegram++
				}
			}
			return wechat, telegram
		}
		time.Sleep(time.Until(first))
		for m := range minutes {
			due := first.Add(time.Duration(m) * time.Minute)
			time.Sleep(time.Until(due))
			synctest.Wait()
			if w, tg := count(); w != m*tasks+perSec || tg != m+1 {
				t.Fatalf("at due time %d: %d wechat runs (want %d: the bucket), %d telegram runs (want %d)", m+1, w, m*tasks+perSec, tg, m+1)
			}
			for time.Since(due) < 50*time.Second {
				time.Sleep(250 * time.Millisecond)
				synctest.Wait()
				w, _ := count()
				if bound := perSec + int(perSec*time.Since(due).Seconds()); w-m*tasks > bound {
					t.Fatalf("%s after due time %d: %d of its wechat runs, over the pace's %d", time.Since(due), m+1, w-m*tasks, bound)
				}
				if w == (m+1)*tasks {
					break
				}
			}
			if w, _ := count(); w != (m+1)*tasks || b.dups != 0 {
				t.Fatalf("minute %d: %d of %d wechat runs published (%d duplicates)", m+1, w, (m+1)*tasks, b.dups)
			}
			if late := time.Since(due); late < (tasks-perSec)*time.Second/perSec {
				t.Errorf("minute %d: all runs out %s after the due time, faster than the pace", m+1, late)
			}
		}
		for k, s := range scheds {
			for i := range tasks / 2 {
				if got := s.Tasks(bridgeUser(k*100 + i)); len(got) != 1 || got[0].Runs != minutes {
					t.Errorf("task of user %d: %+v, want %d runs", k*100+i, got, minutes)
				}
			}
		}
	})
}

// TestPaceUnpacedChannel: a channel the pace was not given, and a nil
// pace, never defer.
func TestPaceUnpacedChannel(t *testing.T) {
	now := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	p := NewPace(map[string]float64{"wechat": 1, "off": 0})
	for i := range 100 {
		if ok, _ := p.take("telegram", now); !ok {
			t.Fatalf("unpaced channel deferred at run %d", i)
		}
		if ok, _ := p.take("off", now); !ok {
			t.Fatalf("channel with rate 0 deferred at run %d", i)
		}
		if ok, _ := (*Pace)(nil).take("wechat", now); !ok {
			t.Fatalf("nil pace deferred at run %d", i)
		}
	}
	if ok, _ := p.take("wechat", now); !ok {
		t.Fatal("the first run of a full bucket was deferred")
	}
	ok, at := p.take("wechat", now)
	if ok || at.Before(now.Add(time.Second-time.Millisecond)) || at.After(now.Add(time.Second+time.Millisecond)) {
		t.Fatalf("second run at 1/s: %v, %v; want deferred by 1s", ok, at.Sub(now))
	}
	if ok, _ := p.take("wechat", at); !ok {
		t.Fatal("the run was still deferred when its time came")
	}
}
