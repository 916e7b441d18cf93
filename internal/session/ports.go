package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/broker"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
)

// A session's ports: what outside clients may reach of the programs that
// listen inside its sandbox. A port is open once a client asks for it
// (OpenPort) or reaches it with an API key; it then has a token, which is
// the only thing that lets a request without a key in (or nothing, if
// the port is public), one-time codes for browser links, and counters.
// Connections are made inside the sandbox's network namespace, to its
// loopback: never to anything of the host's.

// portTokenPrefix marks a port's token (and a link code) for what it is
// in logs and secret scanners.
const portTokenPrefix = "alp_"

// maxLinks bounds the one-time link codes a port keeps (the oldest go).
const maxLinks = 32

// ports are a session's open ports; mu guards every field.
type ports struct {
	mu     sync.Mutex
	byPort map[int]*portGrant
	open   int // proxied connections open, every port's
	closed bool
}

// portGrant is one open port.
type portGrant struct {
	port   int
	public bool
	token  string
	// links: one-time codes' SHA-256 and when each expires.
	links  map[[32]byte]time.Time
	opened time.Time
	by     Caller
	conns  map[*portConn]struct{}
	closed bool

	requests, bytesIn, bytesOut, connections atomic.Int64
	touched                                  atomic.Int64 // unix nanoseconds
}

// Port is an open port as a request reached it: Dial connects to it.
type Port struct {
	s *Session
	g *portGrant
}

// CheckPort checks a port number a client named.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: port %d must be between 1 and 65535", errdefs.ErrInvalidArgument, port)
	}
	return nil
}

// ParsePort reads a port number from a path or a host name: 1 to 65535,
// decimal, no sign or leading zero.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || s == "" || s[0] == '0' || s[0] == '+' || len(s) > 5 {
		return 0, fmt.Errorf("%w: %q is not a port number (1 to 65535)", errdefs.ErrInvalidArgument, truncateID(s))
	}
	return n, CheckPort(n)
}

func newSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return portTokenPrefix + hex.EncodeToString(b[:])
}

// OpenPort opens port for the caller ctx carries, or changes whether it
// is public; it returns the port with its token and a new one-time link
// code (valid for ports.link_ttl). Opening an open port keeps its token.
func (s *Session) OpenPort(ctx context.Context, port int, public bool) (apitype.Port, error) {
	if err := s.portsEnabled(port); err != nil {
		return apitype.Port{}, err
	}
	if public && !s.m.cfg.Ports.AllowPublic {
		return apitype.Port{}, fmt.Errorf("%w: this server does not allow public ports (ports.allow_public): open the port private and send its token", errdefs.ErrPermission)
	}
	g, created, err := s.grant(ctx, port, func(g *portGrant) { g.public = public })
	if err != nil {
		return apitype.Port{}, err
	}
	code := newSecret()
	s.ports.mu.Lock()
	now := time.Now()
	for h, exp := range g.links {
		if now.After(exp) {
			delete(g.links, h)
		}
	}
	for len(g.links) >= maxLinks {
		var oldest [32]byte
		var at time.Time
		for h, exp := range g.links {
			if at.IsZero() || exp.Before(at) {
				oldest, at = h, exp
			}
		}
		delete(g.links, oldest)
	}
	exp := now.Add(s.m.cfg.Ports.LinkTTL.D())
	g.links[sha256.Sum256([]byte(code))] = exp
	p := g.describeLocked()
	s.ports.mu.Unlock()
	p.Token, p.LinkCode, p.LinkExpiresAt = g.token, code, exp.UTC()
	if !created {
		s.portEvent(PortEvent{Caller: s.callerOf(ctx), Op: PortChange, Port: port, Public: public})
	}
	s.Touch()
	return p, nil
}

// portsEnabled refuses ports when the server has them off, and bad
// port numbers.
func (s *Session) portsEnabled(port int) error {
	if !s.m.cfg.Ports.Enabled {
		return fmt.Errorf("%w: this server does not serve sessions' ports (ports.enabled)", errdefs.ErrPermission)
	}
	if err := CheckPort(port); err != nil {
		return err
	}
	if err := s.airlockPort(port); err != nil {
		return err
	}
	if end := s.End(); !end.Zero() {
		return gone(end)
	}
	return nil
}

