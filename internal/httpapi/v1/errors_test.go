package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/session"
)

// fail is the HTTP adapter of errdefs' table: status and code from the
// table, a message a client may read, the request's id, and the detail of
// private and internal errors in the log only.
func TestFailKeepsDetailInTheLog(t *testing.T) {
	secret := "mount /run/airlock/root/s-4194305/proc: permission denied; airlock-init: boom"
	for _, c := range []struct {
		name    string
		err     error
		status  int
		code    string
		message string // what the body's message must be
		endCode apitype.EndCode
		logged  bool // the secret is in the log
		wrapped bool // fail gets a wrapper of the response
	}{
		{"private", fmt.Errorf("starting: %w", errdefs.Private(errdefs.ErrUnavailable, "the sandbox could not be started", errors.New(secret))),
			503, "unavailable", "unavailable: the sandbox could not be started", "", true, false},
		{"internal", fmt.Errorf("open %s", secret), 500, "internal", "internal error; the server log has the details (request req-1)", "", true, false},
		{"client's mistake", fmt.Errorf("%w: memory 16G exceeds the server maximum 8G", errdefs.ErrInvalidArgument),
			400, "invalid_argument", "invalid argument: memory 16G exceeds the server maximum 8G", "", false, false},
		{"ended", &session.EndedError{End: apitype.Ended(apitype.EndOOM)}, 410, "session_ended", "session ended: out of memory", apitype.EndOOM, false, false},
		{"body too large", fmt.Errorf("reading: %w", &http.MaxBytesError{Limit: 1024}), 413, "too_large",
			"too large: the request body is larger than 1024 bytes", "", false, false},
		{"internal, through a wrapper", fmt.Errorf("open %s", secret), 500, "internal", "internal error; the server log has the details (request req-1)", "", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			rec := httptest.NewRecorder()
			var w http.ResponseWriter = httpapi.NewResponse(rec, "req-1", slog.New(slog.NewTextHandler(&logs, nil)))
			if c.wrapped {
				w = unwrapper{w} // as a download's errors are answered
			}
			fail(w, c.err)
			var body apitype.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			e := body.Error
			if rec.Code != c.status || e.Code != c.code || e.Message != c.message || e.RequestID != "req-1" || e.EndCode != c.endCode {
				t.Errorf("status %d, body %+v; want %d %s %q %q", rec.Code, e, c.status, c.code, c.message, c.endCode)
			}
			if strings.Contains(rec.Body.String(), "/run/") || strings.Contains(rec.Body.String(), "airlock-init") {
				t.Errorf("host internals in the body: %s", rec.Body)
			}
			if got := strings.Contains(logs.String(), "permission denied") && strings.Contains(logs.String(), "req-1"); got != c.logged {
				t.Errorf("detail logged with the request id: %v, want %v (log: %s)", got, c.logged, logs.String())
			}
		})
	}
}

// Every response names its request: the client's id when it sent a sane
// one, else a new one, unique per request; error bodies carry it too.
func TestRequestIDs(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Auth = config.AuthNone
	s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
	get := func(id string) (*httptest.ResponseRecorder, apitype.ErrorBody) {
		req := httptest.NewRequest("GET", "/v1/no-such-thing", nil)
		if id != "" {
			req.Header.Set(apitype.RequestIDHeader, id)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var body apitype.ErrorBody
		json.Unmarshal(rec.Body.Bytes(), &body)
		return rec, body
	}
	rec, body := get("client-7.a:b_c")
	if got := rec.Header().Get(apitype.RequestIDHeader); got != "client-7.a:b_c" || body.Error.RequestID != got {
		t.Errorf("client id: header %q, body %q", got, body.Error.RequestID)
	}
	seen := map[string]bool{}
	for _, id := range []string{"", "with space", "quote\"", strings.Repeat("x", 129), "", "ünïcode"} {
		rec, body := get(id)
		got := rec.Header().Get(apitype.RequestIDHeader)
		if got == "" || got == id || body.Error.RequestID != got || seen[got] {
			t.Errorf("sent %q: got id %q (body %q), seen before: %v", id, got, body.Error.RequestID, seen[got])
		}
		seen[got] = true
	}
}

// unwrapper wraps a ResponseWriter as middleware does.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }
