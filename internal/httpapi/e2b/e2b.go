// Package e2b owns airlock's E2B-compatible API, so that code written for
// E2B's SDKs (e2b, @e2b/code-interpreter, e2b_code_interpreter) runs
// against airlock with two environment variables changed: the control
// plane (sandboxes created, connected, listed, timed out and killed, under
// an API key sent as X-API-KEY, e2b_<hex> being airlock's alk_<hex>), and
// the data plane every sandbox serves on E2B's ports 49983 (envd: files,
// the filesystem and process Connect RPCs) and 49999 (the code
// interpreter: executions, contexts), both routed on airlock's one
// listener by the E2b-Sandbox-Id and E2b-Sandbox-Port headers. A sandbox
// is an airlock session; everything it does goes through package session,
// whose Admitter applies the owner's tenant rules and quotas, and whose
// observers audit it.
//
// It must never answer a data-plane request without the sandbox's own
// access token (the SDKs send no API key there), never reach a path
// outside the session's /workspace (E2B's /home/user is the same
// directory), never hold a sandbox past its timeout, and never answer a
// client's mistake with a 500 or an E2B client with a shape its SDK
// cannot read.
package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cluster"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/portproxy"
	"airlock/internal/session"
)

// E2B's ports, as the SDKs name them in E2b-Sandbox-Port.
const (
	envdPort    = "49983"
	jupyterPort = "49999"
	// envdVersion is the envd airlock speaks: 0.5.7 has raw uploads and
	// closing stdin; later versions only add what airlock refuses.
	envdVersion = "0.5.7"
	// keyPrefix is E2B's form of an airlock key: e2b_<hex> is alk_<hex>.
	keyPrefix  = "e2b_"
	alkPrefix  = "alk_"
	defaultTTL = 300 * time.Second
)

// Server serves the E2B API.
type Server struct {
	edge *httpapi.Edge
	m    *session.Manager
	cfg  config.Config
	// ServePort proxies a request to a port of a session (the v1 API's
	// proxy), once the E2B API has authenticated it (nil: no ports).
	ServePort func(w http.ResponseWriter, r *http.Request, p *session.Port)
	// Records keeps sandboxes' records (nil: in memory only, lost with
	// the server); Log hears what goes wrong with them.
	Records Records
	Log     *slog.Logger
	// Cluster lists the sessions who sees across the servers sharing
	// the store (the sessions directory; nil: this server's alone), for
	// Sandbox.list.
	Cluster func(ctx context.Context, who identity.Identity) ([]apitype.Session, error)
	// Register lists a session just created in the sessions directory
	// before its creator hears of it, as the v1 API does (nil: none).
	Register func(ctx context.Context, s apitype.Session) error
	// key derives sandboxes' access tokens (see records.go).
	key     []byte
	control *http.ServeMux
	data    *http.ServeMux

	mu    sync.Mutex
	boxes map[string]*sandbox // by session id
}

// sandbox is what E2B knows of a session beyond airlock's.
type sandbox struct {
	id, template, clientID string
	// envdToken authorizes the data plane (X-Access-Token); traffic the
	// code interpreter's calls that carry no other (E2B's
	// E2B-Traffic-Access-Token) and the sandbox's public ports.
	envdToken, traffic string
	owner              identity.Identity
	metadata           map[string]string
	started            time.Time
	// pause: its timeout pauses it (the session's lifetime does); a call
	// of its data plane resumes it when autoResume.
	pause, autoResume bool

	mu    sync.Mutex
	end   time.Time
	timer *time.Timer
	// watches counts its open WatchDir streams, pollers its
	// CreateWatcher watches; procs are the processes it started.
	watches int
	pollers map[string]*poller
	procs   []proc
}

