// Package v1 owns airlock's HTTP API under /v1: routing (one table),
// strict JSON decoding with size caps (one function), the HTTP adapter of
// errdefs' table (every error becomes a status and a JSON body in one
// place, with the request's id; detail goes to the log), request ids,
// authentication, streaming executions as NDJSON, and streaming files in
// and out of a session's workspace. Its wire types are package apitype's.
//
// It must never answer a client's mistake with a 500, never put host
// internals in a response, never hold a whole upload or download in
// memory, never let a file transfer outlast its caps or a client that
// stopped moving, and never let a request reach a sandbox with a limit
// above the server's maximum (package session enforces the limits and
// admits every request by its tenant's rules and quotas; this package
// only decodes and encodes).
package v1

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
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	_ "embed"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/session"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return openAPI }

// Server serves the API.
type Server struct {
	m       *session.Manager
	cfg     config.Config
	log     *slog.Logger
	mux     *http.ServeMux
	version string
	// idPrefix and seq make request ids unique to this server's life.
	idPrefix string
	seq      atomic.Uint64
	// transfers counts file uploads and downloads (see transfer.go).
	transfers transfers
	// Stats, when set, adds pool figures to /healthz (and /readyz reads
	// the warm sandboxes in them).
	Stats func() map[string]any
	// Pod is the server's name in a cluster, for /readyz.
	Pod string
	// Keys resolves API keys (nil: only server.token and the unix socket
	// authenticate).
	Keys Authenticator
	// Audit, when set, serves GET /v1/audit.
	Audit AuditLog
	// Directory, when set, lists sessions across the servers sharing
	// the store (GET /v1/sessions); its Health joins /readyz.
	Directory Directory
	// public are paths served without authentication (/healthz, /readyz,
	// /v1/openapi.json; /metrics when the operator says so).
	public map[string]bool
	// publicTrees are path prefixes served without authentication (the
	// web console's static pages, which hold no data: "/ui" and below).
	publicTrees []string
	// Observe, when set, hears every answered request: its route pattern
	// ("" if it was refused before routing), status and duration (metrics).
	Observe func(route string, status int, d time.Duration)
	// Refused, when set, hears every request refused for who sent it
	// (metrics count them, the audit log aggregates them).
	Refused func(Refusal)
}

// Directory is the sessions directory (package directory).
type Directory interface {
	// List is the sessions who sees on every server, each with its pod.
	List(ctx context.Context, who identity.Identity) ([]apitype.Session, error)
	// Register lists a session just created (before its creator hears
	// of it).
	Register(ctx context.Context, s apitype.Session) error
	// Health is nil while the store takes the directory's writes.
	Health() error
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
)

// RefusalReasons lists every reason.
func RefusalReasons() []string {
	return []string{RefusedMissingKey, RefusedUnknownKey, RefusedRevokedKey, RefusedExpiredKey, RefusedCrossTenant, RefusedAdminOnly, RefusedBrowser, RefusedPortToken}
}

// wellKnown is where MCP clients look for OAuth (RFC 9728, RFC 8414)
// after a 401. Every path under it is a 404 without a key: a 401 there
// would send them on into an authorization flow airlock does not have,
// and a 404 makes them report the API key problem instead.
const wellKnown = "/.well-known/"

// Authenticator resolves the secret of a bearer API key to its caller.
type Authenticator interface {
	// Authenticate returns the caller whose key secret is, and why it is
	// refused ("" when it is a live key; RefusedUnknownKey,
	// RefusedRevokedKey or RefusedExpiredKey, with the key's identity
	// when it is known).
	Authenticate(ctx context.Context, secret string) (who identity.Identity, refused string, err error)
}

// refuse reports a refusal of r (a no-op without a listener).
func (s *Server) refuse(r *http.Request, kind, reason string, who identity.Identity) {
	if s.Refused == nil {
		return
	}
	src := ""
	if !local(r) {
		src, _, _ = net.SplitHostPort(r.RemoteAddr)
	}
	s.Refused(Refusal{Kind: kind, Reason: reason, Source: src, Tenant: who.Tenant, KeyID: who.KeyID, RequestID: identity.Request(r.Context())})
}

