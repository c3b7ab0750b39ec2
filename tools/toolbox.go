package tools

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
)

// Source is a set of tools that changes while the daemon runs, such as the
// tools of the MCP servers that are connected at the moment. Tools returns
// the current set quickly (a snapshot, not a network call) and is safe for
// concurrent use; the tools it returns follow the [Tool] contract.
type Source interface {
	Tools() []Tool
}

// Toolbox is what the agent's executor calls: a fixed [Registry] of
// built-in tools, plus tools from [Source]s that come and go, less the
// tools whose names match a disabled pattern. It is safe for concurrent
// use, and List re-reads the sources on every call, so a tool that joins
// (an MCP server that became ready) is offered from the next turn on.
//
// Names are unique: a source tool whose name a built-in tool (or an earlier
// source) already has is left out, as is one that fails [ValidateTool];
// each such rejection is logged once.
type Toolbox struct {
	base     *Registry
	sources  []Source
	disabled []string
	// offered is base's model tools less the disabled ones, worked out
	// once: the registry does not change, and List is called several
	// times a turn.
	offered []Tool

	mu       sync.Mutex
	reported map[string]bool // rejected source tools already logged
}

// NewToolbox returns a toolbox over base and sources. disabled holds
// path.Match patterns of tool names to leave out ("bash", "mcp_github_*");
// a malformed pattern is an error. base's logger (see
// [Registry.WithLogger]) is used for the toolbox's own log lines, and its
// fallback (see [Registry.WithFallback]) for calls to unknown names.
func NewToolbox(base *Registry, disabled []string, sources ...Source) (*Toolbox, error) {
	if base == nil {
		var err error
		if base, err = NewRegistry(); err != nil {
			return nil, err
		}
	}
	for _, p := range disabled {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("tools: disabled pattern %q: %w", p, err)
		}
	}
	for i, s := range sources {
		if s == nil {
			return nil, fmt.Errorf("tools: new toolbox: source %d is nil", i)
		}
	}
	b := &Toolbox{
		base:     base,
		sources:  slices.Clone(sources),
		disabled: slices.Clone(disabled),
		reported: make(map[string]bool),
	}
	for _, t := range base.List() {
		if !b.Disabled(t.Name()) {
			b.offered = append(b.offered, t)
		}
	}
	return b, nil
}

// Disabled reports whether name matches one of the disabled patterns.
func (b *Toolbox) Disabled(name string) bool {
	for _, p := range b.disabled {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// List returns the tools offered to the model now: the built-in ones in
// registration order, then each source's in its order. The slice is the
// caller's.
func (b *Toolbox) List() []Tool {
	out := slices.Clone(b.offered)
	var seen map[string]bool // the source tools' names so far
	for _, s := range b.sources {
		for _, t := range s.Tools() {
			if b.accept(t, &seen) {
				out = append(out, t)
			}
		}
	}
	return out
}

// accept reports whether the source tool t joins the list; seen holds the
// source tools' names taken so far (made on first use) and gains t's.
func (b *Toolbox) accept(t Tool, seen *map[string]bool) bool {
	if err := ValidateTool(t); err != nil {
		key := "invalid:nil"
		if t != nil {
			key = "invalid:" + t.Name()
		}
		b.reject(key, "source tool rejected", "err", err)
		return false
	}
	name := t.Name()
	if _, builtin := b.base.byName[name]; builtin || (*seen)[name] {
		b.reject("dup:"+name, "source tool rejected: a tool with this name already exists", "tool", name)
		return false
	}
	if *seen == nil {
		*seen = make(map[string]bool)
	}
	(*seen)[name] = true
	return StageOf(t) == StageModel && !b.Disabled(name)
}

// reject logs a rejection once per key.
func (b *Toolbox) reject(key, msg string, args ...any) {
	b.mu.Lock()
	done := b.reported[key]
	b.reported[key] = true
	b.mu.Unlock()
	if !done {
		b.base.log.Warn(msg, args...)
	}
}

// Names returns the names of List.
func (b *Toolbox) Names() []string {
	ts := b.List()
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name()
	}
	return names
}

// Run calls the tool name with the guarantees of [Registry.Run]: it never
// panics and never returns an empty text; unknown and disabled names go to
// the base registry's fallback, then give an error result listing the
// tools offered.
func (b *Toolbox) Run(ctx context.Context, name string, call Call) Result {
	if !b.Disabled(name) {
		if t, ok := b.base.byName[name]; ok && StageOf(t) == StageModel {
			return b.base.run(ctx, t, call)
		}
		if _, builtin := b.base.byName[name]; !builtin {
			for _, t := range b.List() {
				if t.Name() == name {
					return b.base.run(ctx, t, call)
				}
			}
		}
	}
	return b.base.unknown(ctx, name, call, b.Names())
}

// Known reports whether the model may call name now: a tool of List, or a
// name the base registry's fallback answers (see [Registry.Known]).
func (b *Toolbox) Known(name string) bool {
	if b.Disabled(name) {
		return false
	}
	if _, builtin := b.base.byName[name]; builtin {
		return b.base.Known(name)
	}
	for _, t := range b.List() {
		if t.Name() == name {
			return true
		}
	}
	return b.base.Known(name)
}

// PostTurn returns the base registry's post-turn tools that are not
// disabled.
func (b *Toolbox) PostTurn() []Tool {
	var out []Tool
	for _, t := range b.base.tools {
		if StageOf(t) == StagePostTurn && !b.Disabled(t.Name()) {
			out = append(out, t)
		}
	}
	return out
}

// RunPostTurn runs the post-turn tool t with the guarantees of Run.
func (b *Toolbox) RunPostTurn(ctx context.Context, t Tool, call Call) Result {
	return b.base.RunPostTurn(ctx, t, call)
}
