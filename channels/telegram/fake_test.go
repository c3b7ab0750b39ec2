package telegram

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/channels/markdown"
)

// fakeBot is an in-process Telegram Bot API server speaking the real JSON
// shapes: POST /bot<token>/<method> with form or multipart parameters,
// answers in the {"ok":...} envelope, files under /file/bot<token>/<path>.
// It records every request, keeps the chats' messages (so edits behave as
// Telegram's do), checks HTML markup and message length as Telegram does,
// and can be told to fail requests. Waiting helpers block on a change
// channel, never on sleeps.
type fakeBot struct {
	t     testing.TB
	srv   *httptest.Server
	token string

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	reqs     []fakeReq
	updates  []fakeUpdate // pending, ascending update_id
	nextMsg  int
	messages map[string]string // "<chat>/<message id>" → text
	files    map[string][]byte // file_id → content
	gates    map[string]chan struct{}
	failures map[string][]fakeFailure
}

type fakeReq struct {
	method string
	params url.Values
	files  map[string]fakeUpload // multipart field → file
}

type fakeUpload struct {
	name string
	data []byte
}

type fakeUpdate struct {
	id  int
	raw json.RawMessage
}

type fakeFailure struct {
	status      int
	description string
	retryAfter  int
	migrateTo   int64
}

const (
	fakeToken   = "4242:TEST-token_abcdefghijklmnopqrstuvwxyz"
	fakeBotID   = 4242
	fakeBotUser = "MyBot"
)

func newFakeBot(t testing.TB) *fakeBot {
	f := &fakeBot{
		t:        t,
		token:    fakeToken,
		changed:  make(chan struct{}),
		nextMsg:  1000,
		messages: make(map[string]string),
		files:    make(map[string][]byte),
		gates:    make(map[string]chan struct{}),
		failures: make(map[string][]fakeFailure),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// endpoint is the api_endpoint pointing at the fake.
func (f *fakeBot) endpoint() string { return f.srv.URL + "/bot%s/%s" }

// notify wakes the waiters. Called with f.mu held.
func (f *fakeBot) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// addUpdate queues an update (the JSON of an Update without update_id)
// under id.
func (f *fakeBot) addUpdate(id int, update map[string]any) {
	update["update_id"] = id
	raw, err := json.Marshal(update)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, fakeUpdate{id: id, raw: raw})
	f.notify()
}

// pendingUpdates returns the ids of the updates not yet confirmed.
func (f *fakeBot) pendingUpdates() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []int
	for _, u := range f.updates {
		ids = append(ids, u.id)
	}
	return ids
}

// addFile makes a file downloadable under file_id id.
func (f *fakeBot) addFile(id string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[id] = data
}

// gate makes downloads of file id wait until the returned func is called
// (or the request is cancelled).
func (f *fakeBot) gate(id string) func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.gates[id] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// fail makes the next n calls of method fail with status and description.
func (f *fakeBot) fail(method string, n int, ff fakeFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures[method] = append(f.failures[method], ff)
	}
}

// all returns the recorded requests of method ("" for every method).
func (f *fakeBot) all(method string) []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeReq
	for _, r := range f.reqs {
		if method == "" || r.method == method {
			out = append(out, r)
		}
	}
	return out
}

// waitFor waits until pred holds over the recorded requests, failing the
// test after waitTimeout with what was recorded.
func (f *fakeBot) waitFor(t testing.TB, what string, pred func(reqs []fakeReq) bool) []fakeReq {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		f.mu.Lock()
		reqs, ch := append([]fakeReq(nil), f.reqs...), f.changed
		f.mu.Unlock()
		if pred(reqs) {
			return reqs
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("fake Telegram: timed out waiting for %s; requests:\n%s", what, describeReqs(reqs))
			return nil
		}
	}
}

// waitN waits until method was called at least n times and returns those
// calls.
func (f *fakeBot) waitN(t testing.TB, method string, n int) []fakeReq {
	t.Helper()
	var got []fakeReq
	f.waitFor(t, fmt.Sprintf("%d %s call(s)", n, method), func(reqs []fakeReq) bool {
		got = got[:0]
		for _, r := range reqs {
			if r.method == method {
				got = append(got, r)
			}
		}
		return len(got) >= n
	})
	return got
}

// waitUntil waits until cond (evaluated under no lock of the fake) holds;
// it is re-evaluated whenever the fake records something.
func (f *fakeBot) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	f.waitFor(t, what, func([]fakeReq) bool { return cond() })
}

