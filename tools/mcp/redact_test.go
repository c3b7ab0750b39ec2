package mcp

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// TestSecretsNeverReported configures the secrets an MCP setup carries (a
// GitHub token in env, Authorization and X-Api-Key headers, a URL with
// userinfo and an api_key query value) on a stdio server that prints its
// token to stderr, an HTTP server that is down and one that answers 401
// echoing the credentials it got. Nothing the manager reports or logs
// shows any of them: GET /mcp, the log (the SDK's lines and the stderr
// included), `switchboard check`'s results and the displayed
// configuration; the names stay.
func TestSecretsNeverReported(t *testing.T) {
	const (
		pat    = "ghp_patSECRET0123456789"
		bearer = "bearerSECRET-abcdef"
		apiKey = "xapiSECRET-42"
		query  = "querySECRET/with space"
		user   = "urluserSECRET"
		pass   = "urlpassSECRET"
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	_ = ln.Close()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad credentials: "+r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key")+" "+r.URL.RawQuery, http.StatusUnauthorized)
	}))
	t.Cleanup(echo.Close)
	headers := map[string]string{"Authorization": "Bearer " + bearer, "X-Api-Key": apiKey}
	q := "?api_key=" + url.QueryEscape(query) + "&v=2"
	cfg := Config{Servers: map[string]ServerConfig{
		"gh":   stdioConfig(map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": pat, stderrEnv: "GITHUB_PERSONAL_ACCESS_TOKEN"}),
		"down": {URL: "http://" + user + ":" + pass + "@" + down + "/mcp" + q, Headers: headers},
		"echo": {URL: echo.URL + "/mcp" + q, Headers: headers, Timeout: time.Second},
	}}
	logs := &syncbuf.Buffer{}
	m, err := New(cfg, "test", slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	m.backoff = 10 * time.Millisecond
	start(t, m)
	waitFor(t, m, "gh ready and retries of the others", func() bool {
		st := map[string]ServerStatus{}
		for _, s := range m.Status() {
			st[s.Name] = s
		}
		return st["gh"].Ready && st["down"].Attempts >= 2 && st["down"].Error != "" && st["echo"].Attempts >= 2 && st["echo"].Error != ""
	})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mcp", nil))
	checked, _ := json.Marshal(Check(t.Context(), cfg, "test"))
	shown, _ := json.Marshal(cfg.Redacted())

	secrets := []string{pat, bearer, apiKey, query, url.QueryEscape(query), url.PathEscape(query), user, pass}
	for what, text := range map[string]string{"GET /mcp": rec.Body.String(), "the log": logs.String(), "check": string(checked), "the configuration": string(shown)} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the secret %q:\n%s", what, s, text)
			}
		}
	}
	for _, want := range []string{"test server starting with token=(redacted)", "mcp server unavailable; retrying"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	for _, want := range []string{`"GITHUB_PERSONAL_ACCESS_TOKEN":"(redacted)"`, `"Authorization":"(redacted)"`, `"X-Api-Key":"(redacted)"`,
		`api_key=(redacted)\u0026v=(redacted)`, `(redacted)@127.0.0.1`} {
		if !strings.Contains(string(shown), want) {
			t.Errorf("the configuration %s lacks %s", shown, want)
		}
	}
	if cfg.Servers["down"].Headers["X-Api-Key"] != apiKey {
		t.Error("Redacted changed the configuration it was given")
	}
}

// TestRedactURL keeps the names and hides every value.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://mcp.example/v1":                          "https://mcp.example/v1",
		"https://u:p@mcp.example/v1?key=k1&flag&b=2#frag": "https://(redacted)@mcp.example/v1?key=(redacted)&flag&b=(redacted)#(redacted)",
		"http://tok@mcp.example/?":                        "http://(redacted)@mcp.example/?",
		"http://[::1/?k=v":                                "(unparsable URL, (redacted))",
		"":                                                "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
