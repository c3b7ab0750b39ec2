// Package clientaddr names the client that a per-address limit counts (the
// HTTP listeners' connection share, the web console's login limit, the bus
// listener's login throttle): an IPv4 address as it is, an IPv6 address by
// its /64, which one host usually holds whole, so that a client cannot
// escape a limit by taking the next address of its own network. Zones are
// dropped and IPv4-mapped addresses count as their IPv4 address.
package clientaddr

import (
	"net"
	"net/netip"
)

// Key is the unit ip is counted by: "192.0.2.1", or "2001:db8::/64".
func Key(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// OfConn is the Key of a connection's remote address; ok is false when a
// names no IP address and port (an in-process connection has none).
func OfConn(a net.Addr) (key string, ok bool) {
	if a == nil {
		return "", false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return "", false
	}
	return Key(ap.Addr()), true
}
