// Package portproxy owns the HTTP proxy from outside clients to a
// program listening inside a session's sandbox (a web app, an API, a dev
// server): requests, streamed responses (SSE, chunked) and WebSocket
// upgrades, over a connection its caller dials (package session dials the
// sandbox's loopback inside its network namespace); and the form of the
// hosts ports are served under, <port>-<session host label>.<domain>.
//
// The program is hostile, and its answers are web content for browsers.
// This package must never pass a client's airlock credentials (an API key,
// a port's token or cookie, a link's code) on to the program; never let an
// answer set a cookie, a policy or stored data for any origin but the
// port's own (on the API's origin, the path form, it sets none, and its
// pages run sandboxed in an opaque origin); never hold a body past its
// cap; and never keep a request or WebSocket that moved nothing for the
// idle timeout. It never authenticates: its callers do, before Serve.
package portproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Options bound every proxied request (the ports section).
type Options struct {
	MaxRequestBytes  int64
	MaxResponseBytes int64
	// ResponseTimeout bounds the wait for the program's status line and
	// headers; IdleTimeout closes a request or WebSocket with no byte
	// moving either way.
	ResponseTimeout time.Duration
	IdleTimeout     time.Duration
	// Scheme is the host form's scheme as clients see it (https behind
	// a TLS-terminating ingress).
	Scheme string
}

// Target is the port a request goes to.
type Target struct {
	// Dial connects to the program.
	Dial func(ctx context.Context) (net.Conn, error)
	Port int
	// Segments, on the path form, is how many leading path segments name
	// the port ("/v1/sessions/{id}/ports/{port}": 5); they are taken off
	// the path the program sees. 0: the host form (the port's own host).
	Segments int
	// Fail answers an error in the caller's shape.
	Fail func(w http.ResponseWriter, err error)
}

// pathCSP sandboxes a page served on the API's origin: it runs in an
// opaque origin, so it reads no cookie and no storage of the API's origin
// (the console's key), and its requests there are cross-origin.
const pathCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// CookieName is the port's own cookie, set by a one-time link on the host
// form: a __Host- cookie (Secure, Path=/, no Domain: no other host, a
// sibling port's included, can set or shadow it) when the scheme is
// https.
func CookieName(scheme string) string {
	if scheme == "https" {
		return "__Host-airlock-port"
	}
	return "airlock-port"
}

// cookieNames are every name of the port's cookie: stripped from requests
// whatever the scheme, and never set by a program.
var cookieNames = []string{CookieName("https"), CookieName("http")}

// Serve proxies r to t. The caller has authenticated it.
func Serve(w http.ResponseWriter, r *http.Request, t Target, o Options) {
	pathForm := t.Segments > 0
	prefix, rest, ok := splitPath(r.URL.EscapedPath(), t.Segments)
	if !ok {
		t.Fail(w, fmt.Errorf("%w: the path must go on after the port: /v1/sessions/{id}/ports/{port}/", errdefs.ErrInvalidArgument))
		return
	}
	if pathForm && r.Header.Get("Service-Worker") != "" {
		t.Fail(w, fmt.Errorf("%w: a service worker cannot be registered on the API's origin; use the port's own host (ports.domain)", errdefs.ErrPermission))
		return
	}
	upgrade := r.Header.Get("Upgrade") != ""
	if !upgrade && r.ContentLength > o.MaxRequestBytes {
		t.Fail(w, fmt.Errorf("%w: the request body is larger than ports.max_request_bytes (%d bytes)", errdefs.ErrTooLarge, o.MaxRequestBytes))
		return
	}
	watch := newIdleWatch(o.IdleTimeout)
	defer watch.stop()
	rc := http.NewResponseController(w)
	cw := &clientWriter{ResponseWriter: w, rc: rc, watch: watch}
	defer cw.clearDeadlines()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &clientReader{r: http.MaxBytesReader(w, r.Body, o.MaxRequestBytes), cw: cw}
	}
	errTooBig := fmt.Errorf("%w: the program's answer is larger than ports.max_response_bytes (%d bytes)", errdefs.ErrBadGateway, o.MaxResponseBytes)
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := t.Dial(ctx)
				if err != nil {
					return nil, err
				}
				return watch.backend(c), nil
			},
			DisableKeepAlives:      true,
			DisableCompression:     true,
			ResponseHeaderTimeout:  o.ResponseTimeout,
			MaxResponseHeaderBytes: 64 << 10,
		},
		FlushInterval: -1, // every write at once: SSE, streams
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewrite(pr, t, o, prefix, rest)
		},
		ModifyResponse: func(resp *http.Response) error {
			scopeResponse(resp.Header, pathForm, prefix)
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return nil
			}
			if resp.ContentLength > o.MaxResponseBytes {
				return errTooBig
			}
			resp.Body = &cappedBody{ReadCloser: resp.Body, left: o.MaxResponseBytes, err: errTooBig}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			t.Fail(w, upstreamError(err, t.Port))
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	rp.ServeHTTP(cw, r)
}

