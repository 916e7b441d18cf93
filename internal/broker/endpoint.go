package broker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Addr is where a session's tools answer inside its sandbox: a listener
// airlock opens in the sandbox's own network namespace (loopback only,
// no route out needed, no host path), only for sessions with tools.
const Addr = "127.0.0.1:3129"

// Port is Addr's port, which a session with tools cannot use for egress.
const Port = 3129

// URLEnv names the variable that tells the in-sandbox clients where
// Addr is.
const URLEnv = "AIRLOCK_TOOLS_URL"

// endpoint serves a session's calls on a listener in its sandbox.
type endpoint struct {
	srv    *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// calls counts the calls being served; closed (under mu) refuses
	// new ones, so that Close can wait for those in flight.
	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
}

// enter admits a call unless the endpoint is closing.
func (ep *endpoint) enter() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return false
	}
	ep.calls.Add(1)
	return true
}

// Answer is the in-sandbox protocol's body: the result, or the error.
type Answer struct {
	OK     bool     `json:"ok"`
	Result *Result  `json:"result,omitempty"`
	Error  *wireErr `json:"error,omitempty"`
}

// wireErr is a refusal as the sandbox reads it.
type wireErr struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	Field        string `json:"field,omitempty"`
	Rule         string `json:"rule,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	// Failed: the call was made and failed (else it was refused before).
	Failed bool `json:"failed,omitempty"`
}

// Serve answers the session's calls on ln (a listener in its sandbox,
// see Addr) until Close:
//
//	GET  /v1/tools          the session's tools (ToolList)
//	POST /v1/tools/{name}   a call; the body is the arguments (a JSON object)
func (s *Session) Serve(ln net.Listener, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	ep := &endpoint{cancel: cancel}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, http.StatusOK, apitype.ToolList{Tools: s.Tools()})
	})
	mux.HandleFunc("POST /v1/tools/{name}", s.serveCall)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, http.StatusNotFound, Answer{Error: &wireErr{Code: "not_found", Message: "airlock's tools answer GET /v1/tools and POST /v1/tools/{name}"}})
	})
	ep.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.ep = ep
	ep.wg.Add(1)
	go func() {
		defer ep.wg.Done()
		ep.srv.Serve(ln)
	}()
}

// Close stops the session's endpoint: its listener, its connections and
// the calls in flight (canceled); it returns when they are gone.
func (s *Session) Close() {
	if s.ep == nil {
		return
	}
	ep := s.ep
	ep.mu.Lock()
	ep.closed = true
	ep.mu.Unlock()
	ep.cancel()
	ep.srv.Close()
	ep.wg.Wait()
	// Calls still running return once they see the canceled context:
	// their records are made before Close returns (none comes after
	// the session's end).
	ep.calls.Wait()
}

// fromKey keys the code context a call says it comes from.
type fromKey struct{}

// withFrom notes the context a call says it comes from: a context id's
// characters, at most 64 bytes, else nothing.
func withFrom(ctx context.Context, id string) context.Context {
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return ctx
	}
	return context.WithValue(ctx, fromKey{}, id)
}

func (s *Session) serveCall(w http.ResponseWriter, r *http.Request) {
	if !s.ep.enter() {
		writeAnswer(w, http.StatusServiceUnavailable, Answer{Error: &wireErr{Code: "unavailable", Message: "the session is ending"}})
		return
	}
	defer s.ep.calls.Done()
	max := int64(s.b.cfg.MaxArgumentBytes)
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return // the caller went away
	}
	res, ref, _ := s.Call(withFrom(r.Context(), r.Header.Get(ContextHeader)), r.PathValue("name"), body)
	if ref == nil {
		writeAnswer(w, http.StatusOK, Answer{OK: true, Result: res})
		return
	}
	we := &wireErr{Code: errdefs.Code(ref), Message: ref.Msg, Field: ref.Field, Rule: ref.Rule, Failed: ref.failed}
	if ref.RetryAfter > 0 {
		we.RetryAfterMs = ref.RetryAfter.Milliseconds()
		w.Header().Set("Retry-After", strconv.Itoa(int(roundUp(ref.RetryAfter)/time.Second)))
	}
	writeAnswer(w, errdefs.HTTPStatus(ref), Answer{Error: we})
}

func writeAnswer(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"ok":false,"error":{"code":"internal","message":"the answer could not be encoded"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
