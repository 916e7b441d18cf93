package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// forbidden4 are IPv4 ranges never dialled unless the operator opens them:
// this network, private, shared (CGNAT), loopback, link-local (cloud
// metadata), IETF protocol assignments, documentation, 6to4 relay,
// benchmarking, multicast, reserved and broadcast.
var forbidden4 = prefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
)

// private are the ranges operator internal names may resolve into; the
// rest of the forbidden set (loopback, link-local and metadata, multicast,
// unspecified, the host's own addresses) stays closed to them.
var private = prefixes("10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")

// forbidden6 are IPv6 ranges never dialled, inside global unicast
// (2000::/3, the only IPv6 range dialled at all): Teredo and the other
// IETF protocol assignments, documentation, and 6to4 whose embedded IPv4
// address is checked separately.
var forbidden6 = prefixes("2001::/23", "2001:db8::/32", "3fff::/20")

var (
	global6  = netip.MustParsePrefix("2000::/3")
	nat64    = netip.MustParsePrefix("64:ff9b::/96")
	sixto4   = netip.MustParsePrefix("2002::/16")
	loopback = prefixes("127.0.0.0/8", "::1/128")
	// metadata6 is the cloud metadata service's IPv6 address (AWS), a
	// ULA address: closed even inside an operator CIDR.
	metadata6 = netip.MustParseAddr("fd00:ec2::254")
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func inAny(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Guard decides which addresses may be dialled. The zero value is not
// usable; use NewGuard.
type Guard struct {
	// Open are operator CIDRs the InternalNames may be dialled in,
	// whatever the ranges above say.
	Open []netip.Prefix
	// InternalNames may resolve into private ranges and into Open (an
	// operator's package mirror on the LAN); no other name may.
	InternalNames Policy

	mu       sync.Mutex
	host     []netip.Addr
	hostTime time.Time

	// testOpen is the test-only hook: loopback prefixes where tests run
	// their upstream servers. Only SetTestHooks sets it, and only in a
	// test binary.
	testOpen []netip.Prefix
}

// NewGuard returns a guard with the operator's open CIDRs and internal names.
func NewGuard(open []netip.Prefix, internal Policy) *Guard {
	return &Guard{Open: open, InternalNames: internal}
}

// SetTestHooks lets the guard dial the given loopback prefixes, where tests
// run their upstream servers. It panics outside a test binary, so that no
// configuration can ever enable it, and for prefixes outside 127.0.0.0/8.
func (g *Guard) SetTestHooks(open ...netip.Prefix) {
	if !testing.Testing() {
		panic("egress: test hooks outside a test binary")
	}
	for _, p := range open {
		if !p.Addr().Is4() || !loopback[0].Contains(p.Addr()) || p.Bits() < 8 {
			panic("egress: test hooks open loopback only")
		}
	}
	g.testOpen = open
}

// hostAddrs returns the host's own addresses, refreshed every few seconds.
func (g *Guard) hostAddrs() []netip.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.hostTime) < 5*time.Second && g.host != nil {
		return g.host
	}
	g.host = g.host[:0]
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					g.host = append(g.host, ip.Unmap())
				}
			}
		}
	}
	g.hostTime = time.Now()
	return g.host
}

// Check returns nil when a may be dialled for name, or why not.
func (g *Guard) Check(name string, a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return fmt.Errorf("invalid address")
	}
	if inAny(a, g.testOpen) {
		return nil
	}
	// The host comes before the operator's CIDRs: opening the LAN for a
	// mirror (10.0.0.0/8) must not open the airlock host's own address in
	// it (its API, metrics, sshd, kubelet).
	for _, h := range g.hostAddrs() {
		if h == a {
			return fmt.Errorf("%s is an address of the airlock host", a)
		}
	}
	reason := forbidden(a)
	if reason == "" {
		return nil
	}
	// Only the operator's internal names reach inside: an operator CIDR
	// opened to every allowed name let any name a client may list (and
	// whose DNS its owner controls) resolve into the LAN (red team). The
	// metadata address fd00:ec2::254 is private (ULA) but never open.
	if name != "" && g.InternalNames.AllowsName(name) && (inAny(a, g.Open) || inAny(a, private)) && !neverOpen(a) {
		return nil
	}
	return fmt.Errorf("%s is %s", a, reason)
}

// neverOpen reports whether a stays closed even inside an operator CIDR:
// loopback (the host), link-local (cloud metadata), unspecified and
// multicast, and their embeddings, as for internal names.
func neverOpen(a netip.Addr) bool {
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			a = netip.AddrFrom4([4]byte(b[12:16]))
		case sixto4.Contains(a):
			a = netip.AddrFrom4([4]byte(b[2:6]))
		}
	}
	return a == metadata6 || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || (a.Is4() && a.As4()[0] == 0)
}

