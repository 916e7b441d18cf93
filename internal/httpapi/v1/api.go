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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"

	_ "embed"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/session"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return openAPI }

// Server serves the API, behind the server's edge (package httpapi:
// request ids, keys, refusals, the audit log's state), which it shares
// with the E2B API.
type Server struct {
	*httpapi.Edge
	m       *session.Manager
	cfg     config.Config
	mux     *http.ServeMux
	version string
	// Stats, when set, adds pool figures to /healthz (and /readyz reads
	// the warm sandboxes in them).
	Stats func() map[string]any
	// Pod is the server's name in a cluster, for /readyz.
	Pod string
	// Directory, when set, lists sessions across the servers sharing
	// the store (GET /v1/sessions); its Health joins /readyz.
	Directory Directory
	// public are paths served without authentication (/healthz, /readyz,
	// /v1/openapi.json; /metrics when the operator says so).
	public map[string]bool
	// publicTrees are path prefixes served without authentication (the
	// web console's static pages, which hold no data: "/ui" and below).
	publicTrees []string
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

// wellKnown is where MCP clients look for OAuth (RFC 9728, RFC 8414)
// after a 401. Every path under it is a 404 without a key: a 401 there
// would send them on into an authorization flow airlock does not have,
// and a 404 makes them report the API key problem instead.
const wellKnown = "/.well-known/"

// denied reports err if it is a request for another tenant's resource
// (answered as not found, like an unknown one), then answers it.
func (s *Server) denied(w http.ResponseWriter, r *http.Request, err error) {
	var other *session.OtherTenantError
	if errors.As(err, &other) {
		who, _ := identity.From(r.Context())
		s.Refuse(r, apitype.AuditAccessDenied, httpapi.RefusedCrossTenant, who)
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
	{"GET", "/v1/secrets", (*Server).listSecrets, false},
}

// New returns the API handler, on a new edge (the E2B API shares it).
func New(m *session.Manager, cfg config.Config, log *slog.Logger, version string) *Server {
	s := &Server{Edge: httpapi.NewEdge(cfg, log), m: m, cfg: cfg, mux: http.NewServeMux(), version: version,
		// The API's description holds no secrets: clients and tools read
		// it before they have a key.
		public: map[string]bool{"/healthz": true, "/readyz": true, "/v1/openapi.json": true}}
	allow := map[string][]string{}
	for _, rt := range routes {
		s.mux.HandleFunc(strings.TrimSpace(rt.method+" "+rt.pattern), func(w http.ResponseWriter, r *http.Request) {
			httpapi.Routed(w, r)
			if rt.work {
				if err := s.Work(); err != nil {
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
			httpapi.Routed(w, r)
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
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpapi.Routed(w, r)
		h.ServeHTTP(w, r)
	}))
}

// HandleAdmin serves h at pattern like Handle, to admin callers only
// (the operator's metrics, say): anyone else gets 403.
func (s *Server) HandleAdmin(pattern string, h http.Handler) {
	s.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if who, _ := identity.From(r.Context()); !who.Admin && !s.public[r.URL.Path] {
			s.Refuse(r, apitype.AuditAccessDenied, httpapi.RefusedAdminOnly, who)
			fail(w, fmt.Errorf("%w: %s needs an admin key", errdefs.ErrPermission, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// ServeHTTP serves r behind the edge: its id, panic recovery and log,
// the browser guard, the caller's key (Authorization: Bearer), and no
// path the mux would redirect.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Serve(w, r, fail, func(w http.ResponseWriter, r *http.Request) {
		if s.portHost(r) {
			// A port's own host: the program's, whatever the path; never
			// the API's (see ports.go).
			r.Pattern = hostRoute
			httpapi.Routed(w, r)
			s.serveHost(w, r)
			return
		}
		if err := s.BrowserGuard(r); err != nil {
			s.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedBrowser, identity.Identity{})
			fail(w, err)
			return
		}
		ctx := r.Context()
		if !s.isPublic(r.URL.Path) && !s.anonymousPort(r) {
			bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			who, refused, err := s.Authenticate(r, bearer, "Authorization: Bearer <key>")
			if err != nil {
				if errors.Is(err, errdefs.ErrUnauthenticated) {
					w.Header().Set("WWW-Authenticate", "Bearer")
				}
				if refused != "" {
					s.Refuse(r, apitype.AuditAuthFailure, refused, who)
				}
				fail(w, err)
				return
			}
			ctx = identity.With(ctx, who)
		}
		r = r.WithContext(ctx)
		if !httpapi.Canonical(r.URL.Path) {
			fail(w, fmt.Errorf("%w: the path %q has empty, . or .. segments; name the resource directly", errdefs.ErrInvalidArgument, httpapi.Truncate(r.URL.Path)))
			return
		}
		httpapi.NoRedirects(w, func(w http.ResponseWriter) {
			fail(w, fmt.Errorf("%w: no such endpoint; see /v1/openapi.json", errdefs.ErrNotFound))
		})
		s.mux.ServeHTTP(w, r)
	})
}

// Local returns the API as the server's own operator reaches it (see
// httpapi.AsLocal).
func (s *Server) Local() http.Handler { return httpapi.AsLocal(s) }

// fail answers err: the one place an error of this API becomes an HTTP
// response. The status and code come from errdefs' table, the message is
// what a client may read, with the request's id (httpapi.Report).
func fail(w http.ResponseWriter, err error) {
	kind, msg := httpapi.Report(w, err)
	body := apitype.ErrorBody{Error: apitype.ErrorDetail{Code: kind.Code, Message: msg}}
	var ended *session.EndedError
	if errors.As(err, &ended) {
		body.Error.EndCode = ended.End.Code
	}
	if rw := httpapi.ResponseOf(w); rw != nil {
		body.Error.RequestID = rw.ID()
	}
	httpapi.WriteJSON(w, kind.HTTPStatus, body)
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
	body := apitype.Health{Status: "ok", Version: s.version, Sessions: s.m.Count(), Transfers: s.Transfers.InProgress()}
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
	httpapi.WriteJSON(w, http.StatusOK, body)
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
			// The lean pool is a one-shot's speed hint: one without a
			// ready sandbox there takes another.
			if q, ok := v.(apitype.PoolStats); ok && q.Target > 0 && !strings.HasSuffix(k, apitype.LeanPoolSuffix) {
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
	httpapi.WriteJSON(w, status, body)
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