// denied reports err if it is a request for another tenant's resource
// (answered as not found, like an unknown one), then answers it.
func (s *Server) denied(w http.ResponseWriter, r *http.Request, err error) {
	var other *session.OtherTenantError
	if errors.As(err, &other) {
		who, _ := identity.From(r.Context())
		s.refuse(r, apitype.AuditAccessDenied, RefusedCrossTenant, who)
	}
	fail(w, err)
}

// Public serves path without authentication (a metrics endpoint, say).
func (s *Server) Public(path string) { s.public[path] = true }

// PublicTree serves prefix and every path below it without
// authentication (static pages that hold no data: the web console). The
// browser guard of a server without authentication still applies.
func (s *Server) PublicTree(prefix string) {
	s.publicTrees = append(s.publicTrees, strings.TrimSuffix(prefix, "/"))
}

// isPublic reports whether p is served without authentication.
func (s *Server) isPublic(p string) bool {
	if s.public[p] || strings.HasPrefix(p, wellKnown) {
		return true
	}
	for _, t := range s.publicTrees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

// route is one operation of the API (method "": every method). work
// marks those that start,
// change or read out what the audit log records (sessions, executions,
// commands, installs, one-shot and program runs, file transfers, the
// network policy): while the log cannot write they are refused (see
// AuditLog.Check); reads of state, and what stops work (interrupt,
// signal, delete), are not.
type route struct {
	method, pattern string
	handle          func(*Server, http.ResponseWriter, *http.Request)
	work            bool
}

// routes is the API: every operation, in one table (the OpenAPI document
// describes the same set; a test holds them together).
var routes = []route{
	{"GET", "/healthz", (*Server).health, false},
	{"GET", "/readyz", (*Server).ready, false},
	{"GET", "/v1/openapi.json", (*Server).openapi, false},
	{"POST", "/v1/sessions", (*Server).createSession, true},
	{"GET", "/v1/sessions", (*Server).listSessions, false},
	{"GET", "/v1/sessions/{id}", (*Server).getSession, false},
	{"DELETE", "/v1/sessions/{id}", (*Server).deleteSession, false},
	{"POST", "/v1/sessions/{id}/pause", (*Server).pauseSession, false},
	{"POST", "/v1/sessions/{id}/resume", (*Server).resumeSession, true},
	{"PUT", "/v1/sessions/{id}/timeout", (*Server).setTimeout, false},
	{"POST", "/v1/sessions/{id}/fork", (*Server).forkSession, true},
	{"POST", "/v1/sessions/{id}/execute", (*Server).execute, true},
	{"POST", "/v1/sessions/{id}/interrupt", (*Server).interrupt, false},
	{"POST", "/v1/sessions/{id}/contexts", (*Server).createContext, true},
	{"GET", "/v1/sessions/{id}/contexts", (*Server).listContexts, false},
	{"GET", "/v1/sessions/{id}/contexts/{ctx}", (*Server).getContext, false},
	{"DELETE", "/v1/sessions/{id}/contexts/{ctx}", (*Server).deleteContext, false},
	{"POST", "/v1/sessions/{id}/contexts/{ctx}/restart", (*Server).restartContext, true},
	{"GET", "/v1/sessions/{id}/network", (*Server).getNetwork, false},
	{"PUT", "/v1/sessions/{id}/network", (*Server).putNetwork, true},
	{"POST", "/v1/sessions/{id}/packages", (*Server).installPackages, true},
	{"POST", "/v1/sessions/{id}/commands", (*Server).runCommand, true},
	{"GET", "/v1/sessions/{id}/commands", (*Server).listCommands, false},
	{"GET", "/v1/sessions/{id}/commands/{cid}", (*Server).getCommand, false},
	{"POST", "/v1/sessions/{id}/commands/{cid}/signal", commandAction(signalCommand), false},
	{"POST", "/v1/sessions/{id}/commands/{cid}/stdin", commandAction(commandStdin), true},
	{"POST", "/v1/sessions/{id}/commands/{cid}/resize", commandAction(resizeCommand), false},
	{"GET", "/v1/sessions/{id}/commands/{cid}/events", (*Server).commandEvents, false},
	{"GET", "/v1/sessions/{id}/commands/{cid}/ws", (*Server).commandSocket, true},
	{"GET", "/v1/sessions/{id}/files", (*Server).listFiles, false},
	{"GET", "/v1/sessions/{id}/files/{path...}", (*Server).download, true},
	{"PUT", "/v1/sessions/{id}/files/{path...}", (*Server).upload, true},
	{"DELETE", "/v1/sessions/{id}/files/{path...}", (*Server).deleteFile, true},
	{"POST", "/v1/execute", (*Server).executeOnce, true},
	{"POST", "/v1/run", (*Server).runProgram, true},
	{"GET", "/v1/audit", (*Server).audit, false},
	{"GET", "/v1/sessions/{id}/history", (*Server).history, false},
	{"GET", "/v1/sessions/{id}/notebook", (*Server).notebookExport, false},
	{"GET", "/v1/whoami", (*Server).whoami, false},
	{"GET", "/v1/sessions/{id}/ports", (*Server).listPorts, false},
	{"POST", "/v1/sessions/{id}/ports/{port}", (*Server).openPort, true},
	{"GET", "/v1/sessions/{id}/ports/{port}", (*Server).getPort, false},
	{"DELETE", "/v1/sessions/{id}/ports/{port}", (*Server).closePort, false},
	// A program's own requests, every method (the path form of ports).
	{"", "/v1/sessions/{id}/ports/{port}/{path...}", (*Server).portPath, true},
	{"GET", "/v1/templates", (*Server).listTemplates, false},
	{"GET", "/v1/templates/{name}", (*Server).getTemplate, false},
	{"GET", "/v1/tools", (*Server).listTools, false},
	{"GET", "/v1/sessions/{id}/tools", (*Server).sessionTools, false},
}

// New returns the API handler.
func New(m *session.Manager, cfg config.Config, log *slog.Logger, version string) *Server {
	var b [4]byte
	rand.Read(b[:])
	s := &Server{m: m, cfg: cfg, log: log, mux: http.NewServeMux(), version: version, idPrefix: hex.EncodeToString(b[:]) + "-",
		// The API's description holds no secrets: clients and tools read
		// it before they have a key.
		public: map[string]bool{"/healthz": true, "/readyz": true, "/v1/openapi.json": true}}
	allow := map[string][]string{}
	for _, rt := range routes {
		s.mux.HandleFunc(strings.TrimSpace(rt.method+" "+rt.pattern), func(w http.ResponseWriter, r *http.Request) {
			if rt.work && s.Audit != nil {
				if err := s.Audit.Check(); err != nil {
					fail(w, err)
					return
				}
			}
			rt.handle(s, w, r)
		})
		if rt.method != "" {
			allow[rt.pattern] = append(allow[rt.pattern], rt.method)
		}
	}
	// Method-less patterns are less specific than the ones above: they
	// only catch a known path with the wrong method.
	for pattern, methods := range allow {
		methods := strings.Join(methods, ", ")
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			fail(w, fmt.Errorf("%w: %s is not allowed here; use %s", errdefs.ErrMethodNotAllowed, r.Method, methods))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && cfg.Console.Enabled {
			fail(w, fmt.Errorf("%w: no such endpoint: the web console is at /ui/, the API under /v1 (see /v1/openapi.json)", errdefs.ErrNotFound))
			return
		}
		fail(w, fmt.Errorf("%w: no such endpoint; see /v1/openapi.json", errdefs.ErrNotFound))
	})
	s.mux.HandleFunc(wellKnown, func(w http.ResponseWriter, r *http.Request) {
		fail(w, fmt.Errorf("%w: airlock has no OAuth or other discovery: send an API key as Authorization: Bearer <key>", errdefs.ErrNotFound))
	})
	return s
}

