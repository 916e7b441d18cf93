package v1

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// respond answers an execution as one JSON body or as NDJSON events, on
// every path: a result, an error before or after events went out, and a
// panic (its event writer must not outlive the handler). Admission is
// the session layer's (session's TestAdmissionGivenBackBeforeTheEnd).
func TestRespond(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		stream bool
		run    func(emit func(apitype.Event)) (any, error)
		panics bool
		status int
		body   []string // parts of the body, in order
	}{
		{"a result", false, func(func(apitype.Event)) (any, error) { return apitype.Result{Stdout: "x"}, nil }, false, 200, []string{`"stdout":"x"`}},
		{"an error", false, func(func(apitype.Event)) (any, error) {
			return nil, errdefs.ErrConflict
		}, false, 409, []string{`"code":"conflict"`}},
		{"a stream", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			emit(apitype.Event{Type: apitype.EventEnd, Result: &apitype.Result{}})
			return apitype.Result{}, nil
		}, false, 200, []string{`"type":"stdout"`, `"type":"end"`}},
		{"a stream that fails", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			return nil, boom
		}, false, 200, []string{`"type":"stdout"`, `"type":"failed"`}},
		{"an error before the stream", true, func(func(apitype.Event)) (any, error) { return nil, errdefs.ErrConflict }, false, 409,
			[]string{`"code":"conflict"`}},
		{"a panic in a stream", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			panic("bug")
		}, true, 200, []string{`"type":"stdout"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/execute", strings.NewReader("{}"))
			if tc.stream {
				r.Header.Set("Accept", "application/x-ndjson")
			}
			w := httptest.NewRecorder()
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.panics {
						t.Errorf("panic %v", p)
					}
				}()
				respond(w, r, tc.run)
			}()
			body := w.Body.String()
			if w.Code != tc.status {
				t.Errorf("status %d, want %d: %s", w.Code, tc.status, body)
			}
			at := 0
			for _, part := range tc.body {
				i := strings.Index(body[at:], part)
				if i < 0 {
					t.Errorf("body %q lacks %q after byte %d", body, part, at)
					break
				}
				at += i + len(part)
			}
		})
	}
}
