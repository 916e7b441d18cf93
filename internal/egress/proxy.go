package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProxyAddr is where the optional HTTP proxy listens inside a sandbox:
// proxy-aware clients (HTTP(S)_PROXY) get a 403 whose body says why,
// instead of a reset or NXDOMAIN. It decides exactly as the transparent
// path does: same policy, same guarded dialling, same SNI check after a
// CONNECT.
const ProxyAddr = "127.0.0.1:3128"

// ProxyPort is ProxyAddr's port.
const ProxyPort = 3128

const proxyPort = ProxyPort

// bufConn reads what a bufio.Reader already buffered before the conn.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// hopHeaders are not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

// proxyHead is the head a forward-proxy request is sent upstream with:
// origin form, one request per connection (a later request on the same
// client connection cannot reach another host), and the body's framing
// as the client sent it. net/http moves Transfer-Encoding out of the
// header map; without it upstream would take a chunked body's bytes for
// the next request (red team: chunked uploads broke, and the "body" was
// a second request smuggled past the one-request rule).
func proxyHead(req *http.Request) []byte {
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.Host)
	req.Header.Write(&b)
	if len(req.TransferEncoding) > 0 {
		fmt.Fprintf(&b, "Transfer-Encoding: %s\r\n", strings.Join(req.TransferEncoding, ", "))
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// refuse answers a proxy request with status and the reason, and logs it.
func (g *Gate) refuse(c net.Conn, d *Decision, status int, reason string) {
	d.mu.Lock()
	d.Reason = "denied: " + reason
	d.mu.Unlock()
	g.record(d, true)
	answer(c, status, "denied", reason)
}

// answer ends a proxy request with status, the verdict (X-Airlock-Egress)
// and the reason.
func answer(c net.Conn, status int, verdict, reason string) {
	body := "airlock egress: " + reason + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Airlock-Egress: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), verdict, len(body), body)
	c.Close()
}

// handleProxy decides one proxy request (CONNECT, or an absolute-URI
// request for plain HTTP) and carries the connection.
func (g *Gate) handleProxy(c net.Conn) {
	g.total.Add(1)
	d := &Decision{Kind: "proxy", Start: time.Now()}
	release, reason, session := g.admit()
	switch {
	case release == nil && session:
		g.refuse(c, d, http.StatusTooManyRequests, reason)
		return
	case release == nil:
		// The server's cap: a reset, not a 503. Writing one before the
		// request is read races the reset that closing an unread socket
		// sends, and waiting for the request would hold the very
		// descriptors the cap saves.
		g.deny(c, d, reason)
		return
	}
	defer release()

	c.SetReadDeadline(time.Now().Add(peekTimeout))
	// The head is read through a limit: http.ReadRequest itself has
	// none, and a sandbox streaming one endless header line for the
	// peek time grew the server by gigabytes (red team). The body that
	// follows is the splice's, unlimited but for the byte budget.
	lr := &io.LimitedReader{R: c, N: maxPeek}
	br := bufio.NewReaderSize(lr, 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		reason := "not an HTTP proxy request"
		if lr.N <= 0 {
			reason = fmt.Sprintf("the request head is larger than %d bytes", maxPeek)
		}
		g.refuse(c, d, http.StatusBadRequest, reason)
		return
	}
	lr.N = math.MaxInt64
	c.SetReadDeadline(time.Time{})
	var host, portStr string
	if req.Method == http.MethodConnect {
		host, portStr, err = net.SplitHostPort(req.RequestURI)
	} else if req.URL.Scheme == "http" && req.URL.Host != "" {
		host, portStr = req.URL.Hostname(), req.URL.Port()
		if portStr == "" {
			portStr = "80"
		}
	} else {
		err = fmt.Errorf("not a proxy request")
	}
	p, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || p == 0 {
		g.refuse(c, d, http.StatusBadRequest, "a proxy request needs CONNECT host:port or an absolute http:// URI")
		return
	}
	port := uint16(p)
	d.Port, d.Dest = port, clip(net.JoinHostPort(host, portStr))
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil || looksNumeric(host) {
		g.refuse(c, d, http.StatusForbidden, fmt.Sprintf("%s is an IP address: only allowed names are reachable", clip(host)))
		return
	}
	name, err := NormalizeName(host)
	if err != nil {
		g.refuse(c, d, http.StatusForbidden, fmt.Sprintf("%q is not a valid host name", clip(host)))
		return
	}
	d.Name = name
	if !g.Policy().Allows(name, port) {
		g.refuse(c, d, http.StatusForbidden, name+":"+portStr+" is not in the allowlist")
		return
	}
	if _, why := g.fakeAddr(name); why != "" {
		g.refuse(c, d, http.StatusForbidden, why) // a wildcard's names used up
		return
	}
	if g.limits.Bytes > 0 && g.used.Load() >= g.limits.Bytes {
		g.refuse(c, d, http.StatusForbidden, fmt.Sprintf("the session's byte budget (%d) is used up", g.limits.Bytes))
		return
	}
	giveBack, err := g.takeConnection()
	if err != nil {
		g.refuse(c, d, http.StatusTooManyRequests, err.Error())
		return
	}
	carried := false
	defer func() {
		if !carried {
			giveBack()
		}
	}()
	client := &bufConn{Conn: c, r: br}
	var head []byte
	var reqs *reqStream
	if req.Method != http.MethodConnect {
		// One request per connection: its body passes, framed as the
		// head sent upstream says, and nothing after it (a second
		// request would name a host nobody checked).
		head = proxyHead(req)
		reqs = bodyStream(name, req.ContentLength, slices.Contains(req.TransferEncoding, "chunked"))
		reqs.isHead = req.Method == http.MethodHead
	}
	// The name is resolved (and its addresses checked) while a 403 can
	// still say why; nothing is dialled before the tunnel's first bytes
	// are checked.
	addrs, err := g.resolve(name)
	if err != nil {
		var le limitError
		switch {
		case errors.As(err, &le):
			g.refuse(c, d, http.StatusTooManyRequests, err.Error())
		case g.dialFailed(d, err):
			g.refuse(c, d, http.StatusForbidden, err.Error())
		default:
			answer(c, http.StatusBadGateway, "failed", err.Error())
		}
		return
	}
	if req.Method == http.MethodConnect {
		if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			c.Close()
			return
		}
		// The same tie as the transparent path, before any connection
		// upstream: a TLS ClientHello or HTTP requests through the
		// tunnel must name the host it was opened for, unless its entry
		// is opaque.
		if !g.Policy().Opaque(name, port) {
			if head, reqs, err = g.peek(client, name); err != nil {
				g.deny(c, d, err.Error())
				return
			}
		}
	}
	if !g.Policy().Opaque(name, port) && g.interceptable(name, head) {
		carried = true
		if req.Method == http.MethodConnect {
			head = peeked(head, reqs)
		}
		g.intercept(client, head, name, port, d)
		return
	}
	up, addr, err := g.dialer.Connect(context.Background(), name, addrs, port)
	if err != nil {
		// After a CONNECT's 200 only a reset can say it, as on the
		// transparent path.
		denied := g.dialFailed(d, err)
		switch {
		case req.Method == http.MethodConnect && denied:
			g.deny(c, d, err.Error())
		case req.Method == http.MethodConnect:
			resetClose(c)
		case denied:
			g.refuse(c, d, http.StatusForbidden, err.Error())
		default:
			answer(c, http.StatusBadGateway, "failed", err.Error())
		}
		return
	}
	carried = true
	g.carry(client, up, addr, head, reqs, d)
}
