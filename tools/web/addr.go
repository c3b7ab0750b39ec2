package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Address classes web_fetch refuses.
var (
	// Always refused, even with allow_private.
	cloudMeta = []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata (169.254.169.254)
		netip.MustParsePrefix("fe80::/10"),      // IPv6 link-local
		netip.MustParsePrefix("fd00:ec2::/32"),  // AWS IPv6 metadata (fd00:ec2::254)
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
	}
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// refusal says why ip may not be reached, or "" when it may.
func refusal(ip netip.Addr, allowPrivate bool) string {
	ip = ip.Unmap()
	// IPv6 forms that carry an IPv4 address are judged by that address.
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			return refusal(netip.AddrFrom4([4]byte(b[12:16])), allowPrivate)
		case sixTo4.Contains(ip):
			return refusal(netip.AddrFrom4([4]byte(b[2:6])), allowPrivate)
		}
	}
	for _, p := range cloudMeta {
		if p.Contains(ip) {
			return "link-local (where cloud metadata services live)"
		}
	}
	switch {
	case !ip.IsValid(), ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case allowPrivate:
		return ""
	case ip.IsLoopback():
		return "loopback"
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
		if why := refusal(ip, g.allowPrivate); why != "" {
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: %s resolves to %s, a %s address; web_fetch does not reach private networks", errRefused, host, ip.Unmap(), why)
			}
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
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