// New returns the E2B API of m, behind edge (the v1 API's), with the
// token key in cfg's data_dir (made at the first start).
func New(edge *httpapi.Edge, m *session.Manager, cfg config.Config) (*Server, error) {
	key, err := loadKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Server{edge: edge, m: m, cfg: cfg, key: key, control: http.NewServeMux(), data: http.NewServeMux(), boxes: map[string]*sandbox{}}
	s.routes()
	return s, nil
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// dataPaths are the data plane's paths outside /sandboxes: no path of
// the v1 API starts so.
var dataPaths = []string{"/health", "/execute", "/contexts", "/files", "/filesystem.Filesystem/", "/process.Process/"}

// Claims reports whether r is the E2B API's: its control plane's paths,
// a data-plane request (one naming a sandbox, or on a data path), or one
// to a sandbox's port host (ports.domain, getHost's form) that is envd's
// or the code interpreter's, or carries E2B's traffic token.
func (s *Server) Claims(r *http.Request) bool {
	if port, _, ok := s.portHost(r); ok {
		return port == envdPort || port == jupyterPort || r.Header.Get("E2B-Traffic-Access-Token") != ""
	}
	p := r.URL.Path
	if p == "/sandboxes" || strings.HasPrefix(p, "/sandboxes/") || p == "/v2/sandboxes" || strings.HasPrefix(p, "/v2/sandboxes/") {
		return true
	}
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		return true
	}
	for _, d := range dataPaths {
		if p == d || strings.HasSuffix(d, "/") && strings.HasPrefix(p, d) || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.edge.Serve(w, r, failControl, func(w http.ResponseWriter, r *http.Request) {
		// A port's own host is the program's (or envd's), whatever the
		// path, and carries the sandbox's token, not a key: as v1 serves
		// it, before the browser guard of the API's own host.
		if port, id, ok := s.portHost(r); ok {
			if port == envdPort || port == jupyterPort {
				r.Header.Set("E2b-Sandbox-Port", port)
				if !httpapi.Canonical(r.URL.Path) {
					failControl(w, fmt.Errorf("%w: the path %q has empty, . or .. segments", errdefs.ErrInvalidArgument, httpapi.Truncate(r.URL.Path)))
					return
				}
				s.serveData(w, r, id)
				return
			}
			s.servePort(w, r, port, id)
			return
		}
		if err := s.edge.BrowserGuard(r); err != nil {
			s.edge.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedBrowser, identity.Identity{})
			failControl(w, err)
			return
		}
		if !httpapi.Canonical(r.URL.Path) {
			failControl(w, fmt.Errorf("%w: the path %q has empty, . or .. segments", errdefs.ErrInvalidArgument, httpapi.Truncate(r.URL.Path)))
			return
		}
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" || !strings.Contains(r.URL.Path, "sandboxes") {
			s.serveData(w, r, sessionID(id))
			return
		}
		s.serveControl(w, r)
	})
}

// serveControl authenticates the caller's key (X-API-KEY, or a bearer)
// and serves the control plane.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	secret := r.Header.Get("X-API-KEY")
	if secret == "" {
		secret, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if hexPart, ok := strings.CutPrefix(secret, keyPrefix); ok {
		secret = alkPrefix + hexPart
	}
	who, refused, err := s.edge.Authenticate(r, secret, "X-API-KEY: e2b_<hex> (your airlock key alk_<hex> with e2b_ in front)")
	if err != nil {
		if refused != "" {
			s.edge.Refuse(r, apitype.AuditAuthFailure, refused, who)
		}
		failControl(w, err)
		return
	}
	r = r.WithContext(identity.With(r.Context(), who))
	httpapi.NoRedirects(w, notFound)
	s.control.ServeHTTP(w, r)
}

func notFound(w http.ResponseWriter) {
	failControl(w, fmt.Errorf("%w: no such endpoint of the E2B API", errdefs.ErrNotFound))
}

