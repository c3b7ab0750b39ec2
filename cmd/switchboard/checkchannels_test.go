package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
)

func TestCheckTelegram(t *testing.T) {
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
	cfg := telegram.DefaultConfig()
	cfg.APIEndpoint = srv.URL + "/bot%s/%s"
	if r := checkTelegram(t.Context(), &cfg); r.status != statusSkip {
		t.Fatalf("no token: %+v", r)
	}
	cfg.Token = token
	if r := checkTelegram(t.Context(), &cfg); r.status != statusOK || !strings.Contains(r.detail, "@my_bot") {
		t.Fatalf("good token: %+v", r)
	}
	cfg.Token = "123456:AAE-wrong"
	if r := checkTelegram(t.Context(), &cfg); r.status != statusFail || !strings.Contains(r.detail, "rejected") || strings.Contains(r.detail, "wrong") {
		t.Fatalf("bad token: %+v", r)
	}
	srv.Close()
	cfg.Token = token
	if r := checkTelegram(t.Context(), &cfg); r.status != statusFail || strings.Contains(r.detail, "secret_value") {
		t.Fatalf("unreachable (must not show the token): %+v", r)
	}
}

func TestCheckSlack(t *testing.T) {
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
	cfg := slack.DefaultConfig()
	cfg.APIURL = srv.URL + "/api"
	if r := checkSlack(t.Context(), &cfg); r.status != statusSkip {
		t.Fatalf("off: %+v", r)
	}
	cfg.BotToken = "xoxb-good"
	if r := checkSlack(t.Context(), &cfg); r.status != statusOK || !strings.Contains(r.detail, "Acme") {
		t.Fatalf("good token: %+v", r)
	}
	cfg.BotToken = "xoxb-bad"
	if r := checkSlack(t.Context(), &cfg); r.status != statusFail || !strings.Contains(r.detail, "invalid_auth") {
		t.Fatalf("bad token: %+v", r)
	}
}
