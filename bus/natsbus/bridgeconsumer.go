package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A bridge's durable consumer is the daemon's ([BridgeConsumerConfig]): a
// bridge may (re)create it only with the daemon's settings, through the
// ingress, and the daemon puts it back when someone changed or deleted it.
// A consumer the bridge could configure freely could push the bridge's
// outbound messages onto subjects of the daemon's account
// (deliver_subject), or delete itself (inactive_threshold) and come back
// as a push consumer that stops the daemon's next start.

// BridgeConsumerCheckInterval is how often the daemon checks that every
// declared bridge's consumer is still its own, besides re-creating one at
// once when the server reports it deleted.
const BridgeConsumerCheckInterval = 30 * time.Second

// Tokens of [BridgeAPISubject].
const (
	consumerAPIToken = "consumer"
	infoAPIToken     = "info"
)

// consumerAdvisoryDeleted is the server's advisory of a deleted consumer
// ("<prefix>.<stream>.<consumer>").
const consumerAdvisoryDeleted = "$JS.EVENT.ADVISORY.CONSUMER.DELETED"

// consumerDrift returns the JSON keys of the settings in which cfg differs
// from want, the daemon's consumer, sorted. A setting cfg leaves at its
// zero value counts as want's (a client sends what it sets, the server
// fills in its defaults); the description is free text; the server's own
// metadata ("_nats.*") is left out; the filters are the caller's to
// compare ([filtersWithin], [consumerFilters]).
func consumerDrift(cfg, want jetstream.ConsumerConfig) []string {
	if cfg.Name == want.Durable {
		cfg.Name = ""
	}
	cfg.Description, cfg.FilterSubject, cfg.FilterSubjects = "", "", nil
	maps.DeleteFunc(cfg.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, "_nats.") })
	if len(cfg.Metadata) == 0 {
		cfg.Metadata = nil
	}
	have, std := reflect.ValueOf(cfg), reflect.ValueOf(want)
	var keys []string
	for i := range have.NumField() {
		f := have.Type().Field(i)
		if !f.IsExported() || have.Field(i).IsZero() || reflect.DeepEqual(have.Field(i).Interface(), std.Field(i).Interface()) {
			continue
		}
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if key == "" || key == "-" {
			key = f.Name
		}
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

// filtersWithin reports whether each filter of cfg is one of want's.
func filtersWithin(cfg, want jetstream.ConsumerConfig) bool {
	allowed := consumerFilters(want)
	for _, f := range consumerFilters(cfg) {
		if !slices.Contains(allowed, f) {
			return false
		}
	}
	return true
}

// repairBridgeConsumers makes every declared bridge's durable consumer the
// daemon's ([Bus.repairBridgeConsumer]). It tries each one and returns the
// failures joined, each naming its consumer.
func (b *Bus) repairBridgeConsumers(ctx context.Context) error {
	b.repairMu.Lock()
	defer b.repairMu.Unlock()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(b.bridges)) {
		want := BridgeConsumerConfig(b.subj.Prefix, name, b.bridges[name].Channels)
		if err := b.repairBridgeConsumer(ctx, want); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// repairBridgeConsumer creates the consumer want when it is missing, and
// puts its settings back when they differ from want: updated in place when
// the server allows it (its position is kept), else deleted and created
// again (a push consumer, say; it then delivers what is published from
// now on).
func (b *Bus) repairBridgeConsumer(ctx context.Context, want jetstream.ConsumerConfig) error {
	stream := b.streams.Out
	cons, err := b.js.Consumer(ctx, stream, want.Durable)
	var drift []string
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if _, err := b.js.CreateOrUpdateConsumer(ctx, stream, want); err != nil {
			return fmt.Errorf("create consumer %s/%s: %w", stream, want.Durable, err)
		}
		return nil
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		drift = []string{"deliver_subject"}
	case err != nil:
		return fmt.Errorf("look up consumer %s/%s: %w", stream, want.Durable, err)
	default:
		have := cons.CachedInfo().Config
		drift = consumerDrift(have, want)
		if !slices.Equal(consumerFilters(have), consumerFilters(want)) {
			drift = append(drift, "filter_subjects")
		}
		if len(drift) == 0 {
			return nil
		}
		upd := want
		upd.DeliverPolicy, upd.OptStartSeq, upd.OptStartTime = have.DeliverPolicy, have.OptStartSeq, have.OptStartTime
		if _, err := b.js.UpdateConsumer(ctx, stream, upd); err == nil {
			b.log.Warn("bridge consumer was changed; the daemon's settings are back", "consumer", want.Durable, "changed", drift)
			return nil
		} else {
			b.log.Debug("bridge consumer cannot be updated; replacing it", "consumer", want.Durable, "err", err)
		}
	}
	if err := b.js.DeleteConsumer(ctx, stream, want.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("replace consumer %s/%s (changed: %s): delete: %w", stream, want.Durable, strings.Join(drift, ", "), err)
	}
	if _, err := b.js.CreateOrUpdateConsumer(ctx, stream, want); err != nil {
		return fmt.Errorf("replace consumer %s/%s (changed: %s): create: %w", stream, want.Durable, strings.Join(drift, ", "), err)
	}
	b.log.Warn("bridge consumer was changed and could not be updated; replaced by the daemon's", "consumer", want.Durable, "changed", drift)
	return nil
}

// consumerWatch re-creates the bridges' consumers while the bus is open:
// at once when the server reports one deleted, and every
// [BridgeConsumerCheckInterval]. It runs from [Open] to [Bus.Close].
type consumerWatch struct {
	stop chan struct{} // closed by Close
	done sync.WaitGroup
	sub  *nats.Subscription
}

// watchBridgeConsumers starts the [consumerWatch] of b's bridges.
func (b *Bus) watchBridgeConsumers(interval time.Duration) error {
	w := &consumerWatch{stop: make(chan struct{})}
	wake := make(chan struct{}, 1)
	prefix := consumerAdvisoryDeleted + "." + b.streams.Out + "."
	sub, err := b.nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		name := strings.TrimPrefix(m.Subject, prefix)
		bridge, ok := strings.CutPrefix(name, BridgeConsumerName(""))
		if _, declared := b.bridges[bridge]; ok && declared {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("watch the bridges' consumers: %w", err)
	}
	w.sub = sub
	ctx, cancel := context.WithCancel(context.Background())
	w.done.Go(func() {
		defer cancel()
		<-w.stop
	})
	w.done.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, readyTimeout)
			if err := b.repairBridgeConsumers(rctx); err != nil && ctx.Err() == nil {
				b.log.Error("bridge consumers could not be put back; retrying", "err", err, "retry_in", interval)
			}
			rcancel()
		}
	})
	b.bridgeWatch = w
	return nil
}

