package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(t *testing.T, tool tools.Tool, args string) tools.Result {
	t.Helper()
	reg, err := tools.NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Run(t.Context(), "web_fetch", tools.Call{Args: json.RawMessage(args)})
}

func urlArgs(u string, extra string) string {
	b, _ := json.Marshal(u)
	return `{"url":` + string(b) + extra + `}`
}

func private() tools.WebFetchConfig { return tools.WebFetchConfig{AllowPrivate: true} }

func TestRefusal(t *testing.T) {
	tests := []struct {
		ip          string
		strict, lax string // refusal without / with allow_private ("" = allowed)
	}{
		{"8.8.8.8", "", ""},
		{"2606:4700::1111", "", ""},
		{"127.0.0.1", "loopback", ""},
		{"127.1.2.3", "loopback", ""},
		{"::1", "loopback", ""},
		{"::ffff:127.0.0.1", "loopback", ""},
		{"10.1.2.3", "private", ""},
		{"172.16.0.1", "private", ""},
		{"192.168.1.1", "private", ""},
		{"fd12::1", "private", ""},
		{"100.64.0.1", "reserved", ""},
		{"0.0.0.1", "reserved", ""},
		{"255.255.255.255", "reserved", ""},
		{"64:ff9b::a00:1", "private", ""}, // NAT64 of 10.0.0.1
		{"2002:7f00:1::", "loopback", ""}, // 6to4 of 127.0.0.1
		{"169.254.169.254", "link-local (where cloud metadata services live)", "link-local (where cloud metadata services live)"},
		{"::ffff:169.254.169.254", "link-local (where cloud metadata services live)", "link-local (where cloud metadata services live)"},
		{"fe80::1", "link-local (where cloud metadata services live)", "link-local (where cloud metadata services live)"},
		{"fd00:ec2::254", "cloud metadata service", "cloud metadata service"},
		{"0.0.0.0", "unspecified", "unspecified"},
		{"::", "unspecified", "unspecified"},
		{"224.0.0.1", "multicast", "multicast"},
		{"ff02::1", "multicast", "multicast"},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		if got := refusal(ip, false); got != tt.strict {
			t.Errorf("refusal(%s, strict) = %q, want %q", tt.ip, got, tt.strict)
		}
		if got := refusal(ip, true); got != tt.lax {
			t.Errorf("refusal(%s, allow_private) = %q, want %q", tt.ip, got, tt.lax)
		}
	}
}

func TestDialTimeControl(t *testing.T) {
	g := newGuard(false, nil)
	if err := g.control("tcp4", "10.0.0.1:80", nil); !errors.Is(err, errRefused) {
		t.Errorf("control(10.0.0.1) = %v", err)
	}
	if err := g.control("tcp6", "[::1]:443", nil); !errors.Is(err, errRefused) {
		t.Errorf("control(::1) = %v", err)
	}
	if err := g.control("tcp4", "8.8.8.8:443", nil); err != nil {
		t.Errorf("control(8.8.8.8) = %v", err)
	}
	if err := g.control("tcp4", "garbage", nil); !errors.Is(err, errRefused) {
		t.Errorf("control(garbage) = %v", err)
	}
	lax := newGuard(true, nil)
	if err := lax.control("tcp4", "10.0.0.1:80", nil); err != nil {
		t.Errorf("allow_private control(10.0.0.1) = %v", err)
	}
	if err := lax.control("tcp4", "169.254.169.254:80", nil); !errors.Is(err, errRefused) {
		t.Errorf("allow_private control(169.254.169.254) = %v", err)
	}
}

func TestSSRFRefused(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "secret")
	}))
	defer srv.Close()

	strict := NewFetch(tools.WebFetchConfig{})
	for _, u := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), "http://[::1]:1/", "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0:1/"} {
		r := run(t, strict, urlArgs(u, ""))
		if !r.IsError || !r.Denied || !strings.Contains(r.Text, "refused") {
			t.Errorf("%s: %+v, want a refusal", u, r)
		}
	}
	// allow_private still refuses the metadata address.
	r := run(t, NewFetch(private()), urlArgs("http://169.254.169.254/latest/meta-data/", ""))
	if !r.Denied || !strings.Contains(r.Text, "link-local") {
		t.Errorf("metadata with allow_private: %+v", r)
	}

	// A host name that resolves to 10.x, and one with a mix of addresses:
	// every disallowed address is skipped, none is dialled.
	resolver := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "intranet.example":
			return []netip.Addr{netip.MustParseAddr("10.20.30.40")}, nil
		case "mixed.example":
			return []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, errors.New("no such host")
	}
	tool := newFetch(tools.WebFetchConfig{}, resolver)
	for _, u := range []string{"http://intranet.example/", "https://mixed.example:8443/x"} {
		r := run(t, tool, urlArgs(u, ""))
		if !r.Denied || !strings.Contains(r.Text, "web_fetch does not reach private networks") {
			t.Errorf("%s: %+v", u, r)
		}
	}
	if r := run(t, tool, urlArgs("http://intranet.example/", "")); !strings.Contains(r.Text, "10.20.30.40, a private address") {
		t.Errorf("refusal does not name the address: %s", r.Text)
	}
	if r := run(t, tool, urlArgs("http://nowhere.example/", "")); r.Denied || !strings.Contains(r.Text, "no such host") {
		t.Errorf("unresolvable host: %+v", r)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback server was reached %d times", n)
	}
}