// splitPath parts an escaped path after n segments: the prefix that
// names the port and the rest, "/" at least.
func splitPath(p string, n int) (prefix, rest string, ok bool) {
	if n == 0 {
		return "", p, strings.HasPrefix(p, "/")
	}
	i := 0
	for k := 0; k < n; k++ {
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			return "", "", false
		}
		i += 1 + j
	}
	return p[:i], p[i:], true
}

// rewrite makes the request the program gets: its path on the port, the
// Host it was sent to (host form) or the port's loopback address (path
// form), X-Forwarded-*, and none of airlock's credentials.
func rewrite(pr *httputil.ProxyRequest, t Target, o Options, prefix, rest string) {
	out := pr.Out
	out.URL.Scheme, out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(t.Port)
	if p, err := url.PathUnescape(rest); err == nil {
		out.URL.Path, out.URL.RawPath = p, rest
	}
	if q := out.URL.Query(); q.Has(apitype.PortLinkParam) {
		q.Del(apitype.PortLinkParam)
		out.URL.RawQuery = q.Encode()
	}
	pr.SetXForwarded()
	h := out.Header
	if t.Segments > 0 {
		// On the API's origin Authorization is the API key's.
		h.Del("Authorization")
		out.Host = out.URL.Host
		h.Set("X-Forwarded-Prefix", prefix)
	} else {
		out.Host = pr.In.Host
		h.Set("X-Forwarded-Proto", o.Scheme)
	}
	h.Del(apitype.PortTokenHeader)
	h.Del(apitype.PortKeyHeader)
	h.Del("Forwarded")
	h.Del("X-Real-Ip")
	stripCookies(h)
}

// stripCookies takes the port's cookie out of the request's Cookie
// headers.
func stripCookies(h http.Header) {
	vals := h.Values("Cookie")
	if len(vals) == 0 {
		return
	}
	var kept []string
	for _, v := range vals {
		for _, c := range strings.Split(v, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(c), "=")
			if strings.TrimSpace(c) == "" || isOurCookie(name) {
				continue
			}
			kept = append(kept, strings.TrimSpace(c))
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

func isOurCookie(name string) bool {
	for _, n := range cookieNames {
		if strings.EqualFold(strings.TrimSpace(name), n) {
			return true
		}
	}
	return false
}

// scopeResponse keeps the program's answer to the port's own origin. On
// the path form (the API's origin) it sets no cookie, clears no site
// data, pins no HSTS, registers no service worker scope, and its page
// runs sandboxed; a redirect to an absolute path stays under the port.
// On the host form its cookies are the host's only (no Domain) and never
// the port's own.
func scopeResponse(h http.Header, pathForm bool, prefix string) {
	h.Del("Alt-Svc")
	if pathForm {
		for _, k := range []string{"Set-Cookie", "Clear-Site-Data", "Strict-Transport-Security", "Service-Worker-Allowed"} {
			h.Del(k)
		}
		h.Add("Content-Security-Policy", pathCSP)
		if loc := h.Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") && !strings.HasPrefix(loc, "/\\") {
			h.Set("Location", prefix+loc)
		}
		return
	}
	cookies := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, c := range cookies {
		if c, ok := hostOnly(c); ok {
			h.Add("Set-Cookie", c)
		}
	}
}

// hostOnly is a Set-Cookie value without its Domain attribute (a cookie
// for the host that set it only); false for the port's own cookie.
func hostOnly(setCookie string) (string, bool) {
	parts := strings.Split(setCookie, ";")
	name, _, _ := strings.Cut(parts[0], "=")
	if isOurCookie(name) {
		return "", false
	}
	kept := parts[:1]
	for _, a := range parts[1:] {
		k, _, _ := strings.Cut(a, "=")
		if strings.EqualFold(strings.TrimSpace(k), "domain") {
			continue
		}
		kept = append(kept, a)
	}
	return strings.Join(kept, ";"), true
}

// upstreamError says what went wrong with the program, in errdefs' terms.
func upstreamError(err error, port int) error {
	var mbe *http.MaxBytesError
	switch {
	case errdefs.KindOf(err).Err != nil && !errors.Is(err, context.DeadlineExceeded):
		return err // the dial's own, or a cap of ours
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: the request body is larger than ports.max_request_bytes (%d bytes)", errdefs.ErrTooLarge, mbe.Limit)
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		return fmt.Errorf("%w: the program on port %d did not answer within ports.response_timeout", errdefs.ErrTimeout, port)
	}
	return errdefs.Private(errdefs.ErrBadGateway, fmt.Sprintf("the program on port %d closed the connection or answered no valid HTTP", port), err)
}

// cappedBody ends a response body at its cap with err (the proxy then
// cuts the client's connection: the answer is incomplete).
type cappedBody struct {
	io.ReadCloser
	left int64
	err  error
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.ReadCloser.Read(one[:]); n > 0 {
			return 0, c.err
		}
		return c.ReadCloser.Read(p)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}

// idleWatch closes a proxied exchange's connections once no byte has
// moved either way for its timeout: every byte passes the backend
// connection, so its reads and writes are what it watches.
type idleWatch struct {
	idle  time.Duration
	last  atomic.Int64 // unix nanoseconds
	mu    sync.Mutex
	conns []io.Closer
	timer *time.Timer
	done  bool
}

func newIdleWatch(idle time.Duration) *idleWatch {
	w := &idleWatch{idle: idle}
	w.touch()
	w.timer = time.AfterFunc(idle, w.check)
	return w
}

func (w *idleWatch) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *idleWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if quiet := time.Duration(time.Now().UnixNano() - w.last.Load()); quiet < w.idle {
		w.timer.Reset(w.idle - quiet)
		return
	}
	w.done = true
	for _, c := range w.conns {
		c.Close()
	}
}

