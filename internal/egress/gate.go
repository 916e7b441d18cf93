package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/secrets"
)

// Limits bound what one session's egress may use.
type Limits struct {
	Bytes          int64 // budget, up plus down; 0: unlimited
	MaxConnections int   // open at once; 0: unlimited
	// Connections is the budget of connections carried over the
	// session's life (0: unlimited): each is kept whole for the
	// execution's result and the audit, so it also bounds their memory.
	Connections    int64
	ConnectTimeout time.Duration // resolve and connect upstream
	IdleTimeout    time.Duration // a connection with no byte either way is closed
	// DNSRate and DNSBurst bound the queries the DNS responder answers
	// (a token bucket); 0 DNSRate: no limit.
	DNSRate  int // per second
	DNSBurst int
	// WildcardNames caps the distinct names each wildcard entry lets the
	// sandbox use over the session's life (0: unlimited): each is a
	// name of its choice that airlock looks up upstream.
	WildcardNames int
	// Shared is the server's, the same for every gate (nil: no
	// server-wide cap).
	Shared *Shared
}

// peekTimeout bounds how long a client may take to send its ClientHello
// or first request head. Nothing is dialled before they are whole and
// checked, on every port but an opaque entry's.
var peekTimeout = 5 * time.Second // a variable for tests

// Options configure a Gate.
type Options struct {
	Session string
	Policy  Policy
	Limits  Limits
	Dialer  *Dialer
	Log     *slog.Logger
	// Proxy adds the HTTP proxy on ProxyAddr inside the sandbox.
	Proxy bool
	// Secrets are the session's placeholder secrets (nil: none): the
	// gate terminates connections to their bound hosts to substitute
	// them (see intercept).
	Secrets *secrets.Session
}

// Stats are a gate's counters.
type Stats struct {
	BytesUsed   int64 `json:"bytes_used"`
	BytesBudget int64 `json:"bytes_budget,omitempty"`
	Open        int   `json:"open_connections"`
	Connections int64 `json:"connections"`
	Denied      int64 `json:"denied"`
	// Allowed counts the connections carried, against ConnectionBudget.
	Allowed          int64 `json:"connections_allowed"`
	ConnectionBudget int64 `json:"connection_budget,omitempty"`
}

// Gate is one sandbox's egress: its sockets inside the sandbox's network
// namespace and the connections they carry.
//
// Locks, in the order they may be taken: setMu, then mu, then a
// Decision's own; logMu and dnsMu are leaves (nothing is taken while
// either is held). The fields above setMu never change after Attach; the
// counters are atomic.
type Gate struct {
	session string
	limits  Limits
	dialer  *Dialer
	log     *slog.Logger
	ns      *os.File // the sandbox's network namespace
	secrets *secrets.Session

	// setMu serialises SetPolicy, across the listens it does without mu.
	setMu sync.Mutex
	// mu guards the fields below it, up to the counters.
	mu        sync.Mutex
	policy    Policy
	exec      string
	fakes     map[string]netip.Addr
	names     map[netip.Addr]string
	next      uint32
	listeners map[uint16]net.Listener
	dnsUDP    net.PacketConn
	dnsTCP    net.Listener
	proxy     net.Listener
	conns     map[net.Conn]struct{}
	open      int
	ledgers   map[string]*ledger // by execution ("": none)
	wildNames map[string]int     // distinct names used, by wildcard suffix
	closed    bool

	used, total, denied, allowed atomic.Int64
	wg                           sync.WaitGroup

	// logMu guards the decision log's rate (logBucket, logDropped).
	logMu      sync.Mutex
	logBucket  bucket
	logDropped int64

	// dnsMu guards the DNS query rate and its refusals' log (the three
	// fields below).
	dnsMu       sync.Mutex
	dnsBucket   bucket    // the session's DNS query rate (Limits.DNSRate)
	dnsLogged   time.Time // when a refusal was last logged
	dnsUnlogged int64     // refusals since, recorded but not logged
}

// logBurst and logRate bound the decision lines one gate writes for
// denials and DNS lookups: a sandbox looping over denied lookups or
// connects must not fill the host's disk (1.3 million denied lookups,
// 140 MB of log, in 5 seconds of one sandbox's CPU before this bound).
// Decisions past it still count and stay in the executions' records
// (summarised); one line says how many went unlogged. Allowed
// connections are always logged: the connection budget bounds them.
const (
	logBurst = 200
	logRate  = 50 // lines per second, after the burst
)