// serveData checks the sandbox's access token and serves its data plane
// as its owner (whose tenant's rules and quotas apply).
func (s *Server) serveData(w http.ResponseWriter, r *http.Request, id string) {
	port := r.Header.Get("E2b-Sandbox-Port")
	fail := failControl
	if rpc(r) {
		fail = func(w http.ResponseWriter, err error) { failRPC(w, r, err) }
	}
	if id == "" {
		fail(w, fmt.Errorf("%w: the E2b-Sandbox-Id header is missing: set E2B_SANDBOX_URL to this server", errdefs.ErrInvalidArgument))
		return
	}
	if r.URL.Path == "/health" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	box := s.box(id)
	if box == nil {
		fail(w, s.unknown(id))
		return
	}
	if !box.authorized(r, port) {
		s.edge.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedAccessToken, identity.Identity{})
		fail(w, fmt.Errorf("%w: the sandbox's access token is missing or wrong (X-Access-Token: the envdAccessToken its creation returned)", errdefs.ErrUnauthenticated))
		return
	}
	// Reach resumes a paused sandbox created with autoResume.
	sess, err := s.reach(identity.With(r.Context(), box.owner), box)
	if err != nil {
		if s.lost(err) {
			s.forget(id)
		}
		// Else it is still there (a resume refused for a quota, a
		// conflict, a full disk): its sandbox and record stay.
		fail(w, s.notFoundErr(id, err))
		return
	}
	r = r.WithContext(withSession(identity.With(r.Context(), box.owner), sess, box))
	httpapi.NoRedirects(w, func(w http.ResponseWriter) { fail(w, fmt.Errorf("%w: no such endpoint", errdefs.ErrNotFound)) })
	s.data.ServeHTTP(w, r)
}

// reach is box's session for a call of its data plane or ports: a
// paused one is resumed when box has autoResume, unless it was paused
// with keepMemory false (its pause says so: see pause).
func (s *Server) reach(ctx context.Context, box *sandbox) (*session.Session, error) {
	return s.m.Reach(ctx, box.id)
}

// portHost is the port and sandbox id of a request to a port's own host
// (<port>-<id>.<ports.domain>, what getHost answers).
func (s *Server) portHost(r *http.Request) (port, id string, ok bool) {
	d := s.cfg.Ports.Domain
	if d == "" || !s.cfg.Ports.Enabled {
		return "", "", false
	}
	n, label, under, err := portproxy.ParseHost(r.Host, d)
	if !under || err != nil {
		return "", "", false
	}
	id, ok = cluster.FromHostLabel(label)
	return strconv.Itoa(n), id, ok
}

// servePort proxies r to port of sandbox id: E2B's traffic token opens
// every port of its sandbox (E2B's allowPublicTraffic false; airlock's
// ports are private), in the name of the sandbox's owner.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, port, id string) {
	box := s.box(id)
	if box == nil {
		if err := s.unknown(id); errors.Is(err, errdefs.ErrMisdirected) {
			failControl(w, err)
			return
		}
	}
	tok := r.Header.Get("E2B-Traffic-Access-Token")
	if box == nil || s.ServePort == nil || subtle.ConstantTimeCompare([]byte(tok), []byte(box.traffic)) != 1 {
		s.edge.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedAccessToken, identity.Identity{})
		failControl(w, fmt.Errorf("%w: send the sandbox's trafficAccessToken as E2B-Traffic-Access-Token", errdefs.ErrUnauthenticated))
		return
	}
	if err := s.edge.Work(); err != nil {
		failControl(w, err)
		return
	}
	ctx := identity.With(r.Context(), box.owner)
	sess, err := s.reach(ctx, box)
	if err != nil {
		failControl(w, s.notFoundErr(id, err))
		return
	}
	n, _ := strconv.Atoi(port)
	p, err := sess.PortForCaller(ctx, n)
	if err != nil {
		failControl(w, err)
		return
	}
	// The program's own headers: not ours to pass on.
	r.Header.Del("E2B-Traffic-Access-Token")
	s.ServePort(w, r.WithContext(ctx), p)
}

