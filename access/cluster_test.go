package access

import (
	"bytes"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// newCluster returns n gates, each on its own connection to one embedded
// JetStream (n instances with memory.store jetstream), on one fake clock,
// and the server's URL.
func newCluster(t *testing.T, n int) ([]*Store, *clock, string) {
	t.Helper()
	srv := bustest.StartServer(t)
	c := &clock{t: time.Now().Truncate(time.Second)}
	var out []*Store
	for range n {
		kv, err := kvstate.OpenAccess(t.Context(), bustest.Connect(t, srv), kvstate.Config{Prefix: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, New(Config{}, t.TempDir(), Options{Now: c.now, Shared: kv})) // each instance its own data_dir
	}
	return out, c, srv.ClientURL()
}

// A code issued by instance A is approved with the verb (against the
// cluster, as the operator) and admits the user on A and on B; a
// revocation through B applies on A.
func TestPairingAcrossInstances(t *testing.T) {
	gates, _, url := newCluster(t, 2)
	a, b := gates[0], gates[1]
	code := codeOf(t, a.Check("telegram", "42", "Ann", true))
	// B knows the user waits: silence, no second code.
	if d := b.Check("telegram", "42", "Ann", true); d.Admit || !d.Pairing || d.Reply != "" {
		t.Fatalf("instance B before approval: %+v, want silence (the code is A's, shared)", d)
	}
	var out, errOut bytes.Buffer
	cfgFlag := func(fs *flag.FlagSet) *string { return fs.String("config", "", "configuration file") }
	load := func(string) (Site, error) {
		return Site{DataDir: t.TempDir(), Store: "jetstream", Bus: natsbus.Config{SubjectPrefix: "chat", URL: url}}, nil
	}
	if err := RunVerb(t.Context(), []string{"list"}, &out, &errOut, cfgFlag, load); err != nil || !strings.Contains(out.String(), "telegram:42") {
		t.Fatalf("pairing list against the cluster: %v\n%s%s", err, out.String(), errOut.String())
	}
	out.Reset()
	if err := RunVerb(t.Context(), []string{"approve", code}, &out, &errOut, cfgFlag, load); err != nil || !strings.Contains(out.String(), "Approved telegram:42") {
		t.Fatalf("pairing approve against the cluster: %v\n%s%s", err, out.String(), errOut.String())
	}
	for i, g := range gates {
		if d := g.Check("telegram", "42", "Ann", true); !d.Admit {
			t.Fatalf("instance %d after the approval: %+v, want admitted", i, d)
		}
	}
	if err := b.Revoke("telegram:42"); err != nil {
		t.Fatal(err)
	}
	if d := a.Check("telegram", "42", "Ann", true); d.Admit {
		t.Fatalf("instance A after a revocation on B: %+v, want refused", d)
	}
	// A used code approved on the other instance is refused as used.
	if _, err := b.Approve(code, "test"); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("approving a used code on B: %v", err)
	}
}

// Two instances answering the same user at once issue one code between
// them; and when both draw the same code, only one issues it.
func TestConcurrentIssuingAcrossInstances(t *testing.T) {
	gates, _, _ := newCluster(t, 2)
	var mu sync.Mutex
	var replies []string
	var wg sync.WaitGroup
	for _, g := range gates {
		for range 4 {
			wg.Go(func() {
				d := g.Check("slack", "U7", "", true)
				if d.Admit || !d.Pairing {
					t.Errorf("unknown user admitted: %+v", d)
				}
				if d.Reply != "" {
					mu.Lock()
					replies = append(replies, d.Reply)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(replies) != 1 {
		t.Fatalf("%d replies for one user from two instances, want one code: %q", len(replies), replies)
	}
	pending, _, err := gates[1].List()
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending %+v, %v: want one live code", pending, err)
	}

	// Both instances draw the same codes in the same order: the issued
	// record is shared, so no code goes out twice.
	for _, g := range gates {
		var gmu sync.Mutex
		seq := []string{"CCCC4444", "DDDD5555", "EEEE6666", "FFFF7777"}
		g.gen = func() string {
			gmu.Lock()
			defer gmu.Unlock()
			if len(seq) == 0 {
				return newCode() // a claim lost to a conflicting write used one up
			}
			c := seq[0]
			seq = seq[1:]
			return c
		}
	}
	codes := make([]string, 4)
	for i := range codes {
		wg.Go(func() { codes[i] = codeOf(t, gates[i%2].Check("telegram", "u"+string(rune('a'+i)), "", true)) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, c := range codes {
		if seen[c] {
			t.Fatalf("code %s issued twice across instances: %q", c, codes)
		}
		seen[c] = true
	}
}
