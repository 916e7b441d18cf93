package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/secrets"
)

// maxSubstBody bounds a request body searched for placeholders (only
// toward a host whose secret may go in bodies): it is read whole, so
// that its Content-Length stays true.
const maxSubstBody = 1 << 20

// maxSubstHead bounds a request head once its placeholders are replaced
// (a head of placeholders for a long value grows a hundredfold).
const maxSubstHead = 64 << 10

// interceptable reports whether a connection to name, starting with
// head, is one the gate terminates to substitute secrets: the session
// has a secret bound to name, and the connection is TLS, or plain HTTP
// where a secret bound there may go in plain HTTP. Any other
// connection is carried as it is: its placeholders stay placeholders.
func (g *Gate) interceptable(name string, head []byte) bool {
	bound, plain := g.secrets.Binds(name)
	return bound && (len(head) > 0 && head[0] == 0x16 || plain)
}

// peeked is every byte peek read from the client: the ClientHello, or
// the HTTP bytes as they came (head holds only those its request stream
// let through).
func peeked(head []byte, reqs *reqStream) []byte {
	if reqs != nil && reqs.read != nil {
		return reqs.read
	}
	return head
}

// interception is one connection from the sandbox to a bound host,
// terminated by the gate: each request is checked (its Host must be the
// name), gets the secrets bound there for their placeholders, and goes
// upstream on a connection of its own, verified against the host's trust
// store; each answer goes back with every secret value it echoes
// replaced by its placeholder.
type interception struct {
	g     *Gate
	name  string
	port  uint16
	tls   bool
	d     *Decision
	proxy *httputil.ReverseProxy
	tr    *http.Transport

	// own is the sandbox's connection's place under the caps: admitted
	// and counted when it came, it covers one upstream connection at a
	// time (true: free); every other is admitted as a connection of its
	// own (see upstreamAdmit).
	own    atomic.Bool
	last   atomic.Int64 // unix nanoseconds of the last byte, either side
	ctx    context.Context
	cancel context.CancelFunc
	// handlers counts the requests being served; once ended is set (under
	// hmu) none is added. HTTP/2 starts a stream's handler on a goroutine
	// that may run after the connection is over: an Add then, racing
	// handlers.Wait, would panic the server ("WaitGroup is reused").
	handlers sync.WaitGroup
	hmu      sync.Mutex
	ended    bool

	requests, substituted, refused, dials, more atomic.Int64
	mu                                          sync.Mutex
	used                                        []string // the secrets substituted
	lastRefusal                                 string
}

// An intercepted connection's HTTP/2 carries at most maxStreams requests
// at once, and its requests go upstream on at most maxUpstream
// connections at once (HTTP/1.1 upstreams take one each; requests past
// them wait for one). Each upstream connection but one is admitted and
// counted as a connection of the session's, as direct ones are: Go's
// default of 250 streams let one sandbox connection open 250 upstream.
const (
	maxStreams  = 8
	maxUpstream = 4
)

// RootCAs verify the upstreams of intercepted connections (nil: the
// host's trust store); a variable for tests.
var RootCAs *x509.CertPool

