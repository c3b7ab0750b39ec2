package memcfg_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

func TestDefaultIsValid(t *testing.T) {
	c := memcfg.DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if c.Store != memcfg.StoreBolt || c.Scope != memcfg.ScopeUser || c.Retention != 0 || c.Consolidate != "" || c.EmbeddingModel != "" || c.IndexInterval != time.Minute {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if c.RetentionPeriod() != 0 {
		t.Errorf("RetentionPeriod() = %s, want 0", c.RetentionPeriod())
	}
	c.Retention = 30
	if c.RetentionPeriod() != 30*24*time.Hour {
		t.Errorf("RetentionPeriod() = %s", c.RetentionPeriod())
	}
}

func TestValidateNamesKeys(t *testing.T) {
	c := memcfg.Config{Scope: "team", Retention: memcfg.MaxRetentionDays + 1, Consolidate: "7pm", EmbeddingBaseURL: "localhost:8080", IndexInterval: 0}
	err := c.Validate()
	for _, want := range []string{"memory.scope", "memory.retention", "memory.consolidate", "memory.embedding_base_url", "memory.index_interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a problem naming %s", err, want)
		}
	}
	ok := memcfg.Config{Store: memcfg.StoreJetStream, Scope: memcfg.ScopeShared, Retention: 7, Consolidate: "00:00", EmbeddingBaseURL: "https://api.openai.com/v1", IndexInterval: time.Second}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}

// TestValidateStore: memory.store is bolt or jetstream; anything else
// (another case, a typo, empty) is refused with both choices listed.
func TestValidateStore(t *testing.T) {
	for _, ok := range []string{memcfg.StoreBolt, memcfg.StoreJetStream} {
		c := memcfg.DefaultConfig()
		c.Store = ok
		if err := c.Validate(); err != nil {
			t.Errorf("memory.store %q: Validate() = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Bolt", "JetStream", "nats", "kv"} {
		c := memcfg.DefaultConfig()
		c.Store = bad
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), `memory.store: must be bolt or jetstream, got "`+bad+`"`) {
			t.Errorf("memory.store %q: Validate() = %v, want a problem listing bolt and jetstream", bad, err)
		}
	}
}

func TestParseClock(t *testing.T) {
	for in, want := range map[string][2]int{"23:50": {23, 50}, "00:00": {0, 0}, "07:05": {7, 5}} {
		h, m, err := memcfg.ParseClock(in)
		if err != nil || h != want[0] || m != want[1] {
			t.Errorf("ParseClock(%q) = %d, %d, %v", in, h, m, err)
		}
	}
	for _, in := range []string{"", "24:00", "7:05", "23:60", "23:50:00", "noon", "23.50"} {
		if _, _, err := memcfg.ParseClock(in); err == nil {
			t.Errorf("ParseClock(%q) succeeded", in)
		}
	}
}
