package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/provision"
)

// Stream limits (DESIGN.md §4).
const (
	// DuplicateWindow is the de-duplication window of CHAT_IN and CHAT_DLQ
	// (Nats-Msg-Id). CHAT_OUT de-duplicates over its whole retention
	// (bus.out_retention, [Config.OutRetention]).
	DuplicateWindow = 2 * time.Minute
	// InMaxMsgsPerSubject bounds CHAT_IN per chat subject
	// ("<p>.in.<channel>.<chat>"): a message beyond it is refused with an
	// error to its publisher, and the chat's earlier messages stay.
	InMaxMsgsPerSubject = 1000
	// InMaxBytes bounds CHAT_IN as a whole (a disk guard reached only when
	// the runtime stops consuming): a message beyond it is refused.
	InMaxBytes = 1 << 30
	// OutMaxAge bounds how long CHAT_OUT keeps an outbound message when
	// bus.out_retention is not set ([DefaultOutRetention]).
	OutMaxAge = DefaultOutRetention
	// OutMaxMsgsPerSubject bounds CHAT_OUT per chat subject.
	OutMaxMsgsPerSubject = 1000
	// DLQMaxAge bounds how long CHAT_DLQ keeps a dead letter.
	DLQMaxAge = 7 * 24 * time.Hour
	// DLQMaxMsgs bounds the number of dead letters kept.
	DLQMaxMsgs = 100_000
	// DLQMaxMsgsPerSubject bounds the dead letters kept per channel
	// ("<p>.dlq.<channel>"), the oldest going first, so that one channel's
	// flood of refused messages cannot push another's dead letters out.
	DLQMaxMsgsPerSubject = 10_000
)

// Streams names the three bus streams.
type Streams struct {
	In  string // captures <p>.in.>, work-queue retention
	Out string // captures <p>.out.>, limits retention
	DLQ string // captures <p>.dlq.>, limits retention
}

// StreamsFor derives the stream names from the subject prefix: the prefix
// upper-cased with dots replaced by underscores, then "_IN", "_OUT" and
// "_DLQ". The default prefix "chat" gives CHAT_IN, CHAT_OUT and CHAT_DLQ;
// "acme.bot" gives ACME_BOT_IN and so on.
func StreamsFor(prefix string) Streams {
	base := strings.ToUpper(strings.ReplaceAll(prefix, ".", "_"))
	return Streams{In: base + "_IN", Out: base + "_OUT", DLQ: base + "_DLQ"}
}

// StreamConfigs returns the configurations of the in, out and dlq streams
// for a subject prefix with the default outbound retention and one replica
// ([StreamConfigsWith] with [DefaultOutRetention] and 1).
func StreamConfigs(prefix string) []jetstream.StreamConfig {
	return StreamConfigsWith(prefix, DefaultOutRetention, 1)
}

// StreamConfigsWith returns the configurations of the in, out and dlq
// streams for a subject prefix, in that order. All use file storage. The in
// stream refuses a new message beyond its bounds ([InMaxMsgsPerSubject],
// [InMaxBytes]), so nothing already accepted is lost; the out and dlq
// streams discard the oldest message when a limit is reached. The out
// stream keeps a message for outRetention (bus.out_retention; 0 means
// [DefaultOutRetention]) and de-duplicates over the same span, so a final
// answer re-published with the same Nats-Msg-Id is never stored twice.
// Each stream has replicas copies (bus.replicas; 0 means 1).
func StreamConfigsWith(prefix string, outRetention time.Duration, replicas int) []jetstream.StreamConfig {
	if outRetention <= 0 {
		outRetention = DefaultOutRetention
	}
	if replicas <= 0 {
		replicas = 1
	}
	subj := bus.Subjects{Prefix: prefix}
	names := StreamsFor(prefix)
	return []jetstream.StreamConfig{
		{
			Name:                 names.In,
			Description:          "Switchboard inbound messages (work queue of the agent runtime)",
			Subjects:             []string{subj.InAll()},
			Retention:            jetstream.WorkQueuePolicy,
			Storage:              jetstream.FileStorage,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			MaxMsgsPerSubject:    InMaxMsgsPerSubject,
			MaxBytes:             InMaxBytes,
			Duplicates:           DuplicateWindow,
			Replicas:             replicas,
		},
		{
			Name:              names.Out,
			Description:       "Switchboard outbound messages (catch-up for adapters and bridges)",
			Subjects:          []string{subj.OutAll()},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Discard:           jetstream.DiscardOld,
			MaxAge:            outRetention,
			MaxMsgsPerSubject: OutMaxMsgsPerSubject,
			Duplicates:        outRetention,
			Replicas:          replicas,
		},
		{
			Name:              names.DLQ,
			Description:       "Switchboard dead letters (rejected inbound messages)",
			Subjects:          []string{subj.DLQAll()},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Discard:           jetstream.DiscardOld,
			MaxAge:            DLQMaxAge,
			MaxMsgs:           DLQMaxMsgs,
			MaxMsgsPerSubject: DLQMaxMsgsPerSubject,
			Duplicates:        DuplicateWindow,
			Replicas:          replicas,
		},
	}
}

