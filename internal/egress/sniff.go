package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
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
