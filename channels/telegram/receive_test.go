package telegram

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/bus"
)

// getUpdatesWithOffset waits for a getUpdates call with the given offset.
func getUpdatesWithOffset(t *testing.T, e *env, offset int) {
	t.Helper()
	e.bot.waitFor(t, fmt.Sprintf("getUpdates with offset %d", offset), func(reqs []fakeReq) bool {
		for _, r := range reqs {
			if r.method == "getUpdates" && r.params.Get("offset") == strconv.Itoa(offset) {
				return true
			}
		}
		return false
	})
}

func TestPollingPublishesDirectMessage(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	r := run(t, a)
	e.bot.addUpdate(100, privateMsg(5, user(7, "Ann", "ann"), "hello there"))

	ins := e.waitPublished(t, 1)
	want := bus.Inbound{V: 1, ID: "4242:100", Channel: "telegram", ChatID: "7", UserID: "7", UserName: "Ann",
		Text: "hello there", TS: "2023-11-14T22:13:20Z", Meta: map[string]string{"message_id": "5"}}
	if diff := cmp.Diff(want, ins[0]); diff != "" {
		t.Errorf("inbound envelope (-want +got):\n%s", diff)
	}
	// The offset moves past the update only after the stream acknowledged it.
	getUpdatesWithOffset(t, e, 101)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	stored, ids := e.inbound(t)
	if len(stored) != 1 || ids[0] != "telegram:4242:100" {
		t.Errorf("CHAT_IN holds %d messages with ids %v, want one with Nats-Msg-Id telegram:4242:100", len(stored), ids)
	}
	// Start-up: deleteWebhook before the first getUpdates, and the command menu.
	reqs := e.bot.all("")
	first := slices.IndexFunc(reqs, func(r fakeReq) bool { return r.method == "getUpdates" })
	del := slices.IndexFunc(reqs, func(r fakeReq) bool { return r.method == "deleteWebhook" })
	if del < 0 || del > first {
		t.Errorf("deleteWebhook at %d, first getUpdates at %d: want deleteWebhook first", del, first)
	}
	cmds := e.bot.all("setMyCommands")
	if len(cmds) != 1 {
		t.Fatalf("setMyCommands called %d times", len(cmds))
	}
	for _, c := range []string{"start", "new", "stop", "steer", "compact", "help", "status"} {
		if !strings.Contains(cmds[0].params.Get("commands"), `"command":"`+c+`"`) {
			t.Errorf("setMyCommands lacks %q: %s", c, cmds[0].params.Get("commands"))
		}
	}
	if got := reqs[first].params.Get("allowed_updates"); got != `["message"]` {
		t.Errorf("allowed_updates = %q", got)
	}
	if got := reqs[first].params.Get("timeout"); got != "1" {
		t.Errorf("getUpdates timeout = %q, want the configured 1 s", got)
	}
}

// addBatchWithStuckPhoto queues updates 10 to 14 from Ann, 12 a photo
// whose download blocks until the returned release is called.
func (e *env) addBatchWithStuckPhoto() (release func()) {
	ann := user(7, "Ann", "ann")
	e.bot.addFile("photo-12", []byte("jpeg bytes"))
	release = e.bot.gate("photo-12")
	for id := 10; id <= 14; id++ {
		u := privateMsg(id, ann, fmt.Sprintf("message %d", id))
		if id == 12 {
			m := u["message"].(map[string]any)
			delete(m, "text")
			m["photo"] = []map[string]any{{"file_id": "photo-12", "file_unique_id": "u12", "width": 90, "height": 90, "file_size": 10}}
		}
		e.bot.addUpdate(id, u)
	}
	return release
}

// TestOffsetKillAndRestart stops the adapter in the middle of a batch and
// starts a new one on the same state file: every update is published
// exactly once, none is lost.
func TestOffsetKillAndRestart(t *testing.T) {
	e := newEnv(t)
	release := e.addBatchWithStuckPhoto()

	first := run(t, e.newAdapter(t, e.config(), Deps{}))
	e.waitPublished(t, 2)
	e.bot.waitN(t, "download", 1) // stuck in update 12
	if err := first.stop(t); err != nil {
		t.Fatalf("first Run = %v", err)
	}
	if got := len(e.in.All()); got != 2 {
		t.Fatalf("published %d messages before the kill, want 2", got)
	}
	store, err := openOffsets(filepath.Join(e.dir, "telegram.db"), fakeBotID, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	off, _, err := store.load(t.Context())
	store.close()
	if err != nil || off != 12 {
		t.Fatalf("stored offset = %d, %v; want 12 (past the two published updates)", off, err)
	}

	release()
	second := run(t, e.newAdapter(t, e.config(), Deps{}))
	getUpdatesWithOffset(t, e, 12) // resumes from the stored offset
	e.waitPublished(t, 5)
	getUpdatesWithOffset(t, e, 15)
	if err := second.stop(t); err != nil {
		t.Fatalf("second Run = %v", err)
	}
	ins := e.waitPublished(t, 5)
	if len(ins) != 5 {
		t.Errorf("published %d times in total, want each of the 5 updates once", len(ins))
	}
	stored, ids := e.inbound(t)
	wantIDs := []string{"telegram:4242:10", "telegram:4242:11", "telegram:4242:12", "telegram:4242:13", "telegram:4242:14"}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("CHAT_IN Nats-Msg-Ids (-want +got):\n%s", diff)
	}
	if len(stored[2].Attachments) != 1 || stored[2].Attachments[0].Data == "" {
		t.Errorf("update 12 stored without its photo: %+v", stored[2])
	}
	if got := e.bot.pendingUpdates(); len(got) != 0 {
		t.Errorf("updates still pending at Telegram: %v", got)
	}
}