// intercept carries c, whose first bytes (head) were read and checked,
// as an interception. It returns when the connection ends and every
// request it carried is over, its upstream connections closed.
func (g *Gate) intercept(c net.Conn, head []byte, name string, port uint16, d *Decision) {
	isTLS := len(head) > 0 && head[0] == 0x16
	d.Allowed, d.carried = true, true
	d.Reason = "allowed"
	g.record(d, false)
	idle := g.limits.IdleTimeout
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	ic := &interception{g: g, name: name, port: port, tls: isTLS, d: d}
	ic.own.Store(true)
	ic.last.Store(time.Now().UnixNano())
	ic.ctx, ic.cancel = context.WithCancel(context.Background())
	down := &meterConn{Conn: c, pre: head, g: g, d: d, last: &ic.last}
	ic.tr = &http.Transport{
		Proxy:                  nil, // never the server's HTTP(S)_PROXY
		DialContext:            ic.dial,
		TLSClientConfig:        &tls.Config{RootCAs: RootCAs, ServerName: name, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    g.limits.ConnectTimeout + 10*time.Second,
		ForceAttemptHTTP2:      isTLS,
		DisableCompression:     true, // decoded here, every coding checked
		MaxResponseHeaderBytes: 64 << 10,
		MaxConnsPerHost:        maxUpstream,
		MaxIdleConnsPerHost:    maxUpstream,
		IdleConnTimeout:        idle,
		ResponseHeaderTimeout:  idle,
		ExpectContinueTimeout:  time.Second,
	}
	ic.proxy = &httputil.ReverseProxy{Rewrite: ic.rewrite, Transport: ic.tr, ModifyResponse: ic.modifyResponse,
		ErrorHandler: ic.failed, ErrorLog: log.New(io.Discard, "", 0)}
	reason := "allowed: closed"
	var conn net.Conn = down
	if isTLS {
		leaf, err := g.secrets.CA().Leaf(name)
		if err != nil {
			ic.cancel()
			g.finish(d, "allowed, then failed: no certificate for "+name)
			resetClose(c)
			return
		}
		tc := tls.Server(down, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
		ctx, cancel := context.WithTimeout(context.Background(), peekTimeout)
		err = tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			ic.cancel()
			// The usual cause: the client does not trust the anchor.
			g.finish(d, "allowed, then failed: the TLS handshake with the sandbox's client failed; most often it refused airlock's certificate for "+name+
				" (a client that does not use the session's CA bundle, SSL_CERT_FILE, cannot reach a host a secret is bound to)")
			c.Close()
			return
		}
		conn = tc
	}
	ln := &oneConn{c: make(chan net.Conn, 1), done: make(chan struct{})}
	ln.c <- conn
	ln.addr = c.LocalAddr()
	srv := &http.Server{Handler: ic, ReadHeaderTimeout: peekTimeout, IdleTimeout: idle, MaxHeaderBytes: maxPeek,
		HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		BaseContext: func(net.Listener) context.Context { return ic.ctx },
		ErrorLog:    log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		}}
	// As a carried connection: nothing moving either way for the idle
	// timeout closes it, with the requests in it (an upstream that
	// answers a head and then nothing would hold it forever).
	var idled atomic.Bool
	watchDone := make(chan struct{})
	go func() {
		t := time.NewTicker(max(idle/4, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-watchDone:
				return
			case <-t.C:
				if time.Since(time.Unix(0, ic.last.Load())) > idle {
					idled.Store(true)
					c.Close()
					return
				}
			}
		}
	}()
	srv.Serve(ln)
	// The connection is over: its requests end with it, their upstream
	// connections closed, before the decision is final.
	ic.cancel()
	c.Close()
	ic.hmu.Lock()
	ic.ended = true
	ic.hmu.Unlock()
	ic.handlers.Wait()
	close(watchDone)
	ic.tr.CloseIdleConnections()
	switch {
	case down.budget.Load():
		reason = fmt.Sprintf("allowed, then cut: the session's byte budget (%d) is used up", g.limits.Bytes)
	case idled.Load():
		reason = fmt.Sprintf("allowed, then closed: idle for %v", idle)
	}
	g.finish(d, reason+ic.summary())
}

// finish sets d's final reason and logs it.
func (g *Gate) finish(d *Decision, reason string) {
	d.mu.Lock()
	d.Reason = reason
	d.duration = time.Since(d.Start)
	d.mu.Unlock()
	g.logDecision(d)
}

// summary says what the interception did, for the decision's reason:
// never a value, a placeholder or a header.
func (ic *interception) summary() string {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	s := fmt.Sprintf("; TLS terminated by airlock for secrets, %d requests", ic.requests.Load())
	if !ic.tls {
		s = fmt.Sprintf("; plain HTTP rewritten by airlock for secrets, %d requests", ic.requests.Load())
	}
	if n := ic.substituted.Load(); n > 0 {
		s += fmt.Sprintf(", %d with secrets substituted (%s)", n, strings.Join(ic.used, ", "))
	}
	if n := ic.more.Load(); n > 0 {
		s += fmt.Sprintf(", %d upstream connections (%d more than the sandbox's one, each counted as a connection)", ic.dials.Load(), n)
	}
	if n := ic.refused.Load(); n > 0 {
		s += fmt.Sprintf(", %d refused (last: %s)", n, ic.lastRefusal)
	}
	return s
}

