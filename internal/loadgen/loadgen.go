// Package loadgen drives a running Switchboard daemon through its bus and
// measures what the daemon adds to a turn. It is the one load mechanism of
// the project: `switchboard bench` ([Bench]) and the benchmarks of
// cmd/switchboard (BenchmarkTurns, BenchmarkSessionMemory) both call
// [Drive].
//
// Drive sends Options.Chats chats' messages as a bridge would (JetStream
// publishes on chat.in.<channel>.<chat> with the de-duplication header)
// and waits for each message's final reply on chat.out.>:
//
//   - closed loop (Rate 0): each chat sends its next message when the
//     final reply to the previous one arrived;
//   - open loop (Rate > 0): messages leave at Rate per second over all
//     chats, whatever the replies do, chat after chat (round robin).
//
// The latency of a turn is the time from just before its publish to the
// arrival of its final reply: with the zero-latency scripted model, what
// Switchboard adds on top of the model. A message without a final reply
// within Options.Timeout ends the run with an error naming its chat.
//
// Allocations per turn are runtime.MemStats deltas of the whole process
// over the run (daemon, model and load together, when they share the
// process, as in the benchmarks and the bench verb); RSS is the process's
// resident memory before and after the load.
//
// A [Result] is saved and read as JSON ([WriteResult], [ReadResult]) and
// printed as a table ([Print]), with the ratio to a saved result.
package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/clock"
)

// DefaultTimeout is how long a message waits for its final reply unless
// Options.Timeout says otherwise.
const DefaultTimeout = 2 * time.Minute

// DefaultChannel is the channel the messages come from.
const DefaultChannel = "console"

// Options says what Drive sends.
type Options struct {
	// Chats is the number of chats (one session each), at least 1.
	Chats int
	// Messages is the number of messages each chat sends, at least 1.
	Messages int
	// Turns, when positive, is the total number of messages instead:
	// spread over the chats, the first Turns%Chats chats sending one more
	// (a benchmark's b.N). Chats larger than Turns are reduced to Turns.
	Turns int
	// Rate, when positive, is the open loop's rate in messages per second
	// over all chats; 0 is the closed loop.
	Rate float64
	// Timeout is how long a message may wait for its final reply; 0 is
	// DefaultTimeout.
	Timeout time.Duration
	// Channel is the channel of the messages; "" is DefaultChannel.
	Channel string
	// Metrics, when set, is the daemon's metrics registry: the result then
	// says where the time went (phases.go).
	Metrics prometheus.Gatherer
}

// Validate reports the first option that cannot be run, naming its flag.
func (o Options) Validate() error {
	switch {
	case o.Chats < 1:
		return fmt.Errorf("--chats: must be at least 1, got %d", o.Chats)
	case o.Messages < 1 && o.Turns < 1:
		return fmt.Errorf("--messages: must be at least 1, got %d", o.Messages)
	case o.Rate < 0:
		return fmt.Errorf("--rate: must be 0 (closed loop) or a positive number of messages per second, got %g", o.Rate)
	case o.Timeout < 0:
		return fmt.Errorf("--timeout: must be positive, got %s", o.Timeout)
	}
	return nil
}

// plan returns how many messages each chat sends.
func (o Options) plan() []int {
	if o.Turns <= 0 {
		counts := make([]int, o.Chats)
		for i := range counts {
			counts[i] = o.Messages
		}
		return counts
	}
	counts := make([]int, min(o.Chats, o.Turns))
	for i := range counts {
		counts[i] = o.Turns / len(counts)
		if i < o.Turns%len(counts) {
			counts[i]++
		}
	}
	return counts
}

