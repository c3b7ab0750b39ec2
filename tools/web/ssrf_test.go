package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/tools"
)

const (
	linkLocal       = "link-local (where cloud metadata services live)"
	metadataService = "cloud metadata service"
)

// TestRefusalEveryForm judges every spelling of an internal address that
// issue 13 listed, and the other IPv6 forms that embed an IPv4 address:
// zones are stripped, the embedded IPv4 address is judged by the same
// rules, and the deprecated IPv4-compatible ::a.b.c.d form is refused.
func TestRefusalEveryForm(t *testing.T) {
	const compat = "IPv4-compatible (the deprecated ::a.b.c.d form)"
	tests := []struct {
		ip          string
		strict, lax string // refusal without / with allow_private ("" = allowed)
	}{
		// Zoned literals: netip.Prefix.Contains is false for them.
		{"fe80::1%eth0", linkLocal, linkLocal},
		{"fe80::a9fe:a9fe%2", linkLocal, linkLocal},
		{"64:ff9b::a9fe:a9fe%eth0", linkLocal, linkLocal}, // NAT64 of 169.254.169.254
		{"64:ff9b::a00:1%eth0", "private", ""},
		{"::ffff:169.254.169.254%eth0", linkLocal, linkLocal},
		{"::1%lo", "loopback", ""},
		{"fd00:ec2::254%eth0", metadataService, metadataService},
		{"ff02::1%eth0", "multicast", "multicast"},
		// IPv4-compatible ::a.b.c.d (deprecated, RFC 4291): always refused.
		{"::127.0.0.1", compat, compat},
		{"::169.254.169.254", compat, compat},
		{"::10.0.0.1", compat, compat},
		{"::8.8.8.8", compat, compat},
		{"::127.0.0.1%eth0", compat, compat},
		// IPv4-mapped and IPv4-translated (SIIT).
		{"::ffff:127.0.0.1", "loopback", ""},
		{"::ffff:a9fe:a9fe", linkLocal, linkLocal},
		{"::ffff:0:a9fe:a9fe", linkLocal, linkLocal},
		{"::ffff:0:7f00:1", "loopback", ""},
		{"::ffff:0:808:808", "", ""},
		// NAT64, well-known prefix and local-use prefix (RFC 8215).
		{"64:ff9b::a9fe:a9fe", linkLocal, linkLocal},
		{"64:ff9b::7f00:1", "loopback", ""},
		{"64:ff9b::808:808", "", ""},
		{"64:ff9b:1::a9fe:a9fe", linkLocal, linkLocal},                 // /96 inside the local-use prefix
		{"64:ff9b:1:a9fe:a9:fe00::", linkLocal, linkLocal},             // /48 embedding (RFC 6052)
		{"64:ff9b:1:0:8:808:800::", "private", ""},                     // local use, 8.8.8.8 at /64
		{"64:ff9b:1:7f00:1::", "private", ""},                          // local use, 127.0.1.0 at /48
		{"2002:a9fe:a9fe::1", linkLocal, linkLocal},                    // 6to4 of 169.254.169.254
		{"2002:7f00:1::1", "loopback", ""},                             // 6to4 of 127.0.0.1
		{"2002:c0a8:101::1", "private", ""},                            // 6to4 of 192.168.1.1
		{"2002:808:808::1", "", ""},                                    // 6to4 of 8.8.8.8
		{"2001:0:4136:e378:8000:63bf:5601:5601", linkLocal, linkLocal}, // Teredo, client 169.254.169.254 (obfuscated)
		{"2001:0:a9fe:a9fe::1", linkLocal, linkLocal},                  // Teredo, server 169.254.169.254
		{"2001:0:808:808:0:0:f7f7:f7f7", "", ""},                       // Teredo, server and client 8.8.8.8
		{"2001:0:808:808:0:0:80ff:fffe", "loopback", ""},               // Teredo, client 127.0.0.1
		// Link-local unicast and site-local.
		{"169.254.0.1", linkLocal, linkLocal},
		{"fe80::1", linkLocal, linkLocal},
		{"febf::1", linkLocal, linkLocal},
		{"fec0::1", "reserved", ""},
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

// TestSSRFFormsInURLs gives web_fetch the URLs a model would write for
// those forms; each is refused before anything is dialled, with and
// without allow_private.
func TestSSRFFormsInURLs(t *testing.T) {
	always := []string{
		"http://[fe80::1%25eth0]/",
		"http://[fe80::1%25eth0]:8080/latest/meta-data/",
		"http://[64:ff9b::a9fe:a9fe%25eth0]/latest/meta-data/",
		"http://[64:ff9b::169.254.169.254]/latest/meta-data/",
		"http://[::127.0.0.1]/",
		"http://[::127.0.0.1]:8080/",
		"http://[::169.254.169.254]/",
		"http://[::ffff:169.254.169.254]/",
		"http://[::ffff:a9fe:a9fe%25lo]/",
		"http://[2002:a9fe:a9fe::1]/",
		"http://[2001:0:4136:e378:8000:63bf:5601:5601]/",
		"http://[fe80::a9fe:a9fe]/",
		"http://169.254.169.254/latest/meta-data/",
		"http://[fd00:ec2::254]/latest/meta-data/",
	}
	private := []string{
		"http://[::ffff:127.0.0.1]/",
		"http://[::1%25lo]/",
		"http://[64:ff9b::7f00:1]/",
		"http://[2002:7f00:1::1]/",
		"http://[::ffff:0:7f00:1]/",
		"http://[64:ff9b:1::a00:1]/",
	}
	strict := NewFetch(tools.WebFetchConfig{})
	lax := NewFetch(tools.WebFetchConfig{AllowPrivate: true})
	for _, u := range append(always, private...) {
		if r := run(t, strict, urlArgs(u, "")); !r.Denied || !strings.Contains(r.Text, "refused") {
			t.Errorf("%s: %+v, want a refusal", u, r)
		}
	}
	for _, u := range always {
		if r := run(t, lax, urlArgs(u, "")); !r.Denied || !strings.Contains(r.Text, "refused") {
			t.Errorf("allow_private %s: %+v, want a refusal", u, r)
		}
	}
	// A zone written without escaping its "%" is not a valid URL.
	if r := run(t, strict, urlArgs("http://[fe80::1%eth0]/", "")); !r.IsError || !strings.Contains(r.Text, "not a valid URL") {
		t.Errorf("unescaped zone: %+v", r)
	}
}

// TestSSRFFormsFromResolver: a host name whose DNS answer is one of those
// forms is refused at dial time, and the refusal names the address.
func TestSSRFFormsFromResolver(t *testing.T) {
	answers := map[string]string{
		"zoned.example":  "fe80::1%eth0",
		"nat64.example":  "64:ff9b::a9fe:a9fe%eth0",
		"compat.example": "::127.0.0.1",
		"mapped.example": "::ffff:169.254.169.254",
		"6to4.example":   "2002:a9fe:a9fe::1",
		"teredo.example": "2001:0:4136:e378:8000:63bf:5601:5601",
	}
	resolver := func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := answers[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, errors.New("no such host")
	}
	tool := newFetch(tools.WebFetchConfig{AllowPrivate: true}, resolver)
	for host := range answers {
		r := run(t, tool, urlArgs("http://"+host+"/latest/meta-data/", ""))
		if !r.Denied || !strings.Contains(r.Text, "web_fetch does not reach private networks") {
			t.Errorf("%s: %+v, want a refusal", host, r)
		}
	}
	r := run(t, tool, urlArgs("http://zoned.example/", ""))
	if !strings.Contains(r.Text, "resolves to fe80::1, a link-local") {
		t.Errorf("refusal does not name the address without its zone: %s", r.Text)
	}

	// The socket's Control hook, the last check before connect(2), sees
	// the same forms.
	g := newGuard(true, nil)
	for _, addr := range []string{"[fe80::1%eth0]:80", "[64:ff9b::a9fe:a9fe%eth0]:80", "[::7f00:1]:80", "[2002:a9fe:a9fe::1]:443"} {
		if err := g.control("tcp6", addr, nil); !errors.Is(err, errRefused) {
			t.Errorf("control(%s) = %v, want a refusal", addr, err)
		}
	}
}

// TestRedirectToZonedLinkLocal: a redirect to such a form is refused too.
func TestRedirectToZonedLinkLocal(t *testing.T) {
	var final atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/zoned":
			http.Redirect(w, r, "http://[fe80::a9fe:a9fe%25eth0]/latest/meta-data/", http.StatusFound)
		case "/nat64":
			http.Redirect(w, r, "http://[64:ff9b::a9fe:a9fe%25eth0]/latest/meta-data/", http.StatusFound)
		case "/compat":
			http.Redirect(w, r, "http://[::127.0.0.1]:"+r.Host[strings.LastIndexByte(r.Host, ':')+1:]+"/final", http.StatusFound)
		default:
			final.Add(1)
			fmt.Fprint(w, "arrived")
		}
	}))
	defer srv.Close()
	tool := NewFetch(tools.WebFetchConfig{AllowPrivate: true, MaxRedirects: 5})
	for _, p := range []string{"/zoned", "/nat64", "/compat"} {
		if r := run(t, tool, urlArgs(srv.URL+p, "")); !r.Denied || !strings.Contains(r.Text, "refused") {
			t.Errorf("redirect %s: %+v, want a refusal", p, r)
		}
	}
	if n := final.Load(); n != 0 {
		t.Errorf("a refused redirect reached the server %d times", n)
	}
}