// refuse answers one request with status and why; the connection stays.
func (ic *interception) refuse(w http.ResponseWriter, status int, why string) {
	ic.g.denied.Add(1)
	ic.reply(w, status, why)
}

// reply is refuse for a refusal already counted (a decision of its own).
func (ic *interception) reply(w http.ResponseWriter, status int, why string) {
	ic.refused.Add(1)
	ic.mu.Lock()
	ic.lastRefusal = why
	ic.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Airlock-Egress", "denied")
	w.WriteHeader(status)
	io.WriteString(w, "airlock egress: "+why+"\n")
}

func (ic *interception) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !ic.enter() {
		return // the connection is over, its decision final
	}
	defer ic.handlers.Done()
	w := &redactingWriter{ResponseWriter: rw, ss: ic.g.secrets}
	defer w.trailers()
	ic.requests.Add(1)
	if n, err := NormalizeName(stripPort(r.Host)); err != nil || n != ic.name {
		ic.refuse(w, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q does not match %s, the name this connection was opened for", clip(r.Host), ic.name))
		return
	}
	if n := headSize(r); n > maxPeek {
		ic.refuse(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request head is larger than %d bytes", maxPeek))
		return
	}
	grown := headSize(r)
	for k, vs := range r.Header {
		for _, v := range vs {
			nv, _ := ic.g.secrets.Substitute(v, ic.name, secrets.InHeader, k, ic.tls)
			grown += len(nv) - len(v)
		}
	}
	if r.URL.RawQuery != "" {
		q, _ := ic.g.secrets.Substitute(r.URL.RawQuery, ic.name, secrets.InQuery, "", ic.tls)
		grown += len(q) - len(r.URL.RawQuery)
	}
	if grown > maxSubstHead {
		ic.refuse(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request head would be larger than %d bytes once its placeholders are replaced", maxSubstHead))
		return
	}
	if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
		ic.refuse(w, http.StatusNotImplemented, "protocol upgrades (WebSocket) and CONNECT are not carried to a host a secret is bound to: the upgraded stream could not be checked for the secret")
		return
	}
	if r.Body != nil && r.Body != http.NoBody && ic.g.secrets.Allows(ic.name, secrets.InBody, ic.tls) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxSubstBody+1))
		if err != nil {
			ic.refuse(w, http.StatusBadRequest, "the request body could not be read")
			return
		}
		if len(body) > maxSubstBody {
			ic.refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a request body to %s is searched for placeholders, and it is larger than %d bytes", ic.name, maxSubstBody))
			return
		}
		old, new := ic.g.secrets.Substitutions(ic.name, ic.tls)
		// The cap holds after substitution too: a body of placeholders
		// for a long value would otherwise grow a hundredfold here.
		grown := len(body)
		for i := range old {
			grown += bytes.Count(body, old[i]) * (len(new[i]) - len(old[i]))
		}
		if grown > maxSubstBody {
			ic.refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a request body to %s would be larger than %d bytes once its placeholders are replaced", ic.name, maxSubstBody))
			return
		}
		var used []string
		for i := range old {
			if bytes.Contains(body, old[i]) {
				body = bytes.ReplaceAll(body, old[i], new[i])
				_, u := ic.g.secrets.Substitute(string(old[i]), ic.name, secrets.InBody, "", ic.tls)
				used = append(used, u...)
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.Header.Del("Transfer-Encoding")
		if len(used) > 0 {
			r = r.WithContext(context.WithValue(r.Context(), bodyUsed{}, used))
		}
	}
	ic.proxy.ServeHTTP(w, r)
}

// enter counts a request being served, unless the connection is over.
func (ic *interception) enter() bool {
	ic.hmu.Lock()
	defer ic.hmu.Unlock()
	if ic.ended {
		return false
	}
	ic.handlers.Add(1)
	return true
}

// headSize is about the size of r's head on the wire (net/http's own
// limit lets a few more KiB through, and HTTP/2's is its own).
func headSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Host) + 16
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// bodyUsed keys the secrets ServeHTTP substituted in a request's body.
type bodyUsed struct{}

