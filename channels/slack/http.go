package slack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

// Errors of the Events API request verification.
var (
	errNoSignature  = errors.New("missing X-Slack-Signature or X-Slack-Request-Timestamp")
	errBadTimestamp = errors.New("X-Slack-Request-Timestamp is not a Unix time")
	errOldTimestamp = errors.New("X-Slack-Request-Timestamp is more than 5 minutes away from now (an old or replayed request, or a wrong clock)")
	errBadSignature = errors.New("X-Slack-Signature does not match channels.slack.signing_secret")
)

// serveHTTP runs the Events API server on channels.slack.http_listen
// (listener and server bounded by Options.HTTP, counted as "slack") until
// ctx is cancelled, then shuts it down (waiting a few seconds for
// requests in flight) and returns nil. It returns an error when it cannot
// listen.
func (a *Adapter) serveHTTP(ctx context.Context) error {
	ln, err := a.opts.HTTP.Listen(ctx, "slack", a.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("slack: channels.slack.http_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+EventsPath, func(w http.ResponseWriter, r *http.Request) { a.serveEvents(ctx, w, r) })
	a.log.Info("listening for Slack events", "addr", ln.Addr().String(), "path", EventsPath)
	if a.onListen != nil {
		a.onListen(ln.Addr())
	}
	a.setStatus(nil)
	// Every answer is short and due within Slack's 3 s: a write timeout.
	if err := a.opts.HTTP.Serve(ctx, ln, mux, httpserve.Options{Log: a.log, WriteTimeout: 30 * time.Second, ShutdownTimeout: 5 * time.Second}); err != nil {
		return fmt.Errorf("slack: events server: %w", err)
	}
	return nil
}

// serveEvents answers one Events API request: 413 for a body over 1 MiB,
// 401 when the signature or its timestamp is wrong, the challenge for
// url_verification, and for an event 200 once it is published (or, for
// an event that takes longer, after httpBudget while its processing goes
// on), 500 when it could not be published (Slack retries it).
func (a *Adapter) serveEvents(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpBodyLimit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			a.log.Warn("events request body too large", "remote", r.RemoteAddr, "limit", httpBodyLimit)
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return
	}
	if err := a.verify(r.Header, body); err != nil {
		a.log.Warn("events request rejected", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, "body is not a JSON object", http.StatusBadRequest)
		return
	}
	switch env.Type {
	case "url_verification":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": env.Challenge})
		return
	case "event_callback":
	default:
		w.WriteHeader(http.StatusOK)
		return
	}
	retry, _ := strconv.Atoi(r.Header.Get("X-Slack-Retry-Num"))
	done := make(chan error, 1)
	a.receive(ctx, body, retry, done)
	timer := time.NewTimer(httpBudget)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			http.Error(w, "event not processed", http.StatusInternalServerError)
			return
		}
	case <-timer.C:
	case <-r.Context().Done():
		return
	}
	w.WriteHeader(http.StatusOK)
}

// verify checks an Events API request's v0 signature: HMAC-SHA256 with
// the signing secret over "v0:<timestamp>:<body>", compared in constant
// time, with the timestamp at most 5 minutes away from now.
func (a *Adapter) verify(h http.Header, body []byte) error {
	sig, ts := h.Get("X-Slack-Signature"), h.Get("X-Slack-Request-Timestamp")
	if sig == "" || ts == "" {
		return errNoSignature
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errBadTimestamp
	}
	if d := a.now().Sub(time.Unix(sec, 0)); d > signatureMaxAge || d < -signatureMaxAge {
		return errOldTimestamp
	}
	mac := hmac.New(sha256.New, []byte(a.cfg.SigningSecret))
	_, _ = io.WriteString(mac, "v0:"+ts+":")
	_, _ = mac.Write(body)
	want := "v0=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return errBadSignature
	}
	return nil
}
