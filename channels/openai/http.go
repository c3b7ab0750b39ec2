package openai

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
)

// publishTimeout bounds the publish of one inbound envelope; bodyTimeout
// the reading of a request body.
const (
	publishTimeout = 30 * time.Second
	bodyTimeout    = time.Minute
)

// Handler is the API's HTTP handler (Run serves it).
func (c *Channel) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", c.authed(c.chatCompletions))
	mux.HandleFunc("GET /v1/models", c.authed(c.listModels))
	mux.HandleFunc("GET /v1/models/{id...}", c.authed(c.getModel))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &httpError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "unknown_url",
			message: fmt.Sprintf("Invalid URL (%s %s).", r.Method, r.URL.Path)})
	})
	return c.cors(mux)
}

// cors answers preflight requests and sets the CORS headers for the
// configured origins only; without cors_origins it adds nothing.
func (c *Channel) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		allowed := origin != "" && (slices.Contains(c.cfg.CORSOrigins, "*") || slices.Contains(c.cfg.CORSOrigins, origin))
		if allowed {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, "+headerSession+", OpenAI-Organization, OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, X-Stainless-Package-Version, X-Stainless-Retry-Count, X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Timeout")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authed checks the bearer token before calling h.
func (c *Channel) authed(h func(http.ResponseWriter, *http.Request, *apiKey)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(auth, "Bearer ")
		if auth == "" {
			writeError(w, &httpError{status: http.StatusUnauthorized, typ: typeInvalidRequest,
				message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."})
			return
		}
		k, found := c.authenticate(strings.TrimSpace(token))
		if !ok || !found {
			c.log.Info("request with an unknown API key refused", "remote", r.RemoteAddr, "path", r.URL.Path)
			writeError(w, &httpError{status: http.StatusUnauthorized, typ: typeInvalidRequest, code: "invalid_api_key",
				message: "Incorrect API key provided. Ask the operator of this Switchboard for a key (channels.openai.keys)."})
			return
		}
		h(w, r, k)
	}
}

func (c *Channel) models() []model {
	out := make([]model, 0, len(c.cfg.Models))
	for _, id := range c.cfg.Models {
		out = append(out, model{ID: id, Object: "model", Created: 0, OwnedBy: "switchboard"})
	}
	return out
}

func (c *Channel) listModels(w http.ResponseWriter, _ *http.Request, _ *apiKey) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: c.models()})
}

func (c *Channel) getModel(w http.ResponseWriter, r *http.Request, _ *apiKey) {
	id := r.PathValue("id")
	for _, m := range c.models() {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, modelNotFound(id))
}

func modelNotFound(id string) *httpError {
	return &httpError{status: http.StatusNotFound, typ: typeInvalidRequest, param: "model", code: "model_not_found",
		message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", id)}
}

// readBody reads the body up to max_body_bytes.
func (c *Channel) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *httpError) {
	tooLarge := &httpError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: "request_too_large",
		message: fmt.Sprintf("The request body is larger than this server accepts (%d bytes, channels.openai.max_body_bytes).", c.cfg.MaxBodyBytes)}
	if r.ContentLength > c.cfg.MaxBodyBytes {
		return nil, tooLarge
	}
	// The body must arrive in bodyTimeout; the deadline is lifted for the
	// (long) answer.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.MaxBodyBytes))
	_ = rc.SetReadDeadline(time.Time{})
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case err != nil:
		return nil, badRequest("", "", "The request body could not be read.")
	}
	return body, nil
}