// grant returns port's grant, made (and change applied) if the port is
// not open yet; change, if set, is applied to an open one too.
func (s *Session) grant(ctx context.Context, port int, change func(*portGrant)) (*portGrant, bool, error) {
	s.ports.mu.Lock()
	if s.ports.closed {
		s.ports.mu.Unlock()
		return nil, false, gone(s.End())
	}
	g, ok := s.ports.byPort[port]
	if !ok {
		if len(s.ports.byPort) >= s.m.cfg.Ports.MaxPerSession {
			s.ports.mu.Unlock()
			return nil, false, fmt.Errorf("%w: the session has %d ports open, the server's ports.max_per_session: close one first (DELETE /v1/sessions/{id}/ports/{port})", errdefs.ErrLimit, len(s.ports.byPort))
		}
		if s.ports.byPort == nil {
			s.ports.byPort = map[int]*portGrant{}
		}
		g = &portGrant{port: port, token: newSecret(), links: map[[32]byte]time.Time{}, opened: time.Now(), by: s.callerOf(ctx), conns: map[*portConn]struct{}{}}
		s.ports.byPort[port] = g
	}
	if change != nil {
		change(g)
	}
	public := g.public
	s.ports.mu.Unlock()
	if !ok {
		s.portEvent(PortEvent{Caller: g.by, Op: PortOpen, Port: port, Public: public})
	}
	return g, !ok, nil
}

// ClosePort closes port: its token and links stop working and its
// connections are closed. A port that is not open is not found.
func (s *Session) ClosePort(ctx context.Context, port int) error {
	if err := CheckPort(port); err != nil {
		return err
	}
	s.ports.mu.Lock()
	g, ok := s.ports.byPort[port]
	if ok {
		delete(s.ports.byPort, port)
	}
	s.ports.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: port %d of the session is not open", errdefs.ErrNotFound, port)
	}
	s.closeGrant(g, s.callerOf(ctx))
	return nil
}

// closeGrant closes g's connections and reports its end.
func (s *Session) closeGrant(g *portGrant, who Caller) {
	s.ports.mu.Lock()
	g.closed = true
	conns := make([]*portConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	public := g.public
	s.ports.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.portEvent(PortEvent{Caller: who, Op: PortClose, Port: g.port, Public: public, Duration: time.Since(g.opened),
		Requests: g.requests.Load(), Connections: g.connections.Load(), BytesIn: g.bytesIn.Load(), BytesOut: g.bytesOut.Load()})
}

// closePorts closes every port of an ending session.
func (s *Session) closePorts(who Caller) {
	s.ports.mu.Lock()
	s.ports.closed = true
	all := make([]*portGrant, 0, len(s.ports.byPort))
	for _, g := range s.ports.byPort {
		all = append(all, g)
	}
	s.ports.byPort = nil
	s.ports.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].port < all[j].port })
	for _, g := range all {
		s.closeGrant(g, who)
	}
}