// Handle serves h at pattern (a ServeMux pattern) behind everything the
// API's own routes get: the request id, authentication, panic recovery
// and the request log. Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// HandleAdmin serves h at pattern like Handle, to admin callers only
// (the operator's metrics, say): anyone else gets 403.
func (s *Server) HandleAdmin(pattern string, h http.Handler) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if who, _ := identity.From(r.Context()); !who.Admin && !s.public[r.URL.Path] {
			s.refuse(r, apitype.AuditAccessDenied, RefusedAdminOnly, who)
			fail(w, fmt.Errorf("%w: %s needs an admin key", errdefs.ErrPermission, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// ServeHTTP gives every request an id, recovers panics, authenticates, and
// logs the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &response{ResponseWriter: w, status: http.StatusOK, id: s.requestID(r), log: s.log}
	rw.Header().Set(apitype.RequestIDHeader, rw.id)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("panic in handler", "request", rw.id, "panic", p, "stack", string(debug.Stack()))
			if !rw.wrote {
				fail(rw, errors.New("panic"))
			}
		}
		d := time.Since(start)
		s.log.Debug("request", "request", rw.id, "method", r.Method, "path", r.URL.Path, "status", rw.status, "ms", d.Milliseconds())
		if s.Observe != nil {
			s.Observe(r.Pattern, rw.status, d) // r: the routed request, below
		}
	}()
	ctx := identity.WithRequest(r.Context(), rw.id)
	r = r.WithContext(ctx)
	if s.portHost(r) {
		// A port's own host: the program's, whatever the path; never
		// the API's (see ports.go).
		r.Pattern = hostRoute
		s.serveHost(rw, r)
		return
	}
	if err := s.browserGuard(r); err != nil {
		s.refuse(r, apitype.AuditAuthFailure, RefusedBrowser, identity.Identity{})
		fail(rw, err)
		return
	}
	if !s.isPublic(r.URL.Path) && !s.anonymousPort(r) {
		who, refused, err := s.authenticate(r)
		if err != nil {
			if errors.Is(err, errdefs.ErrUnauthenticated) {
				rw.Header().Set("WWW-Authenticate", "Bearer")
			}
			if refused != "" {
				s.refuse(r, apitype.AuditAuthFailure, refused, who)
			}
			fail(rw, err)
			return
		}
		ctx = identity.With(ctx, who)
	}
	r = r.WithContext(ctx)
	if !canonical(r.URL.Path) {
		// Go's ServeMux would answer a redirect to the cleaned path: to
		// another resource (files/.. is the session itself), which a
		// client that follows redirects would then act on.
		fail(rw, fmt.Errorf("%w: the path %q has empty, . or .. segments; name the resource directly", errdefs.ErrInvalidArgument, truncateForMessage(r.URL.Path)))
		return
	}
	s.mux.ServeHTTP(noRedirects{rw}, r)
}

