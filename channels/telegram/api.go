package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// Sentinel errors. Use errors.Is.
var (
	// ErrUnauthorized: Telegram rejected the bot token (401, or 404 on
	// getMe). Run returns it; retrying cannot help.
	ErrUnauthorized = errors.New("telegram: the bot token was rejected (check channels.telegram.token)")
	// ErrConflict: getUpdates keeps answering 409, i.e. another process
	// polls with the same token (or a webhook was set meanwhile).
	ErrConflict = errors.New("telegram: another instance is receiving updates for this bot token (getUpdates 409 Conflict); " +
		"stop the other instance or use a different bot token")
	// errTooLarge: a file is larger than the configured cap.
	errTooLarge = errors.New("file too large")
)

// apiError is an error answer of the Bot API ({"ok":false,...}) or a
// non-2xx HTTP status without one.
type apiError struct {
	Method      string
	Code        int    // error_code, or the HTTP status
	Description string // e.g. "Bad Request: chat not found"
	RetryAfter  time.Duration
	MigrateTo   int64 // parameters.migrate_to_chat_id
}

func (e *apiError) Error() string {
	return fmt.Sprintf("telegram: %s: %d %s", e.Method, e.Code, e.Description)
}

// Unwrap maps the answers callers branch on to the sentinels.
func (e *apiError) Unwrap() error {
	switch {
	case e.Code == http.StatusUnauthorized || (e.Code == http.StatusNotFound && e.Method == "getMe"):
		return ErrUnauthorized
	case e.Code == http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// has reports whether the description contains s (case-insensitive).
// Telegram's descriptions are the only way to tell some 400s apart.
func (e *apiError) has(s string) bool {
	return strings.Contains(strings.ToLower(e.Description), s)
}

// asAPI returns err's *apiError, if any.
func asAPI(err error) (*apiError, bool) {
	var ae *apiError
	ok := errors.As(err, &ae)
	return ae, ok
}

// retryAfter reports a 429 answer and how long to wait.
func retryAfter(err error) (time.Duration, bool) {
	if ae, ok := asAPI(err); ok && ae.Code == http.StatusTooManyRequests {
		return ae.RetryAfter, true
	}
	return 0, false
}

// transient reports whether retrying the same request later can succeed:
// network errors, timeouts, 429 and 5xx answers.
func transient(err error) bool {
	ae, ok := asAPI(err)
	if !ok {
		return !errors.Is(err, errTooLarge)
	}
	return ae.Code == http.StatusTooManyRequests || ae.Code >= 500
}

// api calls the Bot API through the library with a context per call. The
// library's requests carry no context, so every call builds a BotAPI
// around a doer that binds the call's ctx to the request. It is immutable
// and safe for concurrent use.
type api struct {
	token    string
	endpoint string // fmt pattern (token, method)
	files    string // fmt pattern (token, file path)
	hc       *http.Client
	unit     time.Duration // one retry_after unit: a second (tests shorten it)
}

// doer is the library's HTTPClient for one call: it applies the call's ctx,
// records the HTTP status (UploadFiles reports no error code) and removes
// the token from transport errors, whose message holds the URL.
type doer struct {
	ctx    context.Context //nolint:containedctx // lives for one call only
	hc     *http.Client
	token  string
	status int
}

func (d *doer) Do(r *http.Request) (*http.Response, error) {
	resp, err := d.hc.Do(r.WithContext(d.ctx))
	if err != nil {
		return nil, redact(err, d.token)
	}
	d.status = resp.StatusCode
	return resp, nil
}

// redact removes the token from a transport error (a *url.Error names the
// request URL, which contains it).
func redact(err error, token string) error {
	var ue *url.Error
	if token != "" && errors.As(err, &ue) {
		ue.URL = strings.ReplaceAll(ue.URL, token, "<token>")
	}
	return err
}

// bot returns a library client whose requests use d.
func (a *api) bot(d *doer) *tgbotapi.BotAPI {
	b := &tgbotapi.BotAPI{Token: a.token, Client: d}
	b.SetAPIEndpoint(a.endpoint)
	return b
}

// call invokes method with params and decodes the result into out (when
// not nil). Errors: *apiError for an answer that is not ok (or a non-2xx
// status without a JSON answer), ctx's error, or a network error.
func (a *api) call(ctx context.Context, method string, params tgbotapi.Params, out any) error {
	d := &doer{ctx: ctx, hc: a.hc, token: a.token}
	resp, err := a.bot(d).MakeRequest(method, params)
	return a.result(ctx, method, d.status, resp, err, out)
}

// upload sends method as a multipart request with one file.
func (a *api) upload(ctx context.Context, method string, params tgbotapi.Params, file tgbotapi.RequestFile, out any) error {
	d := &doer{ctx: ctx, hc: a.hc, token: a.token}
	resp, err := a.bot(d).UploadFiles(method, params, []tgbotapi.RequestFile{file})
	return a.result(ctx, method, d.status, resp, err, out)
}

// result turns the library's answer into ours.
func (a *api) result(ctx context.Context, method string, status int, resp *tgbotapi.APIResponse, err error, out any) error {
	if err != nil {
		var te *tgbotapi.Error
		if errors.As(err, &te) {
			code := te.Code
			if code == 0 {
				code = status
			}
			return &apiError{Method: method, Code: code, Description: te.Message,
				RetryAfter: time.Duration(te.RetryAfter) * a.unit, MigrateTo: te.MigrateToChatID}
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("telegram: %s: %w", method, cerr)
		}
		if status >= 300 {
			// Not a Bot API answer (a proxy's error page, say).
			return &apiError{Method: method, Code: status, Description: http.StatusText(status)}
		}
		return fmt.Errorf("telegram: %s: %w", method, err)
	}
	if out == nil || resp == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		return fmt.Errorf("telegram: %s: decode result: %w", method, err)
	}
	return nil
}

// getMe returns the bot's own user.
func (a *api) getMe(ctx context.Context) (tgbotapi.User, error) {
	var u tgbotapi.User
	err := a.call(ctx, "getMe", nil, &u)
	return u, err
}

// getUpdates long-polls for updates from offset (0: the server's earliest
// unconfirmed one), returning them undecoded.
func (a *api) getUpdates(ctx context.Context, offset int, timeout time.Duration) ([]json.RawMessage, error) {
	p := tgbotapi.Params{
		"timeout":         strconv.Itoa(int(timeout / time.Second)),
		"allowed_updates": `["message"]`,
	}
	p.AddNonZero("offset", offset)
	var raw []json.RawMessage
	err := a.call(ctx, "getUpdates", p, &raw)
	return raw, err
}

// download fetches a file by its getFile path, failing with errTooLarge
// when it is longer than limit bytes.
func (a *api) download(ctx context.Context, filePath string, limit int64) ([]byte, error) {
	u := fmt.Sprintf(a.files, a.token, filePath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("telegram: download: invalid file path %q", filePath)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("telegram: download: %w", redact(err, a.token))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &apiError{Method: "download", Code: resp.StatusCode, Description: http.StatusText(resp.StatusCode)}
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("telegram: download: %d bytes: %w", resp.ContentLength, errTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("telegram: download: %w", redact(err, a.token))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("telegram: download: more than %d bytes: %w", limit, errTooLarge)
	}
	return data, nil
}

// getFile resolves a file id to its download path.
func (a *api) getFile(ctx context.Context, fileID string) (tgbotapi.File, error) {
	var f tgbotapi.File
	err := a.call(ctx, "getFile", tgbotapi.Params{"file_id": fileID}, &f)
	return f, err
}
