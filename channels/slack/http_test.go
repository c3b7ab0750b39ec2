package slack

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// httpEnv runs an adapter in http mode.
func httpEnv(t *testing.T) (*env, *running) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Mode, cfg.AppToken, cfg.SigningSecret, cfg.HTTPListen = ModeHTTP, "", signingSecret, "127.0.0.1:0"
	return e, e.start(e.adapter(cfg))
}

// sign returns the v0 signature of body at ts.
func sign(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// post sends an Events API request signed at time at (with secret;
// "" sends no signature headers) and returns the status and body.
func (r *running) post(t *testing.T, body []byte, at time.Time, secret string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+r.addr.String()+EventsPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		ts := strconv.FormatInt(at.Unix(), 10)
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sign(secret, ts, body))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestHTTPModeSignedEventIsPublishedBeforeTheAnswer(t *testing.T) {
	e, r := httpEnv(t)
	in := e.collectIn()
	status, _ := r.post(t, payload("EvH1", dm("U1", "D1", "90.1", "over http")), e.clock.Now(), signingSecret, nil)
	if status != http.StatusOK {
		t.Fatalf("status = %d, want 200", status)
	}
	// The answer came after the publish: the stream already holds it.
	if n := e.streamMsgs(); n != 1 {
		t.Errorf("CHAT_IN holds %d messages when Slack gets its 200, want 1", n)
	}
	waitInbound(t, in, "over http")
}

func TestHTTPModeRejectsBadRequests(t *testing.T) {
	e, r := httpEnv(t)
	body := payload("EvBad", dm("U1", "D1", "91.1", "forged"))
	now := e.clock.Now()
	for _, tt := range []struct {
		name   string
		at     time.Time
		secret string
		header map[string]string
		want   int
	}{
		{"no signature", now, "", nil, http.StatusUnauthorized},
		{"wrong secret", now, "another secret", nil, http.StatusUnauthorized},
		{"timestamp 6 minutes old", now.Add(-6 * time.Minute), signingSecret, nil, http.StatusUnauthorized},
		{"timestamp 6 minutes ahead", now.Add(6 * time.Minute), signingSecret, nil, http.StatusUnauthorized},
		{"timestamp not a number", now, signingSecret, map[string]string{"X-Slack-Request-Timestamp": "soon"}, http.StatusUnauthorized},
		{"signature of another body", now, signingSecret, map[string]string{"X-Slack-Signature": sign(signingSecret, strconv.FormatInt(now.Unix(), 10), []byte("{}"))}, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, _ := r.post(t, body, tt.at, tt.secret, tt.header); status != tt.want {
				t.Errorf("status = %d, want %d", status, tt.want)
			}
		})
	}
	// A signed request 4 minutes old is still accepted.
	if status, _ := r.post(t, payload("EvOK", dm("U1", "D1", "91.2", "fine")), now.Add(-4*time.Minute), signingSecret, nil); status != http.StatusOK {
		t.Errorf("status of a request 4 minutes old = %d, want 200", status)
	}
	if n := e.streamMsgs(); n != 1 {
		t.Errorf("CHAT_IN holds %d messages, want only the valid one", n)
	}
}

func TestHTTPModeURLVerification(t *testing.T) {
	e, r := httpEnv(t)
	body := []byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	status, got := r.post(t, body, e.clock.Now(), signingSecret, nil)
	var res struct{ Challenge string }
	if err := json.Unmarshal([]byte(got), &res); status != http.StatusOK || err != nil || res.Challenge != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Errorf("url_verification answered %d %q, want 200 with the challenge", status, got)
	}
	if status, _ := r.post(t, body, e.clock.Now(), "wrong", nil); status != http.StatusUnauthorized {
		t.Errorf("unsigned url_verification answered %d, want 401", status)
	}
}

func TestHTTPModeRejectsOversizedBody(t *testing.T) {
	e, r := httpEnv(t)
	body := payload("EvBig", dm("U1", "D1", "92.1", strings.Repeat("x", httpBodyLimit)))
	if status, _ := r.post(t, body, e.clock.Now(), signingSecret, nil); status != http.StatusRequestEntityTooLarge {
		t.Errorf("status = %d, want 413", status)
	}
	if n := e.streamMsgs(); n != 0 {
		t.Errorf("CHAT_IN holds %d messages, want 0", n)
	}
}

func TestHTTPModeRetriesAndReplaysAreDeduplicated(t *testing.T) {
	e, r := httpEnv(t)
	in := e.collectIn()
	body := payload("EvR", mention("U1", "C1", "93.1", "", "<@UBOT> once"))
	now := e.clock.Now()
	if status, _ := r.post(t, body, now, signingSecret, nil); status != http.StatusOK {
		t.Fatalf("status = %d", status)
	}
	// Slack's retry, and an attacker's replay of the captured request
	// inside the 5-minute window.
	retry := map[string]string{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
	if status, _ := r.post(t, body, now.Add(time.Minute), signingSecret, retry); status != http.StatusOK {
		t.Fatalf("retry status = %d", status)
	}
	e.clock.Add(2 * time.Minute)
	if status, _ := r.post(t, body, now, signingSecret, nil); status != http.StatusOK {
		t.Fatalf("replay status = %d", status)
	}
	// The channel message twin of the mention.
	if status, _ := r.post(t, payload("EvR2", channelMsg("U1", "C1", "93.1", "", "<@UBOT> once")), e.clock.Now(), signingSecret, nil); status != http.StatusOK {
		t.Fatalf("twin status = %d", status)
	}
	// Replayed after the window: refused outright.
	e.clock.Add(4 * time.Minute)
	if status, _ := r.post(t, body, now, signingSecret, nil); status != http.StatusUnauthorized {
		t.Errorf("late replay status = %d, want 401", status)
	}
	if n := e.streamMsgs(); n != 1 {
		t.Errorf("CHAT_IN holds %d messages, want 1", n)
	}
	if got := texts(t, in); len(got) != 1 {
		t.Errorf("published %q, want one message", got)
	}
}

func TestHTTPModeListenError(t *testing.T) {
	e := newEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := e.config()
	cfg.Mode, cfg.SigningSecret, cfg.HTTPListen = ModeHTTP, signingSecret, busy.Addr().String()
	a := e.adapter(cfg)
	if err := a.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "channels.slack.http_listen") {
		t.Errorf("Run = %v, want an error naming channels.slack.http_listen", err)
	}
}
