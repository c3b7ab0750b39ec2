package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/internal/health"
)

// CheckTimeout bounds [Check].
const CheckTimeout = 10 * time.Second

// Check reports, for `switchboard check` (result name "Slack"), whether
// the Web API accepts cfg's bot token: it asks who the token belongs to
// (auth.test, one attempt, at most CheckTimeout) with the client the
// adapter uses ("bot token accepted: <bot user> in workspace <team>"). A
// rejected token or one without a bot user fails, naming
// channels.slack.bot_token. A nil or disabled cfg is skipped. A nil hc
// uses a client of its own.
func Check(ctx context.Context, cfg *Config, hc *http.Client) health.Result {
	r := health.Result{Name: "Slack"}
	if cfg == nil || !cfg.Enabled() {
		r.Status, r.Detail = health.Skip, "off (set SLACK_BOT_TOKEN and SLACK_APP_TOKEN, or channels.slack.*)"
		return r
	}
	who, err := authTest(ctx, *cfg, hc)
	if err != nil {
		r.Status, r.Detail = health.Fail, err.Error()
		return r
	}
	r.Status, r.Detail = health.OK, "bot token accepted: "+who
	return r
}

// authTest asks the Web API who the bot token belongs to and describes the
// answer: "<bot user> in workspace <team>".
func authTest(ctx context.Context, cfg Config, hc *http.Client) (string, error) {
	if cfg.BotToken == "" {
		return "", errors.New("slack: channels.slack.bot_token is empty")
	}
	if hc == nil {
		hc = &http.Client{}
	}
	cfg = cfg.withDefaults()
	api := slackapi.New(cfg.BotToken, slackapi.OptionAPIURL(cfg.APIURL), slackapi.OptionHTTPClient(hc))
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	res, err := api.AuthTestContext(ctx)
	switch {
	case err != nil && fatalAuth(err):
		return "", fmt.Errorf("slack: auth.test: channels.slack.bot_token rejected: %w (check SLACK_BOT_TOKEN)", err)
	case err != nil:
		return "", fmt.Errorf("slack: auth.test: %w", err)
	case res.UserID == "":
		return "", errors.New("slack: auth.test: the token has no bot user (use the bot user OAuth token, xoxb-...)")
	}
	return fmt.Sprintf("%s in workspace %s", res.User, res.Team), nil
}