func (ic *interception) addUsed(names []string) {
	if len(names) == 0 {
		return
	}
	ic.mu.Lock()
	for _, n := range names {
		if !slices.Contains(ic.used, n) {
			ic.used = append(ic.used, n)
		}
	}
	ic.mu.Unlock()
}

// rewrite makes the request that goes upstream: to the name and port
// the connection was opened for, placeholders substituted where their
// secrets may go, and no Accept-Encoding of the client's (the transport
// asks for gzip itself and decodes it, so that the answer can be
// checked for echoed secrets).
func (ic *interception) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL.Scheme = "http"
	if ic.tls {
		out.URL.Scheme = "https"
	}
	out.URL.Host = net.JoinHostPort(ic.name, strconv.Itoa(int(ic.port)))
	out.Host = pr.In.Host
	// The gate asks for gzip itself and decodes it (see decoded), and
	// asks for whole answers: a range could cut an echoed value in
	// pieces no redaction would know.
	out.Header.Set("Accept-Encoding", "gzip")
	out.Header.Del("Range")
	out.Header.Del("If-Range")
	var all []string
	for k, vs := range out.Header {
		for i, v := range vs {
			nv, used := ic.g.secrets.Substitute(v, ic.name, secrets.InHeader, k, ic.tls)
			vs[i] = nv
			all = append(all, used...)
		}
	}
	if out.URL.RawQuery != "" {
		q, used := ic.g.secrets.Substitute(out.URL.RawQuery, ic.name, secrets.InQuery, "", ic.tls)
		out.URL.RawQuery = q
		all = append(all, used...)
	}
	if b, _ := pr.In.Context().Value(bodyUsed{}).([]string); len(b) > 0 {
		all = append(all, b...)
	}
	if len(all) > 0 {
		ic.substituted.Add(1)
	}
	ic.addUsed(all)
}

// failed answers a request that got no answer upstream: never with the
// transport's own text (it may quote the URL, whose query may hold a
// substituted secret).
func (ic *interception) failed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	status, why := http.StatusBadGateway, "the upstream failed"
	var fe *ForbiddenError
	var ue *UpstreamError
	var le limitError
	var ce capError
	switch {
	case errors.Is(err, errEncoding):
		why = "the upstream answered with a Content-Encoding airlock cannot check for echoed secrets"
	case errors.As(err, &le):
		// The session's limits, answered as the proxy answers them.
		status, why = http.StatusTooManyRequests, le.Error()
	case errors.As(err, &ce):
		status, why = http.StatusServiceUnavailable, ce.Error()
	case errors.As(err, &fe):
		status, why = http.StatusForbidden, fe.Error()
	case errors.As(err, &ue):
		why = ue.Error()
	case strings.Contains(err.Error(), "x509:") || strings.Contains(err.Error(), "tls:"):
		why = "the upstream's certificate did not verify against the server's trust store"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout awaiting response headers"):
		status, why = http.StatusGatewayTimeout, "the upstream did not answer within the idle timeout"
	}
	var de *deniedError
	if errors.As(err, &de) {
		ic.reply(w, status, why)
		return
	}
	ic.refuse(w, status, why)
}

// dial connects upstream for the transport: always to the name and
// port the connection was opened for, through the gate's guarded
// dialler, each connection admitted under the session's and the
// server's caps (upstreamAdmit).
func (ic *interception) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	release, giveBack, err := ic.upstreamAdmit()
	if err != nil {
		return nil, err
	}
	up, addr, err := ic.connect(ctx)
	if err != nil {
		giveBack()
		release()
		var ue *UpstreamError
		if !errors.As(err, &ue) && ctx.Err() == nil {
			// Forbidden, or the session's DNS rate: a denial, as
			// on a direct connection (an upstream failure is not).
			ic.deniedUpstream(err.Error())
			return nil, &deniedError{err}
		}
		return nil, err
	}
	ic.dials.Add(1)
	ic.d.mu.Lock()
	ic.d.Address = addr.String()
	ic.d.mu.Unlock()
	if !ic.g.track(up) {
		up.Close()
		release()
		return nil, net.ErrClosed
	}
	return &upstreamConn{Conn: up, g: ic.g, last: &ic.last, release: release}, nil
}

