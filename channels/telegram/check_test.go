package telegram

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
)

func TestCheck(t *testing.T) {
	const token = "123456:AAE-secret_value"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bot"+token+"/getMe" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"ok":false,"error_code":401,"description":"Unauthorized"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"result":{"id":42,"is_bot":true,"first_name":"B","username":"my_bot"}}`))
	}))
	defer srv.Close()
	if r := Check(t.Context(), nil, nil); r.Status != health.Skip || r.Name != "Telegram" {
		t.Fatalf("not configured: %+v", r)
	}
	cfg := DefaultConfig()
	cfg.APIEndpoint = srv.URL + "/bot%s/%s"
	if r := Check(t.Context(), &cfg, nil); r.Status != health.Skip {
		t.Fatalf("no token: %+v", r)
	}
	cfg.Token = token
	if r := Check(t.Context(), &cfg, nil); r.Status != health.OK || !strings.Contains(r.Detail, "@my_bot") {
		t.Fatalf("good token: %+v", r)
	}
	cfg.Token = "123456:AAE-wrong"
	if r := Check(t.Context(), &cfg, nil); r.Status != health.Fail || !strings.Contains(r.Detail, "rejected") || strings.Contains(r.Detail, "wrong") {
		t.Fatalf("bad token: %+v", r)
	}
	srv.Close()
	cfg.Token = token
	if r := Check(t.Context(), &cfg, nil); r.Status != health.Fail || strings.Contains(r.Detail, "secret_value") {
		t.Fatalf("unreachable (must not show the token): %+v", r)
	}
}