// Ports describes the session's open ports, by number (no tokens).
func (s *Session) Ports() []apitype.Port {
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	out := make([]apitype.Port, 0, len(s.ports.byPort))
	for _, g := range s.ports.byPort {
		out = append(out, g.describeLocked())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// DescribePort describes one open port (no token).
func (s *Session) DescribePort(port int) (apitype.Port, error) {
	if err := CheckPort(port); err != nil {
		return apitype.Port{}, err
	}
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	g, ok := s.ports.byPort[port]
	if !ok {
		return apitype.Port{}, fmt.Errorf("%w: port %d of the session is not open (POST /v1/sessions/{id}/ports/%d opens it)", errdefs.ErrNotFound, port, port)
	}
	return g.describeLocked(), nil
}

func (g *portGrant) describeLocked() apitype.Port {
	return apitype.Port{Port: g.port, Public: g.public, OpenedAt: g.opened.UTC(), Requests: g.requests.Load(),
		Connections: g.connections.Load(), OpenConnections: len(g.conns), BytesIn: g.bytesIn.Load(), BytesOut: g.bytesOut.Load()}
}

// PortForCaller is port as the caller ctx carries reaches it with an API
// key (the caller found the session, see Manager.Find): a port not open
// yet is opened, private, in its name.
func (s *Session) PortForCaller(ctx context.Context, port int) (*Port, error) {
	if err := s.portsEnabled(port); err != nil {
		return nil, err
	}
	g, _, err := s.grant(ctx, port, nil)
	if err != nil {
		return nil, err
	}
	return &Port{s: s, g: g}, nil
}

// PortForToken is port as a request without an API key reaches it: it
// must be open, and public or token must be its token. Nothing says why
// not: an unknown port and a wrong token look the same.
func (s *Session) PortForToken(port int, token string) (*Port, bool) {
	if !s.m.cfg.Ports.Enabled || CheckPort(port) != nil || s.airlockPort(port) != nil || !s.End().Zero() {
		return nil, false
	}
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	g, ok := s.ports.byPort[port]
	if !ok {
		return nil, false
	}
	if g.public || token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(g.token)) == 1 {
		return &Port{s: s, g: g}, true
	}
	return nil, false
}

// RedeemPortLink uses up a one-time link code of port and returns the
// port's token (for the cookie the link sets); false when the code is
// unknown, used or expired.
func (s *Session) RedeemPortLink(port int, code string) (string, bool) {
	if !s.End().Zero() {
		return "", false
	}
	h := sha256.Sum256([]byte(code))
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	g, ok := s.ports.byPort[port]
	if !ok {
		return "", false
	}
	exp, ok := g.links[h]
	if !ok {
		return "", false
	}
	delete(g.links, h)
	if time.Now().After(exp) {
		return "", false
	}
	return g.token, true
}

// Number is the port's number.
func (p *Port) Number() int { return p.g.port }

// Public reports whether the port is public.
func (p *Port) Public() bool {
	p.s.ports.mu.Lock()
	defer p.s.ports.mu.Unlock()
	return p.g.public
}

// Session is the port's session.
func (p *Port) Session() *Session { return p.s }

// Request counts a request to the port and marks the session used.
func (p *Port) Request() {
	p.g.requests.Add(1)
	p.s.Touch()
}

// Dial connects to the port on the sandbox's loopback, from inside its
// network namespace: to 127.0.0.1 (what listens on 0.0.0.0 too), else
// ::1. The connection counts against ports.max_connections, its bytes in
// the port's counters; closing the port or ending the session closes it.
func (p *Port) Dial(ctx context.Context) (net.Conn, error) {
	s, g := p.s, p.g
	max := s.m.cfg.Ports.MaxConnections
	s.ports.mu.Lock()
	switch {
	case g.closed || s.ports.closed:
		s.ports.mu.Unlock()
		return nil, fmt.Errorf("%w: port %d of the session was closed", errdefs.ErrGone, g.port)
	case s.ports.open >= max:
		s.ports.mu.Unlock()
		return nil, fmt.Errorf("%w: %d connections to the session's ports are open, the server's ports.max_connections", errdefs.ErrLimit, max)
	}
	s.ports.open++
	s.ports.mu.Unlock()
	c, err := s.dialPort(ctx, g.port)
	s.ports.mu.Lock()
	if err == nil && (g.closed || s.ports.closed) {
		c.Close()
		err = fmt.Errorf("%w: port %d of the session was closed", errdefs.ErrGone, g.port)
	}
	if err != nil {
		s.ports.open--
		s.ports.mu.Unlock()
		return nil, err
	}
	pc := &portConn{Conn: c, p: p}
	g.conns[pc] = struct{}{}
	s.ports.mu.Unlock()
	g.connections.Add(1)
	return pc, nil
}

// airlockPorts are the ports airlock itself listens on inside a
// sandbox, whether or not this session uses them: a port link to one
// would hand whoever holds it the session's tools (and their budgets
// and credentials) or its egress.
var airlockPorts = map[int]string{
	53:               "airlock's DNS responder",
	egress.ProxyPort: "airlock's egress proxy",
	broker.Port:      "airlock's tool endpoint",
}

// airlockPort refuses a port that is airlock's inside the sandbox, not
// a program's: those above, and every port the session's egress gate
// listens on (which change with its network policy, so dialPort asks
// again at each connection).
func (s *Session) airlockPort(port int) error {
	what, ok := airlockPorts[port]
	if !ok {
		if g := s.egressGate(); g != nil && port <= 65535 && g.Holds(uint16(port)) {
			what, ok = "airlock's egress gate (the session's network policy uses it)", true
		}
	}
	if ok {
		return fmt.Errorf("%w: port %d inside the session is %s, not a program's, and is never served outside it: listen on another port", errdefs.ErrPermission, port, what)
	}
	return nil
}

// dialPort connects to port on the sandbox's loopback.
func (s *Session) dialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := s.airlockPort(port); err != nil {
		return nil, err
	}
	ns, err := s.netns()
	if err != nil {
		return nil, err
	}
	defer unix.Close(ns)
	p := strconv.Itoa(port)
	c, err := egress.DialIn(ctx, ns, "tcp4", "127.0.0.1:"+p)
	if errors.Is(err, unix.ECONNREFUSED) {
		// A program on ::1 only (Node's "localhost", say); a sandbox
		// without IPv6 refuses this one as well.
		if c6, err6 := egress.DialIn(ctx, ns, "tcp6", "[::1]:"+p); err6 == nil {
			return c6, nil
		}
		return nil, fmt.Errorf("%w: nothing listens on port %d inside the session (on 127.0.0.1, 0.0.0.0 or ::1): start the program, then retry", errdefs.ErrBadGateway, port)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errdefs.Private(errdefs.ErrBadGateway, fmt.Sprintf("could not connect to port %d inside the session", port), err)
	}
	return c, nil
}

