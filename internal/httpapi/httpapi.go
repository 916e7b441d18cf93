// Package httpapi owns what airlock's HTTP APIs share (its own under /v1,
// package v1; E2B's, package e2b; both on one listener): the edge every
// request crosses (its id, panic recovery, the request log and metrics
// hook), who the caller is (the unix socket, server.token, API keys), the
// browser guard of a server without authentication, the refusals that
// are counted and audited, the audit log's refusal of work while it
// cannot write, JSON answers with control characters escaped, bodies
// read under a cap, and the logging half of turning an error into an
// answer (each API encodes its own error bodies).
//
// It must never put host internals in a response, never follow a
// redirect the mux would answer, and never decide what a request may do
// beyond who sent it: package session admits work (one Admitter for
// every API).
package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// Edge is where every request to an API arrives. One Edge serves every
// API of a server, so that keys, refusals, metrics and the audit log's
// state are the same whichever API a client speaks.
type Edge struct {
	cfg config.Config
	log *slog.Logger
	// idPrefix and seq make request ids unique to this server's life.
	idPrefix string
	seq      atomic.Uint64
	// Keys resolves API keys (nil: only server.token and the unix socket
	// authenticate).
	Keys Authenticator
	// Audit, when set, is the audit log: work is refused while it cannot
	// write records (see Work).
	Audit AuditLog
	// Observe, when set, hears every answered request: its route pattern
	// ("" if it was refused before routing), status and duration (metrics).
	Observe func(route string, status int, d time.Duration)
	// Refused, when set, hears every request refused for who sent it
	// (metrics count them, the audit log aggregates them).
	Refused func(Refusal)
	// Transfers counts file uploads and downloads of every API against
	// the same caps.
	Transfers Transfers
}

// NewEdge returns the edge of a server configured by cfg.
func NewEdge(cfg config.Config, log *slog.Logger) *Edge {
	var b [4]byte
	rand.Read(b[:])
	return &Edge{cfg: cfg, log: log, idPrefix: hex.EncodeToString(b[:]) + "-"}
}

// Log is the server's logger.
func (e *Edge) Log() *slog.Logger { return e.log }

// AuditLog is the audit log the APIs serve and obey (package audit).
type AuditLog interface {
	Query(ctx context.Context, q apitype.AuditQuery) ([]apitype.AuditRecord, string, error)
	// Check refuses work while records cannot be written (nil: go on).
	Check() error
	// Health is its state for /healthz.
	Health() apitype.AuditHealth
}

// Authenticator resolves the secret of an API key to its caller.
type Authenticator interface {
	// Authenticate returns the caller whose key secret is, and why it is
	// refused ("" when it is a live key; RefusedUnknownKey,
	// RefusedRevokedKey or RefusedExpiredKey, with the key's identity
	// when it is known).
	Authenticate(ctx context.Context, secret string) (who identity.Identity, refused string, err error)
}

// Refusal is a request refused for who sent it: a failed authentication
// or a request for what the caller may not see.
type Refusal struct {
	// Kind is apitype.AuditAuthFailure or apitype.AuditAccessDenied.
	Kind string
	// Reason is one of RefusalReasons.
	Reason string
	// Source is the client's address (no port; "" over the unix socket).
	Source string
	// Tenant and KeyID are the caller's, when its key is known (a
	// revoked or expired one too).
	Tenant, KeyID, RequestID string
}

// Reasons of refusals: a fixed vocabulary (metrics label by it).
const (
	RefusedMissingKey  = "missing_key"
	RefusedUnknownKey  = "unknown_key"
	RefusedRevokedKey  = "revoked_key"
	RefusedExpiredKey  = "expired_key"
	RefusedCrossTenant = "cross_tenant"
	RefusedAdminOnly   = "admin_only"
	RefusedBrowser     = "browser"
	// RefusedPortToken: a request to a session's port without an API
	// key and without the port's token (or cookie, or a live link), to a
	// port that is not public.
	RefusedPortToken = "port_token"
	// RefusedAccessToken: a sandbox's data plane (E2B's envd and code
	// interpreter) without that sandbox's access token.
	RefusedAccessToken = "access_token"
)

// RefusalReasons lists every reason.
func RefusalReasons() []string {
	return []string{RefusedMissingKey, RefusedUnknownKey, RefusedRevokedKey, RefusedExpiredKey, RefusedCrossTenant, RefusedAdminOnly, RefusedBrowser, RefusedPortToken, RefusedAccessToken}
}