// authorized reports whether r carries the sandbox's token: the envd
// token anywhere, the traffic token on the code interpreter's port (whose
// SDK sends only that one when it manages contexts).
func (b *sandbox) authorized(r *http.Request, port string) bool {
	if tok := r.Header.Get("X-Access-Token"); tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(b.envdToken)) == 1 {
		return true
	}
	if port != jupyterPort {
		return false
	}
	tok := r.Header.Get("E2B-Traffic-Access-Token")
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(b.traffic)) == 1
}

type sessionKey struct{}

type bound struct {
	sess *session.Session
	box  *sandbox
}

func withSession(ctx context.Context, sess *session.Session, box *sandbox) context.Context {
	return context.WithValue(ctx, sessionKey{}, bound{sess, box})
}

// sessionOf is the session a data-plane request was routed to.
func sessionOf(r *http.Request) (*session.Session, *sandbox) {
	b := r.Context().Value(sessionKey{}).(bound)
	return b.sess, b.box
}

// box is the sandbox of id, nil when there is none (or its session is
// gone).
func (s *Server) box(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id]
}

// forget drops the sandbox of a session that is gone, and its record.
func (s *Server) forget(id string) {
	s.mu.Lock()
	b := s.boxes[id]
	delete(s.boxes, id)
	s.mu.Unlock()
	s.unrecord(id)
	if b != nil {
		b.mu.Lock()
		if b.timer != nil {
			b.timer.Stop()
		}
		b.mu.Unlock()
	}
}

// unknown is the error for a sandbox id this server has none of: E2B's
// 404, or, when the id names another server of a cluster, 421 saying
// which (the router sends its requests there; see
// docs/guides/kubernetes.md).
func (s *Server) unknown(id string) error {
	if _, err := s.m.Get(id); errors.Is(err, errdefs.ErrMisdirected) {
		return err
	}
	return fmt.Errorf("%w: sandbox %q not found", errdefs.ErrNotFound, httpapi.Truncate(wireID(id)))
}

// gone reports whether err says a sandbox's session is gone (ended, or
// unknown): its sandbox can be forgotten.
func gone(err error) bool {
	return errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrNotFound)
}

// lost says whether err, of a call naming a sandbox's session, means
// the session is gone for good, and the sandbox with it (its record
// dropped: forget). Not one this server's shutdown ended with its
// recovery point kept: the next start lists it paused, and its record
// must be there for it (its tokens, its metadata).
func (s *Server) lost(err error) bool { return gone(err) && !s.m.KeptAtShutdown(err) }

// errKept answers a call naming a sandbox whose session the server's
// shutdown under way ended with its recovery point kept: as v1's delete
// of it, unavailable, never E2B's "not found".
var errKept = fmt.Errorf("%w: the server is shutting down; the sandbox is kept and listed paused at its next start", errdefs.ErrUnavailable)

// notFoundErr is err of a session that is gone, as E2B says it: not
// found; one a shutdown under way kept, errKept.
func (s *Server) notFoundErr(id string, err error) error {
	if s.m.KeptAtShutdown(err) {
		return errKept
	}
	if gone(err) {
		return fmt.Errorf("%w: sandbox %q not found", errdefs.ErrNotFound, httpapi.Truncate(id))
	}
	return err
}

// errorBody is E2B's error: the control plane's, envd's HTTP routes' and
// the code interpreter's.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// failControl answers err in the control plane's shape: the status and
// {"code": status, "message"}; an ended session is not found (the SDKs
// read 404 as "no such sandbox").
func failControl(w http.ResponseWriter, err error) {
	kind, msg := httpapi.Report(w, err)
	status := kind.HTTPStatus
	if errors.Is(err, errdefs.ErrGone) {
		status = http.StatusNotFound
	}
	httpapi.WriteJSON(w, status, errorBody{Code: status, Message: msg})
}