func describeReqs(reqs []fakeReq) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "  %s %s\n", r.method, r.params.Encode())
	}
	return b.String()
}

func (f *fakeBot) serve(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"+f.token+"/"); ok {
		f.download(w, r, rest)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/bot"+f.token+"/")
	if !ok {
		if strings.HasPrefix(r.URL.Path, "/bot") {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"})
			return
		}
		writeJSON(w, http.StatusNotFound, map[string]any{"ok": false, "error_code": 404, "description": "Not Found"})
		return
	}
	req := fakeReq{method: method, files: map[string]fakeUpload{}}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + err.Error()})
			return
		}
		req.params = url.Values(r.MultipartForm.Value)
		for field, fhs := range r.MultipartForm.File {
			fh := fhs[0]
			file, err := fh.Open()
			if err == nil {
				data, _ := io.ReadAll(file)
				file.Close()
				req.files[field] = fakeUpload{name: fh.Filename, data: data}
			}
		}
	} else {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + err.Error()})
			return
		}
		req.params = r.PostForm
	}
	if method == "getUpdates" {
		f.getUpdates(w, r, req)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.notify()
	if q := f.failures[method]; len(q) > 0 {
		ff := q[0]
		f.failures[method] = q[1:]
		f.mu.Unlock()
		writeFailure(w, ff)
		return
	}
	status, body := f.answer(req)
	f.mu.Unlock()
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeFailure(w http.ResponseWriter, ff fakeFailure) {
	body := map[string]any{"ok": false, "error_code": ff.status, "description": ff.description}
	params := map[string]any{}
	if ff.retryAfter > 0 {
		params["retry_after"] = ff.retryAfter
	}
	if ff.migrateTo != 0 {
		params["migrate_to_chat_id"] = ff.migrateTo
	}
	if len(params) > 0 {
		body["parameters"] = params
	}
	if ff.status >= 500 && ff.description == "" {
		w.WriteHeader(ff.status) // a proxy's error page: not JSON
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
		return
	}
	writeJSON(w, ff.status, body)
}

func ok(result any) (int, any) { return http.StatusOK, map[string]any{"ok": true, "result": result} }

func bad(description string) (int, any) {
	return http.StatusBadRequest, map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + description}
}