// bucket is a token bucket: burst tokens at first, rate more each
// second, one per event. Its owner locks it.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at now if there is one.
func (b *bucket) take(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else if now.After(b.last) {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	if now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// allowLog takes a token for one decision line; dropped is how many were
// refused since the last line allowed.
func (g *Gate) allowLog() (ok bool, dropped int64) {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if !g.logBucket.take(time.Now(), logRate, logBurst) {
		g.logDropped++
		return false, 0
	}
	dropped, g.logDropped = g.logDropped, 0
	return true, dropped
}

// logUnlogged writes how many decisions went unlogged, if any.
func (g *Gate) logUnlogged(n int64) {
	if n > 0 {
		g.log.LogAttrs(context.Background(), slog.LevelWarn, "egress decisions not logged (rate limit)",
			slog.String("session", g.session), slog.Int64("count", n))
	}
}

// fakeBase is the first fake address: 127.1.0.0/16, inside loopback so
// that the sandbox reaches it with no route but lo.
var fakeBase = netip.AddrFrom4([4]byte{127, 1, 0, 0})

// fakeAddr returns the per-session fake address of an allowed name,
// allocating one the first time; addresses are never reused for another
// name within the session. A name only a wildcard allows takes one of
// that wildcard's Limits.WildcardNames for the session's life (a name the
// sandbox chooses is one airlock looks up upstream: without a cap a
// wildcard was a channel to the upstream resolver, ~340 names a second).
// why says why a name has none.
func (g *Gate) fakeAddr(name string) (_ netip.Addr, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.policy.AllowsName(name) {
		return netip.Addr{}, name + " is not in the allowlist"
	}
	if a, ok := g.fakes[name]; ok {
		return a, ""
	}
	if g.next >= 65534 {
		return netip.Addr{}, "the session has used all its fake addresses"
	}
	if why := g.takeWildcardName(name); why != "" {
		return netip.Addr{}, why
	}
	g.next++
	b := fakeBase.As4()
	b[2], b[3] = byte(g.next>>8), byte(g.next)
	a := netip.AddrFrom4(b)
	g.fakes[name], g.names[a] = a, name
	return a, ""
}

// takeWildcardName counts a new name against the first wildcard of the
// policy with room for it, unless an exact entry allows it; g.mu held.
// The counts outlive policy changes (a PUT that drops and adds a
// wildcard again starts from where it was).
func (g *Gate) takeWildcardName(name string) (why string) {
	if g.limits.WildcardNames <= 0 {
		return ""
	}
	var full []string
	for _, r := range g.policy.Rules {
		if !r.Wildcard && r.MatchName(name) {
			return ""
		}
	}
	for _, r := range g.policy.Rules {
		if !r.Wildcard || !r.MatchName(name) || slices.Contains(full, r.Name) {
			continue
		}
		if g.wildNames[r.Name] < g.limits.WildcardNames {
			if g.wildNames == nil {
				g.wildNames = map[string]int{}
			}
			g.wildNames[r.Name]++
			return ""
		}
		full = append(full, r.Name)
	}
	return fmt.Sprintf("*.%s has given this session its %d distinct names (network.max_wildcard_names); names used before still work",
		strings.Join(full, ", *."), g.limits.WildcardNames)
}

func (g *Gate) nameOf(a netip.Addr) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.names[a]
	return n, ok
}

// Policy returns the current policy.
func (g *Gate) Policy() Policy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

// SetExecution tags the decisions that follow with an execution id ("" for
// none).
func (g *Gate) SetExecution(id string) {
	g.mu.Lock()
	g.exec = id
	g.mu.Unlock()
}

// Records returns the decisions tagged with execution id, oldest first
// (summarised: see ledger).
func (g *Gate) Records(id string) []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.ledgers[id]; l != nil {
		return l.records()
	}
	return nil
}

// Take returns the decisions tagged with execution id, as Records does,
// and forgets them: an execution's go to its result and audit record.
func (g *Gate) Take(id string) []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.ledgers[id]
	delete(g.ledgers, id)
	if l == nil {
		return nil
	}
	return l.records()
}

// TakeAll returns every decision not taken yet but the execution's in
// progress, oldest first, and forgets them: what no execution's record
// carried (made between executions, or in one that never finished), for
// the session's end.
func (g *Gate) TakeAll() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Record
	for id, l := range g.ledgers {
		if id != "" && id == g.exec {
			continue // its result takes them
		}
		out = append(out, l.records()...)
		delete(g.ledgers, id)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.First.Compare(b.First) })
	return out
}