// Drive runs the load of o against the daemon whose bus nc reaches (with
// the rights to publish inbound messages and read chat.out.>), with the
// subjects of subj, and returns what it measured. It returns when every
// message had its final reply, on the first error (a publish refused, a
// message without a final reply within the timeout), or when ctx ends.
func Drive(ctx context.Context, nc *nats.Conn, subj bus.Subjects, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	d := newDriver(o, subj)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(d.asyncError))
	if err != nil {
		return Result{}, fmt.Errorf("loadgen: %w", err)
	}
	sub, err := nc.Subscribe(subj.OutAll(), d.onOutbound)
	if err != nil {
		return Result{}, fmt.Errorf("loadgen: subscribe %s: %w", subj.OutAll(), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return Result{}, fmt.Errorf("loadgen: %w", err)
	}
	// The subscription is in place at the server before the first message.
	if err := nc.FlushTimeout(o.Timeout); err != nil {
		return Result{}, fmt.Errorf("loadgen: subscribe %s: %w", subj.OutAll(), err)
	}

	var sumsBefore, sumsAfter histSums
	if o.Metrics != nil {
		if sumsBefore, err = gatherSums(o.Metrics); err != nil {
			return Result{}, err
		}
	}
	rssBefore, _ := RSS(0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if o.Rate > 0 {
		err = d.openLoop(ctx, js)
	} else {
		err = d.closedLoop(ctx, js)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		return Result{}, err
	}
	rssAfter, _ := RSS(0)
	d.mu.Lock() // a late duplicate of a final may still be in onOutbound
	lat := d.lat
	d.mu.Unlock()
	n := float64(len(lat))
	slices.Sort(lat)
	r := Result{
		Chats:          len(d.counts),
		Messages:       o.Messages,
		Rate:           o.Rate,
		Turns:          len(lat),
		Seconds:        elapsed.Seconds(),
		TurnsPerSecond: n / elapsed.Seconds(),
		P50Ms:          percentileMs(lat, 50),
		P90Ms:          percentileMs(lat, 90),
		P99Ms:          percentileMs(lat, 99),
		MaxMs:          percentileMs(lat, 100),
		RSSBeforeBytes: rssBefore,
		RSSBytes:       rssAfter,
		BytesPerTurn:   float64(after.TotalAlloc-before.TotalAlloc) / n,
		AllocsPerTurn:  float64(after.Mallocs-before.Mallocs) / n,
		GoVersion:      runtime.Version(),
		GOMAXPROCS:     runtime.GOMAXPROCS(0),
	}
	if o.Turns > 0 {
		r.Messages = 0
	}
	var total time.Duration
	for _, l := range lat {
		total += l
	}
	if n > 0 {
		r.MeanMs = float64(total.Microseconds()) / 1000 / n
	}
	if o.Metrics != nil {
		if sumsAfter, err = gatherSums(o.Metrics); err != nil {
			return Result{}, err
		}
		r.setPhases(sumsBefore, sumsAfter)
	}
	return r, nil
}

// percentileMs is the nearest-rank q-th percentile of lat, in milliseconds.
func percentileMs(lat []time.Duration, q int) float64 {
	if len(lat) == 0 {
		return 0
	}
	i := (len(lat)*q + 99) / 100
	return float64(lat[max(i, 1)-1].Microseconds()) / 1000
}

// sent is a message waiting for its final reply.
type sent struct {
	chat int
	at   time.Time
}

// driver is the state of one Drive.
type driver struct {
	o      Options
	subj   bus.Subjects
	counts []int           // messages per chat
	finals []chan struct{} // per chat: its message's final reply arrived (closed loop)

	mu       sync.Mutex
	pending  map[string]sent // inbound id → when it left
	lat      []time.Duration // of the answered messages, sorted at the end
	left     int             // messages without a final reply
	done     chan struct{}   // closed when left reaches 0
	asyncErr error           // the first refused asynchronous publish
}

func newDriver(o Options, subj bus.Subjects) *driver {
	d := &driver{o: o, subj: subj, counts: o.plan(), pending: map[string]sent{}, done: make(chan struct{})}
	d.finals = make([]chan struct{}, len(d.counts))
	for i, n := range d.counts {
		d.finals[i] = make(chan struct{}, 1)
		d.left += n
	}
	d.lat = make([]time.Duration, 0, d.left)
	return d
}

func chatID(c int) string { return "c" + strconv.Itoa(c) }

func messageID(c, k int) string { return chatID(c) + "-" + strconv.Itoa(k) }

// message returns message k of chat c: its subject, payload and
// de-duplication key, after noting that it leaves now.
func (d *driver) message(c, k int) (subject string, data []byte, dedup string, err error) {
	chat := chatID(c)
	in := bus.Inbound{V: 1, ID: messageID(c, k), Channel: d.o.Channel, ChatID: chat, UserID: "u-" + chat, Text: "ping " + messageID(c, k)}
	data, err = json.Marshal(in)
	if err != nil {
		return "", nil, "", fmt.Errorf("loadgen: %w", err)
	}
	d.mu.Lock()
	d.pending[in.ID] = sent{chat: c, at: time.Now()}
	d.mu.Unlock()
	return d.subj.In(d.o.Channel, chat), data, in.DedupKey(), nil
}

// finalOf is what Drive reads of an outbound envelope.
type finalOf struct {
	InReplyTo string `json:"in_reply_to"`
	Final     bool   `json:"final"`
}

// onOutbound notes the final replies to the messages Drive sent.
func (d *driver) onOutbound(m *nats.Msg) {
	var o finalOf
	if json.Unmarshal(m.Data, &o) != nil || !o.Final {
		return
	}
	now := time.Now()
	d.mu.Lock()
	s, ok := d.pending[o.InReplyTo]
	if ok {
		delete(d.pending, o.InReplyTo)
		d.lat = append(d.lat, now.Sub(s.at))
		if d.left--; d.left == 0 {
			close(d.done)
		}
	}
	d.mu.Unlock()
	if ok {
		select {
		case d.finals[s.chat] <- struct{}{}:
		default:
		}
	}
}

func (d *driver) closedLoop(ctx context.Context, js jetstream.JetStream) error {
	g, ctx := errgroup.WithContext(ctx)
	for c, n := range d.counts {
		g.Go(func() error {
			timer := time.NewTimer(d.o.Timeout)
			defer timer.Stop()
			for k := range n {
				subject, data, dedup, err := d.message(c, k)
				if err != nil {
					return err
				}
				if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(dedup)); err != nil {
					return fmt.Errorf("loadgen: chat %s: publish %s: %w", chatID(c), messageID(c, k), err)
				}
				timer.Reset(d.o.Timeout)
				select {
				case <-d.finals[c]:
				case <-timer.C:
					return fmt.Errorf("loadgen: chat %s: no final reply to message %s within %s", chatID(c), messageID(c, k), d.o.Timeout)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func (d *driver) openLoop(ctx context.Context, js jetstream.JetStream) error {
	interval := time.Duration(float64(time.Second) / d.o.Rate)
	start := time.Now()
	i := 0
	for k := 0; ; k++ {
		sentAny := false
		for c, n := range d.counts {
			if k >= n {
				continue
			}
			sentAny = true
			if err := clock.Sleep(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
				return err
			}
			i++
			subject, data, dedup, err := d.message(c, k)
			if err != nil {
				return err
			}
			if _, err := js.PublishAsync(subject, data, jetstream.WithMsgID(dedup)); err != nil {
				return fmt.Errorf("loadgen: chat %s: publish %s: %w", chatID(c), messageID(c, k), err)
			}
			if err := d.refused(); err != nil {
				return err
			}
		}
		if !sentAny {
			break
		}
	}
	timer := time.NewTimer(d.o.Timeout)
	defer timer.Stop()
	select {
	case <-d.done:
		<-js.PublishAsyncComplete()
		return d.refused()
	case <-timer.C:
		if err := d.refused(); err != nil {
			return err
		}
		return fmt.Errorf("loadgen: no final reply within %s after the last message: %s", d.o.Timeout, d.unanswered())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// asyncError records the first publish the stream refused (open loop).
func (d *driver) asyncError(_ jetstream.JetStream, m *nats.Msg, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.asyncErr == nil {
		d.asyncErr = fmt.Errorf("loadgen: publish on %s (%s): %w", m.Subject, m.Header.Get(bus.HeaderMsgID), err)
	}
}

func (d *driver) refused() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asyncErr
}

// unanswered names the chats with messages still waiting, and those
// messages (at most ten of each).
func (d *driver) unanswered() string {
	d.mu.Lock()
	var ids []string
	seen := map[int]bool{}
	var chats []int
	for id, s := range d.pending {
		ids = append(ids, id)
		if !seen[s.chat] {
			seen[s.chat] = true
			chats = append(chats, s.chat)
		}
	}
	d.mu.Unlock()
	slices.Sort(chats)
	slices.Sort(ids)
	names := make([]string, len(chats))
	for i, c := range chats {
		names[i] = chatID(c)
	}
	return fmt.Sprintf("chat %s (message %s)", atMost(names, 10), atMost(ids, 10))
}

// atMost joins the first n of list, saying how many more there are.
func atMost(list []string, n int) string {
	s := strings.Join(list[:min(len(list), n)], ", ")
	if len(list) > n {
		s += fmt.Sprintf(" and %d more", len(list)-n)
	}
	return s
}

// RSS returns the resident memory of process pid (0: this process) in
// bytes, from /proc (Drive reports 0 where /proc cannot be read).
func RSS(pid int) (int64, error) {
	st, err := status(pid)
	return int64(st.VmRSS), err
}

// AnonRSS is the part of RSS(pid) that is anonymous memory (the heap,
// stacks): the rest are file pages (the binary, the memory-mapped
// history), clean and given back under memory pressure.
func AnonRSS(pid int) (int64, error) {
	st, err := status(pid)
	return int64(st.RssAnon), err
}

func status(pid int) (procfs.ProcStatus, error) {
	var p procfs.Proc
	var err error
	if pid == 0 {
		p, err = procfs.Self()
	} else {
		p, err = procfs.NewProc(pid)
	}
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("loadgen: rss: %w", err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("loadgen: rss: %w", err)
	}
	return st, nil
}
