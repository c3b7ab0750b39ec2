package slack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Identity the fake Web API reports (auth.test).
const (
	botUser  = "UBOT"
	botID    = "BBOT"
	teamID   = "T1"
	botToken = "xoxb-test"
	appToken = "xapp-test"
)

// apiCall is one Web API request the fake received.
type apiCall struct {
	method string
	form   url.Values
}

// failure is an answer the fake gives instead of the normal one.
type failure struct {
	status     int    // HTTP status; 0 means 200
	retryAfter string // Retry-After header
	slackErr   string // {"ok":false,"error":...}
}

// fakeFile is a file the fake serves (files.info and download).
type fakeFile struct {
	info    map[string]any
	content []byte
}

// fakeSlack emulates the parts of Slack's Web API the adapter uses, file
// downloads and uploads, and a Socket Mode websocket. Everything it sees
// is recorded; waits are on a channel closed at every change, never on
// sleeps. It is safe for concurrent use.
type fakeSlack struct {
	srv *httptest.Server

	mu      sync.Mutex
	changed chan struct{}
	calls   []apiCall
	acks    []string
	conns   int
	nextTS  int
	msgs    map[string]url.Values // posted messages by ts (last text)
	users   map[string]string     // user id → display name
	files   map[string]fakeFile
	replies map[string][]map[string]any // thread ts → conversations.replies
	fail    map[string][]failure        // method → next failures
	status  string                      // assistant.threads.setStatus error; "" ok
	uploads map[string][]byte

	frames chan []byte   // socket mode frames to send
	kick   chan struct{} // closed when a newer connection replaces the current one
	stop   chan struct{} // closed at cleanup
}

func newFakeSlack(t testing.TB) *fakeSlack {
	t.Helper()
	f := &fakeSlack{
		changed: make(chan struct{}),
		msgs:    make(map[string]url.Values),
		users:   map[string]string{"U1": "Ann", "U2": "Bob"},
		files:   make(map[string]fakeFile),
		replies: make(map[string][]map[string]any),
		fail:    make(map[string][]failure),
		uploads: make(map[string][]byte),
		frames:  make(chan []byte, 100),
		stop:    make(chan struct{}),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.stop)
		f.srv.Close()
	})
	return f
}

// apiURL is the Web API base URL, deliberately without the trailing
// slash the adapter must add.
func (f *fakeSlack) apiURL() string { return f.srv.URL + "/api" }

// notify wakes waiters; called with f.mu held.
func (f *fakeSlack) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// failNext makes the next call of method fail.
func (f *fakeSlack) failNext(method string, fl failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = append(f.fail[method], fl)
}

func (f *fakeSlack) setStatusError(code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = code
}

func (f *fakeSlack) addFile(id string, info map[string]any, content []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info["id"] = id
	info["url_private_download"] = f.srv.URL + "/files/" + id
	f.files[id] = fakeFile{info: info, content: content}
}

func (f *fakeSlack) setReplies(threadTS string, msgs []map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[threadTS] = msgs
}

// callsOf returns the recorded calls of method.
func (f *fakeSlack) callsOf(method string) []apiCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apiCall
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

// waitFor waits until cond (called with f.mu held) is true.
func (f *fakeSlack) waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("fake slack: timed out waiting for %s; calls: %v; acks: %v", what, f.describe(), f.acks)
		}
	}
}

func (f *fakeSlack) describe() string {
	var b strings.Builder
	for _, c := range f.calls {
		line := fmt.Sprintf("%s %v", c.method, c.form)
		if len(line) > 200 {
			line = line[:200] + "…"
		}
		b.WriteString("\n  " + line)
	}
	return b.String()
}

// waitCalls waits until method has been called n times and returns the
// calls.
func (f *fakeSlack) waitCalls(t testing.TB, method string, n int) []apiCall {
	t.Helper()
	f.waitFor(t, fmt.Sprintf("%d calls of %s", n, method), func() bool {
		c := 0
		for _, call := range f.calls {
			if call.method == method {
				c++
			}
		}
		return c >= n
	})
	return f.callsOf(method)
}

// waitAck waits for the Socket Mode ack of an envelope.
func (f *fakeSlack) waitAck(t testing.TB, envelopeID string) {
	t.Helper()
	f.waitFor(t, "ack of "+envelopeID, func() bool {
		for _, a := range f.acks {
			if a == envelopeID {
				return true
			}
		}
		return false
	})
}

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/ws":
		f.serveSocket(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/files/"):
		f.serveDownload(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/upload/"):
		data, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.uploads[strings.TrimPrefix(r.URL.Path, "/upload/")] = data
		f.notify()
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "invalid_form"})
		return
	}
	token := r.Form.Get("token")
	if token == "" {
		token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, apiCall{method: method, form: r.Form})
	defer f.notify()
	want := botToken
	if method == "apps.connections.open" {
		want = appToken
	}
	if token != want {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	if q := f.fail[method]; len(q) > 0 {
		fl := q[0]
		f.fail[method] = q[1:]
		if fl.retryAfter != "" {
			w.Header().Set("Retry-After", fl.retryAfter)
		}
		status := fl.status
		if status == 0 {
			status = http.StatusOK
		}
		writeJSON(w, status, map[string]any{"ok": false, "error": fl.slackErr})
		return
	}
	writeJSON(w, http.StatusOK, f.answer(method, r.Form))
}