// Stats returns the gate's counters.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	return Stats{BytesUsed: g.used.Load(), BytesBudget: g.limits.Bytes, Open: open, Connections: g.total.Load(), Denied: g.denied.Load(),
		Allowed: g.allowed.Load(), ConnectionBudget: g.limits.Connections}
}

// record keeps d for its execution and, when final, logs it.
func (g *Gate) record(d *Decision, final bool) {
	g.mu.Lock()
	d.Execution = g.exec
	l := g.ledgers[g.exec]
	if l == nil {
		if g.ledgers == nil {
			g.ledgers = map[string]*ledger{}
		}
		l = &ledger{}
		g.ledgers[g.exec] = l
	}
	if d.kept() {
		l.conns = append(l.conns, d)
	} else {
		l.summarise(d.Snapshot())
	}
	g.mu.Unlock()
	if !d.Allowed {
		g.denied.Add(1)
	}
	if final {
		g.logDecision(d)
	}
}

func (g *Gate) logDecision(d *Decision) {
	if !d.kept() {
		ok, dropped := g.allowLog()
		if !ok {
			return
		}
		g.logUnlogged(dropped)
	}
	r := d.Snapshot()
	level := slog.LevelInfo
	if !r.Allowed {
		level = slog.LevelWarn
	}
	g.log.LogAttrs(context.Background(), level, "egress",
		slog.String("session", g.session), slog.String("execution", r.Execution), slog.String("kind", r.Kind),
		slog.String("name", r.Name), slog.String("dest", r.Dest), slog.String("address", r.Address),
		slog.Int("port", int(r.Port)), slog.Bool("allowed", r.Allowed), slog.String("reason", r.Reason),
		slog.Int64("bytes_up", r.BytesUp), slog.Int64("bytes_down", r.BytesDown),
		slog.Int64("duration_ms", time.Since(d.Start).Milliseconds()), slog.String("detail", d.detail))
}

func (g *Gate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gate) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// resetClose closes c with a RST, so that the client fails at once.
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// SetPolicy replaces the policy: new DNS answers and new connections
// follow it, connections already open are left alone. Listeners are opened
// for new ports and closed for ports no longer allowed.
func (g *Gate) SetPolicy(p Policy) error {
	// One change at a time: two would both try to open a new port, and
	// the second would find it taken by the first.
	g.setMu.Lock()
	defer g.setMu.Unlock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errors.New("egress: gate closed")
	}
	want := p.Ports()
	var add []uint16
	for _, port := range want {
		if _, ok := g.listeners[port]; !ok {
			add = append(add, port)
		}
	}
	g.mu.Unlock()
	// The new ports first, the policy after: a port the sandbox already
	// listens on (*PortInUseError) leaves the gate as it was, never with
	// a policy whose port would reach the sandbox's own listener.
	var ls map[uint16]net.Listener
	if len(add) > 0 {
		var err error
		if ls, err = listenPorts(g.ns, add); err != nil {
			return err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		for _, l := range ls {
			l.Close()
		}
		return errors.New("egress: gate closed")
	}
	g.policy = p
	for port, l := range g.listeners {
		if !slices.Contains(want, port) {
			l.Close()
			delete(g.listeners, port)
		}
	}
	for port, l := range ls {
		g.listeners[port] = l
		g.wg.Add(1)
		go g.serve(l, g.handle)
	}
	return nil
}

// Holds reports whether the gate listens on TCP port inside the sandbox
// (its DNS responder, its proxy, a port the policy allows): connections
// there are the sandbox's egress, never a program of the sandbox's.
func (g *Gate) Holds(port uint16) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.listeners[port]
	return ok || port == 53 && g.dnsTCP != nil || port == proxyPort && g.proxy != nil
}

