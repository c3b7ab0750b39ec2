package natsbus

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/logging"
)

// ingressQueue is the queue group of the ingress subscriptions, so that
// several daemons sharing an external server each take a message once.
const ingressQueue = "switchboard-ingress"

// Bounds of what one bridge's ingress subscription holds before the
// ingress has taken it: the client drops the bridge's excess (counted and
// logged, [ingress.dropped]). Each bridge has its own subscriptions, so a
// flood by one never drops another's message. The bytes are
// [ingressPendingPayloads] of the server's largest message (4 MiB with
// the default max_payload of 1 MiB), so a message of any allowed size
// fits; the count bounds a flood of small messages.
const (
	ingressPendingMsgs     = 16 << 10
	ingressPendingPayloads = 4
)

// ingress receives, in the daemon account, what each bridge publishes on its
// inbound subjects ([IngressSubject]), and stores it in the in stream:
//
//  1. The bridge is the subject's token, set by the server (the bridge's
//     account maps only its own channels there), so it cannot lie about it.
//  2. The envelope is validated on the inbound subject it was published on
//     ([bus.ParseInbound]: channel and chat must match the subject).
//  3. Only then the channel's rate limit applies (when limits is not nil).
//  4. The message is published on "<p>.in.<channel>.<chat>" with its own
//     de-duplication key "Nats-Msg-Id: <channel>:<id>" taken from the
//     validated envelope; every header the bridge sent is dropped. The
//     stream's acknowledgement comes back to the ingress's own inbox and is
//     forwarded, byte for byte, to the bridge's reply subject. That reply
//     subject is the server's response mapping ("_R_.…") of the bridge's
//     request, which the server routes back into the bridge's own account
//     whatever reply subject the bridge gave; the ingress answers no other.
//
// A refused message is dead-lettered on "<p>.dlq.<channel>" of its own
// channel and, when the bridge asked for a reply, answered with a
// JetStream-style error ({"error":{"code":400|429,"description":...}}), so
// the bridge's client library reports it as an API error. A message refused
// as invalid is also answered to its chat with an error final
// ([ingress.answer]), so the user learns why.
//
// It is started by [Open] and stopped by [Bus.Close]: the ingress is part of
// the embedded server's plumbing, without which no declared bridge can
// publish, so it lives exactly as long as the server. Its handlers run on
// the subscriptions' goroutines of the NATS client, which Close drains.
type ingress struct {
	nc      *nats.Conn    // the ingress's own connection, in the daemon account
	closed  chan struct{} // closed when nc is closed
	subj    bus.Subjects
	maxText int
	limits  map[string]*channelLimit // by channel; nil: limits apply in Consume
	log     *slog.Logger
	inbox   string // prefix of the replies of the stream to the ingress
	subs    []*nats.Subscription
	// pendingBytes bounds each bridge subscription's held bytes.
	pendingBytes int
	// bridgeOf names the bridge of each ingress subscription; drops
	// throttles the log lines of each bridge's dropped messages. Both are
	// set by start and read-only after.
	bridgeOf map[*nats.Subscription]string
	drops    map[string]*logging.Throttle
}

// serviceReplyPrefix starts the reply subjects the server substitutes for a
// request crossing a service import.
const serviceReplyPrefix = "_R_."

// noReply is the token of the ingress inbox for a bridge message sent
// without a reply subject.
const noReply = "-"

// start subscribes to every declared bridge's ingress subjects, one
// subscription per bridge.
func (g *ingress) start(bridges map[string]BridgeConfig) error {
	g.inbox = g.nc.NewRespInbox()
	sub, err := g.nc.Subscribe(g.inbox+".>", g.forward)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	g.subs = append(g.subs, sub)
	names := make([]string, 0, len(bridges))
	for name := range bridges {
		names = append(names, name)
	}
	slices.Sort(names)
	g.bridgeOf, g.drops = map[*nats.Subscription]string{}, map[string]*logging.Throttle{}
	for _, name := range names {
		g.drops[name] = &logging.Throttle{}
		for _, s := range []struct {
			subject string
			handler nats.MsgHandler
		}{
			{IngressSubject(g.subj.Prefix, name, ">"), g.handler(name, bridges[name].Channels)},
			{BridgeAPISubject(g.subj.Prefix, name, ">"), g.apiHandler(name, bridges[name].Channels)},
		} {
			sub, err := g.nc.QueueSubscribe(s.subject, ingressQueue, s.handler)
			if err == nil {
				err = sub.SetPendingLimits(ingressPendingMsgs, g.pendingBytes)
			}
			if err != nil {
				return fmt.Errorf("ingress of bridge %s: %w", name, err)
			}
			g.subs = append(g.subs, sub)
			g.bridgeOf[sub] = name
		}
	}
	if err := g.nc.Flush(); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	return nil
}

// asyncError is the ingress connection's error handler: a bridge
// subscription over its pending limits has dropped messages of that
// bridge, which are counted and logged at most every
// [logging.DefaultThrottleEvery] per bridge.
func (g *ingress) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	bridge, ok := g.bridgeOf[sub]
	if !ok || !errors.Is(err, nats.ErrSlowConsumer) {
		if !errors.Is(err, nats.ErrConnectionClosed) {
			g.log.Warn("ingress: nats error", "err", err)
		}
		return
	}
	g.noteDropped(bridge)
}

// noteDropped logs, at most every [logging.DefaultThrottleEvery] per bridge, that
// bridge's flood is being dropped, with how many of its messages the
// ingress has dropped since it started.
func (g *ingress) noteDropped(bridge string) {
	var total int
	for sub, name := range g.bridgeOf {
		if name == bridge {
			n, _ := sub.Dropped()
			total += n
		}
	}
	if _, ok := g.drops[bridge].Note(time.Now(), 1); ok {
		g.log.Warn("ingress: a bridge sends faster than the daemon takes its messages; the excess is dropped", "bridge", bridge,
			"dropped_total", total, "pending_limit_msgs", ingressPendingMsgs, "pending_limit_bytes", g.pendingBytes)
	}
}