// close stops the watch and waits for a repair under way.
func (w *consumerWatch) close() {
	_ = w.sub.Unsubscribe()
	close(w.stop)
	w.done.Wait()
}

// apiHandler returns the handler of the JetStream API requests of bridge
// that its account maps to the ingress ([BridgeAPISubject]): creating its
// consumer, and the account info.
func (g *ingress) apiHandler(bridge string, channels []string) nats.MsgHandler {
	prefix := BridgeAPISubject(g.subj.Prefix, bridge, "")
	want := BridgeConsumerConfig(g.subj.Prefix, bridge, channels)
	return func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, prefix)
		switch {
		case rest == infoAPIToken:
			g.accountInfo(m)
		case strings.HasPrefix(rest, consumerAPIToken+"."):
			g.createConsumer(m, bridge, want)
		default:
			g.log.Warn("ingress: API request outside the bridge's imports ignored", "bridge", bridge, "subject", m.Subject)
		}
	}
}

// consumerRequest is the body of a JetStream consumer-create request.
type consumerRequest struct {
	Stream   string                   `json:"stream_name"`
	Config   jetstream.ConsumerConfig `json:"config"`
	Action   string                   `json:"action,omitempty"`
	Pedantic bool                     `json:"pedantic,omitempty"`
}

// createConsumer answers a bridge's request to create or update its
// consumer: a request for anything but the daemon's consumer want (see
// [consumerDrift]; its filters may name some of the bridge's channels) is
// refused with a JetStream API error (400) naming the settings; otherwise
// the ingress asks JetStream for exactly want, whatever else the request
// said, and forwards the answer.
func (g *ingress) createConsumer(m *nats.Msg, bridge string, want jetstream.ConsumerConfig) {
	out := StreamsFor(g.subj.Prefix).Out
	refuse := func(why string) {
		g.log.Warn("ingress: consumer request of a bridge refused", "bridge", bridge, "consumer", want.Durable, "reason", why)
		g.reply(m, http.StatusBadRequest, fmt.Sprintf("switchboard: consumer %s is the daemon's (a pull consumer of the bridge's channels, explicit acks, never deleted for inactivity): %s", want.Durable, why))
	}
	var req consumerRequest
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		refuse("the request is not a consumer configuration the daemon knows: " + err.Error())
		return
	}
	switch drift := consumerDrift(req.Config, want); {
	case req.Stream != "" && req.Stream != out:
		refuse(fmt.Sprintf("stream_name must be %s", out))
		return
	case len(drift) > 0:
		refuse("these settings must be left out or be the daemon's: " + strings.Join(drift, ", "))
		return
	case !filtersWithin(req.Config, want):
		refuse("the filter must be one of the bridge's channels: " + strings.Join(consumerFilters(want), ", "))
		return
	}
	data, err := json.Marshal(consumerRequest{Stream: out, Config: want, Action: req.Action})
	if err == nil {
		subject := "$JS.API.CONSUMER.CREATE." + out + "." + want.Durable
		if want.FilterSubject != "" {
			subject += "." + want.FilterSubject
		}
		reply := noReply
		if strings.HasPrefix(m.Reply, serviceReplyPrefix) {
			reply = m.Reply
		}
		err = g.nc.PublishRequest(subject, g.inbox+"."+reply, data)
	}
	if err != nil {
		g.log.Warn("ingress: consumer request not passed on", "bridge", bridge, "err", err)
		g.reply(m, http.StatusServiceUnavailable, "switchboard ingress: "+err.Error())
	}
}

// accountInfo answers a bridge's JetStream account info with the bridge's
// own view: nothing stored, no stream of its own, its one consumer. The
// daemon account's real figures (how many streams, consumers and bytes
// every channel has) are not the bridge's business.
func (g *ingress) accountInfo(m *nats.Msg) {
	resp := server.JSApiAccountInfoResponse{
		ApiResponse: server.ApiResponse{Type: server.JSApiAccountInfoResponseType},
		JetStreamAccountStats: &server.JetStreamAccountStats{
			JetStreamTier: server.JetStreamTier{Consumers: 1, Limits: server.JetStreamAccountLimits{MaxMemory: -1, MaxStore: -1, MaxStreams: -1, MaxConsumers: -1}},
			API:           server.JetStreamAPIStats{Level: server.JSApiLevel},
		},
	}
	data, err := json.Marshal(resp)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		g.log.Warn("ingress: account info not answered", "err", err)
	}
}