// Refuse reports a refusal of r (a no-op without a listener).
func (e *Edge) Refuse(r *http.Request, kind, reason string, who identity.Identity) {
	if e.Refused == nil {
		return
	}
	src := ""
	if !Local(r) {
		src, _, _ = net.SplitHostPort(r.RemoteAddr)
	}
	e.Refused(Refusal{Kind: kind, Reason: reason, Source: src, Tenant: who.Tenant, KeyID: who.KeyID, RequestID: identity.Request(r.Context())})
}

// Fail answers a request with an error, in its API's own shape.
type Fail func(w http.ResponseWriter, err error)

// Serve runs next for r with what every API's request gets: an id (the
// client's X-Request-Id when it is a sane token, else a new one) in the
// answer's header and in r's context, recovery from a panic (answered
// with fail when nothing was written yet), the request log, and Observe.
func (e *Edge) Serve(w http.ResponseWriter, r *http.Request, fail Fail, next func(w http.ResponseWriter, r *http.Request)) {
	start := time.Now()
	rw := &Response{ResponseWriter: w, status: http.StatusOK, id: e.requestID(r), log: e.log}
	rw.Header().Set(apitype.RequestIDHeader, rw.id)
	r = r.WithContext(identity.WithRequest(r.Context(), rw.id))
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			e.log.Error("panic in handler", "request", rw.id, "panic", p, "stack", string(debug.Stack()))
			if !rw.wrote {
				fail(rw, errors.New("panic"))
			}
		}
		d := time.Since(start)
		if e.log.Enabled(r.Context(), slog.LevelDebug) { // off, it costs no allocation
			e.log.Debug("request", "request", rw.id, "method", r.Method, "path", r.URL.Path, "status", rw.status, "ms", d.Milliseconds())
		}
		if e.Observe != nil {
			e.Observe(rw.route, rw.status, d)
		}
	}()
	next(rw, r)
}

// Routed records the route pattern r was served by, for Observe (call it
// from the routed handler: the mux sets r.Pattern on its own copy).
func Routed(w http.ResponseWriter, r *http.Request) {
	if rw := ResponseOf(w); rw != nil {
		rw.route = r.Pattern
	}
}

// requestID is the client's X-Request-Id when it is a sane token, else a
// new one.
func (e *Edge) requestID(r *http.Request) string {
	if id := r.Header.Get(apitype.RequestIDHeader); id != "" && len(id) <= 128 && SaneID(id) {
		return id
	}
	return e.idPrefix + strconv.FormatUint(e.seq.Add(1), 10)
}

// SaneID reports whether id is made of letters, digits and - _ . : only.
func SaneID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// Open reports whether r's caller is the operator without a key: over
// the unix socket (or in-process), or on a server without
// authentication (server.auth "none", loopback only).
func (e *Edge) Open(r *http.Request) bool {
	return Local(r) || e.cfg.Server.Auth == config.AuthNone
}

// Authenticate resolves the caller whose secret (a bearer API key, or
// server.token) r carries; how the secret travels is the API's (how is
// named in the error of a missing one). The operator (Open) is an admin
// whatever it sends. A refused caller gets why (one of RefusalReasons),
// and its identity when its key is known but revoked or expired.
func (e *Edge) Authenticate(r *http.Request, secret, how string) (identity.Identity, string, error) {
	if e.Open(r) {
		return identity.Identity{Admin: true}, "", nil
	}
	if secret == "" {
		return identity.Identity{}, RefusedMissingKey, fmt.Errorf("%w: bad or missing API key: send one as %s", errdefs.ErrUnauthenticated, how)
	}
	if tok := e.cfg.Server.Token; tok != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(tok)) == 1 {
		return identity.Identity{Admin: true}, "", nil
	}
	refused := RefusedUnknownKey
	var who identity.Identity
	if e.Keys != nil {
		var err error
		who, refused, err = e.Keys.Authenticate(r.Context(), secret)
		if err != nil {
			return identity.Identity{}, "", err
		}
		if refused == "" {
			return who, "", nil
		}
	}
	if refused == RefusedExpiredKey {
		// The holder of the secret learns nothing it could not try.
		return who, refused, fmt.Errorf("%w: bad or missing API key: the key has expired; ask for a new one", errdefs.ErrUnauthenticated)
	}
	return who, refused, fmt.Errorf("%w: bad or missing API key: the key is unknown or revoked", errdefs.ErrUnauthenticated)
}

