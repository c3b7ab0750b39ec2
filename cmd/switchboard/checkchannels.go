package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
)

// checkTelegram reports telegram.Check (getMe with the configured token).
func checkTelegram(ctx context.Context, cfg *telegram.Config) checkResult {
	r := checkResult{name: "Telegram"}
	if cfg == nil || !cfg.Enabled() {
		r.status, r.detail = statusSkip, "off (set TELEGRAM_BOT_TOKEN or channels.telegram.token)"
		return r
	}
	who, err := telegram.Check(ctx, *cfg, nil)
	if err != nil {
		r.status, r.detail = statusFail, err.Error()
		return r
	}
	r.status, r.detail = statusOK, "token accepted: "+who
	return r
}

// checkSlack reports slack.Check (auth.test with the configured bot token).
func checkSlack(ctx context.Context, cfg *slack.Config) checkResult {
	r := checkResult{name: "Slack"}
	if cfg == nil || !cfg.Enabled() {
		r.status, r.detail = statusSkip, "off (set SLACK_BOT_TOKEN and SLACK_APP_TOKEN, or channels.slack.*)"
		return r
	}
	who, err := slack.Check(ctx, *cfg, nil)
	if err != nil {
		r.status, r.detail = statusFail, err.Error()
		return r
	}
	r.status, r.detail = statusOK, "bot token accepted: "+who
	return r
}
