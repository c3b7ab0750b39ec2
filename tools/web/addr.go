package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
)

// Address classes web_fetch refuses.
var (
	// Cloud metadata services outside the link-local ranges, refused even
	// with allow_private (those in 169.254/16 and fe80::/10 are refused as
	// link-local). Each is judged in every form: IPv4-mapped, NAT64, 6to4
	// and Teredo spellings of the IPv4 ones too.
	metadata = []netip.Prefix{
		netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud (inside carrier-grade NAT)
		netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud
		netip.MustParsePrefix("168.63.129.16/32"),   // Azure's WireServer (a public address)
		netip.MustParsePrefix("fd00:ec2::/32"),      // AWS IPv6 (fd00:ec2::254, and fd00:ec2::23 of EKS)
		netip.MustParsePrefix("fd20:ce::254/128"),   // Google Cloud IPv6
		netip.MustParsePrefix("fd00:42::42/128"),    // Scaleway IPv6
	}
	// Refused unless allow_private.
	special = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
		netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
		netip.MustParsePrefix("100::/64"),        // discard
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	}
	// IPv6 forms that carry an IPv4 address.
	v4compat     = netip.MustParsePrefix("::/96")           // ::a.b.c.d, deprecated (RFC 4291)
	v4translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT ::ffff:0:a.b.c.d (RFC 2765)
	nat64        = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64 prefix (RFC 6052)
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")  // local-use NAT64 prefixes (RFC 8215)
	sixTo4       = netip.MustParsePrefix("2002::/16")       // 6to4 (RFC 3056)
	teredo       = netip.MustParsePrefix("2001::/32")       // Teredo (RFC 4380)
)

const (
	whyLinkLocal = "link-local (where cloud metadata services live)"
	whyMetadata  = "cloud metadata service"
	whyCompat    = "IPv4-compatible (the deprecated ::a.b.c.d form)"
)

// refusal says why ip may not be reached, or "" when it may. A zone
// (fe80::1%eth0) is dropped first: it does not change where an address
// leads, but netip.Prefix.Contains is false for any zoned address. IPv6
// forms that carry an IPv4 address (IPv4-mapped, SIIT, NAT64, 6to4,
// Teredo) are judged by that address too; the deprecated IPv4-compatible
// ::a.b.c.d form is always refused. Link-local and cloud metadata
// addresses are refused whatever allowPrivate says.
func refusal(ip netip.Addr, allowPrivate bool) string {
	ip = ip.WithZone("").Unmap()
	switch {
	case !ip.IsValid(), ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast():
		return whyLinkLocal
	case slices.ContainsFunc(metadata, func(p netip.Prefix) bool { return p.Contains(ip) }):
		return whyMetadata
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.IsLoopback():
		if allowPrivate {
			return ""
		}
		return "loopback"
	case v4compat.Contains(ip):
		return whyCompat
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip), v4translated.Contains(ip):
			return refusal(v4(b[12:16]), allowPrivate)
		case sixTo4.Contains(ip):
			return refusal(v4(b[2:6]), allowPrivate)
		case teredo.Contains(ip):
			// The Teredo server, then the client's address (stored inverted).
			if why := refusal(v4(b[4:8]), allowPrivate); why != "" {
				return why
			}
			return refusal(v4([]byte{^b[12], ^b[13], ^b[14], ^b[15]}), allowPrivate)
		case nat64Local.Contains(ip):
			// The IPv4 address sits where the operator's prefix length
			// (/48 to /96, RFC 6052) puts it: no candidate may be
			// link-local or a metadata service, and the prefix is a
			// private network anyway.
			for _, c := range [][]byte{{b[6], b[7], b[9], b[10]}, {b[7], b[9], b[10], b[11]}, b[9:13], b[12:16]} {
				if why := refusal(v4(c), true); why == whyLinkLocal || why == whyMetadata {
					return why
				}
			}
			if !allowPrivate {
				return "private"
			}
			return ""
		}
	}
	switch {
	case allowPrivate:
		return ""
	case ip.IsPrivate():
		return "private"
	}
	for _, p := range special {
		if p.Contains(ip) {
			return "reserved"
		}
	}
	return ""
}

// v4 is the IPv4 address of 4 bytes.
func v4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b)) }

// errRefused marks a destination web_fetch will not reach.
var errRefused = errors.New("refused")

// guard dials only to addresses that pass refusal: it resolves the host
// itself, refuses every disallowed address, and connects to the checked
// address (never resolving again), so a DNS answer that changes between a
// check and the connection (rebinding) cannot slip through. The dialer's
// Control hook checks the address once more right before connect(2).
type guard struct {
	allowPrivate bool
	resolve      func(ctx context.Context, host string) ([]netip.Addr, error)
	dialer       *net.Dialer
}

func newGuard(allowPrivate bool, resolve func(ctx context.Context, host string) ([]netip.Addr, error)) *guard {
	g := &guard{allowPrivate: allowPrivate, resolve: resolve}
	if g.resolve == nil {
		g.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	g.dialer = &net.Dialer{Control: g.control}
	return g
}

// control runs right before connect(2) with the numeric address.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot check address %s", errRefused, address)
	}
	if why := refusal(ap.Addr(), g.allowPrivate); why != "" {
		return fmt.Errorf("%w: %s is a %s address", errRefused, ap.Addr(), why)
	}
	return nil
}

// DialContext is the transport's dial function.
func (g *guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = g.resolve(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	var firstErr error
	for _, ip := range ips {
		ip = ip.WithZone("").Unmap() // dial exactly the address checked
		if why := refusal(ip, g.allowPrivate); why != "" {
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: %s resolves to %s, a %s address; web_fetch does not reach private networks", errRefused, host, ip, why)
			}
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil || errors.Is(firstErr, errRefused) {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("resolve %s: no addresses", host)
	}
	return nil, firstErr
}