// add closes c with the rest when the exchange idles out.
func (w *idleWatch) add(c io.Closer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		c.Close()
		return
	}
	w.conns = append(w.conns, c)
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.timer.Stop()
}

// backend watches c.
func (w *idleWatch) backend(c net.Conn) net.Conn {
	w.add(c)
	return &watchedConn{Conn: c, w: w}
}

type watchedConn struct {
	net.Conn
	w *idleWatch
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.touch()
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.w.touch()
	}
	return n, err
}

// clientWriter is the client's side: each write moves the connection's
// write deadline (a client that stops reading is cut off after the idle
// timeout), and a WebSocket's hijacked connection is closed with the
// backend's when the exchange idles out.
type clientWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	watch *idleWatch
	// wrote and read: when the write and read deadlines were last moved
	// (unix nanoseconds); deadline: one was.
	wrote, read        atomic.Int64
	hijacked, deadline atomic.Bool
}

// due reports whether a deadline was last moved (at *last) long enough
// ago to move it again: a few times per idle period, so that a busy
// stream is not slowed.
func (c *clientWriter) due(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	then := last.Load()
	if time.Duration(now-then) < c.watch.idle/8 || !last.CompareAndSwap(then, now) {
		return false
	}
	c.deadline.Store(true)
	return true
}

func (c *clientWriter) Write(p []byte) (int, error) {
	if c.due(&c.wrote) {
		c.rc.SetWriteDeadline(time.Now().Add(c.watch.idle))
	}
	return c.ResponseWriter.Write(p)
}

// WriteHeader drops the program's informational answers (100, 102, 103)
// but 101: ReverseProxy copies their headers to the client as they come,
// never through ModifyResponse, so a 103 could carry a Set-Cookie for
// the port's own cookie, an Alt-Svc or a Clear-Site-Data that
// scopeResponse removes from final answers. The server sends its own
// 100 Continue when the proxy reads a body; an Early Hints is only a hint.
func (c *clientWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		clear(c.Header())
		return
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *clientWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *clientWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := c.rc.Hijack()
	if err != nil {
		return nil, nil, err
	}
	c.hijacked.Store(true)
	// The server's and this exchange's deadlines were the request's.
	conn.SetDeadline(time.Time{})
	c.watch.add(conn)
	return conn, brw, nil
}

func (c *clientWriter) clearDeadlines() {
	if c.deadline.Load() && !c.hijacked.Load() {
		c.rc.SetWriteDeadline(time.Time{})
		c.rc.SetReadDeadline(time.Time{})
	}
}

// clientReader is the request body: each read moves the connection's
// read deadline (a client that stops sending is cut off after the idle
// timeout).
type clientReader struct {
	r  io.ReadCloser
	cw *clientWriter
}

func (c *clientReader) Read(p []byte) (int, error) {
	if c.cw.due(&c.cw.read) {
		c.cw.rc.SetReadDeadline(time.Now().Add(c.cw.watch.idle))
	}
	n, err := c.r.Read(p)
	if err != nil {
		// The body is over: the server's own read, which watches for the
		// client going away while the answer streams, must not time out.
		c.cw.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (c *clientReader) Close() error { return c.r.Close() }