// A stored offset older than six days is dropped: getUpdates starts
// without one, and what Telegram sends again is de-duplicated.
func TestStaleOffsetIsDropped(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.dir, "telegram.db")
	store, err := openOffsets(path, fakeBotID, func() time.Time { return time.Now().Add(-7 * 24 * time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	if err := store.save(t.Context(), 999999); err != nil {
		t.Fatal(err)
	}
	store.close()
	e.bot.addUpdate(5, privateMsg(1, user(7, "Ann", ""), "after a quiet week"))
	run(t, e.newAdapter(t, e.config(), Deps{StatePath: path}))
	ins := e.waitPublished(t, 1)
	if ins[0].ID != "4242:5" {
		t.Errorf("published %q, want update 5", ins[0].ID)
	}
	reqs := e.bot.all("getUpdates")
	if reqs[0].params.Has("offset") {
		t.Errorf("first getUpdates sent offset %q, want none", reqs[0].params.Get("offset"))
	}
}

func TestRepublishedUpdateIsDeduplicated(t *testing.T) {
	e := newEnv(t)
	e.bot.addUpdate(20, privateMsg(1, user(7, "Ann", ""), "once"))
	first := run(t, e.newAdapter(t, e.config(), Deps{StatePath: filepath.Join(e.dir, "a.db")}))
	getUpdatesWithOffset(t, e, 21)
	first.stop(t)
	// A new state file knows no offset; Telegram sends update 20 again
	// (as it does after a crash before the offset was stored).
	e.bot.addUpdate(20, privateMsg(1, user(7, "Ann", ""), "once"))
	second := run(t, e.newAdapter(t, e.config(), Deps{StatePath: filepath.Join(e.dir, "b.db")}))
	e.waitPublished(t, 2)
	getUpdatesWithOffset(t, e, 21)
	second.stop(t)
	if stored, _ := e.inbound(t); len(stored) != 1 {
		t.Errorf("CHAT_IN holds %d messages, want the update once", len(stored))
	}
}

func TestUndecodableUpdateIsSkipped(t *testing.T) {
	e := newEnv(t)
	run(t, e.newAdapter(t, e.config(), Deps{}))
	e.bot.addUpdate(7, map[string]any{"message": map[string]any{"message_id": "not a number"}})
	getUpdatesWithOffset(t, e, 8)
	e.bot.addUpdate(8, privateMsg(1, user(7, "Ann", ""), "next"))
	if ins := e.waitPublished(t, 1); ins[0].ID != "4242:8" {
		t.Errorf("published %+v", ins)
	}
}

func TestConflictEndsRun(t *testing.T) {
	e := newEnv(t)
	e.bot.fail("getUpdates", 1000, fakeFailure{status: 409,
		description: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})
	a := e.newAdapter(t, e.config(), Deps{})
	a.tune.conflictGrace = 30 * time.Millisecond
	r := run(t, a)
	e.status.waitFor(t, "naming the conflict", func(err error) bool { return errors.Is(err, ErrConflict) })
	err := r.wait(t)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "another instance") {
		t.Fatalf("Run = %v, want ErrConflict", err)
	}
}

func TestRejectedTokenEndsRun(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Token = "1:wrong"
	r := run(t, e.newAdapter(t, cfg, Deps{}))
	err := r.wait(t)
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Run = %v, want ErrUnauthorized", err)
	}
	if strings.Contains(err.Error(), "1:wrong") {
		t.Errorf("error %q shows the token", err)
	}
}

func TestTransientFailuresAreRetried(t *testing.T) {
	e := newEnv(t)
	e.bot.fail("getMe", 1, fakeFailure{status: 502}) // a proxy's HTML page
	e.bot.fail("getUpdates", 1, fakeFailure{status: 500, description: "Internal Server Error"})
	e.bot.fail("getUpdates", 1, fakeFailure{status: 429, description: "Too Many Requests: retry after 3", retryAfter: 3})
	e.bot.addUpdate(1, privateMsg(1, user(7, "Ann", ""), "still here"))
	run(t, e.newAdapter(t, e.config(), Deps{}))
	e.waitPublished(t, 1)
	e.status.waitFor(t, "reporting the 502", func(err error) bool { return err != nil && strings.Contains(err.Error(), "getMe: 502") })
	e.status.waitFor(t, "reporting the 429", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "429") && strings.Contains(err.Error(), "retrying in 3ms")
	})
	e.status.waitFor(t, "healthy again", func(err error) bool { return err == nil })
}

func TestNetworkErrorsHideTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	a := &api{token: fakeToken, endpoint: "http://" + addr + "/bot%s/%s", files: "http://" + addr + "/file/bot%s/%s",
		hc: &http.Client{}, unit: time.Second}
	_, err = a.getMe(t.Context())
	if err == nil || strings.Contains(err.Error(), fakeToken) || !strings.Contains(err.Error(), "<token>") {
		t.Errorf("getMe error = %v, want one with the token replaced", err)
	}
	_, err = a.download(t.Context(), "x", 10)
	if err == nil || strings.Contains(err.Error(), fakeToken) {
		t.Errorf("download error = %v, want one without the token", err)
	}
	if !transient(err) {
		t.Errorf("a refused connection is not transient")
	}
}

func TestWebhook(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Mode = ModeWebhook
	cfg.WebhookListen = "127.0.0.1:0"
	cfg.WebhookURL = "https://bot.example.com/tg/hook"
	cfg.WebhookSecret = "s3cret_-XYZ0123456789"
	a := e.newAdapter(t, cfg, Deps{})
	addrs := make(chan net.Addr, 1)
	a.tune.webhookReady = func(addr net.Addr) { addrs <- addr }
	r := run(t, a)
	var addr net.Addr
	select {
	case addr = <-addrs:
	case <-time.After(waitTimeout):
		t.Fatal("webhook server did not start")
	}
	set := e.bot.waitN(t, "setWebhook", 1)[0]
	if set.params.Get("url") != cfg.WebhookURL || set.params.Get("secret_token") != cfg.WebhookSecret ||
		set.params.Get("max_connections") != "1" {
		t.Errorf("setWebhook params = %v", set.params)
	}
	e.status.waitFor(t, "healthy", func(err error) bool { return err == nil })

	update := `{"update_id":300,"message":{"message_id":9,"date":1700000000,"text":"via webhook",` +
		`"from":{"id":7,"is_bot":false,"first_name":"Ann"},"chat":{"id":7,"type":"private"}}}`
	post := func(method, path, secret, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr.String()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name, method, path, secret, body string
		want                             int
	}{
		{"no secret", "POST", "/tg/hook", "", update, http.StatusUnauthorized},
		{"wrong secret", "POST", "/tg/hook", "s3cret_-XYz0123456789", update, http.StatusUnauthorized},
		{"wrong path", "POST", "/other", cfg.WebhookSecret, update, http.StatusNotFound},
		{"GET", "GET", "/tg/hook", cfg.WebhookSecret, "", http.StatusMethodNotAllowed},
		{"not JSON", "POST", "/tg/hook", cfg.WebhookSecret, "{", http.StatusBadRequest},
		{"not an update", "POST", "/tg/hook", cfg.WebhookSecret, `{"message":{}}`, http.StatusBadRequest},
		{"undecodable, skipped", "POST", "/tg/hook", cfg.WebhookSecret, `{"update_id":299,"message":{"message_id":"x"}}`, http.StatusOK},
	} {
		if got := post(c.method, c.path, c.secret, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	if got := len(e.in.All()); got != 0 {
		t.Fatalf("rejected calls published %d messages", got)
	}
	if got := post("POST", "/tg/hook", cfg.WebhookSecret, update); got != http.StatusOK {
		t.Fatalf("valid update: status %d", got)
	}
	// 200 comes only after the stream stored the message.
	if stored, ids := e.inbound(t); len(stored) != 1 || ids[0] != "telegram:4242:300" || stored[0].Text != "via webhook" {
		t.Fatalf("after 200, CHAT_IN holds %+v %v", stored, ids)
	}
	// Telegram sending it again is harmless.
	if got := post("POST", "/tg/hook", cfg.WebhookSecret, update); got != http.StatusOK {
		t.Fatalf("repeated update: status %d", got)
	}
	if stored, _ := e.inbound(t); len(stored) != 1 {
		t.Errorf("a repeated update was stored again: %d messages", len(stored))
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := len(e.bot.all("getUpdates")) + len(e.bot.all("deleteWebhook")); n != 0 {
		t.Errorf("webhook mode called getUpdates/deleteWebhook %d times", n)
	}
}

func TestWebhookListenError(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := e.config()
	cfg.Mode = ModeWebhook
	cfg.WebhookListen = ln.Addr().String() // taken
	cfg.WebhookURL = "https://bot.example.com/hook"
	cfg.WebhookSecret = "s0123456789abcdef"
	err = run(t, e.newAdapter(t, cfg, Deps{})).wait(t)
	if err == nil || !strings.Contains(err.Error(), "channels.telegram.webhook_listen") {
		t.Fatalf("Run = %v, want an error naming webhook_listen", err)
	}
}

func TestOffsetFileLockedByAnotherProcess(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.dir, "telegram.db")
	held, err := openOffsets(path, fakeBotID, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer held.close()
	err = run(t, e.newAdapter(t, e.config(), Deps{StatePath: path})).wait(t)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("Run = %v, want a clear lock error", err)
	}
}
