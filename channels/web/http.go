package web

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/workspace"
)

//go:embed assets
var assets embed.FS

// Limits of a request.
const (
	// maxUploadBytes bounds a message's files together (they travel in
	// the inbound envelope, base64).
	maxUploadBytes = 512 << 10
	publishTimeout = 30 * time.Second
	cookieName     = "sb_session"
	headerCSRF     = "X-CSRF-Token"
)

// publicAssets are the files the login page needs; every other asset
// needs a session.
var publicAssets = []string{"login.js", "style.css"}

var (
	convRE  = regexp.MustCompile(`^[a-z0-9]{1,32}$`)
	msgIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Handler is the console's HTTP handler (Run serves it).
func (c *Channel) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", c.page("login.html"))
	mux.HandleFunc("POST /api/login", c.postLogin)
	mux.HandleFunc("GET /assets/{file}", c.asset)
	mux.HandleFunc("GET /{$}", c.authed(false, func(w http.ResponseWriter, r *http.Request, _ login) { c.page("chat.html")(w, r) }))
	mux.HandleFunc("GET /dashboard", c.authed(false, c.dashPage))
	mux.HandleFunc("GET /api/me", c.authed(true, c.me))
	mux.HandleFunc("POST /api/logout", c.authed(true, c.csrf(c.logout)))
	mux.HandleFunc("GET /api/conversations", c.authed(true, c.listConvs))
	mux.HandleFunc("GET /api/conversations/{conv}/messages", c.authed(true, c.history))
	mux.HandleFunc("POST /api/conversations/{conv}/messages", c.authed(true, c.csrf(c.postMessage)))
	mux.HandleFunc("GET /api/conversations/{conv}/events", c.authed(true, c.events))
	c.dashRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := c.session(r); !ok {
			c.unauthenticated(w, r, strings.HasPrefix(r.URL.Path, "/api/"))
			return
		}
		apiError(w, http.StatusNotFound, "not_found", "There is no such page: "+r.URL.Path)
	})
	return securityHeaders(mux)
}

// securityHeaders forbids every script, style and frame that is not the
// console's own: even if model text reached the DOM as HTML, the browser
// would not run it.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// page serves an embedded HTML page.
func (c *Channel) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			http.Error(w, "missing page", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	}
}

func (c *Channel) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if !slices.Contains(publicAssets, name) {
		if _, ok := c.session(r); !ok {
			c.unauthenticated(w, r, true)
			return
		}
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil || strings.HasSuffix(name, ".html") {
		http.NotFound(w, r)
		return
	}
	ct := cmp.Or(mime.TypeByExtension(path.Ext(name)), "application/octet-stream")
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// session returns the login of the request's cookie.
func (c *Channel) session(r *http.Request) (login, bool) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return login{}, false
	}
	l, ok := c.store.getLogin(ck.Value)
	if !ok || !c.allowed(l.User) {
		return login{}, false // expired, or the user was removed from allow_users
	}
	return l, true
}

func (c *Channel) unauthenticated(w http.ResponseWriter, r *http.Request, api bool) {
	if api {
		apiError(w, http.StatusUnauthorized, "login_required", "Log in first: open /login and enter a pairing code.")
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// authed lets only a logged-in browser reach h; api selects 401 over a
// redirect to the login page.
func (c *Channel) authed(api bool, h func(http.ResponseWriter, *http.Request, login)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l, ok := c.session(r)
		if !ok {
			c.unauthenticated(w, r, api)
			return
		}
		h(w, r, l)
	}
}

// csrf checks the session's token and the Origin of a state-changing
// request.
func (c *Channel) csrf(h func(http.ResponseWriter, *http.Request, login)) func(http.ResponseWriter, *http.Request, login) {
	return func(w http.ResponseWriter, r *http.Request, l login) {
		tok := r.Header.Get(headerCSRF)
		if tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(l.CSRF)) != 1 || !sameOrigin(r) {
			apiError(w, http.StatusForbidden, "csrf", "This request did not carry the page's CSRF token; reload the page and try again.")
			return
		}
		h(w, r, l)
	}
}

