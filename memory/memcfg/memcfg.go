// Package memcfg holds the configuration of Switchboard's long-term memory
// (YAML section "memory"): who memory belongs to, how long history is
// kept, the optional embedding model of memory search and the optional
// nightly consolidation. Each memory package takes the part it needs; this
// package only declares, defaults and validates the keys.
package memcfg

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Scopes of long-term memory.
const (
	// ScopeUser gives every user their own direct-chat memory folder; a
	// group chat has its own notes folder, with a folder per member for
	// their notes made in that group (the default).
	ScopeUser = "user"
	// ScopeShared keeps one memory for everybody: the workspace's
	// MEMORY.md and memory/YYYY-MM-DD.md.
	ScopeShared = "shared"
)

// History stores (memory.store).
const (
	// StoreBolt keeps history and receipts in data_dir/history.db (bbolt,
	// memory/boltstore): one instance (the default).
	StoreBolt = "bolt"
	// StoreJetStream keeps them on a JetStream stream of the bus
	// (memory/jsstore), replicated by bus.replicas, so that several
	// instances on one NATS cluster share them.
	StoreJetStream = "jetstream"
)

// Bounds of the settings.
const (
	// MaxRetentionDays bounds Retention (100 years).
	MaxRetentionDays = 36500
	// MinIndexInterval bounds IndexInterval from below.
	MinIndexInterval = time.Second
)

// Config configures memory (YAML section "memory"). The zero value is not
// valid; start from [DefaultConfig].
type Config struct {
	// Store is where conversation history and the de-duplication
	// receipts are kept: "bolt" (data_dir/history.db, the default) or
	// "jetstream" (a stream on the bus, "<PREFIX>_HISTORY", shared by
	// every instance on the same NATS cluster and replicated by
	// bus.replicas).
	Store string `yaml:"store"`
	// Scope is "user" (each user has memory/users/<channel>/<user>/ for
	// direct chats, a group chat memory/chats/<channel>/<chat>/ and each
	// member memory/chats/<channel>/<chat>/users/<user>/ in it) or
	// "shared" (one memory: MEMORY.md and memory/YYYY-MM-DD.md).
	Scope string `yaml:"scope"`
	// Retention is how many days a session may stay idle before its
	// history is deleted; 0 keeps everything.
	Retention int `yaml:"retention"`
	// Consolidate is the local time ("23:50") at which MEMORY.md files are
	// rewritten each night from the recent daily notes; empty turns it off.
	Consolidate string `yaml:"consolidate"`
	// EmbeddingModel turns on vector search through the OpenAI-compatible
	// /embeddings endpoint (e.g. text-embedding-3-small); empty means
	// keyword search only.
	EmbeddingModel string `yaml:"embedding_model"`
	// EmbeddingBaseURL and EmbeddingAPIKey name the embeddings endpoint;
	// empty values inherit llm.base_url and llm.api_key.
	EmbeddingBaseURL string `yaml:"embedding_base_url"`
	EmbeddingAPIKey  string `yaml:"embedding_api_key"`
	// IndexInterval is how often memory files are rescanned for changes
	// (writes through the memory tools are indexed at once).
	IndexInterval time.Duration `yaml:"index_interval"`
}

// DefaultConfig returns the documented defaults: history in bbolt, user scope, keep all
// history, no consolidation, keyword search only, rescan every minute.
func DefaultConfig() Config {
	return Config{
		Store:         StoreBolt,
		Scope:         ScopeUser,
		IndexInterval: time.Minute,
	}
}

// Validate reports every problem (errors.Join), each naming its YAML key
// under "memory.".
func (c Config) Validate() error {
	var errs []error
	switch c.Store {
	case StoreBolt, StoreJetStream:
	default:
		errs = append(errs, fmt.Errorf("memory.store: must be %s or %s, got %q", StoreBolt, StoreJetStream, c.Store))
	}
	switch c.Scope {
	case ScopeUser, ScopeShared:
	default:
		errs = append(errs, fmt.Errorf("memory.scope: must be user or shared, got %q", c.Scope))
	}
	if c.Retention < 0 || c.Retention > MaxRetentionDays {
		errs = append(errs, fmt.Errorf("memory.retention: must be between 0 (keep everything) and %d days, got %d", MaxRetentionDays, c.Retention))
	}
	if c.Consolidate != "" {
		if _, _, err := ParseClock(c.Consolidate); err != nil {
			errs = append(errs, fmt.Errorf("memory.consolidate: %w", err))
		}
	}
	if c.EmbeddingBaseURL != "" {
		if u, err := url.Parse(c.EmbeddingBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("memory.embedding_base_url: must be an http(s) URL such as https://api.openai.com/v1, got %q", c.EmbeddingBaseURL))
		}
	}
	if c.IndexInterval < MinIndexInterval {
		errs = append(errs, fmt.Errorf("memory.index_interval: must be at least %s, got %s", MinIndexInterval, c.IndexInterval))
	}
	return errors.Join(errs...)
}

// RetentionPeriod returns Retention as a duration (0 when everything is
// kept).
func (c Config) RetentionPeriod() time.Duration {
	return time.Duration(c.Retention) * 24 * time.Hour
}

// ParseClock parses a 24-hour local time "HH:MM" (00:00 to 23:59) and
// returns its hour and minute.
func ParseClock(s string) (hour, minute int, err error) {
	t, perr := time.Parse("15:04", s)
	if perr != nil || len(s) != 5 {
		return 0, 0, fmt.Errorf("must be a 24-hour time HH:MM such as 23:50, or empty for off; got %q", s)
	}
	return t.Hour(), t.Minute(), nil
}
