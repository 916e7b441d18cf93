package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// newHTTPClient is the client of every HTTP tool: no redirects followed
// (one could take the credential, or the call, elsewhere), bounded
// headers, the host's trust store (or roots). The server's proxy
// environment only when the operator says so (envProxy): a variable
// set for something else must not silently route every credential
// through a proxy.
func newHTTPClient(roots *x509.CertPool, envProxy bool) *http.Client {
	var proxy func(*http.Request) (*url.URL, error)
	if envProxy {
		proxy = http.ProxyFromEnvironment
	}
	tr := &http.Transport{
		Proxy:                  proxy,
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// callHTTP makes an HTTP tool's call. Its refusals never quote the
// request (its headers carry the credential) or the transport's error
// text beyond its kind.
func (b *Broker) callHTTP(ctx context.Context, t *tool, p prepared) (*Result, *Refusal) {
	h := t.cfg.HTTP
	var body io.Reader
	if p.body != nil {
		body = bytes.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(ctx, h.Method, p.url, body)
	if err != nil {
		return nil, &Refusal{Kind: errdefs.ErrInvalidArgument, Rule: "template", Msg: "the arguments make no valid request"}
	}
	req.Header.Set("User-Agent", "airlock-broker")
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	if p.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cr := t.cfg.Credential; cr != nil {
		req.Header.Set(cr.Header, strings.Replace(cr.Format, "{secret}", t.secret, 1))
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, b.transportRefusal(ctx, t, err)
	}
	defer resp.Body.Close()
	max := int64(t.cfg.MaxResponse)
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if int64(len(data)) > max {
		return nil, &Refusal{Kind: errdefs.ErrTooLarge, Rule: "max_response",
			Msg: fmt.Sprintf("the tool answered more than its %d-byte cap (max_response); the answer was refused: ask for less", max)}
	}
	if err != nil {
		return nil, b.transportRefusal(ctx, t, err)
	}
	data, _ = t.scrubBytes(data)
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	r := &Result{Kind: apitype.ToolHTTP, Status: resp.StatusCode, ContentType: clip(t.scrub(ct), 200)}
	r.body(data, mt == "application/json" || strings.HasSuffix(mt, "+json"))
	return r, nil
}

// transportRefusal says why a call got no (whole) answer: its time ran
// out, or the tool's server could not be reached or broke off.
func (b *Broker) transportRefusal(ctx context.Context, t *tool, err error) *Refusal {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Refusal{Kind: errdefs.ErrTimeout, Rule: "timeout", Msg: fmt.Sprintf("the tool did not answer within its timeout (%s)", t.cfg.Timeout)}
	}
	if ctx.Err() != nil {
		return &Refusal{Kind: errdefs.ErrUnavailable, Rule: "canceled", Msg: "the call was canceled: the caller went away or the session ended"}
	}
	b.log.Warn("broker: a tool's server failed", "tool", t.name, "err", errKind(err))
	return &Refusal{Kind: errdefs.ErrUnavailable, Rule: "upstream", Msg: "the tool's server could not be reached or broke off the answer: " + errKind(err)}
}

// errKind names a transport error's kind without its text (which may
// quote the URL or an answer).
func errKind(err error) string {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return "connection failed"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed early"
	case strings.Contains(err.Error(), "tls:"), strings.Contains(err.Error(), "x509:"):
		return "TLS failed (its certificate is not trusted by the server, or the handshake broke)"
	}
	return "transport error"
}
