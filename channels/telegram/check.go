package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// CheckTimeout bounds [Check].
const CheckTimeout = 10 * time.Second

// Check asks the Bot API who the bot is (getMe, one attempt, at most
// CheckTimeout), with the adapter's own client, and describes the answer:
// "bot @name (id N)". A rejected token is an error wrapping
// [ErrUnauthorized]; no error ever shows the token. A nil hc uses a client
// of its own.
func Check(ctx context.Context, cfg Config, hc *http.Client) (string, error) {
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