func TestRedirectsRechecked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam", http.StatusFound)
		case "/to-ftp":
			http.Redirect(w, r, "ftp://example.com/file", http.StatusFound)
		case "/final":
			fmt.Fprint(w, "arrived")
		default: // /r/N redirects N more times, then to /final
			var n int
			if _, err := fmt.Sscanf(r.URL.Path, "/r/%d", &n); err != nil {
				http.NotFound(w, r)
				return
			}
			next := "/final"
			if n > 1 {
				next = fmt.Sprintf("/r/%d", n-1)
			}
			http.Redirect(w, r, next, http.StatusFound)
		}
	}))
	defer srv.Close()
	tool := NewFetch(private()) // MaxRedirects defaults to 0 here: set it.
	ft := tool.(*fetchTool)
	ft.cfg.MaxRedirects = 5

	r := run(t, tool, urlArgs(srv.URL+"/to-metadata", ""))
	if !r.Denied || !strings.Contains(r.Text, "169.254.169.254 is a link-local") && !strings.Contains(r.Text, "link-local") {
		t.Errorf("redirect to metadata: %+v", r)
	}
	r = run(t, tool, urlArgs(srv.URL+"/to-ftp", ""))
	if !r.Denied || !strings.Contains(r.Text, "only http and https") {
		t.Errorf("redirect to ftp: %+v", r)
	}
	r = run(t, tool, urlArgs(srv.URL+"/r/5", ""))
	if r.IsError || !strings.Contains(r.Text, "arrived") || !strings.Contains(r.Text, "URL: "+srv.URL+"/final") {
		t.Errorf("5 redirects: %+v", r)
	}
	r = run(t, tool, urlArgs(srv.URL+"/r/6", ""))
	if !r.IsError || !strings.Contains(r.Text, "stopped after 5 redirects") {
		t.Errorf("6 redirects: %+v", r)
	}
}

const testPage = `<!doctype html><html><head><title> Test  Page </title><style>body{color:red}</style>
<script>var secret = "do not show";</script></head>
<body><nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
<main>
<h1>Main   heading</h1>
<p>First paragraph with <b>bold</b> and a <a href="/docs/intro">relative link</a>.</p>
<ul><li>one</li><li>two <a href="https://example.org/x">https://example.org/x</a></li></ul>
<pre>  indented
    code</pre>
<img src="a.png" alt="a chart">
<table><tr><td>a</td><td>b</td></tr></table>
<p hidden>hidden text</p>
</main>
<footer>Footer text</footer>
</body></html>`

func TestHTMLToText(t *testing.T) {
	base, _ := url.Parse("https://site.example/blog/post")
	title, text, err := htmlToText(strings.NewReader(testPage), base)
	if err != nil {
		t.Fatal(err)
	}
	if title != "Test Page" {
		t.Errorf("title = %q", title)
	}
	want := "# Main heading\n\nFirst paragraph with bold and a relative link (https://site.example/docs/intro).\n\n" +
		"- one\n- two https://example.org/x\n\n  indented\n    code\n\n[image: a chart]\n\na | b |"
	if text != want {
		t.Errorf("text:\n%q\nwant:\n%q", text, want)
	}
	for _, unwanted := range []string{"do not show", "color:red", "Home", "hidden text", "Footer"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("text contains %q", unwanted)
		}
	}
	// Without <main>, the body is used (navigation still left out).
	_, text, _ = htmlToText(strings.NewReader("<body><nav>menu</nav><p>Just <i>this</i>.</p><footer>f</footer></body>"), base)
	if text != "Just this.\n\nf" {
		t.Errorf("body text = %q", text)
	}
}

