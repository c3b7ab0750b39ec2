package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/provision"
)

// Partitioned consumption (agent.partitions > 1, docs/scale-out.md): the in
// stream maps every "<p>.in.<channel>.<chat>" to
// "<p>.inp.<k>.<channel>.<chat>" with a subject transform, k being
// partition(N) of the channel and chat tokens (the server's stable hash),
// and each partition k has a durable pull consumer [PartitionConsumerName]
// with a priority group in pinned-client mode: the server delivers a
// partition's messages to one pulling client at a time (every instance
// pulls on every partition), and moves the pin to another when the holder
// has not pulled for [PinnedTTL]. A session (channel, chat and thread) is
// thus handled by one instance at a time, in order; all threads of a chat
// share its partition, which only makes the grouping coarser.
const (
	// MaxPartitions bounds agent.partitions.
	MaxPartitions = 1024
	// PriorityGroup is the priority group of the partition consumers.
	PriorityGroup = "agent"
	// PinnedTTL is how long a partition stays pinned to an instance that
	// stopped pulling before the server pins another one.
	PinnedTTL = 5 * time.Second
	// PartitionedAckWait is the partition consumers' AckWait: a message
	// delivered to an instance that died is redelivered to the partition's
	// new holder this long after its last in-progress mark (the runtime
	// marks every [PartitionedAckWait]/3).
	PartitionedAckWait = 6 * time.Second
	// partitionPullExpiry is how long one pull request of a partition
	// consumer lasts: the holder pulls again at least this often, well
	// within PinnedTTL, so an idle but living holder keeps its pin.
	partitionPullExpiry = 2 * time.Second
	// inPartitionedKind is the subject kind the transform maps to.
	inPartitionedKind = "inp"
)

// PartitionConsumerName returns the durable name of partition k's
// consumer: "agent-p<k>".
func PartitionConsumerName(k int) string { return ConsumerName + "-p" + strconv.Itoa(k) }

// partitionOfName returns k for a name "agent-p<k>".
func partitionOfName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, ConsumerName+"-p")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || strconv.Itoa(k) != s {
		return 0, false
	}
	return k, true
}

// PartitionTransform returns the in stream's subject transform for n
// partitions, nil for n <= 1 (no partitioning, today's subjects).
func PartitionTransform(prefix string, n int) *jetstream.SubjectTransformConfig {
	if n <= 1 {
		return nil
	}
	return &jetstream.SubjectTransformConfig{
		Source:      prefix + ".in.*.*",
		Destination: fmt.Sprintf("%s.%s.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", prefix, inPartitionedKind, n),
	}
}

// PartitionConsumerConfig returns the configuration of partition k's
// durable consumer: [ConsumerConfig]'s, filtered on the partition's
// subjects, pinned ([PriorityGroup], [PinnedTTL]), with
// [PartitionedAckWait].
func PartitionConsumerConfig(prefix string, k int) jetstream.ConsumerConfig {
	cfg := ConsumerConfig(prefix)
	cfg.Durable = PartitionConsumerName(k)
	cfg.Description = fmt.Sprintf("Switchboard agent runtime, partition %d", k)
	cfg.FilterSubject = fmt.Sprintf("%s.%s.%d.>", prefix, inPartitionedKind, k)
	cfg.AckWait = PartitionedAckWait
	cfg.PriorityPolicy = jetstream.PriorityPolicyPinned
	cfg.PriorityGroups = []string{PriorityGroup}
	cfg.PinnedTTL = PinnedTTL
	return cfg
}

// publishedSubject returns the subject a message of the in stream was
// published on: a partitioned subject "<p>.inp.<k>.<rest>" is
// "<p>.in.<rest>"; any other is returned as it is.
func publishedSubject(subj bus.Subjects, stored string) string {
	rest, ok := strings.CutPrefix(stored, subj.Prefix+"."+inPartitionedKind+".")
	if !ok {
		return stored
	}
	_, rest, ok = strings.Cut(rest, ".")
	if !ok {
		return stored
	}
	return subj.Prefix + ".in." + rest
}

// part is one consumer Consume reads: partition k (-1 for the consumer
// [ConsumerName], which is not pinned) and the pin id the server last gave
// this instance on it.
type part struct {
	k    int
	name string
	cons jetstream.Consumer
	pin  atomic.Pointer[string]

	held    atomic.Int64 // messages delivered and not yet settled ([settle])
	release atomic.Pointer[releasing]

	// hold is the takeover in progress, if any (takeover.go), under the
	// handler's lock.
	hold *takeover
}

// pinned reports whether the pin the server holds for this consumer is
// the one it last gave this instance.
func (p *part) pinned(info *jetstream.ConsumerInfo) bool {
	mine := p.pin.Load()
	if mine == nil || *mine == "" {
		return false
	}
	for _, g := range info.PriorityGroups {
		if g.Group == PriorityGroup && g.PinnedClientID == *mine {
			return true
		}
	}
	return false
}

// consumerConfigs returns the runtime's consumers for the configured
// partitions: [ConsumerName] always (with partitions it receives only what
// the transform did not map: messages stored before it was set, and
// subjects of another shape), and one per partition when there are more
// than one.
func (b *Bus) consumerConfigs() []jetstream.ConsumerConfig {
	cfgs := []jetstream.ConsumerConfig{ConsumerConfig(b.subj.Prefix)}
	if b.partitions > 1 {
		// The same subjects as "<p>.in.>", but as two filters: a consumer
		// whose one filter is the stream's one subject counts as
		// unfiltered, and the server would then keep every partition's
		// acknowledged messages until it has passed them.
		cfgs[0].FilterSubject = ""
		cfgs[0].FilterSubjects = []string{b.subj.Prefix + ".in.*", b.subj.Prefix + ".in.*.>"}
		for k := range b.partitions {
			cfgs = append(cfgs, PartitionConsumerConfig(b.subj.Prefix, k))
		}
	}
	return cfgs
}

