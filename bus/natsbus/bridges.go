package natsbus

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/logging"
)

// Settings of the bridges' durable consumers on the out stream.
const (
	// BridgeAckWait is how long a pulled outbound message may stay
	// unacknowledged before it is delivered again.
	BridgeAckWait = 60 * time.Second
	// BridgeMaxAckPending bounds a bridge's pulled-but-unacknowledged
	// messages.
	BridgeMaxAckPending = 1000
	// BridgeMaxWaiting bounds a bridge's pull requests waiting at once
	// (the server's default, set so that the consumer the server reports
	// is exactly the daemon's).
	BridgeMaxWaiting = 512
)

// BridgeConsumerConfig returns the durable consumer the daemon creates on
// the out stream for a bridge, the only one the bridge may have:
// [BridgeConsumerName], a pull consumer filtered to the channels' outbound
// subjects, delivering only messages published after its creation,
// explicit acks with [BridgeAckWait], unlimited deliveries, never deleted
// for inactivity. A bridge's request to create or update it with any other
// setting is refused, and the daemon puts back a consumer someone changed
// or deleted ([Open], docs/bus-protocol.md §1.1).
func BridgeConsumerConfig(prefix, bridge string, channels []string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       BridgeConsumerName(bridge),
		Description:   "Switchboard bridge " + bridge + ": outbound messages of " + strings.Join(channels, ", "),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       BridgeAckWait,
		MaxAckPending: BridgeMaxAckPending,
		MaxWaiting:    BridgeMaxWaiting,
		MaxDeliver:    -1,
	}
	setFilters(&cfg, bridgeFilters(prefix, channels))
	return cfg
}

func bridgeFilters(prefix string, channels []string) []string {
	subj := bus.Subjects{Prefix: prefix}
	f := make([]string, 0, len(channels))
	for _, ch := range channels {
		f = append(f, subj.OutChannel(ch))
	}
	slices.Sort(f)
	return f
}

func setFilters(cfg *jetstream.ConsumerConfig, filters []string) {
	cfg.FilterSubject, cfg.FilterSubjects = "", nil
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
}

func consumerFilters(cfg jetstream.ConsumerConfig) []string {
	var f []string
	if cfg.FilterSubject != "" {
		f = append(f, cfg.FilterSubject)
	}
	f = append(f, cfg.FilterSubjects...)
	slices.Sort(f)
	return f
}

// channelLimit is the inbound rate limit of one bridge channel.
type channelLimit struct {
	channel string
	bridge  string
	rate    float64
	lim     *rate.Limiter
	// answers bounds the error finals that tell the bridge's users why a
	// message was refused: the same rate, a bucket of its own, so refused
	// garbage never spends the budget of valid messages and a flood of it
	// never produces more answers than the channel may send messages.
	answers *rate.Limiter

	drops logging.Throttle // rate-limited messages not logged yet
}

// newLimits builds one token bucket per bridge channel: rate
// [BridgeConfig.Rate] per second, holding one second's worth (at least 1).
func newLimits(bridges map[string]BridgeConfig) map[string]*channelLimit {
	limits := map[string]*channelLimit{}
	for name, br := range bridges {
		r := br.Rate()
		burst := max(1, int(math.Ceil(r)))
		for _, ch := range br.Channels {
			limits[ch] = &channelLimit{channel: ch, bridge: name, rate: r, lim: rate.NewLimiter(rate.Limit(r), burst),
				answers: rate.NewLimiter(rate.Limit(r), burst)}
		}
	}
	return limits
}

// RateLimitReason is the dead-letter reason of an inbound message rejected
// by the rate limit of channel: "rate limit exceeded for channel <channel>".
func RateLimitReason(channel string) string {
	return "rate limit exceeded for channel " + channel
}

// channelOf returns the channel token of an inbound subject
// "<p>.in.<channel>...", or "".
func (b *Bus) channelOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, b.subj.Prefix+".in.")
	if !ok {
		return ""
	}
	ch, _, _ := strings.Cut(rest, ".")
	return ch
}

// rateLimited applies the inbound rate limit of the message's channel, if
// its channel belongs to a bridge. An invalid envelope spends no budget of
// valid messages: the handler dead-letters it and answers it with an error
// final ([bus.RefusalFinal]), within the channel's answer budget
// ([channelLimit.answers]); over that budget it is dead-lettered here,
// without an answer, and terminated (rateLimited returns true). The limit is judged at the time the
// message entered the stream, so a backlog drained later (after a restart)
// is judged as it arrived; a redelivered message was judged already and
// passes. A message over the limit is dead-lettered (core publish, no
// acknowledgement) with [RateLimitReason] and terminated, and rateLimited
// returns true: the handler must not see it.
func (b *Bus) rateLimited(m jetstream.Msg) bool {
	cl := b.limits[b.channelOf(m.Subject())]
	if cl == nil {
		return false
	}
	at := time.Now()
	if md, err := m.Metadata(); err == nil {
		if md.NumDelivered > 1 {
			return false
		}
		at = md.Timestamp
	}
	lim, reason := cl.lim, errors.New(RateLimitReason(cl.channel))
	if _, err := bus.ParseInbound(b.subj, m.Subject(), m.Data(), b.maxText); err != nil {
		lim, reason = cl.answers, err
	}
	if lim.AllowN(at, 1) {
		return false
	}
	rec := bus.NewDLQRecord(m.Subject(), m.Data(), reason, time.Now().UTC())
	data, err := json.Marshal(rec)
	if err == nil {
		err = b.nc.Publish(b.subj.DLQ(cl.channel), data)
	}
	if err != nil {
		b.log.Warn("rate-limited message: dead letter not published", "channel", cl.channel, "err", err)
	}
	if err := m.Term(); err != nil {
		b.log.Warn("rate-limited message: terminate", "channel", cl.channel, "err", err)
	}
	if lim == cl.lim {
		cl.noteDropped(b.log)
	}
	return true
}

// noteDropped counts a rate-limited message and logs at most once per
// logging.DefaultThrottleEvery per channel.
func (cl *channelLimit) noteDropped(log *slog.Logger) {
	if n, ok := cl.drops.Note(time.Now(), 1); ok {
		log.Warn("inbound rate limit exceeded: messages dead-lettered", "channel", cl.channel, "bridge", cl.bridge,
			"max_msgs_per_sec", cl.rate, "dropped", n)
	}
}