func TestFetchContent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "Switchboard/") {
			http.Error(w, "bad agent "+ua, http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, testPage)
		case "/latin1":
			w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			_, _ = w.Write([]byte("<p>caf\xe9</p>"))
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"a":1}`)
		case "/bin":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write([]byte{0, 1, 2})
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("x", 5000))
		case "/long":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("é", 250))
		case "/sniff":
			fmt.Fprint(w, "<html><body><p>sniffed</p></body></html>")
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "<p>nothing here</p>")
		}
	}))
	defer srv.Close()
	tool := newFetch(tools.WebFetchConfig{AllowPrivate: true, MaxBytes: 1024}, nil)

	r := run(t, tool, urlArgs(srv.URL+"/page", ""))
	if r.IsError || !strings.HasPrefix(r.Text, "URL: "+srv.URL+"/page\nTitle: Test Page\n\n# Main heading") {
		t.Errorf("page: %+v", r)
	}
	if r := run(t, tool, urlArgs(srv.URL+"/latin1", "")); !strings.HasSuffix(r.Text, "\n\ncafé") {
		t.Errorf("latin1: %q", r.Text)
	}
	if r := run(t, tool, urlArgs(srv.URL+"/json", "")); r.IsError || !strings.HasSuffix(r.Text, `{"a":1}`) {
		t.Errorf("json: %+v", r)
	}
	if r := run(t, tool, urlArgs(srv.URL+"/bin", "")); !r.IsError || !strings.Contains(r.Text, `unsupported content type "application/octet-stream"`) {
		t.Errorf("binary: %+v", r)
	}
	if r := run(t, tool, urlArgs(srv.URL+"/sniff", "")); r.IsError || !strings.HasSuffix(r.Text, "sniffed") {
		t.Errorf("sniffed: %+v", r)
	}
	r = run(t, tool, urlArgs(srv.URL+"/missing", ""))
	if !r.IsError || !strings.Contains(r.Text, "HTTP status: 404 Not Found") || !strings.Contains(r.Text, "nothing here") {
		t.Errorf("404: %+v", r)
	}
	r = run(t, tool, urlArgs(srv.URL+"/big", ""))
	if r.IsError || !strings.Contains(r.Text, "larger than the download limit") || strings.Count(r.Text, "x") != 1024 {
		t.Errorf("big: %d x, %q", strings.Count(r.Text, "x"), r.Text[:120])
	}
	r = run(t, tool, urlArgs(srv.URL+"/long", `,"max_chars":100`))
	if strings.Count(r.Text, "é") != 100 || !strings.Contains(r.Text, "[... 150 more characters; call web_fetch again with start=100 to continue]") {
		t.Errorf("paged: %q", r.Text)
	}
	r = run(t, tool, urlArgs(srv.URL+"/long", `,"start":200,"max_chars":100`))
	if strings.Count(r.Text, "é") != 50 || strings.Contains(r.Text, "more characters") {
		t.Errorf("last part: %q", r.Text)
	}
	if r := run(t, tool, urlArgs(srv.URL+"/long", `,"start":999`)); !strings.Contains(r.Text, "past the end") {
		t.Errorf("start past end: %q", r.Text)
	}
}

func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	tool := newFetch(tools.WebFetchConfig{AllowPrivate: true, Timeout: 50 * time.Millisecond}, nil)
	r := run(t, tool, urlArgs(srv.URL, ""))
	if !r.IsError || !strings.Contains(r.Text, "timed out after 50ms") {
		t.Errorf("timeout: %+v", r)
	}
}

func TestFetchBadArgs(t *testing.T) {
	tool := NewFetch(tools.WebFetchConfig{})
	tests := []struct{ args, want string }{
		{`{}`, "url is required"},
		{`{"url":"ftp://x/y"}`, "must start with http:// or https://"},
		{`{"url":"file:///etc/passwd"}`, "must start with http:// or https://"},
		{`{"url":"http://"}`, "has no host"},
		{`{"url":"http://a b/"}`, "not a valid URL"},
		{`{"url":"http://x/","start":-1}`, "start must be >= 0"},
		{`{"url":"http://x/","max_chars":5}`, "max_chars must be between"},
		{`{"url":"http://x/","max_chars":60000}`, "max_chars must be between"},
		{`{"url":"http://x/","method":"POST"}`, `unknown field "method"`},
		{urlArgs("http://x/"+strings.Repeat("a", maxURLLen), ""), "longer than"},
	}
	for _, tt := range tests {
		r := run(t, tool, tt.args)
		if !r.IsError || !strings.Contains(r.Text, tt.want) {
			t.Errorf("%.80s: %+v, want %q", tt.args, r, tt.want)
		}
	}
}

func BenchmarkHTMLToText(b *testing.B) {
	big := strings.Repeat(testPage, 50)
	base, _ := url.Parse("https://site.example/")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := htmlToText(strings.NewReader(big), base); err != nil {
			b.Fatal(err)
		}
	}
}