// canonical reports whether p is an absolute path with no empty, "." or
// ".." segment (a trailing slash is kept: it is a different resource).
func canonical(p string) bool {
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

func truncateForMessage(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// noRedirects turns any redirect the mux would still answer into a 404
// of the API's own: no API response is ever a redirect.
type noRedirects struct{ *response }

func (n noRedirects) WriteHeader(code int) {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		n.response.Header().Del("Location")
		n.response.redirected = true
		fail(n.response, fmt.Errorf("%w: no such endpoint; see /v1/openapi.json", errdefs.ErrNotFound))
		return
	}
	n.response.WriteHeader(code) // a 304 of a download, say, stays
}

func (n noRedirects) Unwrap() http.ResponseWriter { return n.response }

func (n noRedirects) Write(b []byte) (int, error) {
	if n.response.redirected {
		return len(b), nil // the redirect's own body
	}
	return n.response.Write(b)
}

// requestID is the client's X-Request-Id when it is a sane token, else a
// new one.
func (s *Server) requestID(r *http.Request) string {
	if id := r.Header.Get(apitype.RequestIDHeader); id != "" && len(id) <= 128 && saneID(id) {
		return id
	}
	return s.idPrefix + strconv.FormatUint(s.seq.Add(1), 10)
}

func saneID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// authenticate resolves the caller of r, once, at the edge: the unix
// socket (and this process's own in-process callers) are the operator,
// an admin; without authentication (server.auth "none", loopback only)
// everyone is; otherwise the bearer must be server.token (an admin) or a
// live API key.
//
// A refused caller gets why (one of RefusalReasons), and its identity
// when its key is known but revoked or expired.
func (s *Server) authenticate(r *http.Request) (identity.Identity, string, error) {
	if local(r) || s.cfg.Server.Auth == config.AuthNone {
		return identity.Identity{Admin: true}, "", nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return identity.Identity{}, RefusedMissingKey, fmt.Errorf("%w: bad or missing API key: send one as Authorization: Bearer <key>", errdefs.ErrUnauthenticated)
	}
	return s.authenticateSecret(r, got)
}

// authenticateSecret resolves the caller whose API key (or server.token)
// is got, as authenticate does.
func (s *Server) authenticateSecret(r *http.Request, got string) (identity.Identity, string, error) {
	if tok := s.cfg.Server.Token; tok != "" && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
		return identity.Identity{Admin: true}, "", nil
	}
	refused := RefusedUnknownKey
	var who identity.Identity
	if s.Keys != nil {
		var err error
		who, refused, err = s.Keys.Authenticate(r.Context(), got)
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

// browserGuard protects a server without authentication (auth "none",
// loopback only, every caller an admin) from the web pages its user
// visits: a DNS-rebinding page reaches 127.0.0.1 under its own name (a
// foreign Host), and a cross-site form or fetch posts text/plain JSON with
// a foreign Origin. Either would otherwise list, read and run code in
// every session. Requests over the unix socket and this process's own
// (MCP's in-process client, whose /mcp request passed here already) are
// not a browser's; with keys a page has no key to send.
func (s *Server) browserGuard(r *http.Request) error {
	if s.cfg.Server.Auth != config.AuthNone || local(r) || r.RemoteAddr == "in-process" {
		return nil
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && la.IP.IsLoopback() && !loopbackHost(r.Host) {
		return fmt.Errorf("%w: Host %q is not a loopback name (a DNS-rebinding guard of a server without authentication)", errdefs.ErrPermission, truncateForMessage(r.Host))
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		return fmt.Errorf("%w: a request from the web page %q (a server without authentication answers no page but its own origin's)", errdefs.ErrPermission, truncateForMessage(o))
	}
	// Ports are not part of a site: a page on localhost:3000 fetching
	// localhost:8080 is "same-site", and a no-cors GET sends no Origin.
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return fmt.Errorf("%w: a %s request (a server without authentication answers no web page but its own origin's)", errdefs.ErrPermission, site)
	}
	return nil
}

// sameOrigin reports whether origin (an Origin header) is the origin the
// request came to: its scheme, and the host and port of its Host header,
// which the browser sets to the URL it fetches (a page on any other port
// of localhost is another origin). "null" (sandboxed frames, files,
// redirects) is no origin.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	oh, op := splitHostPort(u.Host, u.Scheme)
	rh, rp := splitHostPort(r.Host, scheme)
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

// Local returns the API as the server's own operator reaches it: every
// request is treated like one over the unix socket (for a server embedded
// in `airlock mcp`, whose stdio client is the operator).
func (s *Server) Local() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.UnixAddr{Name: "in-process", Net: "unix"})))
	})
}

