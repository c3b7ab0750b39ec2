package config

import (
	"strings"
	"testing"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestExpandEnv(t *testing.T) {
	env := envMap(map[string]string{"A": "alpha", "EMPTY": "", "DOLLAR": "$B", "B": "beta"})
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "alpha"},
		{in: "x-${A}-${B}-y", want: "x-alpha-beta-y"},
		{in: "${UNSET}", want: ""},
		{in: "${UNSET:-fallback}", want: "fallback"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${A:-fallback}", want: "alpha"},
		{in: "${UNSET:-}", want: ""},
		{in: "${UNSET:-http://h:1/v1 x}", want: "http://h:1/v1 x"},
		{in: "$$", want: "$"},
		{in: "$${A}", want: "${A}"},
		{in: "pa$$word", want: "pa$word"},
		{in: "${DOLLAR}", want: "$B"}, // values are not expanded again
		{in: "cost: $5", want: "cost: $5"},
		{in: "trailing $", want: "trailing $"},
		{in: "${A", wantErr: `unterminated ${ in "${A"`},
		{in: "${}", wantErr: "invalid environment variable reference ${}"},
		{in: "${A B}", wantErr: "invalid environment variable reference ${A B}"},
		{in: "${A-x}", wantErr: "invalid environment variable reference ${A-x}"},
	}
	for _, tt := range tests {
		got, err := expandEnv(tt.in, env)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("expandEnv(%q) = %q, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