func (ic *interception) connect(ctx context.Context) (net.Conn, netip.Addr, error) {
	addrs, err := ic.g.resolve(ic.name)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return ic.g.dialer.Connect(ctx, ic.name, addrs, ic.port)
}

// upstreamAdmit takes a place for one upstream connection: the sandbox's
// connection's own when it is free, else one under the session's cap
// (max_connections), the server's (max_open_connections) and one of
// the session's connection budget, exactly as a direct connection from
// the sandbox takes them; a refusal is recorded as theirs is. release
// gives the place back when the connection closes, giveBack the budget's
// when it is never opened.
func (ic *interception) upstreamAdmit() (release, giveBack func(), err error) {
	if ic.own.CompareAndSwap(true, false) {
		return func() { ic.own.Store(true) }, func() {}, nil
	}
	rel, reason, session := ic.g.admit()
	if rel == nil {
		ic.deniedUpstream(reason)
		if session {
			return nil, nil, &deniedError{limitError(reason)}
		}
		return nil, nil, &deniedError{capError(reason)}
	}
	giveBack, err = ic.g.takeConnection()
	if err != nil {
		rel()
		ic.deniedUpstream(err.Error())
		return nil, nil, &deniedError{err}
	}
	ic.more.Add(1)
	return rel, func() { ic.more.Add(-1); giveBack() }, nil
}

// deniedUpstream records an upstream connection refused by a cap, as a
// refused connection of the sandbox's is recorded.
func (ic *interception) deniedUpstream(reason string) {
	d := &Decision{Kind: ic.d.Kind, Name: ic.name, Dest: ic.d.Dest, Port: ic.port, Start: time.Now(),
		Reason: "denied: " + reason + " (an upstream connection for a connection airlock terminates for secrets)"}
	ic.g.record(d, true)
}

// capError is a refusal at the server's connection cap (503).
type capError string

func (e capError) Error() string { return string(e) }

// deniedError is an upstream connection refused and recorded as a
// denial of its own (deniedUpstream): its request's refusal is not
// counted again.
type deniedError struct{ err error }

func (e *deniedError) Error() string { return e.err.Error() }
func (e *deniedError) Unwrap() error { return e.err }

// upstreamConn is an upstream connection of an interception: tracked by
// the gate (closed with it), its bytes keeping the interception from
// idling out, its place given back when it closes.
type upstreamConn struct {
	net.Conn
	g       *Gate
	last    *atomic.Int64
	release func()
	once    sync.Once
}

func (c *upstreamConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *upstreamConn) Close() error {
	c.once.Do(func() {
		c.g.untrack(c.Conn)
		c.release()
	})
	return c.Conn.Close()
}

// meterConn is the sandbox's side of an interception: the bytes read
// before (pre) first, every byte counted in the decision and charged to
// the session's budget.
type meterConn struct {
	net.Conn
	pre    []byte
	g      *Gate
	d      *Decision
	last   *atomic.Int64 // the interception's last byte
	budget atomic.Bool   // the budget ran out
}

func (m *meterConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if len(m.pre) > 0 {
		n = copy(p, m.pre)
		m.pre = m.pre[n:]
	} else {
		n, err = m.Conn.Read(p)
	}
	if n > 0 {
		m.last.Store(time.Now().UnixNano())
		ok := m.g.charge(n)
		m.d.up.Add(int64(ok))
		if ok < n {
			m.budget.Store(true)
			return ok, errBudget
		}
	}
	return n, err
}

func (m *meterConn) Write(p []byte) (int, error) {
	ok := m.g.charge(len(p))
	n, err := m.Conn.Write(p[:ok])
	if n > 0 {
		m.last.Store(time.Now().UnixNano())
	}
	m.d.down.Add(int64(n))
	m.g.refund(ok - n)
	if err == nil && ok < len(p) {
		m.budget.Store(true)
		err = errBudget
	}
	return n, err
}

// oneConn is a listener that gives one connection, then waits until it
// is closed.
type oneConn struct {
	c    chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.addr }