// answer builds the successful answer of a Web API method. Called with
// f.mu held.
func (f *fakeSlack) answer(method string, form url.Values) map[string]any {
	ok := func(kv ...any) map[string]any {
		m := map[string]any{"ok": true}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	switch method {
	case "auth.test":
		return ok("user_id", botUser, "bot_id", botID, "team_id", teamID, "user", "switchboard", "team", "Test")
	case "apps.connections.open":
		return ok("url", "ws"+strings.TrimPrefix(f.srv.URL, "http")+"/ws")
	case "chat.postMessage":
		f.nextTS++
		ts := fmt.Sprintf("1800000000.%06d", f.nextTS)
		f.msgs[ts] = form
		return ok("channel", form.Get("channel"), "ts", ts, "message", map[string]any{"text": form.Get("text"), "ts": ts})
	case "chat.update":
		ts := form.Get("ts")
		old, found := f.msgs[ts]
		if !found {
			return map[string]any{"ok": false, "error": "message_not_found"}
		}
		updated := url.Values{"channel": {form.Get("channel")}, "text": {form.Get("text")}, "thread_ts": {old.Get("thread_ts")}}
		f.msgs[ts] = updated
		return ok("channel", form.Get("channel"), "ts", ts, "text", form.Get("text"))
	case "chat.delete":
		delete(f.msgs, form.Get("ts"))
		return ok("channel", form.Get("channel"), "ts", form.Get("ts"))
	case "chat.postEphemeral":
		return ok("message_ts", "1800000000.999999")
	case "assistant.threads.setStatus":
		if f.status != "" {
			return map[string]any{"ok": false, "error": f.status}
		}
		return ok()
	case "users.info":
		id := form.Get("user")
		name, found := f.users[id]
		if !found {
			return map[string]any{"ok": false, "error": "user_not_found"}
		}
		return ok("user", map[string]any{"id": id, "name": strings.ToLower(name), "real_name": name + " Real",
			"profile": map[string]any{"display_name": name, "real_name": name + " Real"}})
	case "conversations.replies":
		return ok("messages", f.replies[form.Get("ts")], "has_more", false)
	case "files.info":
		ff, found := f.files[form.Get("file")]
		if !found {
			return map[string]any{"ok": false, "error": "file_not_found"}
		}
		return ok("file", ff.info)
	case "files.getUploadURLExternal":
		id := "FUP" + strconv.Itoa(len(f.uploads)+1)
		return ok("upload_url", f.srv.URL+"/upload/"+id, "file_id", id)
	case "files.completeUploadExternal":
		return ok("files", []map[string]any{{"id": "FUP", "title": "t"}})
	}
	return map[string]any{"ok": false, "error": "unknown_method"}
}

// serveDownload serves a file's content to a request carrying the bot
// token.
func (f *fakeSlack) serveDownload(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, apiCall{method: "download", form: url.Values{"path": {r.URL.Path}}})
	defer f.notify()
	if r.Header.Get("Authorization") != "Bearer "+botToken {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	ff, found := f.files[strings.TrimPrefix(r.URL.Path, "/files/")]
	if !found {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(ff.content)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveSocket is the Socket Mode endpoint: it accepts the client's
// Origin, sends hello, then the queued frames and a ping every 50 ms,
// and records the acks it reads, until the client goes or the fake
// stops.
func (f *fakeSlack) serveSocket(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "https://api.slack.com" }}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	kick := make(chan struct{})
	f.mu.Lock()
	if f.kick != nil {
		close(f.kick) // the older connection stops taking frames
	}
	f.kick = kick
	f.conns++
	f.notify()
	f.mu.Unlock()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			var ack struct {
				EnvelopeID string `json:"envelope_id"`
			}
			if err := conn.ReadJSON(&ack); err != nil {
				return
			}
			f.mu.Lock()
			f.acks = append(f.acks, ack.EnvelopeID)
			f.notify()
			f.mu.Unlock()
		}
	}()
	defer func() {
		_ = conn.Close()
		<-readerDone
	}()
	if err := conn.WriteJSON(map[string]any{"type": "hello", "num_connections": 1, "connection_info": map[string]any{"app_id": "A1"}}); err != nil {
		return
	}
	ping := time.NewTicker(50 * time.Millisecond)
	defer ping.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-readerDone:
			return
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second)); err != nil {
				return
			}
		case <-kick:
			return
		case frame := <-f.frames:
			select {
			case <-kick:
				f.frames <- frame // for the newer connection
				return
			default:
			}
			if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				return
			}
		}
	}
}

// sendEnvelope queues a Socket Mode events_api envelope around payload.
func (f *fakeSlack) sendEnvelope(envelopeID string, retry int, payload []byte) {
	frame, _ := json.Marshal(map[string]any{
		"type": "events_api", "envelope_id": envelopeID, "payload": json.RawMessage(payload),
		"accepts_response_payload": false, "retry_attempt": retry, "retry_reason": "",
	})
	f.frames <- frame
}

// sendRaw queues a frame as is.
func (f *fakeSlack) sendRaw(frame []byte) { f.frames <- frame }