// ensureStreams creates the streams or updates them to the current
// configuration (an existing CHAT_OUT gets the configured retention and
// de-duplication window, every stream bus.replicas; a change is logged). The streams are independent:
// they are ensured concurrently (the server creates each one's store, so
// the start-up waits for the slowest, not for the three in a row).
func (b *Bus) ensureStreams(ctx context.Context) error {
	var g errgroup.Group
	for i, cfg := range StreamConfigsWith(b.subj.Prefix, b.outRetention, b.replicas) {
		if i == 0 {
			cfg.SubjectTransform = PartitionTransform(b.subj.Prefix, b.partitions)
		}
		g.Go(func() error { return b.ensureStream(ctx, cfg) })
	}
	return g.Wait()
}

// ensureStream creates or updates one stream.
func (b *Bus) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	var before *jetstream.StreamConfig
	if s, err := b.js.Stream(ctx, cfg.Name); err == nil {
		c := s.CachedInfo().Config
		before = &c
	}
	// Instances starting together send this at once: see internal/provision.
	if err := provision.Do(ctx, b.log, "stream "+cfg.Name, 0, func(ctx context.Context) error {
		_, err := b.js.CreateOrUpdateStream(ctx, cfg)
		return err
	}); err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, explainReplicas(err, cfg.Replicas))
	}
	if before != nil && (before.MaxAge != cfg.MaxAge || before.Duplicates != cfg.Duplicates || before.Replicas != cfg.Replicas) {
		b.log.Info("stream updated", "stream", cfg.Name, "max_age", cfg.MaxAge, "was_max_age", before.MaxAge,
			"duplicate_window", cfg.Duplicates, "was_duplicate_window", before.Duplicates,
			"replicas", cfg.Replicas, "was_replicas", before.Replicas)
	}
	return nil
}

// JetStream API error codes that concern the number of replicas.
const (
	errCodeNoPeers               = 10005 // no suitable peers for placement
	errCodeInsufficientResources = 10023
	errCodeReplicasNotUpdatable  = 10061
	errCodeReplicasNotSupported  = 10074 // replicas > 1 in non-clustered mode
)

// explainReplicas adds to a JetStream error from creating or updating a
// stream with the given replicas (bus.replicas) what the operator can do
// about it, when the error is about replicas; other errors are returned
// as they are. The result wraps err.
func explainReplicas(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Errorf("bus.replicas is %d but the NATS server is not part of a JetStream cluster (it keeps one copy only): "+
			"set bus.replicas: 1, or point bus.url at a cluster of at least %d servers: %w", replicas, replicas, err)
	case errCodeNoPeers, errCodeInsufficientResources:
		return fmt.Errorf("bus.replicas is %d but the NATS cluster has fewer JetStream servers available for it "+
			"(every replica needs its own server with room in its account's limits): lower bus.replicas or add servers: %w", replicas, err)
	case errCodeReplicasNotUpdatable:
		return fmt.Errorf("the server cannot change this stream's replicas to %d (bus.replicas): "+
			"keep the stream's current replicas, or move its data to a new stream: %w", replicas, err)
	}
	return err
}
