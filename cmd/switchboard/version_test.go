package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestVersionVerb(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"version"}, nil, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "switchboard ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
}

func TestHealthcheckVerb(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer ok.Close()
	var out bytes.Buffer
	if code := run(t.Context(), []string{"healthcheck", "--url", ok.URL + "/healthz"}, nil, &out, &out); code != 0 {
		t.Fatalf("healthy: exit %d: %s", code, out.String())
	}
	if code := run(t.Context(), []string{"healthcheck", "--url", ok.URL + "/nope"}, nil, &out, &out); code != 1 {
		t.Fatalf("unhealthy: exit %d", code)
	}
	ok.Close()
	if code := run(t.Context(), []string{"healthcheck", "--url", ok.URL + "/healthz"}, nil, &out, &out); code != 1 {
		t.Fatalf("down: exit %d", code)
	}
}

func TestHealthcheckBadURL(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"healthcheck", "--url", "http://[::1"}, nil, &out, &out); code != 2 || !strings.Contains(out.String(), "unusable health URL") {
		t.Fatalf("a broken URL: exit %d (want 2): %s", code, out.String())
	}
}
