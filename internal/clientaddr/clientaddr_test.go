package clientaddr

import (
	"net"
	"net/netip"
	"testing"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::/64"},
		{"2001:db8::ffff:1", "2001:db8::/64"},
		{"2001:db8:0:1::1", "2001:db8:0:1::/64"},
		{"fe80::1%eth0", "fe80::/64"},
	} {
		if got := Key(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Key(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
}

func TestOfConn(t *testing.T) {
	if got, ok := OfConn(&net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 1}); !ok || got != "2001:db8::/64" {
		t.Errorf("OfConn(TCP [2001:db8::7]:1) = %q, %v", got, ok)
	}
	if got, ok := OfConn(&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 4222}); !ok || got != "127.0.0.1" {
		t.Errorf("OfConn(TCP 127.0.0.1:4222) = %q, %v", got, ok)
	}
	for _, a := range []net.Addr{nil, &net.UnixAddr{Name: "/tmp/s", Net: "unix"}, pipeAddr{}} {
		if got, ok := OfConn(a); ok {
			t.Errorf("OfConn(%v) = %q, want none", a, got)
		}
	}
}

// pipeAddr is the address of an in-process connection (net.Pipe).
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