// netns is a descriptor of the sandbox's network namespace of its own,
// for the caller to close: a duplicate, taken under attachMu (teardown
// closes the sandbox's own under it; a number closed and reused could
// name another sandbox's namespace, or the server's).
func (s *Session) netns() (int, error) {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	if end := s.End(); !end.Zero() {
		return -1, gone(end)
	}
	fd, ok := s.inst.NetNS()
	if !ok {
		// gVisor without a network: runsc's own network stack, which
		// nothing outside the sandbox can connect into.
		return -1, fmt.Errorf("%w: this %s session was created without a network, and nothing outside its sandbox can reach its ports: create the session with \"network\" (an empty allow list is enough) to reach its ports", errdefs.ErrConflict, s.inst.Isolation())
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, errdefs.Private(errdefs.ErrUnavailable, "could not reach the session's network", err)
	}
	return dup, nil
}

// portConn is a connection to a port: it counts the bytes either way and
// keeps the session used while they move.
type portConn struct {
	net.Conn
	p    *Port
	once sync.Once
	in   atomic.Int64 // written to the program
	out  atomic.Int64 // read from it
}

func (c *portConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.out.Add(int64(n))
		c.p.g.bytesOut.Add(int64(n))
		c.moved()
	}
	return n, err
}

func (c *portConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.in.Add(int64(n))
		c.p.g.bytesIn.Add(int64(n))
		c.moved()
	}
	return n, err
}

// moved marks the session used, at most once a second per port.
func (c *portConn) moved() {
	now := time.Now().UnixNano()
	if last := c.p.g.touched.Load(); now-last >= int64(time.Second) && c.p.g.touched.CompareAndSwap(last, now) {
		c.p.s.Touch()
	}
}

func (c *portConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		s, g := c.p.s, c.p.g
		s.ports.mu.Lock()
		delete(g.conns, c)
		s.ports.open--
		s.ports.mu.Unlock()
		s.portEvent(PortEvent{Caller: Caller{Tenant: s.owner.Tenant}, Op: PortTraffic, Port: g.port, BytesIn: c.in.Load(), BytesOut: c.out.Load()})
	})
	return err
}

// Operations of PortEvent.
const (
	PortOpen    = "open"    // a port was opened
	PortChange  = "change"  // an open port was opened again: made public or private
	PortClose   = "close"   // closed (by a client, or the session's end), with its totals
	PortTraffic = "traffic" // one connection to it ended, with its bytes
)

// PortEvent describes what happened to a session's port.
type PortEvent struct {
	Caller
	Session string
	Op      string
	Port    int
	Public  bool
	// Close: how long it was open and what it carried; traffic: one
	// connection's bytes.
	Duration              time.Duration
	Requests, Connections int64
	// BytesIn went to the program, BytesOut came from it.
	BytesIn, BytesOut int64
}

func (s *Session) portEvent(e PortEvent) {
	if s.m.obs == nil {
		return
	}
	e.Session = s.id
	s.m.obs.PortUsed(e)
}