// local reports whether r came over the server's unix socket, which only
// the server's own user can reach (its file mode is 0600).
func local(r *http.Request) bool {
	_, ok := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr)
	return ok
}

// response is every handler's ResponseWriter: it remembers the status for
// the log, and the request's id and logger for fail.
type response struct {
	http.ResponseWriter
	status int
	wrote  bool
	id     string
	log    *slog.Logger
	// redirected: the mux answered a redirect, replaced by a 404
	redirected bool
}

func (r *response) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *response) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *response) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// fail answers err: the one place an error becomes an HTTP response. The
// status and code come from errdefs' table, the message is what a client
// may read (errdefs.Message), and the detail of a private or internal
// error goes to the log under the request's id, which the body names.
func fail(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = fmt.Errorf("%w: the request body is larger than %d bytes", errdefs.ErrTooLarge, mbe.Limit)
	}
	kind := errdefs.KindOf(err)
	if after, ok := errdefs.RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(after.Seconds())))))
	}
	body := apitype.ErrorBody{Error: apitype.ErrorDetail{Code: kind.Code, Message: errdefs.Message(err)}}
	var ended *session.EndedError
	if errors.As(err, &ended) {
		body.Error.EndCode = ended.End.Code
	}
	if rw := responseOf(w); rw != nil {
		body.Error.RequestID = rw.id
		var private *errdefs.Error
		switch {
		case errors.Is(err, context.Canceled):
			rw.log.Debug("request cancelled", "request", rw.id, "err", err) // its client left
		case kind.Err == nil:
			rw.log.Error("request failed", "request", rw.id, "err", err)
		case errors.As(err, &private):
			rw.log.Warn("request failed", "request", rw.id, "code", kind.Code, "err", err)
		}
	}
	if kind.Err == nil && body.Error.RequestID != "" {
		body.Error.Message = "internal error; the server log has the details (request " + body.Error.RequestID + ")"
	}
	writeJSON(w, kind.HTTPStatus, body)
}