// leftovers returns the configurations of partition consumers the server
// holds beyond the configured partitions (agent.partitions was larger,
// or > 1, before) that still hold messages, and deletes those that hold
// none. The messages of a kept one are consumed like a partition's until a
// later start finds it empty.
func (b *Bus) leftovers(ctx context.Context) ([]jetstream.ConsumerConfig, error) {
	s, err := b.js.Stream(ctx, b.streams.In)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", b.streams.In, err)
	}
	var out []jetstream.ConsumerConfig
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		k, ok := partitionOfName(info.Name)
		if !ok || (b.partitions > 1 && k < b.partitions) {
			continue
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			if err := s.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("delete drained consumer %s/%s: %w", b.streams.In, info.Name, err)
			}
			b.log.Info("deleted a drained partition consumer of another agent.partitions", "stream", b.streams.In, "consumer", info.Name)
			continue
		}
		b.log.Warn("a partition consumer of another agent.partitions still holds messages; consuming it until it is drained",
			"stream", b.streams.In, "consumer", info.Name, "pending", info.NumPending, "ack_pending", info.NumAckPending)
		out = append(out, info.Config)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", b.streams.In, err)
	}
	return out, nil
}

// setupConsumers creates or updates the runtime's consumers
// ([Bus.consumerConfigs] and the leftovers). The first time in embedded
// mode each is deleted and created afresh, so that messages a previous
// process received but never acknowledged are redelivered at once (the
// in-process server has no other client).
func (b *Bus) setupConsumers(ctx context.Context) ([]*part, error) {
	cfgs := b.consumerConfigs()
	extra, err := b.leftovers(ctx)
	if err != nil {
		return nil, err
	}
	cfgs = append(cfgs, extra...)
	fresh := b.ns != nil && b.recreated.CompareAndSwap(false, true)
	parts := make([]*part, 0, len(cfgs))
	for _, cfg := range cfgs {
		cons, err := b.setupConsumer(ctx, cfg, fresh)
		if err != nil {
			return nil, err
		}
		k, ok := partitionOfName(cfg.Durable)
		if !ok {
			k = -1
		}
		parts = append(parts, &part{k: k, name: cfg.Durable, cons: cons})
	}
	b.parts.Store(&parts)
	return parts, nil
}

// setupConsumer creates or updates one consumer, or with fresh deletes it
// and creates it anew.
func (b *Bus) setupConsumer(ctx context.Context, cfg jetstream.ConsumerConfig, fresh bool) (jetstream.Consumer, error) {
	if !fresh {
		// Instances starting together send this create at once: sent
		// again when unanswered (internal/provision).
		var cons jetstream.Consumer
		err := provision.Do(ctx, b.log, "consumer "+b.streams.In+"/"+cfg.Durable, 0, func(ctx context.Context) error {
			var err error
			cons, err = b.js.CreateOrUpdateConsumer(ctx, b.streams.In, cfg)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("create or update consumer %s/%s: %w", b.streams.In, cfg.Durable, err)
		}
		return cons, nil
	}
	if err := b.js.DeleteConsumer(ctx, b.streams.In, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("delete stale consumer %s/%s: %w", b.streams.In, cfg.Durable, err)
	}
	cons, err := b.js.CreateConsumer(ctx, b.streams.In, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s/%s: %w", b.streams.In, cfg.Durable, err)
	}
	return cons, nil
}

// PartitionState is one partition consumer's state as this instance sees
// it.
type PartitionState struct {
	// Partition is k of "agent-p<k>".
	Partition int
	// Owned reports that the server pins the partition to this instance.
	Owned bool
	// Pending is the number of the partition's messages not yet delivered.
	Pending uint64
	// AckPending is the number delivered but not yet acknowledged.
	AckPending int
	// Redelivered is the number delivered more than once and not yet
	// acknowledged.
	Redelivered int
}

// Partitions returns the state of every partition consumer Consume reads,
// by partition (one API call each); none before Consume set them up or
// with agent.partitions 1. Safe for concurrent use.
func (b *Bus) Partitions(ctx context.Context) ([]PartitionState, error) {
	ps := b.parts.Load()
	if ps == nil {
		return nil, nil
	}
	var out []PartitionState
	var errs []error
	for _, p := range *ps {
		if p.k < 0 {
			continue
		}
		info, err := p.cons.Info(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("natsbus: consumer %s/%s info: %w", b.streams.In, p.name, err))
			continue
		}
		out = append(out, PartitionState{Partition: p.k, Owned: p.pinned(info), Pending: info.NumPending,
			AckPending: info.NumAckPending, Redelivered: info.NumRedelivered})
	}
	return out, errors.Join(errs...)
}

// Owned returns the partitions the server pins to this instance, in
// order ([Bus.Partitions]).
func (b *Bus) Owned(ctx context.Context) ([]int, error) {
	ps, err := b.Partitions(ctx)
	var owned []int
	for _, p := range ps {
		if p.Owned {
			owned = append(owned, p.Partition)
		}
	}
	return owned, err
}

// PartitionCount returns the configured number of partitions (1: none).
func (b *Bus) PartitionCount() int { return max(1, b.partitions) }

// Heartbeat returns how often the runtime should mark the messages it
// holds in progress: a third of the consumers' shortest AckWait (10 s
// without partitions, 2 s with them).
func (b *Bus) Heartbeat() time.Duration {
	if b.partitions > 1 {
		return PartitionedAckWait / 3
	}
	return AckWait / 3
}
