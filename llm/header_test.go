package llm_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestRequestHeadersPerRequest: the requests share the client's headers
// (they are not copied per request), yet a client with a cookie jar sends
// each request only the jar's cookies, and concurrent requests see the
// same headers (run under -race).
func TestRequestHeadersPerRequest(t *testing.T) {
	s := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	jar.SetCookies(u, []*http.Cookie{{Name: "route", Value: "a1"}})
	tr := s.HTTPClient().Transport
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey = s.URL(), "sk-test"
	for name, client := range map[string]*http.Client{"jar": {Transport: tr, Jar: jar}, "plain": {Transport: tr}} {
		c, err := llm.New(cfg, nil, llm.WithHTTPClient(client))
		if err != nil {
			t.Fatal(err)
		}
		before := len(s.Requests())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := c.Stream(t.Context(), userReq("hi"), nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for _, r := range s.Requests()[before:] {
			wantCookie := ""
			if name == "jar" {
				wantCookie = "route=a1"
			}
			if got := r.Header.Get("Cookie"); got != wantCookie || len(r.Header.Values("Cookie")) > 1 {
				t.Errorf("%s: request %d Cookie = %q (%d values), want %q", name, r.Seq, got, len(r.Header.Values("Cookie")), wantCookie)
			}
			if r.Header.Get("Authorization") != "Bearer sk-test" || r.Header.Get("Accept") != "text/event-stream" {
				t.Errorf("%s: request %d headers %v", name, r.Seq, r.Header)
			}
		}
	}
}