// dropped returns how many messages of each bridge the ingress has dropped
// over its pending limits since it started.
func (g *ingress) dropped() map[string]int {
	out := make(map[string]int, len(g.drops))
	for sub, name := range g.bridgeOf {
		n, _ := sub.Dropped()
		out[name] += n
	}
	return out
}

// handler returns the message handler of bridge's ingress subscription.
func (g *ingress) handler(bridge string, channels []string) nats.MsgHandler {
	prefix := IngressSubject(g.subj.Prefix, bridge, "")
	return func(m *nats.Msg) {
		rest, ok := strings.CutPrefix(m.Subject, prefix)
		ch, _, _ := strings.Cut(rest, ".")
		if !ok || !slices.Contains(channels, ch) {
			// Not reachable through the bridge's imports.
			g.log.Warn("ingress: message outside the bridge's channels ignored", "bridge", bridge, "subject", m.Subject)
			return
		}
		subject := g.subj.Prefix + ".in." + rest
		in, err := bus.ParseInbound(g.subj, subject, m.Data, g.maxText)
		if err != nil {
			g.log.Debug("ingress: invalid inbound refused", "bridge", bridge, "subject", subject, "err", err)
			g.refuse(m, subject, ch, http.StatusBadRequest, err)
			g.answer(bridge, subject, ch, m.Data, err)
			return
		}
		if cl := g.limits[ch]; cl != nil && !cl.lim.Allow() {
			g.refuse(m, subject, ch, http.StatusTooManyRequests, errors.New(RateLimitReason(ch)))
			cl.noteDropped(g.log)
			return
		}
		reply := noReply
		if strings.HasPrefix(m.Reply, serviceReplyPrefix) {
			reply = m.Reply
		}
		out := &nats.Msg{
			Subject: subject,
			Reply:   g.inbox + "." + reply,
			Data:    m.Data,
			Header:  nats.Header{jetstream.MsgIDHeader: []string{in.DedupKey()}},
		}
		if err := g.nc.PublishMsg(out); err != nil {
			g.log.Warn("ingress: store inbound", "bridge", bridge, "subject", subject, "err", err)
			g.reply(m, http.StatusServiceUnavailable, "switchboard ingress: "+err.Error())
		}
	}
}

// forward passes the stream's acknowledgement of a stored message on to the
// bridge that sent it.
func (g *ingress) forward(m *nats.Msg) {
	to := strings.TrimPrefix(m.Subject, g.inbox+".")
	if to == noReply {
		var ack struct {
			Error *jetstream.APIError `json:"error"`
		}
		if json.Unmarshal(m.Data, &ack) == nil && ack.Error != nil {
			g.log.Debug("ingress: inbound sent without reply not stored", "err", ack.Error)
		}
		return
	}
	if err := g.nc.Publish(to, m.Data); err != nil {
		g.log.Warn("ingress: acknowledgement not forwarded", "err", err)
	}
}

// refuse dead-letters a refused inbound message on its channel's dead-letter
// subject and answers the bridge with the reason.
func (g *ingress) refuse(m *nats.Msg, subject, channel string, code int, reason error) {
	rec := bus.NewDLQRecord(subject, m.Data, reason, time.Now().UTC())
	data, err := json.Marshal(rec)
	if err == nil {
		err = g.nc.Publish(g.subj.DLQ(channel), data)
	}
	if err != nil {
		g.log.Warn("ingress: dead letter not published", "channel", channel, "err", err)
	}
	g.reply(m, code, reason.Error())
}

// answer tells the sender of a message refused as invalid why, with an
// error final on the outbound subject of the channel and chat its subject
// names ([bus.RefusalFinal]); the channel is the bridge's own (the handler
// checked it), so only that bridge's consumer can receive the answer. At
// most one answer per refused message, within the channel's answer budget
// (the bridge's rate, a bucket of its own); a message without a valid
// chat token, or over the budget, is dead-lettered only. The answer is
// stored in the out stream with its id as de-duplication key; nothing
// consumes outbound subjects in the runtime, so it triggers nothing.
func (g *ingress) answer(bridge, subject, channel string, data []byte, reason error) {
	out, outSubject, ok := bus.RefusalFinal(g.subj, subject, data, reason)
	if !ok {
		return
	}
	if cl := g.limits[channel]; cl != nil && !cl.answers.Allow() {
		g.log.Debug("ingress: refused message not answered: answer budget spent", "bridge", bridge, "subject", subject)
		return
	}
	payload, err := json.Marshal(out)
	if err == nil {
		err = g.nc.PublishMsg(&nats.Msg{Subject: outSubject, Data: payload, Header: nats.Header{jetstream.MsgIDHeader: []string{out.ID}}})
	}
	if err != nil {
		g.log.Warn("ingress: error final of a refused message not published", "bridge", bridge, "subject", subject, "err", err)
	}
}

// ingressError is the JetStream API error reply of a refused message: the
// shape of a stream's negative acknowledgement.
type ingressError struct {
	Error jetstream.APIError `json:"error"`
}

// reply answers m, when it came with a service reply subject, with a
// JetStream-style error.
func (g *ingress) reply(m *nats.Msg, code int, description string) {
	if !strings.HasPrefix(m.Reply, serviceReplyPrefix) {
		return
	}
	data, err := json.Marshal(ingressError{Error: jetstream.APIError{Code: code, Description: description}})
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		g.log.Warn("ingress: error reply not sent", "subject", m.Subject, "err", err)
	}
}
