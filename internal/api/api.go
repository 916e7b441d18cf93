// Package api owns airlock's HTTP API under /v1: routing, strict JSON
// decoding with size caps, mapping every error to a status and a JSON body
// in one place, streaming executions as NDJSON, and streaming files in and
// out of a session's workspace.
//
// It must never answer a client's mistake with a 500, never hold a whole
// upload or download in memory, never let a file transfer outlast its
// caps or a client that stopped moving, and never let a request reach a sandbox
// with a limit above the server's maximum (package session enforces the
// limits; this package only parses).
package api

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	_ "embed"

	"airlock/internal/config"
	"airlock/internal/errdefs"
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
	// transfers counts file uploads and downloads (see transfer.go).
	transfers transfers
	// Stats, when set, adds pool figures to /healthz.
	Stats func() any
}

// New returns the API handler.
func New(m *session.Manager, cfg config.Config, log *slog.Logger, version string) *Server {
	s := &Server{m: m, cfg: cfg, log: log, mux: http.NewServeMux(), version: version}
	route := func(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, h) }
	route("GET /healthz", s.health)
	route("GET /v1/openapi.json", s.openapi)
	route("POST /v1/sessions", s.createSession)
	route("GET /v1/sessions", s.listSessions)
	route("GET /v1/sessions/{id}", s.getSession)
	route("DELETE /v1/sessions/{id}", s.deleteSession)
	route("POST /v1/sessions/{id}/execute", s.execute)
	route("POST /v1/sessions/{id}/interrupt", s.interrupt)
	route("GET /v1/sessions/{id}/files", s.listFiles)
	route("GET /v1/sessions/{id}/files/{path...}", s.download)
	route("PUT /v1/sessions/{id}/files/{path...}", s.upload)
	route("DELETE /v1/sessions/{id}/files/{path...}", s.deleteFile)
	route("POST /v1/execute", s.executeOnce)
	route("POST /v1/run", s.runProgram)
	// Method-less patterns are less specific than the ones above: they
	// only catch a known path with the wrong method.
	for path, allow := range map[string]string{
		"/healthz": "GET", "/v1/openapi.json": "GET", "/v1/sessions": "GET, POST",
		"/v1/sessions/{id}": "GET, DELETE", "/v1/sessions/{id}/execute": "POST",
		"/v1/sessions/{id}/interrupt": "POST", "/v1/sessions/{id}/files": "GET",
		"/v1/sessions/{id}/files/{path...}": "GET, PUT, DELETE", "/v1/execute": "POST",
		"/v1/run": "POST",
	} {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed here; use %s", r.Method, allow))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint; see /v1/openapi.json")
	})
	return s
}

// ServeHTTP adds panic recovery, authentication and a request log.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("panic in handler", "panic", p, "stack", string(debug.Stack()))
			if !rec.wrote {
				writeError(rec, http.StatusInternalServerError, "internal", "internal error")
			}
		}
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", time.Since(start).Milliseconds())
	}()
	if tok := s.cfg.Server.Token; tok != "" && r.URL.Path != "/healthz" && !local(r) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			rec.Header().Set("WWW-Authenticate", "Bearer")
			writeError(rec, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
	}
	s.mux.ServeHTTP(rec, r)
}

// local reports whether r came over the server's unix socket, which only
// the server's own user can reach (its file mode is 0600).
func local(r *http.Request) bool {
	_, ok := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr)
	return ok
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// errorBody is every error response.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

// fail maps err to its status in the one place that does so.
func fail(w http.ResponseWriter, err error) {
	status := errdefs.HTTPStatus(err)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status = http.StatusRequestEntityTooLarge
		err = fmt.Errorf("%w: the request body is larger than %d bytes", errdefs.ErrTooLarge, mbe.Limit)
	}
	writeError(w, status, errdefs.Code(err), err.Error())
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
	w.Write(buf.Bytes())
}

// decode reads one JSON object from the body, strictly: a size cap,
// unknown fields rejected, nothing after the object. An empty body is an
// empty object.
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
		return err
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
	body := map[string]any{"status": "ok", "version": s.version, "sessions": s.m.Count(), "transfers": s.transfers.inProgress()}
	if s.Stats != nil {
		body["pool"] = s.Stats()
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
