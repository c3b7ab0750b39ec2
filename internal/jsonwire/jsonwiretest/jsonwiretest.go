// Package jsonwiretest checks hand-written JSON against encoding/json.
package jsonwiretest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
)

// CheckAppender fails t unless v writes, with AppendJSON and through
// json.Marshal, exactly what json.Marshal writes for old (the value the
// typed one replaces, e.g. the map an event used to carry).
func CheckAppender(t testing.TB, v jsonwire.Appender, old any) {
	t.Helper()
	want, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if self, _ := json.Marshal(v); !bytes.Equal(self, want) {
		t.Errorf("json.Marshal(%#v) = %s, want %s", v, self, want)
	}
	if got := v.AppendJSON([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Errorf("AppendJSON(%#v) = %s, want %s", v, got[1:], want)
	}
}
