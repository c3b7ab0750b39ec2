package natsbus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The instance registry (issue 17, item 6) is for operators only: every
// instance with partitions puts what it is into the key-value bucket
// [InstancesBucket] every [announceEvery], under a TTL of [InstancesTTL],
// and `switchboard status` lists the bucket. Nothing decides anything from
// it: the server's pins decide who consumes what.
const (
	// InstancesTTL is how long an instance's entry outlives its last put.
	InstancesTTL = 15 * time.Second
	// announceEvery is how often an instance puts its entry.
	announceEvery = 5 * time.Second
)

// PartitionsComponent names what [Bus.Announce] reports.
const PartitionsComponent = "partitions"

// Instance is one entry of the registry.
type Instance struct {
	// Name is [DefaultInstanceName] unless set.
	Name     string    `json:"name"`
	AdminURL string    `json:"admin_url,omitempty"`
	Version  string    `json:"version,omitempty"`
	Started  time.Time `json:"started"`
	// Owned are the partitions the server pins to the instance, of
	// Partitions.
	Owned      []int     `json:"owned"`
	Partitions int       `json:"partitions"`
	Updated    time.Time `json:"updated"`
}

// InstancesBucket is the registry's bucket for a subject prefix: the
// prefix with dots turned into underscores, then "_instances"
// (chat_instances by default).
func InstancesBucket(prefix string) string {
	return strings.ReplaceAll(prefix, ".", "_") + "_instances"
}

var kvKeyUnsafe = regexp.MustCompile(`[^-_=a-zA-Z0-9]`)

// DefaultInstanceName is "<host>-<pid>-<6 random hex digits>" (two
// buses of one process are two instances), with what a key may not hold
// replaced by "_".
func DefaultInstanceName() string {
	host, _ := os.Hostname()
	return kvKeyUnsafe.ReplaceAllString(fmt.Sprintf("%s-%d-%06x", cmp.Or(host, "host"), os.Getpid(), rand.N(1<<24)), "_")
}

// Announce reports, with partitions (agent.partitions > 1), which ones
// this instance owns: to report as the detail "owned [0 3] of 16
// (instance NAME)" of the component [PartitionsComponent] (for /readyz)
// and into the registry, every
// announceEvery until ctx ends; then it deletes its entry and returns nil.
// adminAddr ("host:port" of the admin server, "" when off) is read at
// every put: the admin listener may bind late.
// Without partitions it returns nil at once. A registry that cannot be
// written is logged, not fatal: it reports only.
func (b *Bus) Announce(ctx context.Context, inst Instance, adminAddr func() string, report func(component, detail string)) error {
	if b.partitions <= 1 {
		return nil
	}
	inst.Name = cmp.Or(inst.Name, DefaultInstanceName())
	inst.Partitions = b.partitions
	var kv jetstream.KeyValue
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		owned, err := b.Owned(ctx)
		report(PartitionsComponent, fmt.Sprintf("owned %s of %d (instance %s)", formatPartitions(owned), b.partitions, inst.Name))
		if err == nil && kv == nil {
			kv, err = b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: InstancesBucket(b.subj.Prefix),
				Description: "Switchboard instances (reporting only)", TTL: InstancesTTL, Replicas: max(1, b.replicas)})
		}
		if err == nil {
			inst.Owned, inst.Updated = owned, time.Now().UTC()
			if addr := adminAddr(); addr != "" {
				inst.AdminURL = "http://" + addr
			}
			data, _ := json.Marshal(inst)
			_, err = kv.Put(ctx, inst.Name, data)
		}
		if err != nil && ctx.Err() == nil {
			b.log.Debug("instance registry not updated", "err", err)
		}
		select {
		case <-ctx.Done():
			if kv != nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = kv.Delete(dctx, inst.Name)
				cancel()
			}
			return nil
		case <-t.C:
		}
	}
}

// formatPartitions writes owned partitions as "[0 3 7]", "none" when empty.
func formatPartitions(owned []int) string {
	if len(owned) == 0 {
		return "none"
	}
	return fmt.Sprint(owned)
}

// ListInstances reads the registry of the bus with subject prefix prefix,
// sorted by name; none when the bucket does not exist.
func ListInstances(ctx context.Context, js jetstream.JetStream, prefix string) ([]Instance, error) {
	kv, err := js.KeyValue(ctx, InstancesBucket(prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsbus: instances bucket %s: %w", InstancesBucket(prefix), err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsbus: instances bucket %s: %w", InstancesBucket(prefix), err)
	}
	var out []Instance
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue // expired meanwhile
		}
		var inst Instance
		if json.Unmarshal(e.Value(), &inst) == nil {
			out = append(out, inst)
		}
	}
	slices.SortFunc(out, func(a, b Instance) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// WriteStatus prints the instances as a table: name, admin URL, version,
// started, partitions owned.
func WriteStatus(w io.Writer, insts []Instance) error {
	if len(insts) == 0 {
		_, err := fmt.Fprintln(w, "no instance registered (instances register with memory.store jetstream and agent.partitions above 1)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tADMIN\tVERSION\tSTARTED\tPARTITIONS")
	for _, in := range insts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s of %d\n", in.Name, cmp.Or(in.AdminURL, "-"), cmp.Or(in.Version, "-"),
			in.Started.UTC().Format(time.RFC3339), formatPartitions(in.Owned), in.Partitions)
	}
	return tw.Flush()
}

// Status connects as op, reads the registry of the bus with subject
// prefix prefix and prints it to w (`switchboard status`).
func Status(ctx context.Context, op Operator, prefix string, w io.Writer) error {
	nc, err := nats.Connect(op.URL, append(op.Options(), nats.Name("switchboard-status"))...)
	if err != nil {
		return fmt.Errorf("natsbus: status: connect %s: %w", redactURL(op.URL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natsbus: status: %w", err)
	}
	insts, err := ListInstances(ctx, js, prefix)
	if err != nil {
		return err
	}
	return WriteStatus(w, insts)
}
