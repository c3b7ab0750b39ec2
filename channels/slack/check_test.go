package slack

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
)

func TestCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Slack takes the token as a form field or a bearer header.
		_ = r.ParseForm()
		token := r.Form.Get("token")
		if token == "" {
			token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if r.URL.Path != "/api/auth.test" || token != "xoxb-good" {
			_, _ = w.Write([]byte(`{"ok":false,"error":"invalid_auth"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"team":"Acme","user":"switchboard","user_id":"U1","bot_id":"B1"}`))
	}))
	defer srv.Close()
	if r := Check(t.Context(), nil, nil); r.Status != health.Skip || r.Name != "Slack" {
		t.Fatalf("not configured: %+v", r)
	}
	cfg := DefaultConfig()
	cfg.APIURL = srv.URL + "/api"
	if r := Check(t.Context(), &cfg, nil); r.Status != health.Skip {
		t.Fatalf("off: %+v", r)
	}
	cfg.BotToken = "xoxb-good"
	if r := Check(t.Context(), &cfg, nil); r.Status != health.OK || !strings.Contains(r.Detail, "Acme") {
		t.Fatalf("good token: %+v", r)
	}
	cfg.BotToken = "xoxb-bad"
	if r := Check(t.Context(), &cfg, nil); r.Status != health.Fail || !strings.Contains(r.Detail, "invalid_auth") {
		t.Fatalf("bad token: %+v", r)
	}
}