// Work refuses work while the audit log cannot write its records (nil:
// go on). Every API calls it before a request that starts, changes or
// reads out what the log records; reads of state, and what stops work,
// are not refused.
func (e *Edge) Work() error {
	if e.Audit == nil {
		return nil
	}
	return e.Audit.Check()
}

// BrowserGuard protects a server without authentication (auth "none",
// loopback only, every caller an admin) from the web pages its user
// visits: a DNS-rebinding page reaches 127.0.0.1 under its own name (a
// foreign Host), and a cross-site form or fetch posts text/plain JSON with
// a foreign Origin. Either would otherwise list, read and run code in
// every session. Requests over the unix socket and this process's own
// (MCP's in-process client, whose /mcp request passed here already) are
// not a browser's; with keys a page has no key to send.
func (e *Edge) BrowserGuard(r *http.Request) error {
	if e.cfg.Server.Auth != config.AuthNone || Local(r) || r.RemoteAddr == "in-process" {
		return nil
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && la.IP.IsLoopback() && !loopbackHost(r.Host) {
		return fmt.Errorf("%w: Host %q is not a loopback name (a DNS-rebinding guard of a server without authentication)", errdefs.ErrPermission, Truncate(r.Host))
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if o := r.Header.Get("Origin"); o != "" && !SameOrigin(o, scheme, r.Host) {
		return fmt.Errorf("%w: a request from the web page %q (a server without authentication answers no page but its own origin's)", errdefs.ErrPermission, Truncate(o))
	}
	// Ports are not part of a site: a page on localhost:3000 fetching
	// localhost:8080 is "same-site", and a no-cors GET sends no Origin.
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return fmt.Errorf("%w: a %s request (a server without authentication answers no web page but its own origin's)", errdefs.ErrPermission, site)
	}
	return nil
}

// SameOrigin reports whether origin (an Origin header) is the origin a
// request came to: scheme (the one the client used, which a server
// behind a TLS-terminating proxy knows only from its configuration), and
// the host and port of its Host header, which the browser sets to the
// URL it fetches (a page on any other port of localhost is another
// origin). "null" (sandboxed frames, files, redirects) is no origin.
func SameOrigin(origin, scheme, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	oh, op := splitHostPort(u.Host, u.Scheme)
	rh, rp := splitHostPort(host, scheme)
	return u.Scheme == scheme && op != "" && op == rp && strings.EqualFold(oh, rh)
}

// splitHostPort splits a URL's or Host header's host and port, the port
// defaulted by scheme ("" when it is neither http nor https).
func splitHostPort(hostport, scheme string) (host, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), port
}

// loopbackHost reports whether a Host header (name or address, with or
// without a port) names this machine's loopback.
func loopbackHost(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// Local reports whether r came over the server's unix socket, which only
// the server's own user can reach (its file mode is 0600), or from this
// process (see AsLocal).
func Local(r *http.Request) bool {
	_, ok := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr)
	return ok
}

// AsLocal serves h as the server's own operator reaches it: every request
// is treated like one over the unix socket (for a server embedded in
// `airlock mcp`, whose stdio client is the operator).
func AsLocal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.UnixAddr{Name: "in-process", Net: "unix"})))
	})
}

// Canonical reports whether p is an absolute path with no empty, "." or
// ".." segment (a trailing slash is kept: it is a different resource).
// Go's ServeMux would answer a redirect to the cleaned path: to another
// resource (files/.. is the session itself), which a client that follows
// redirects would then act on.
func Canonical(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p[1:], "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return p == "/"
		}
	}
	return true
}

