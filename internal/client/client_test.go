package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Every kind of errdefs' table that a server answers comes back as an
// *Error with the server's status, code, message, end code and request id,
// matching its sentinel and no other.
func TestErrorsMatchTheirSentinel(t *testing.T) {
	for _, k := range errdefs.Kinds() {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(k.HTTPStatus)
			json.NewEncoder(w).Encode(apitype.ErrorBody{Error: apitype.ErrorDetail{
				Code: k.Code, Message: "msg of " + k.Code, EndCode: apitype.EndIdle, RequestID: "req-1",
			}})
		}))
		_, err := New(srv.URL).Session(context.Background(), "abc")
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.Status != k.HTTPStatus || e.Code != k.Code || e.Message != "msg of "+k.Code ||
			e.EndCode != apitype.EndIdle || e.RequestID != "req-1" || err.Error() != "msg of "+k.Code {
			t.Errorf("%s: %v (%+v)", k.Code, err, e)
			continue
		}
		for _, s := range errdefs.Sentinels() {
			if errors.Is(err, s) != (s == k.Err) {
				t.Errorf("%s: errors.Is(err, %v) = %v", k.Code, s, errors.Is(err, s))
			}
		}
		if StatusOf(err) != k.HTTPStatus {
			t.Errorf("%s: StatusOf = %d", k.Code, StatusOf(err))
		}
	}
}

// An answer that is not the API's error body still becomes an *Error
// with its status and text.
func TestForeignErrorBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(apitype.RequestIDHeader, "req-2")
		http.Error(w, "bad gateway page", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := New(srv.URL).Health(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != 502 || e.Message != "bad gateway page" || e.RequestID != "req-2" || e.Unwrap() != nil {
		t.Errorf("%v (%+v)", err, e)
	}
}

// A streamed execution hands every event over in order and returns the
// end's result; a failed event is the request's error, with its code's
// sentinel; requests carry the token and ask for NDJSON.
func TestStream(t *testing.T) {
	var fail bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" || r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/v1/sessions/a%2Fb/execute" && r.URL.RawPath != "/v1/sessions/a%2Fb/execute" {
			http.Error(w, "bad request "+r.URL.String(), 400)
			return
		}
		var req apitype.ExecuteRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Code != "print(1)" {
			http.Error(w, "bad body", 400)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(apitype.Event{Type: apitype.EventStdout, Text: "1\n"})
		if fail {
			enc.Encode(apitype.Event{Type: apitype.EventFailed, Error: &apitype.ExecError{Name: "session_ended", Value: "session ended: deleted"}})
			return
		}
		enc.Encode(apitype.Event{Type: apitype.EventEnd, Result: &apitype.Result{Stdout: "1\n", ExecutionCount: 1}})
	}))
	defer srv.Close()
	c := New(srv.URL+"/", WithToken("tok"))
	var got []string
	res, err := c.Execute(context.Background(), "a/b", apitype.ExecuteRequest{Code: "print(1)"}, func(e apitype.Event) { got = append(got, e.Type) })
	if err != nil || res.Stdout != "1\n" || res.ExecutionCount != 1 || strings.Join(got, ",") != "stdout,end" {
		t.Fatalf("stream: %v %+v %q", err, res, got)
	}
	fail = true
	got = nil
	_, err = c.Execute(context.Background(), "a/b", apitype.ExecuteRequest{Code: "print(1)"}, func(e apitype.Event) { got = append(got, e.Type) })
	if !errors.Is(err, errdefs.ErrGone) || err.Error() != "session ended: deleted" || strings.Join(got, ",") != "stdout,failed" {
		t.Errorf("failed stream: %v %q", err, got)
	}
}

// A unix socket nobody listens on is unreachable: nothing was sent.
func TestUnixUnreachable(t *testing.T) {
	c := Unix(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.RunProgram(context.Background(), apitype.ProgramRequest{Code: "print(1)"}, nil)
	if !errors.Is(err, ErrUnreachable) || StatusOf(err) != 0 {
		t.Errorf("%v, want ErrUnreachable", err)
	}
}

// Workspace paths are escaped segment by segment.
func TestFilePath(t *testing.T) {
	for in, want := range map[string]string{
		"a/b c.txt": "/v1/sessions/s1/files/a/b%20c.txt",
		"x?y#z":     "/v1/sessions/s1/files/x%3Fy%23z",
		"100%":      "/v1/sessions/s1/files/100%25",
	} {
		if got := filePath("s1", in); got != want {
			t.Errorf("filePath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := fmt.Sprint(sessionPath("a/b")); got != "/v1/sessions/a%2Fb" {
		t.Errorf("sessionPath = %q", got)
	}
}