// sameOrigin reports whether the request's Origin, when sent, is its own
// host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// overTLS reports whether the browser reached the console over TLS: the
// console serves it, or (behind an HTTPS reverse proxy that keeps the Host
// header) the page's Origin is https.
func overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	u, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && u.Scheme == "https"
}

type loginRequest struct {
	User string `json:"user"`
	Code string `json:"code"`
}

func (c *Channel) postLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		apiError(w, http.StatusForbidden, "csrf", "Log in from this console's own login page.")
		return
	}
	if !c.login.allowAddr(clientAddr(r), c.now()) {
		apiError(w, http.StatusTooManyRequests, "rate_limited", "Too many login attempts from your address; wait a minute and try again.")
		return
	}
	var req loginRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "Send a JSON body with user and code.")
		return
	}
	if !c.allowed(req.User) {
		c.log.Info("web login refused: user not allowed", "user", req.User, "remote", r.RemoteAddr)
		apiError(w, http.StatusForbidden, "user_not_allowed", "This user may not use the web console (channels.web.allow_users).")
		return
	}
	if !c.login.allowUser(req.User, c.now()) {
		apiError(w, http.StatusTooManyRequests, "rate_limited", "Too many login attempts for this user; wait a minute and try again.")
		return
	}
	if err := redeem(c.deps.PairDir, req.Code, req.User, c.now()); err != nil {
		c.log.Info("web login refused", "user", req.User, "remote", r.RemoteAddr, "err", err)
		apiError(w, http.StatusForbidden, "bad_code", "Login failed: "+err.Error()+". Ask the operator for a new code (switchboard web pair).")
		return
	}
	token, csrf := randHex(32), randHex(16)
	if err := c.store.putLogin(token, login{User: req.User, CSRF: csrf, Created: c.now().Unix()}); err != nil {
		apiError(w, http.StatusInternalServerError, "store", "The login could not be saved; try again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: int(loginTTL / time.Second)})
	c.log.Info("web login", "user", req.User, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]string{"user": req.User, "csrf": csrf})
}

func (c *Channel) logout(w http.ResponseWriter, r *http.Request, _ login) {
	if ck, err := r.Cookie(cookieName); err == nil {
		_ = c.store.deleteLogin(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (c *Channel) me(w http.ResponseWriter, _ *http.Request, l login) {
	writeJSON(w, http.StatusOK, map[string]any{"user": l.User, "csrf": l.CSRF, "dashboard": c.cfg.Dashboard && c.operator(l.User),
		"model": !c.deps.NoModel, "max_upload_bytes": maxUploadBytes, "max_text_bytes": c.deps.MaxTextBytes})
}

func (c *Channel) listConvs(w http.ResponseWriter, _ *http.Request, l login) {
	cs, err := c.store.convs(l.User)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "store", "The conversations could not be read.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversations": append([]conv{}, cs...)})
}

// chatOf returns the bus chat of the request's conversation, or writes
// 400.
func chatOf(w http.ResponseWriter, r *http.Request, l login) (conv, chat string, ok bool) {
	conv = r.PathValue("conv")
	if !convRE.MatchString(conv) {
		apiError(w, http.StatusBadRequest, "bad_conversation", "A conversation id is 1 to 32 of a-z 0-9.")
		return "", "", false
	}
	return conv, chatID(l.User, conv), true
}

// chatID is the bus chat of a user's conversation.
func chatID(user, conv string) string { return user + ":" + conv }

func (c *Channel) history(w http.ResponseWriter, r *http.Request, l login) {
	_, chat, ok := chatOf(w, r, l)
	if !ok {
		return
	}
	ms, err := c.store.messages(chat)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "store", "The history could not be read.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": append([]message{}, ms...)})
}

// inboundID derives the envelope id of a page's message, so a retry with
// the same id is the same envelope (stored once) and users cannot collide.
func inboundID(user, conv, id string) string {
	return "w" + hex.EncodeToString(digest(user + "\x00" + conv + "\x00" + id)[:12])
}

func (c *Channel) postMessage(w http.ResponseWriter, r *http.Request, l login) {
	conv, chat, ok := chatOf(w, r, l)
	if !ok {
		return
	}
	in, files, herr := c.readMessage(w, r, l, conv, chat)
	if herr != nil {
		apiError(w, herr.status, herr.code, herr.message)
		return
	}
	if c.deps.NoModel && !strings.HasPrefix(in.Text, "/") {
		apiError(w, http.StatusServiceUnavailable, "model_not_configured",
			"No language model is configured in this Switchboard, so the agent cannot answer. The operator should set the llm section of config.yaml (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL) and restart it.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	if herr := c.publish(ctx, in); herr != nil {
		apiError(w, herr.status, herr.code, herr.message)
		return
	}
	m := message{ID: in.ID, Role: "user", Kind: "text", Text: in.Text, Files: files, At: c.now().Unix()}
	title := in.Text
	if len(title) > 60 {
		title = strings.ToValidUTF8(title[:60], "") + "…"
	}
	if err := errors.Join(c.store.putMessage(chat, m), c.store.touchConv(l.User, conv, title)); err != nil {
		c.log.Warn("user message not kept in the page's history (the agent has it)", "chat_id", chat, "err", err)
	}
	c.hub.send(chat, frame{Event: "msg", Data: m})
	writeJSON(w, http.StatusAccepted, map[string]string{"id": in.ID})
}

// httpError is a refusal with a status, a code and words for the user.
type httpError struct {
	status  int
	code    string
	message string
}

// readMessage parses a multipart message: id, text, files.
func (c *Channel) readMessage(w http.ResponseWriter, r *http.Request, l login, conv, chat string) (bus.Inbound, []string, *httpError) {
	tooLarge := &httpError{http.StatusRequestEntityTooLarge, "too_large",
		fmt.Sprintf("The files are too large: at most %d KiB in all per message.", maxUploadBytes>>10)}
	limit := int64(maxUploadBytes + c.deps.MaxTextBytes + 64<<10)
	if r.ContentLength > limit {
		return bus.Inbound{}, nil, tooLarge
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseMultipartForm(limit); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return bus.Inbound{}, nil, tooLarge
		}
		return bus.Inbound{}, nil, &httpError{http.StatusBadRequest, "bad_request", "The message could not be read (multipart form with id, text and files)."}
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	// Browsers send a form's line breaks as CRLF; the agent gets them as
	// typed.
	id, text := r.FormValue("id"), strings.ReplaceAll(r.FormValue("text"), "\r\n", "\n")
	if !msgIDRE.MatchString(id) {
		return bus.Inbound{}, nil, &httpError{http.StatusBadRequest, "bad_id", "A message needs an id of 1 to 64 of A-Z a-z 0-9 _ -."}
	}
	in := bus.Inbound{V: bus.Version, ID: inboundID(l.User, conv, id), Channel: Name, ChatID: chat, UserID: l.User,
		UserName: l.User, Text: text, TS: c.now().UTC().Format(time.RFC3339)}
	var names []string
	total := 0
	for _, fh := range r.MultipartForm.File["files"] {
		f, err := fh.Open()
		if err != nil {
			return bus.Inbound{}, nil, &httpError{http.StatusBadRequest, "bad_file", "A file could not be read: " + fh.Filename}
		}
		data, err := io.ReadAll(io.LimitReader(f, maxUploadBytes+1))
		_ = f.Close()
		total += len(data)
		if err != nil || total > maxUploadBytes {
			return bus.Inbound{}, nil, tooLarge
		}
		mt := fh.Header.Get("Content-Type")
		names = append(names, fh.Filename)
		if !strings.HasPrefix(mt, "image/") && c.deps.Files != nil {
			note, err := c.saveFile(chat, in.ID, fh.Filename, mt, data)
			if err != nil {
				c.log.Error("save an uploaded file", "chat_id", chat, "err", err)
				return bus.Inbound{}, nil, &httpError{http.StatusInternalServerError, "save_failed", "The file could not be saved in the workspace: " + fh.Filename}
			}
			in.Text = strings.TrimSpace(in.Text + "\n" + note)
			continue
		}
		kind := bus.AttachFile
		switch {
		case strings.HasPrefix(mt, "image/"):
			kind = bus.AttachImage
		case strings.HasPrefix(mt, "audio/"):
			kind = bus.AttachAudio
		}
		in.Attachments = append(in.Attachments, bus.Attachment{Kind: kind, Name: fh.Filename, MIME: mt, Size: int64(len(data)),
			Data: base64.StdEncoding.EncodeToString(data)})
	}
	if strings.TrimSpace(in.Text) == "" && len(in.Attachments) == 0 {
		return bus.Inbound{}, nil, &httpError{http.StatusBadRequest, "empty", "The message is empty."}
	}
	return in, names, nil
}

// saveFile writes an uploaded file into the chat's workspace inbox,
// inbox/web/<chat>/<envelope id>-<name> (private to that chat; a retry of
// the message overwrites it whole), and returns the note for the text.
func (c *Channel) saveFile(chat, id, name, mimeType string, data []byte) (string, error) {
	dir, err := workspace.InboxFolder(Name, chat)
	if err != nil {
		return "", err
	}
	rel := path.Join(dir, id+"-"+fileName(name))
	root := c.deps.Files
	if err := root.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	if err := root.WriteFile(rel+".part", data, 0o640); err != nil {
		return "", err
	}
	if err := root.Rename(rel+".part", rel); err != nil {
		_ = root.Remove(rel + ".part")
		return "", err
	}
	return fmt.Sprintf("[The user sent a file, saved in the workspace as %s (%s, %d bytes)]", rel, cmp.Or(mimeType, "unknown type"), len(data)), nil
}

// fileName reduces a browser's file name to a safe base name: letters,
// digits, '.', '-' and '_' (others become '_'), no leading dot, at most
// 120 bytes keeping the end (the extension).
func fileName(name string) string {
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') || c == '.' && i == 0 {
			b[i] = '_'
		}
	}
	if len(b) > 120 {
		b = b[len(b)-120:]
	}
	if len(b) == 0 || string(b) == "_" {
		return "file"
	}
	return string(b)
}