// Truncate shortens what a client sent for an error message.
func Truncate(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// Response is every handler's ResponseWriter: it remembers the status
// for the log, and the request's id and logger for Report.
type Response struct {
	http.ResponseWriter
	status int
	wrote  bool
	id     string
	route  string
	log    *slog.Logger
	// redirected: the mux answered a redirect, replaced by a 404
	redirected bool
	notFound   func(w http.ResponseWriter)
}

// NewResponse is the Response Serve gives a handler, for a request
// answered outside Serve (a test's).
func NewResponse(w http.ResponseWriter, id string, log *slog.Logger) *Response {
	return &Response{ResponseWriter: w, status: http.StatusOK, id: id, log: log}
}

// ID is the request's id.
func (r *Response) ID() string { return r.id }

// Wrote reports whether anything was written yet.
func (r *Response) Wrote() bool { return r.wrote }

func (r *Response) WriteHeader(code int) {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		if r.notFound != nil && !r.wrote {
			// No API response is ever a redirect.
			r.Header().Del("Location")
			r.redirected = true
			nf := r.notFound
			r.notFound = nil
			nf(r)
			return
		}
	}
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *Response) Write(b []byte) (int, error) {
	if r.redirected {
		return len(b), nil // the redirect's own body
	}
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *Response) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// NoRedirects makes any redirect the mux answers on w (a *Response, or
// one under wrappers) notFound's answer instead.
func NoRedirects(w http.ResponseWriter, notFound func(w http.ResponseWriter)) {
	if rw := ResponseOf(w); rw != nil {
		rw.notFound = func(w http.ResponseWriter) {
			nf := notFound
			nf(w)
		}
	}
}

// AllowRedirects lets w answer redirects again: a proxied program's own
// (NoRedirects is for the mux's).
func AllowRedirects(w http.ResponseWriter) {
	if rw := ResponseOf(w); rw != nil {
		rw.notFound = nil
	}
}

// ResponseOf finds the request's *Response under the wrappers of w (a
// download's stall deadline, say); nil outside Serve.
func ResponseOf(w http.ResponseWriter) *Response {
	for {
		switch rw := w.(type) {
		case *Response:
			return rw
		case interface{ Unwrap() http.ResponseWriter }:
			w = rw.Unwrap()
		default:
			return nil
		}
	}
}

// Report is the half of answering err that every API shares: a body too
// large becomes ErrTooLarge, a retry's delay becomes Retry-After, and the
// detail of a private or internal error goes to the log under the
// request's id. It returns err's row of errdefs' table and what a client
// may read (for an internal error, only where the log has the detail).
func Report(w http.ResponseWriter, err error) (errdefs.Kind, string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = fmt.Errorf("%w: the request body is larger than %d bytes", errdefs.ErrTooLarge, mbe.Limit)
	}
	kind := errdefs.KindOf(err)
	if after, ok := errdefs.RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(after.Seconds())))))
	}
	msg := errdefs.Message(err)
	if rw := ResponseOf(w); rw != nil {
		var private *errdefs.Error
		switch {
		case errors.Is(err, context.Canceled):
			rw.log.Debug("request cancelled", "request", rw.id, "err", err) // its client left
		case kind.Err == nil:
			rw.log.Error("request failed", "request", rw.id, "err", err)
		case errors.As(err, &private):
			rw.log.Warn("request failed", "request", rw.id, "code", kind.Code, "err", err)
		}
		if kind.Err == nil {
			msg = "internal error; the server log has the details (request " + rw.id + ")"
		}
	}
	return kind, msg
}

// WriteJSON answers v as JSON with status (HTML left unescaped, control
// characters escaped: see EscapeControls).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := EncodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"cannot encode the response"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// EncodeJSON is v as one line of JSON (ending in \n), HTML left
// unescaped, control characters escaped (see EscapeControls).
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return EscapeControls(buf.Bytes()), nil
}

// EscapeControls escapes, in encoded JSON, the control characters
// encoding/json leaves as they are: DEL and C1 (U+0080-U+009F, which some
// terminals obey: U+009B is CSI). They come from sandboxed code (a file's
// name, its output) and must not drive the terminal of whoever reads a
// response raw. Outside strings JSON is ASCII without them, so every one
// is in a string, where \u00XX means the same.
func EscapeControls(b []byte) []byte {
	if bytes.IndexByte(b, 0x7f) < 0 && bytes.IndexByte(b, 0xc2) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == 0x7f:
			out = append(out, `\u007f`...)
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = append(out, fmt.Sprintf(`\u%04x`, b[i+1])...)
			i++
		default:
			out = append(out, b[i])
		}
	}
	return out
}

// ReadBody reads r's whole body, at most max bytes (more is an
// *http.MaxBytesError, which Report makes ErrTooLarge). A body cut short
// or with a broken chunked encoding is the client's mistake.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, errdefs.Private(errdefs.ErrInvalidArgument, "the request body could not be read (truncated, or a malformed chunked encoding)", err)
	}
	return data, nil
}