// chatCompletions serves POST /v1/chat/completions.
func (c *Channel) chatCompletions(w http.ResponseWriter, r *http.Request, k *apiKey) {
	if res := k.lim.Reserve(); res.Delay() > 0 {
		wait := res.Delay()
		res.Cancel()
		writeError(w, &httpError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "rate_limit_exceeded",
			retryAfter: int(math.Ceil(wait.Seconds())),
			message:    fmt.Sprintf("Rate limit reached for this API key: %d requests per minute (channels.openai.rate_limit). Please try again in %s.", c.cfg.RateLimit, wait.Round(time.Millisecond))})
		return
	}
	body, herr := c.readBody(w, r)
	if herr != nil {
		writeError(w, herr)
		return
	}
	req, herr := parseChat(r, body)
	if herr != nil {
		writeError(w, herr)
		return
	}
	if !slices.Contains(c.cfg.Models, req.model) {
		writeError(w, modelNotFound(req.model))
		return
	}
	if c.deps.NoModel {
		writeError(w, &httpError{status: http.StatusServiceUnavailable, typ: typeServer, code: "model_not_configured",
			message: "No language model is configured in this Switchboard, so the agent cannot answer. The operator should set the llm section of config.yaml (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL) and restart it."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.RequestTimeout)
	defer cancel()
	c.serveTurn(ctx, w, k, req)
}

// serveTurn publishes the turn's inbound envelope (or finds the one an
// earlier request with the same Idempotency-Key published) and answers
// from its outbound envelopes.
func (c *Channel) serveTurn(ctx context.Context, w http.ResponseWriter, k *apiKey, req *chatRequest) {
	text, atts := req.turnText()
	in := bus.Inbound{V: bus.Version, ID: newID(), Channel: Name, ChatID: chatID(k.user, req.session), UserID: k.user,
		UserName: k.user, Text: text, Attachments: atts, TS: c.now().UTC().Format(time.RFC3339)}
	if req.idempotency != "" {
		rec, _, err := c.store.claim(k.scope+"\x00"+req.idempotency, request{ID: in.ID, Chat: in.ChatID, At: c.now().Unix()})
		if err != nil {
			c.log.Error("idempotency record", "err", err)
			writeError(w, &httpError{status: http.StatusInternalServerError, typ: typeServer, message: "The request could not be recorded; please retry."})
			return
		}
		in.ID, in.ChatID = rec.ID, rec.Chat
	}
	t, fresh := c.turns.joinNew(in.ID)
	answered := false
	defer func() { c.release(t, in, req.idempotency != "", answered) }()
	// A retry finds the stored final, or joins the request still waiting
	// for it; otherwise (a first request, or a retry after the channel
	// restarted) it publishes: the stream's and the runtime's
	// de-duplication keep a second publish from starting a second turn.
	a, ok, _ := c.store.getAnswer(in.ID)
	switch {
	case ok && req.idempotency != "":
		t.update(func() { t.final = &a })
	case fresh || req.idempotency == "":
		if herr := c.publish(ctx, in); herr != nil {
			writeError(w, herr)
			answered = true // nothing runs
			return
		}
	}
	r := responder{c: c, w: w, req: req, id: "chatcmpl-" + in.ID, created: c.now().Unix()}
	answered = r.respond(ctx, &t)
}

// release ends a request's wait for a turn. The last request to leave a
// turn that has no answer yet stops it, unless the request can come back
// for its answer (an Idempotency-Key) or the channel is shutting down.
func (c *Channel) release(t *turn, in bus.Inbound, idempotent, answered bool) {
	left := c.turns.leave(t)
	if answered || idempotent || left > 0 {
		return
	}
	select {
	case <-c.stopping:
		return
	default:
	}
	stop := bus.Inbound{V: bus.Version, ID: newID(), Channel: Name, ChatID: in.ChatID, UserID: in.UserID, UserName: in.UserName,
		Text: "/stop", TS: c.now().UTC().Format(time.RFC3339)}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if err := c.client.PublishInbound(ctx, stop); err != nil {
		c.log.Warn("could not stop the turn of a request that went away", "chat_id", in.ChatID, "in_reply_to", t.id, "err", err)
		return
	}
	c.log.Info("client went away before the answer; turn stopped", "chat_id", in.ChatID, "in_reply_to", t.id)
}

// publish publishes in, mapping the bus's refusals to OpenAI errors.
func (c *Channel) publish(ctx context.Context, in bus.Inbound) *httpError {
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	err := c.client.PublishInbound(pctx, in)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bus.ErrTooLarge):
		return badRequest("messages", "context_length_exceeded", fmt.Sprintf(
			"The turn's input is larger than this Switchboard accepts (bus.max_text_bytes, %d bytes); in stateless mode that includes the earlier messages. Shorten it, or use a session (X-Switchboard-Session) so the history is kept by the agent.", c.deps.MaxTextBytes))
	case errors.Is(err, bus.ErrInvalid):
		return badRequest("messages", "invalid_value", "The message cannot be passed to the agent: "+err.Error())
	case errors.As(err, &apiErr) && (apiErr.Code == http.StatusServiceUnavailable || apiErr.Code == http.StatusTooManyRequests):
		c.log.Warn("the daemon's queue refused a request", "chat_id", in.ChatID, "err", err)
		return &httpError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "queue_full", retryAfter: 30,
			message: "The agent's queue for this session is full (" + apiErr.Description + "). Please try again later."}
	}
	c.log.Error("publish inbound", "chat_id", in.ChatID, "err", err)
	return &httpError{status: http.StatusServiceUnavailable, typ: typeServer, code: "bus_unavailable",
		message: "Switchboard could not hand the message to the agent (its message bus did not answer). Please try again."}
}

// newID is a fresh inbound id.
func newID() string { return strings.ToLower(rand.Text()) }
