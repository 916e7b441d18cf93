package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// maxPeek caps what is read before a decision: a ClientHello with
// post-quantum key shares spans several segments but stays far below.
const maxPeek = 16 << 10

var errPeekDone = errors.New("peeked")

// ClientHelloSNI parses a TLS ClientHello at the start of data and returns
// its server name. It reads nothing past the ClientHello; complete reports
// whether data held a whole one (false: read more).
func ClientHelloSNI(data []byte) (sni string, complete bool, err error) {
	r := &peekConn{r: bytes.NewReader(data)}
	var got *tls.ClientHelloInfo
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		got = h
		return nil, errPeekDone
	}}
	herr := tls.Server(r, cfg).Handshake()
	if got != nil {
		if got.ServerName == "" {
			return "", true, errors.New("TLS ClientHello without a server name (SNI)")
		}
		return got.ServerName, true, nil
	}
	if r.eof {
		return "", false, nil
	}
	if herr == nil {
		herr = errors.New("no ClientHello")
	}
	return "", true, errors.New("not a TLS ClientHello")
}

// peekConn is a net.Conn over a byte slice that swallows writes (the
// alert crypto/tls sends when the peek aborts the handshake).
type peekConn struct {
	r   *bytes.Reader
	eof bool
}

func (c *peekConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}
func (c *peekConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *peekConn) Close() error                     { return nil }
func (c *peekConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *peekConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *peekConn) SetDeadline(time.Time) error      { return nil }
func (c *peekConn) SetReadDeadline(time.Time) error  { return nil }
func (c *peekConn) SetWriteDeadline(time.Time) error { return nil }

// HTTPHost parses an HTTP/1 request head at the start of data and returns
// the host it is for (the Host header, and the absolute URI's host when
// there is one: both must agree), without a port. complete is false when
// the head is not whole yet.
func HTTPHost(data []byte) (host string, complete bool, err error) {
	if !bytes.Contains(data, []byte("\r\n\r\n")) && !bytes.Contains(data, []byte("\n\n")) {
		if len(data) >= maxPeek {
			return "", true, errors.New("HTTP request head too large")
		}
		return "", false, nil
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(data)))
	line, err := tp.ReadLine()
	if err != nil {
		return "", true, errors.New("malformed HTTP request")
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/1.") {
		return "", true, errors.New("malformed HTTP request line")
	}
	if method == http.MethodConnect {
		return "", true, errors.New("CONNECT on a direct connection")
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return "", true, errors.New("malformed HTTP request head")
	}
	hosts := mh.Values("Host")
	if len(hosts) > 1 {
		return "", true, errors.New("HTTP request with more than one Host")
	}
	var hdr, uri string
	if len(hosts) == 1 {
		hdr = hosts[0]
	}
	if !strings.HasPrefix(target, "/") && target != "*" {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return "", true, errors.New("malformed HTTP request target")
		}
		uri = u.Host
	}
	if hdr == "" && uri == "" {
		return "", true, errors.New("HTTP request without a Host")
	}
	h1, h2 := stripPort(hdr), stripPort(uri)
	if hdr != "" && uri != "" && !strings.EqualFold(h1, h2) {
		return "", true, errors.New("HTTP Host and request URI name different hosts")
	}
	if h1 == "" {
		h1 = h2
	}
	return h1, true, nil
}

func stripPort(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// looksHTTP reports whether data starts like an HTTP/1 request line.
func looksHTTP(data []byte) bool {
	for _, m := range []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "} {
		n := min(len(m), len(data))
		if n > 0 && string(data[:n]) == m[:n] {
			return true
		}
	}
	return false
}
