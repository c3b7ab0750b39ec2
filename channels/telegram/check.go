package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/internal/health"
)

// CheckTimeout bounds [Check].
const CheckTimeout = 10 * time.Second

// Check reports, for `switchboard check` (result name "Telegram"), whether
// the Bot API accepts cfg's token: it asks who the bot is (getMe, one
// attempt, at most CheckTimeout) with the adapter's own client and names
// the bot ("token accepted: bot @name (id N)"). A nil or disabled cfg is
// skipped. The detail never shows the token. A nil hc uses a client of its
// own.
func Check(ctx context.Context, cfg *Config, hc *http.Client) health.Result {
	r := health.Result{Name: "Telegram"}
	if cfg == nil || !cfg.Enabled() {
		r.Status, r.Detail = health.Skip, "off (set TELEGRAM_BOT_TOKEN or channels.telegram.token)"
		return r
	}
	who, err := whoAmI(ctx, *cfg, hc)
	if err != nil {
		r.Status, r.Detail = health.Fail, err.Error()
		return r
	}
	r.Status, r.Detail = health.OK, "token accepted: "+who
	return r
}

// whoAmI asks the Bot API (getMe) who the bot is and describes the answer: "bot
// @name (id N)". A rejected token is an error wrapping [ErrUnauthorized];
// no error ever shows the token.
func whoAmI(ctx context.Context, cfg Config, hc *http.Client) (string, error) {
	if cfg.Token == "" {
		return "", errors.New("telegram: channels.telegram.token is empty")
	}
	endpoint := cfg.APIEndpoint
	if endpoint == "" {
		endpoint = DefaultAPIEndpoint
	}
	if hc == nil {
		hc = &http.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	a := &api{token: cfg.Token, endpoint: endpoint, hc: hc, unit: time.Second}
	me, err := a.getMe(ctx)
	if ae, ok := asAPI(err); ok { // the Bot API's answer: method, code, description
		if errors.Is(err, ErrUnauthorized) {
			return "", fmt.Errorf("%w: getMe answered %d %s", ErrUnauthorized, ae.Code, ae.Description)
		}
		return "", err
	}
	if err != nil {
		// A transport error quotes the URL, which holds the token.
		return "", errors.New(strings.ReplaceAll(err.Error(), cfg.Token, "<token>"))
	}
	return fmt.Sprintf("bot @%s (id %d)", me.UserName, me.ID), nil
}
