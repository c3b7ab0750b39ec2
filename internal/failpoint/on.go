//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var (
	parseOnce sync.Once
	armed     map[string]*point // nil when the variable is unset
)

type point struct {
	at   int64 // crash at this hit
	hits atomic.Int64
}

// Hit crashes the process with SIGKILL when name is the armed point of
// SWITCHBOARD_FAILPOINT and this is the chosen hit.
func Hit(name string) {
	parseOnce.Do(func() {
		var err error
		if armed, err = parse(os.Getenv(EnvVar)); err != nil {
			fmt.Fprintf(os.Stderr, "failpoint: %s: %v\n", EnvVar, err)
			os.Exit(2)
		}
	})
	p := armed[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: SIGKILL at %s (hit %d)\n", name, p.at)
	if self, err := os.FindProcess(os.Getpid()); err == nil {
		_ = self.Kill() // SIGKILL on Unix
	}
	select {} // the signal is delivered asynchronously: never go on
}

// parse reads "name[:n],...".
func parse(v string) (map[string]*point, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	out := map[string]*point{}
	for item := range strings.SplitSeq(v, ",") {
		name, count, hasCount := strings.Cut(strings.TrimSpace(item), ":")
		if !slices.Contains(Names(), name) {
			return nil, fmt.Errorf("unknown point %q (known: %s)", name, strings.Join(Names(), ", "))
		}
		n := int64(1)
		if hasCount {
			var err error
			if n, err = strconv.ParseInt(count, 10, 64); err != nil || n < 1 {
				return nil, fmt.Errorf("point %s: count %q is not a positive number", name, count)
			}
		}
		out[name] = &point{at: n}
	}
	return out, nil
}