// PortInUseError says a port the gate needs inside the sandbox is taken
// there already: a program of the sandbox listens on it.
type PortInUseError struct {
	Port uint16
	Err  error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("egress: port %d is in use inside the sandbox: %v", e.Port, e.Err)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// Close closes every socket of the gate and every connection it carries,
// and waits for their goroutines.
func (g *Gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	for _, l := range g.listeners {
		l.Close()
	}
	if g.dnsUDP != nil {
		g.dnsUDP.Close()
	}
	if g.dnsTCP != nil {
		g.dnsTCP.Close()
	}
	if g.proxy != nil {
		g.proxy.Close()
	}
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	g.logMu.Lock()
	dropped := g.logDropped
	g.logDropped = 0
	g.logMu.Unlock()
	g.logUnlogged(dropped)
	g.dnsMu.Lock()
	refused := g.dnsUnlogged
	g.dnsUnlogged = 0
	g.dnsMu.Unlock()
	g.logDNSRefused(refused)
	if g.ns != nil {
		return g.ns.Close()
	}
	return nil
}

// serve accepts on l, each connection tracked and handled by handle (the
// gate's own listeners, or the proxy's).
func (g *Gate) serve(l net.Listener, handle func(net.Conn)) {
	defer g.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		if !g.track(c) {
			resetClose(c)
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer g.untrack(c)
			handle(c)
		}()
	}
}

// dialFailed classifies an allowed name's failed dial: an address the
// guard forbids is a denial (true: the caller denies); an upstream
// failure (DNS, connect) is not, and is recorded here as allowed, with
// what failed.
func (g *Gate) dialFailed(d *Decision, err error) (denied bool) {
	var fe *ForbiddenError
	if errors.As(err, &fe) {
		d.detail = fe.Detail // the log's only
	}
	var ue *UpstreamError
	if !errors.As(err, &ue) {
		return true // forbidden, or a session's limit
	}
	d.mu.Lock()
	d.Allowed, d.Reason = true, err.Error()
	d.mu.Unlock()
	g.record(d, true)
	return false
}

func (g *Gate) deny(c net.Conn, d *Decision, reason string) {
	d.mu.Lock()
	d.Reason = "denied: " + reason
	d.mu.Unlock()
	g.record(d, true)
	resetClose(c)
}

// admit takes a place for one connection under the session's connection
// cap and the server's; release gives both back. Refused (nil release),
// reason says why and session whether the session's own cap refused it.
func (g *Gate) admit() (release func(), reason string, session bool) {
	g.mu.Lock()
	over := g.limits.MaxConnections > 0 && g.open >= g.limits.MaxConnections
	if !over {
		g.open++
	}
	g.mu.Unlock()
	if over {
		return nil, fmt.Sprintf("the session's connection cap (%d) is reached", g.limits.MaxConnections), true
	}
	if !g.limits.Shared.acquire() {
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
		return nil, g.limits.Shared.capReason(), false
	}
	return func() {
		g.limits.Shared.release()
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
	}, "", false
}

// handle decides one connection from the sandbox and, when allowed,
// carries it.
func (g *Gate) handle(c net.Conn) {
	g.total.Add(1)
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	dst, port := local.Addr().Unmap(), local.Port()
	d := &Decision{Kind: "connect", Dest: netip.AddrPortFrom(dst, port).String(), Port: port, Start: time.Now()}

	release, reason, _ := g.admit()
	if release == nil {
		g.deny(c, d, reason)
		return
	}
	defer release()

	name, ok := g.nameOf(dst)
	if !ok {
		g.deny(c, d, fmt.Sprintf("%s is an IP address: only allowed names are reachable, through airlock's DNS", dst))
		return
	}
	d.Name = name
	policy := g.Policy()
	if !policy.Allows(name, port) {
		g.deny(c, d, name+":"+strconv.Itoa(int(port))+" is not in the allowlist")
		return
	}
	if g.limits.Bytes > 0 && g.used.Load() >= g.limits.Bytes {
		g.deny(c, d, fmt.Sprintf("the session's byte budget (%d) is used up", g.limits.Bytes))
		return
	}
	var head []byte
	var reqs *reqStream
	if !policy.Opaque(name, port) {
		var err error
		if head, reqs, err = g.peek(c, name); err != nil {
			g.deny(c, d, err.Error())
			return
		}
	}
	giveBack, err := g.takeConnection()
	if err != nil {
		g.deny(c, d, err.Error())
		return
	}
	if !policy.Opaque(name, port) && g.interceptable(name, head) {
		g.intercept(c, peeked(head, reqs), name, port, d)
		return
	}
	up, addr, err := g.dial(name, port)
	if err != nil {
		giveBack()
		if g.dialFailed(d, err) {
			g.deny(c, d, err.Error())
		} else {
			resetClose(c)
		}
		return
	}
	g.carry(c, up, addr, head, reqs, d)
}

// limitError is a refusal by one of the session's limits (the proxy
// answers it with a 429).
type limitError string

func (e limitError) Error() string { return string(e) }

