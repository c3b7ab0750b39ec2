// Package channels holds the contract between Switchboard and the chat
// platforms it serves (DESIGN.md §1–2).
//
// A channel adapter (channels/telegram, channels/slack) connects one chat
// platform to the bus and nothing else: it turns platform events into
// inbound envelopes ([github.com/switchboard-chat/switchboard/bus.Inbound]) published on
// "<p>.in.<channel>.<chat>", and renders the outbound envelopes
// ([github.com/switchboard-chat/switchboard/bus.Outbound]) it receives on "<p>.out.<channel>.>" back into
// platform messages. Adapters know nothing about LLMs, sessions, tools or
// history; the agent runtime knows nothing about any platform. They meet only
// on the bus, through the same protocol an external bridge process speaks
// (docs/bus-protocol.md), and the built-in adapters use the same client code
// as external Go bridges: package [github.com/switchboard-chat/switchboard/bus/bridge].
//
// Shared text helpers live in [github.com/switchboard-chat/switchboard/channels/markdown]: rendering the
// Markdown the model writes into Telegram HTML, Slack mrkdwn or plain text,
// and splitting long replies into platform-sized pieces.
package channels

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/internal/clock"
)

// Channel is a running connection between one chat platform and the bus.
//
// Name returns the channel instance name, the <channel> token of its
// subjects (e.g. "telegram"); it must satisfy [github.com/switchboard-chat/switchboard/bus.ValidChannel]
// and never changes.
//
// Run connects to the platform and the bus and serves both directions. It
// blocks until ctx is cancelled, then stops (every goroutine it started has
// returned, in-flight platform requests are abandoned or finished) and
// returns nil. It returns an error only for a problem it cannot recover from
// by waiting, such as a token the platform rejects, a second poller with the
// same token, or a bus subject it is not permitted to use; the caller then
// decides whether to stop the daemon. Transient platform and network errors
// (timeouts, 5xx, rate limits, disconnects) are retried inside Run with
// capped exponential backoff and reported through the adapter's [StatusFunc],
// never returned.
//
// Run is called at most once per Channel value. Name is safe for concurrent
// use.
type Channel interface {
	Name() string
	Run(ctx context.Context) error
}

// StatusFunc receives an adapter's health changes, to feed the daemon's
// readiness check (/readyz): nil means healthy (connected and serving), a
// non-nil error says what is wrong (e.g. "telegram: getUpdates: 502 Bad
// Gateway, retrying in 8s"). Adapters call it from their own goroutines,
// whenever the state changes (they may repeat a state), so it must be safe
// for concurrent use and must not block. A nil StatusFunc means nobody
// listens; adapters check for nil before calling.
type StatusFunc func(err error)

// Sleep waits for d or until ctx ends ([clock.Sleep], the project's one
// context-aware sleep), returning ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }

// SplitList decodes a YAML list of scalars, or one scalar, into its
// entries: every entry is split at commas and white space and empty parts
// are dropped, so `allow_users: ${ALLOW_USERS}` works with "a, b" and with
// an unset variable (no entries; nil). what names the entries in errors.
func SplitList(n *yaml.Node, what string) ([]string, error) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.SequenceNode:
		items = n.Content
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	default:
		return nil, errors.New("must be a list of " + what)
	}
	var out []string
	for _, it := range items {
		if it.Kind == yaml.AliasNode && it.Alias != nil {
			it = it.Alias
		}
		if it.Kind != yaml.ScalarNode {
			return nil, errors.New("entries must be " + what + ", not lists or mappings")
		}
		if it.ShortTag() == "!!null" {
			continue
		}
		out = append(out, strings.FieldsFunc(it.Value, func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
		})...)
	}
	return out, nil
}

// Metrics receives an adapter's measurements (the metrics package
// implements it). status is ok, retry (a rate limit will be waited out) or
// failed. Methods must be cheap and safe for concurrent use.
type Metrics interface {
	PlatformSend(channel, status string)
	RateLimitWait(channel string)
	// OutboundDuplicate counts an outbound envelope not shown because its
	// id was already shown (a final re-published after a daemon crash).
	OutboundDuplicate(channel string)
}

// NopMetrics discards measurements.
type NopMetrics struct{}

// PlatformSend implements Metrics.
func (NopMetrics) PlatformSend(string, string) {}

// RateLimitWait implements Metrics.
func (NopMetrics) RateLimitWait(string) {}

// OutboundDuplicate implements Metrics.
func (NopMetrics) OutboundDuplicate(string) {}
