package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{Level: "loud", Format: "xml"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "log.level: must be one of debug, info, warn, error, got \"loud\"") ||
		!strings.Contains(err.Error(), "log.format: must be text or json, got \"xml\"") {
		t.Errorf("Validate = %v", err)
	}
}

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	log := Config{Level: "warn", Format: "json"}.New(&buf)
	log.Info("hidden")
	log.Warn("shown", "k", "v")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `"msg":"shown","k":"v"`) {
		t.Errorf("json at warn: %q", got)
	}
	Config{}.New(nil).Error("discarded")
}