// publish publishes in, mapping the bus's refusals to words for the user.
func (c *Channel) publish(ctx context.Context, in bus.Inbound) *httpError {
	err := c.client.PublishInbound(ctx, in)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bus.ErrTooLarge):
		return &httpError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf(
			"The message is too large: this Switchboard accepts at most %d bytes of text (bus.max_text_bytes). Shorten it or send it as a file.", c.deps.MaxTextBytes)}
	case errors.Is(err, bus.ErrInvalid):
		return &httpError{http.StatusBadRequest, "invalid", "The message cannot be passed to the agent: " + err.Error()}
	case errors.As(err, &apiErr) && (apiErr.Code == http.StatusServiceUnavailable || apiErr.Code == http.StatusTooManyRequests):
		return &httpError{http.StatusTooManyRequests, "queue_full", "The agent's queue is full; try again in a minute."}
	}
	c.log.Error("publish inbound", "chat_id", in.ChatID, "err", err)
	return &httpError{http.StatusServiceUnavailable, "bus_unavailable", "Switchboard could not hand the message to the agent (its message bus did not answer). Try again."}
}

// events streams a conversation's outbound envelopes, agent events and
// other browsers' messages as server-sent events.
func (c *Channel) events(w http.ResponseWriter, r *http.Request, l login) {
	_, chat, ok := chatOf(w, r, l)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	s := c.hub.join(chat)
	defer c.hub.leave(chat, s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "retry: 1000\n: ready\n\n")
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(c.keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-tick.C:
			_, _ = io.WriteString(w, ": keep-alive\n\n")
		case f := <-s.ch:
			b, _ := json.Marshal(f.Data)
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", f.Event, b)
		}
		if rc.Flush() != nil {
			return
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError writes {"error": {"code", "message"}}.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