// TestMetadataRefusedWithAllowPrivate: the cloud metadata services that
// live outside the link-local ranges (Alibaba Cloud's 100.100.100.200 in
// carrier-grade NAT, Oracle's 192.0.0.192, Azure's WireServer, the AWS,
// Google and Scaleway IPv6 ones) are refused even with allow_private, in
// every spelling: IPv4-mapped, SIIT, NAT64 (well-known and local-use, at
// /96 and /48), 6to4, Teredo, as a URL literal, from the resolver, and in
// the socket's last check; the neighbours of those addresses stay allowed.
func TestMetadataRefusedWithAllowPrivate(t *testing.T) {
	forms := []string{
		"100.100.100.200",
		"::ffff:100.100.100.200",
		"::ffff:6464:64c8%eth0",
		"::ffff:0:6464:64c8",           // SIIT
		"64:ff9b::6464:64c8",           // NAT64
		"64:ff9b:1::6464:64c8",         // local-use NAT64, /96
		"64:ff9b:1:6464:64:c800::",     // local-use NAT64, /48
		"2002:6464:64c8::1",            // 6to4
		"2001:0:6464:64c8::1",          // Teredo server
		"2001:0:808:808:0:0:9b9b:9b37", // Teredo client (stored inverted)
		"192.0.0.192",
		"::ffff:c000:c0",
		"64:ff9b::c000:c0",
		"168.63.129.16",
		"2002:a83f:8110::1",
		"fd00:ec2::254",
		"fd00:ec2::23",
		"fd20:ce::254",
		"fd20:ce::254%eth0",
		"fd00:42::42",
	}
	for _, f := range forms {
		ip := netip.MustParseAddr(f)
		for _, lax := range []bool{false, true} {
			if got := refusal(ip, lax); got != metadataService {
				t.Errorf("refusal(%s, allow_private=%v) = %q, want %q", f, lax, got, metadataService)
			}
		}
	}
	for _, f := range []string{"100.100.100.201", "100.64.0.1", "192.0.0.193", "fd20:ce::253", "fd00:42::43"} {
		if got := refusal(netip.MustParseAddr(f), true); got != "" {
			t.Errorf("refusal(%s, allow_private) = %q, want allowed (not a metadata address)", f, got)
		}
	}

	lax := NewFetch(tools.WebFetchConfig{AllowPrivate: true})
	for _, u := range []string{
		"http://100.100.100.200/latest/meta-data/",
		"http://[::ffff:100.100.100.200]/latest/meta-data/",
		"http://[64:ff9b::100.100.100.200]/latest/meta-data/",
		"http://[2002:6464:64c8::1]/latest/meta-data/",
		"http://192.0.0.192/opc/v1/instance/",
		"http://[fd20:ce::254]/computeMetadata/v1/",
		"http://[fd00:ec2::254]/latest/meta-data/",
	} {
		if r := run(t, lax, urlArgs(u, "")); !r.Denied || !strings.Contains(r.Text, "cloud metadata service") {
			t.Errorf("allow_private %s: %+v, want a refusal naming the metadata service", u, r)
		}
	}

	resolver := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "metadata.example" {
			return []netip.Addr{netip.MustParseAddr("::ffff:6464:64c8")}, nil
		}
		return nil, errors.New("no such host")
	}
	r := run(t, newFetch(tools.WebFetchConfig{AllowPrivate: true}, resolver), urlArgs("http://metadata.example/latest/meta-data/", ""))
	if !r.Denied || !strings.Contains(r.Text, "resolves to 100.100.100.200, a cloud metadata service address") {
		t.Errorf("a name resolving to the metadata service: %+v, want a refusal", r)
	}
	g := newGuard(true, nil)
	for _, addr := range []string{"100.100.100.200:80", "[::ffff:6464:64c8]:80", "[64:ff9b::6464:64c8]:80", "[fd20:ce::254]:80"} {
		if err := g.control("tcp", addr, nil); !errors.Is(err, errRefused) {
			t.Errorf("control(%s) = %v, want a refusal", addr, err)
		}
	}
}