// responseOf finds the request's *response under the wrappers of w (a
// download's stall deadline, say); nil outside ServeHTTP.
func responseOf(w http.ResponseWriter) *response {
	for {
		switch rw := w.(type) {
		case *response:
			return rw
		case interface{ Unwrap() http.ResponseWriter }:
			w = rw.Unwrap()
		default:
			return nil
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"cannot encode the response"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(escapeControls(buf.Bytes()))
}

// escapeControls escapes, in encoded JSON, the control characters
// encoding/json leaves as they are: DEL and C1 (U+0080-U+009F, which some
// terminals obey: U+009B is CSI). They come from sandboxed code (a file's
// name, its output) and must not drive the terminal of whoever reads a
// response raw. Outside strings JSON is ASCII without them, so every one
// is in a string, where \u00XX means the same.
func escapeControls(b []byte) []byte {
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

// decode reads one JSON object from the body, strictly: a size cap,
// unknown fields rejected, nothing after the object. An empty body is an
// empty object. Every JSON body the API reads goes through here.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	// JSON is all we read. curl -d labels it form-urlencoded, so that and
	// text/plain are taken as JSON too; anything else is a mistake.
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		switch mt {
		case "application/json", "application/x-www-form-urlencoded", "text/plain":
		default:
			return fmt.Errorf("%w: Content-Type must be application/json, not %q", errdefs.ErrInvalidArgument, ct)
		}
	}
	body := http.MaxBytesReader(w, r.Body, int64(s.cfg.Server.MaxBodyBytes))
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		// A body cut short or with a broken chunked encoding is the
		// client's: what it sent cannot be read.
		return errdefs.Private(errdefs.ErrInvalidArgument, "the request body could not be read (truncated, or a malformed chunked encoding)", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	if err := config.Decode(data, v); err != nil {
		return fmt.Errorf("%w: request body: %s", errdefs.ErrInvalidArgument, describeJSONError(err))
	}
	return nil
}

func describeJSONError(err error) string {
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &ute):
		if ute.Field != "" {
			return fmt.Sprintf("field %q: want %s, got %s", ute.Field, ute.Type, ute.Value)
		}
		return fmt.Sprintf("want %s, got %s", ute.Type, ute.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	// Unknown fields, trailing data, and errors from our own
	// unmarshalers, which name the problem already.
	msg := strings.TrimPrefix(err.Error(), errdefs.ErrInvalidArgument.Error()+": ")
	return strings.TrimPrefix(msg, "json: ")
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	body := apitype.Health{Status: "ok", Version: s.version, Sessions: s.m.Count(), Transfers: s.transfers.inProgress()}
	if s.Audit != nil {
		h := s.Audit.Health()
		body.Audit = &h
		if h.Status != "ok" {
			body.Status = "degraded"
		}
	}
	if s.Stats != nil {
		body.Pool = map[string]json.RawMessage{}
		for k, v := range s.Stats() {
			if b, err := json.Marshal(v); err == nil {
				body.Pool[k] = b
			}
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// ready is /readyz: ready when the manager takes sessions, has room for
// one more, and every language with a warm pool has a sandbox ready (so
// the next creation is warm). Kubernetes' readiness probe reads it.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	open, maxSessions, accepting := s.m.Capacity()
	body := apitype.Readiness{Pod: s.Pod, Sessions: open, MaxSessions: maxSessions}
	if !accepting {
		body.Reasons = append(body.Reasons, "the server is shutting down")
	}
	if open >= maxSessions {
		body.Reasons = append(body.Reasons, fmt.Sprintf("%d sessions are open, server.max_sessions", maxSessions))
	}
	if s.Audit != nil && s.Audit.Check() != nil {
		body.Reasons = append(body.Reasons, "the audit log cannot write records and work is refused (audit.on_failure \"refuse\")")
	}
	if s.Directory != nil && s.Directory.Health() != nil {
		body.Reasons = append(body.Reasons, "the store cannot be reached (store.dsn): the sessions directory and the quotas' counts are not written")
	}
	if s.Stats != nil {
		body.Warm = map[string]int{}
		var langs []string
		for k, v := range s.Stats() {
			if q, ok := v.(apitype.PoolStats); ok && q.Target > 0 {
				body.Warm[k] = q.Ready
				langs = append(langs, k)
			}
		}
		slices.Sort(langs)
		for _, lang := range langs {
			if body.Warm[lang] == 0 {
				body.Reasons = append(body.Reasons, "no warm "+lang+" sandbox yet")
			}
		}
	}
	body.Ready = len(body.Reasons) == 0
	status := http.StatusOK
	if !body.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