// answer handles every method except getUpdates. Called with f.mu held.
func (f *fakeBot) answer(req fakeReq) (int, any) {
	p := req.params
	switch req.method {
	case "getMe":
		return ok(map[string]any{"id": fakeBotID, "is_bot": true, "first_name": "Switchy", "username": fakeBotUser,
			"can_join_groups": true, "can_read_all_group_messages": false})
	case "setMyCommands", "deleteWebhook", "setWebhook", "sendChatAction":
		return ok(true)
	case "sendMessage":
		text := p.Get("text")
		if code, body, bad := checkText(text, p.Get("parse_mode")); bad {
			return code, body
		}
		f.nextMsg++
		f.messages[p.Get("chat_id")+"/"+strconv.Itoa(f.nextMsg)] = text
		return ok(f.message(p, f.nextMsg, text))
	case "editMessageText":
		k := p.Get("chat_id") + "/" + p.Get("message_id")
		old, exists := f.messages[k]
		if !exists {
			return bad("message to edit not found")
		}
		text := p.Get("text")
		if code, body, bad := checkText(text, p.Get("parse_mode")); bad {
			return code, body
		}
		if old == text {
			return bad("message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
		}
		f.messages[k] = text
		id, _ := strconv.Atoi(p.Get("message_id"))
		return ok(f.message(p, id, text))
	case "sendPhoto", "sendDocument":
		f.nextMsg++
		return ok(f.message(p, f.nextMsg, ""))
	case "getFile":
		id := p.Get("file_id")
		data, exists := f.files[id]
		if !exists {
			return bad("invalid file_id")
		}
		if len(data) > 20<<20 {
			return bad("file is too big")
		}
		return ok(map[string]any{"file_id": id, "file_unique_id": "u" + id, "file_size": len(data), "file_path": "documents/" + id})
	}
	return http.StatusNotFound, map[string]any{"ok": false, "error_code": 404, "description": "Not Found: method not found"}
}

func (f *fakeBot) message(p url.Values, id int, text string) map[string]any {
	chat, _ := strconv.ParseInt(p.Get("chat_id"), 10, 64)
	typ := "private"
	if chat < 0 {
		typ = "supergroup"
	}
	m := map[string]any{"message_id": id, "date": 1700000001, "chat": map[string]any{"id": chat, "type": typ},
		"from": map[string]any{"id": fakeBotID, "is_bot": true, "first_name": "Switchy", "username": fakeBotUser}}
	if text != "" {
		m["text"] = text
	}
	return m
}

// Telegram's HTML subset: tags and the attributes they may carry.
var (
	htmlTagRE     = regexp.MustCompile(`^<(/?)([a-z-]+)((?:\s+[a-z]+="[^"<>]*")*)\s*>`)
	htmlEntityRE  = regexp.MustCompile(`^&(lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});`)
	telegramTags  = map[string]bool{"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true, "s": true, "strike": true, "del": true, "span": true, "tg-spoiler": true, "a": true, "code": true, "pre": true, "blockquote": true}
	errParseShape = "can't parse entities: "
)

// checkText rejects what Telegram rejects: empty text, invalid HTML (an
// unknown or unclosed tag, a stray '<' or '&'), visible text over 4096
// UTF-16 units.
func checkText(text, mode string) (int, any, bool) {
	visible := text
	if mode == "HTML" {
		v, err := htmlVisible(text)
		if err != "" {
			code, body := bad(errParseShape + err)
			return code, body, true
		}
		visible = v
	} else if mode != "" {
		code, body := bad("unsupported parse_mode " + mode)
		return code, body, true
	}
	if strings.TrimSpace(visible) == "" {
		code, body := bad("message text is empty")
		return code, body, true
	}
	if markdown.UTF16Len(visible) > MaxMessageLen {
		code, body := bad("message is too long")
		return code, body, true
	}
	return 0, nil, false
}

// htmlVisible checks Telegram HTML and returns its visible text, or a
// parse error.
func htmlVisible(s string) (string, string) {
	var b strings.Builder
	var open []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			m := htmlTagRE.FindStringSubmatch(s[i:])
			if m == nil || !telegramTags[m[2]] {
				return "", fmt.Sprintf("Unsupported start tag at byte offset %d", i)
			}
			if m[1] == "/" {
				if len(open) == 0 || open[len(open)-1] != m[2] {
					return "", fmt.Sprintf("Unexpected end tag at byte offset %d", i)
				}
				open = open[:len(open)-1]
			} else {
				open = append(open, m[2])
			}
			i += len(m[0])
		case '&':
			m := htmlEntityRE.FindString(s[i:])
			if m == "" {
				return "", fmt.Sprintf("Unsupported entity at byte offset %d", i)
			}
			b.WriteString(html.UnescapeString(m))
			i += len(m)
		case '>':
			return "", fmt.Sprintf("Unexpected '>' at byte offset %d", i)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	if len(open) > 0 {
		return "", "Can't find end tag corresponding to start tag " + open[len(open)-1]
	}
	return b.String(), ""
}

// getUpdates implements the long poll: updates below offset are
// confirmed (deleted); pending ones are returned at once; otherwise it
// waits up to timeout seconds for one, or until the client goes away.
func (f *fakeBot) getUpdates(w http.ResponseWriter, r *http.Request, req fakeReq) {
	offset, _ := strconv.Atoi(req.params.Get("offset"))
	timeout, _ := strconv.Atoi(req.params.Get("timeout"))
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.notify()
	if q := f.failures["getUpdates"]; len(q) > 0 {
		ff := q[0]
		f.failures["getUpdates"] = q[1:]
		f.mu.Unlock()
		writeFailure(w, ff)
		return
	}
	if offset > 0 {
		kept := f.updates[:0]
		for _, u := range f.updates {
			if u.id >= offset {
				kept = append(kept, u)
			}
		}
		f.updates = kept
	}
	for len(f.updates) == 0 {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			writeJSON(w, http.StatusOK, map[string]any{"ok": true, "result": []any{}})
			return
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
	}
	result := make([]json.RawMessage, 0, len(f.updates))
	for _, u := range f.updates {
		result = append(result, u.raw)
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "result": result})
}

// download serves a file, waiting for its gate if one is set.
func (f *fakeBot) download(w http.ResponseWriter, r *http.Request, path string) {
	id := strings.TrimPrefix(path, "documents/")
	f.mu.Lock()
	data, exists := f.files[id]
	gate := f.gates[id]
	f.reqs = append(f.reqs, fakeReq{method: "download", params: url.Values{"file_id": {id}}})
	f.notify()
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if !exists {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}
