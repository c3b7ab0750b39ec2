package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/tools"
)

// Check connects to every configured server once, as the daemon would,
// lists its tools and disconnects (a stdio server is stopped), for
// `switchboard check` with the daemon stopped: one result per server,
// named "MCP <server>", bounded by the connection timeout (30 s). A
// disabled server is skipped; no server configured gives one skipped
// result.
func Check(ctx context.Context, cfg Config, version string) []health.Result {
	if len(cfg.Servers) == 0 {
		return []health.Result{{Name: "MCP", Status: health.Skip, Detail: "no servers configured (mcp.servers)"}}
	}
	m, err := New(cfg, version, nil)
	if err != nil {
		return []health.Result{{Name: "MCP", Status: health.Fail, Detail: err.Error()}}
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	names := slices.Sorted(maps.Keys(cfg.Servers))
	results := make([]health.Result, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		results[i].Name = "MCP " + name
		sc := cfg.Servers[name]
		if sc.Disabled {
			results[i].Status, results[i].Detail = health.Skip, "disabled (mcp.servers."+name+".disabled)"
			continue
		}
		wg.Go(func() { results[i] = m.checkOne(ctx, name, sc) })
	}
	wg.Wait()
	return results
}

// checkOne connects to one server until its tools are listed or the
// session fails.
func (m *Manager) checkOne(ctx context.Context, name string, sc ServerConfig) health.Result {
	r := health.Result{Name: "MCP " + name}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ended := make(chan error, 1)
	go func() { ended <- m.session(sctx, m.serverLog(name), name, sc) }()
	for {
		changed := m.Changed()
		if st := m.statusOf(name); st.Ready {
			stop()
			<-ended
			r.Status, r.Detail = health.OK, fmt.Sprintf("started, %d %s listed%s", st.Tools, health.Plural(st.Tools, "tool", "tools"), toolList(m.toolsOf(name)))
			if st.Tools == 0 {
				r.Status, r.Detail = health.Warn, "started, but it lists no tool the model can use"
			}
			return r
		}
		select {
		case err := <-ended:
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %s", connectTimeout)
			}
			r.Status, r.Detail = health.Fail, fmt.Sprintf("%v (check mcp.servers.%s: command, args, url)", err, name)
			return r
		case <-changed:
		}
	}
}

func (m *Manager) statusOf(name string) ServerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *m.status[name]
}

// toolList names the first tools: ": mcp_x_a, mcp_x_b, ...".
func toolList(ts []tools.Tool) string {
	if len(ts) == 0 {
		return ""
	}
	var names []string
	for _, t := range ts[:min(len(ts), 5)] {
		names = append(names, t.Name())
	}
	more := ""
	if len(ts) > len(names) {
		more = ", ..."
	}
	return ": " + strings.Join(names, ", ") + more
}