// takeConnection takes one connection of the session's budget; giveBack
// returns it when the connection is not carried after all.
func (g *Gate) takeConnection() (giveBack func(), err error) {
	giveBack = func() { g.allowed.Add(-1) }
	for {
		n := g.allowed.Load()
		if g.limits.Connections > 0 && n >= g.limits.Connections {
			return nil, limitError(fmt.Sprintf("the session's connection budget (%d connections, network.connection_budget) is used up", g.limits.Connections))
		}
		if g.allowed.CompareAndSwap(n, n+1) {
			return giveBack, nil
		}
	}
}

// resolve looks name up for one of the sandbox's connections. A lookup
// upstream of a name the sandbox chose is one of the session's DNS
// queries: it takes a token of the session's DNS rate, so that a
// wildcard entry is no faster a channel to the upstream resolver than
// the sandbox's own queries.
func (g *Gate) resolve(name string) ([]netip.Addr, error) {
	if !g.dnsToken(time.Now()) {
		return nil, limitError(g.dnsRateReason() + " (airlock's lookup of " + name + " upstream counts in it)")
	}
	return g.dialer.Resolve(context.Background(), name)
}

// dial resolves name (see resolve) and connects to it.
func (g *Gate) dial(name string, port uint16) (net.Conn, netip.Addr, error) {
	addrs, err := g.resolve(name)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return g.dialer.Connect(context.Background(), name, addrs, port)
}

// carry records an allowed connection, splices it, and logs it when it
// ends.
func (g *Gate) carry(down, up net.Conn, addr netip.Addr, head []byte, reqs *reqStream, d *Decision) {
	d.Address = addr.String()
	d.Allowed, d.carried = true, true
	d.Reason = "allowed"
	g.record(d, false)
	if !g.track(up) {
		up.Close()
		down.Close()
		return
	}
	defer g.untrack(up)
	reason := g.splice(down, up, head, reqs, d)
	d.mu.Lock()
	d.Reason = reason
	d.duration = time.Since(d.Start)
	d.mu.Unlock()
	g.logDecision(d)
}

// maxEcho bounds what a reason repeats of what the sandbox sent (a Host,
// an SNI, a proxy target): reasons reach the execution's result, the
// audit log and the server's log, and a 16 KiB Host in each of an
// execution's 256 decisions made 4 MB audit records (red team: a tenant
// could evict every tenant's audit history, kept by size, in a few
// hundred executions).
const maxEcho = 255

// clip cuts s to maxEcho bytes.
func clip(s string) string {
	if len(s) > maxEcho {
		return s[:maxEcho] + "..."
	}
	return s
}

// peek reads what the client sends first, before anything is dialled,
// and checks that it names the name behind the fake address: the SNI of a
// TLS ClientHello, or the Host of an HTTP request — and, through the
// returned stream, of every later request on the connection. It returns
// the bytes to send upstream first. A client that sends nothing (a
// protocol where the server speaks first) or something else is refused:
// only an opaque entry carries those.
func (g *Gate) peek(c net.Conn, name string) ([]byte, *reqStream, error) {
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(peekTimeout))
	buf := make([]byte, 0, 2048)
	var reqs *reqStream
	var first []byte
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		fresh := buf[len(buf) : len(buf)+n]
		buf = buf[:len(buf)+n]
		kind := ""
		switch {
		case len(buf) == 0:
		case buf[0] == 0x16:
			kind = "TLS SNI"
			sni, complete, perr := ClientHelloSNI(buf)
			if perr != nil {
				return nil, nil, perr
			}
			if complete {
				if n, err := NormalizeName(sni); err != nil || n != name {
					return nil, nil, fmt.Errorf("%s %q does not match %s, the name behind the address", kind, clip(sni), name)
				}
				return buf, nil, nil
			}
			if len(buf) >= maxPeek {
				return nil, nil, fmt.Errorf("%s: the ClientHello is larger than %d bytes", kind, maxPeek)
			}
		case looksHTTP(buf):
			kind = "HTTP Host"
			if reqs == nil {
				reqs = newReqStream(name)
			}
			if err := reqs.feed(fresh, func(b []byte) error { first = append(first, b...); return nil }); err != nil {
				return nil, nil, err
			}
			if reqs.requests > 0 {
				reqs.read = buf
				return first, reqs, nil
			}
		default:
			return nil, nil, errors.New("the connection starts with neither a TLS ClientHello nor an HTTP request (other protocols need an opaque entry, name:port/opaque)")
		}
		if err != nil {
			switch {
			case err == io.EOF:
				return nil, nil, errors.New("the client closed before sending a request")
			case kind != "":
				return nil, nil, fmt.Errorf("%s: incomplete after %v", kind, peekTimeout)
			}
			return nil, nil, fmt.Errorf("nothing sent within %v: a connection must start with a TLS ClientHello or an HTTP request (a protocol where the server speaks first needs an opaque entry, name:port/opaque)", peekTimeout)
		}
	}
}

