package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
)

const checkChannelTimeout = 10 * time.Second

// checkTelegram calls getMe with the configured token.
func checkTelegram(ctx context.Context, cfg *telegram.Config) checkResult {
	r := checkResult{name: "Telegram"}
	if cfg == nil || !cfg.Enabled() {
		r.status, r.detail = statusSkip, "off (set TELEGRAM_BOT_TOKEN or channels.telegram.token)"
		return r
	}
	endpoint := cfg.APIEndpoint
	if endpoint == "" {
		endpoint = telegram.DefaultAPIEndpoint
	}
	var body struct {
		OK          bool   `json:"ok"`
		Description string `json:"description"`
		Result      struct {
			ID       int64  `json:"id"`
			Username string `json:"username"`
		} `json:"result"`
	}
	status, err := getJSON(ctx, http.MethodGet, fmt.Sprintf(endpoint, cfg.Token, "getMe"), "", &body)
	switch {
	case err != nil:
		// The URL holds the token: never show it.
		r.status, r.detail = statusFail, "getMe: "+strings.ReplaceAll(err.Error(), cfg.Token, "<token>")
	case status == http.StatusUnauthorized || status == http.StatusNotFound:
		r.status, r.detail = statusFail, fmt.Sprintf("getMe: HTTP %d: the bot token was rejected (check TELEGRAM_BOT_TOKEN)", status)
	case !body.OK:
		r.status, r.detail = statusFail, fmt.Sprintf("getMe: HTTP %d: %s", status, body.Description)
	default:
		r.status, r.detail = statusOK, fmt.Sprintf("token accepted: bot @%s (id %d)", body.Result.Username, body.Result.ID)
	}
	return r
}

// checkSlack calls auth.test with the configured bot token.
func checkSlack(ctx context.Context, cfg *slack.Config) checkResult {
	r := checkResult{name: "Slack"}
	if cfg == nil || !cfg.Enabled() {
		r.status, r.detail = statusSkip, "off (set SLACK_BOT_TOKEN and SLACK_APP_TOKEN, or channels.slack.*)"
		return r
	}
	if cfg.BotToken == "" {
		r.status, r.detail = statusFail, "channels.slack.bot_token is empty"
		return r
	}
	api := cfg.APIURL
	if api == "" {
		api = slack.DefaultAPIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	var body struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
		Team  string `json:"team"`
		User  string `json:"user"`
	}
	status, err := getJSON(ctx, http.MethodPost, api+"auth.test", cfg.BotToken, &body)
	switch {
	case err != nil:
		r.status, r.detail = statusFail, "auth.test: "+err.Error()
	case !body.OK:
		r.status, r.detail = statusFail, fmt.Sprintf("auth.test: HTTP %d: %s (check SLACK_BOT_TOKEN)", status, body.Error)
	default:
		r.status, r.detail = statusOK, fmt.Sprintf("bot token accepted: %s in workspace %s", body.User, body.Team)
	}
	return r
}

// getJSON makes one request and decodes a JSON answer (whatever the
// status), with a bearer token when given.
func getJSON(ctx context.Context, method, u, bearer string, v any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, checkChannelTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return 0, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, fmt.Errorf("cannot reach %s: %v", bus.RedactURL(hostOf(u)), ue.Err)
		}
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, checkMaxBody))
	if err := json.Unmarshal(data, v); err != nil {
		return resp.StatusCode, fmt.Errorf("HTTP %d: not a JSON answer%s", resp.StatusCode, bodyHint(data))
	}
	return resp.StatusCode, nil
}

// hostOf keeps scheme and host of u (paths may hold tokens).
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the endpoint"
	}
	return p.Scheme + "://" + p.Host
}