// forbidden says which forbidden range a is in, or "".
func forbidden(a netip.Addr) string {
	if a.Is4() {
		if inAny(a, forbidden4) {
			return describe4(a)
		}
		return ""
	}
	switch {
	case nat64.Contains(a):
		b := a.As16()
		if r := forbidden(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return "a NAT64 embedding of " + r
		}
		return ""
	case sixto4.Contains(a):
		b := a.As16()
		if r := forbidden(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return "a 6to4 embedding of " + r
		}
		return ""
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsPrivate():
		return "a unique local address (fc00::/7)"
	case !global6.Contains(a):
		return "outside IPv6 global unicast (reserved, IPv4-compatible or metadata)"
	case inAny(a, forbidden6):
		return "a reserved IPv6 range (Teredo, documentation, IETF)"
	}
	return ""
}

func describe4(a netip.Addr) string {
	switch {
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		return "the cloud metadata address"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsPrivate():
		return "private (RFC 1918)"
	case netip.MustParsePrefix("100.64.0.0/10").Contains(a):
		return "shared address space (100.64.0.0/10)"
	case a.IsMulticast():
		return "multicast"
	case netip.MustParsePrefix("0.0.0.0/8").Contains(a):
		return "\"this network\" (0.0.0.0/8)"
	}
	return "a reserved range"
}

// Resolver looks names up for dialling. net.DefaultResolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer dials a name's guarded addresses.
type Dialer struct {
	Guard    *Guard
	Resolver Resolver
	Timeout  time.Duration
}

// Dial resolves name and connects to one of its addresses (Resolve, then
// Connect). It returns the address dialled.
func (d *Dialer) Dial(ctx context.Context, name string, port uint16) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	addrs, err := d.Resolve(ctx, name)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return d.Connect(ctx, name, addrs, port)
}

// Resolve looks name up and returns the addresses the guard lets it
// dial, in order: a *ForbiddenError when it has only others.
func (d *Dialer) Resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	addrs, err := d.Resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, &UpstreamError{DNS: true, Msg: "cannot resolve " + name + dnsWhy(err)}
	}
	var out []netip.Addr
	var forbidden error
	for _, a := range addrs {
		if err := d.Guard.Check(name, a); err != nil {
			if forbidden == nil {
				forbidden = &ForbiddenError{Name: name, Detail: err.Error()}
			}
			continue
		}
		out = append(out, a.Unmap())
	}
	switch {
	case len(out) > 0:
		return out, nil
	case forbidden != nil:
		return nil, forbidden
	}
	return nil, &UpstreamError{DNS: true, Msg: name + " has no address"}
}

// Connect dials addrs (Resolve's) in order until one answers. The guard
// checks each address again right before connect (Control), so nothing
// the sandbox or a rebinding resolver says can pick an address without
// that check. It returns the address dialled.
func (d *Dialer) Connect(ctx context.Context, name string, addrs []netip.Addr, port uint16) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	nd := net.Dialer{Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		return d.Guard.Check(name, ap.Addr())
	}}
	var firstErr error
	for _, a := range addrs {
		c, err := nd.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, a, nil
		}
		if firstErr == nil {
			firstErr = &UpstreamError{Msg: fmt.Sprintf("connect to %s: %v", name, shortErr(err))}
		}
	}
	if firstErr == nil {
		firstErr = &UpstreamError{DNS: true, Msg: name + " has no address"}
	}
	return nil, netip.Addr{}, firstErr
}

// UpstreamError is an allowed name that could not be reached for a
// reason of the network, not of the policy: the upstream resolver did not
// give an address (DNS), or no address took the connection. It is not a
// denial: the gate records it as allowed, with what failed.
type UpstreamError struct {
	DNS bool
	Msg string
}

func (e *UpstreamError) Error() string {
	if e.DNS {
		return "upstream DNS failure: " + e.Msg
	}
	return "upstream connection failed: " + e.Msg
}

// dnsWhy says why a lookup failed, without the resolver's address (the
// host's configuration is not the sandbox's to learn).
func dnsWhy(err error) string {
	var de *net.DNSError
	switch {
	case !errors.As(err, &de):
		return ""
	case de.IsNotFound:
		return " (no such host)"
	case de.IsTimeout:
		return " (the resolver timed out)"
	}
	return " (the resolver failed)"
}

// ForbiddenError is a name that resolved only to addresses the guard
// refuses. Its message, which the sandbox's client sees (the execution's
// egress list, the audit log), does not say which addresses: that would
// make airlock an oracle for the operator's internal DNS and the host's
// own addresses. Detail, with them, is for the server's log.
type ForbiddenError struct {
	Name, Detail string
}

func (e *ForbiddenError) Error() string {
	return e.Name + " resolves to a forbidden address (private, loopback, link-local, reserved or the host's)"
}

// shortErr drops Go's "dial tcp a:p:" prefix: reasons name the name.
func shortErr(err error) string {
	var op *net.OpError
	if e, ok := err.(*net.OpError); ok {
		op = e
		if op.Err != nil {
			return op.Err.Error()
		}
	}
	return err.Error()
}