// charge takes up to n bytes from the session's byte budget and returns
// how many it got: only those are forwarded. A compare-and-swap, so that
// the counter never passes the budget either (adding first and giving
// back made bytes_used read more than bytes_budget, and concurrent
// connections raced on the excess).
func (g *Gate) charge(n int) int {
	if g.limits.Bytes <= 0 {
		g.used.Add(int64(n))
		return n
	}
	for {
		u := g.used.Load()
		ok := min(int64(n), g.limits.Bytes-u)
		if ok <= 0 {
			return 0
		}
		if g.used.CompareAndSwap(u, u+ok) {
			return int(ok)
		}
	}
}

// splice carries the connection both ways until both sides are done,
// counting bytes against the session's budget, checking every request of
// a plain HTTP connection (reqs) and closing idle connections. It returns
// the final reason.
func (g *Gate) splice(down, up net.Conn, head []byte, reqs *reqStream, d *Decision) string {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var once sync.Once
	quit := make(chan struct{})
	reason := "allowed: closed"
	stop := func(r string) {
		once.Do(func() {
			reason = r
			close(quit)
			down.Close()
			up.Close()
		})
	}
	budgetErr := fmt.Sprintf("allowed, then cut: the session's byte budget (%d) is used up", g.limits.Bytes)
	upward := &mover{g: g, dst: up, src: down, ctr: &d.up, last: &last}
	downward := &mover{g: g, dst: down, src: up, ctr: &d.down, last: &last}
	defer upward.done()
	defer downward.done()
	// end says what a direction's end means for the connection: src
	// finished (half-close dst), the client's one proxy request is over
	// (wait for the answer), or the connection is cut.
	end := func(m *mover, err error) {
		var refused *refusedError
		switch {
		case err == nil || err == io.EOF:
			if tc := tcpOf(m.dst); tc != nil {
				tc.CloseWrite()
			} else {
				stop("allowed: closed")
			}
		case err == errOneRequest && m == downward:
			stop("allowed: closed") // the proxy's one answer is whole
		case err == errOneRequest:
		case err == errBudget:
			stop(budgetErr)
		case errors.As(err, &refused):
			g.denied.Add(1)
			stop("allowed, then cut: " + refused.Error())
		default:
			stop("allowed: closed")
		}
	}
	if len(head) > 0 {
		if err := upward.write(head); err == errBudget {
			stop(budgetErr)
		} else if err != nil {
			stop("allowed, then failed: " + shortErr(err))
		}
	}
	// An Upgrade (the first request, only) waits for the upstream's
	// answer: the client's next bytes are HTTP again unless it is 101.
	// The forward proxy's one request gets one answer, then the end.
	answer := make(chan bool, 1)
	watch := reqs != nil && reqs.waiting()
	oneAnswer := reqs != nil && reqs.single
	upDone, downDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(upDone)
		if reqs == nil {
			end(upward, upward.copyAll())
			return
		}
		end(upward, upward.copyRequests(reqs, answer, quit))
	}()
	go func() {
		defer close(downDone)
		switch {
		case oneAnswer:
			end(downward, downward.copyResponse(reqs.isHead, quit))
			return
		case watch:
			if err := downward.watchUpgrade(answer); err != nil {
				end(downward, err)
				return
			}
		}
		end(downward, downward.copyAll())
	}()
	var tick <-chan time.Time
	if g.limits.IdleTimeout > 0 {
		t := time.NewTicker(max(g.limits.IdleTimeout/4, 10*time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	for upDone != nil || downDone != nil {
		select {
		case <-upDone:
			upDone = nil
		case <-downDone:
			downDone = nil
		case <-tick:
			if time.Since(time.Unix(0, last.Load())) > g.limits.IdleTimeout {
				stop(fmt.Sprintf("allowed, then closed: idle for %v", g.limits.IdleTimeout))
			}
		}
	}
	stop(reason)
	return reason
}
