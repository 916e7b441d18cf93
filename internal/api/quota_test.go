package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/identity"
)

// countingQuotas admits every execution and counts the releases.
type countingQuotas struct {
	mu       sync.Mutex
	admitted int
	released int
}

func (q *countingQuotas) AdmitSession(context.Context, identity.Identity) (func(), error) {
	return func() {}, nil
}
func (q *countingQuotas) Of(identity.Identity) config.Quotas { return config.Quotas{} }
func (q *countingQuotas) AdmitExecution(context.Context, identity.Identity) (func(), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.admitted++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.released++
	}, nil
}

func (q *countingQuotas) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.released
}

// writeWatcher records how many releases had happened when the answer's
// first byte was written.
type writeWatcher struct {
	http.ResponseWriter
	q         *countingQuotas
	atWrite   int
	wroteOnce bool
}

func (w *writeWatcher) Write(b []byte) (int, error) {
	if !w.wroteOnce {
		w.wroteOnce, w.atWrite = true, w.q.count()
	}
	return w.ResponseWriter.Write(b)
}

// An admitted execution's place is released exactly once on every path
// of a handler (admitExecution, defer, respond), and before the client
// can learn that the execution ended.
func TestExecutionReleasedOnce(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		stream bool
		run    func(emit func(apitype.Event)) (any, error)
		panics bool
	}{
		{"a result", false, func(func(apitype.Event)) (any, error) { return apitype.Result{}, nil }, false},
		{"an error", false, func(func(apitype.Event)) (any, error) { return nil, boom }, false},
		{"a stream", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			emit(apitype.Event{Type: apitype.EventEnd, Result: &apitype.Result{}})
			return apitype.Result{}, nil
		}, false},
		{"a stream that fails", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			return nil, boom
		}, false},
		{"an error before the stream", true, func(func(apitype.Event)) (any, error) { return nil, boom }, false},
		{"a panic", false, func(func(apitype.Event)) (any, error) { panic("bug") }, true},
		{"a panic in a stream", true, func(emit func(apitype.Event)) (any, error) {
			emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
			panic("bug")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &countingQuotas{}
			s := &Server{Quotas: q}
			r := httptest.NewRequest("POST", "/v1/execute", strings.NewReader("{}"))
			r = r.WithContext(identity.With(r.Context(), identity.Identity{Tenant: "a"}))
			if tc.stream {
				r.Header.Set("Accept", "application/x-ndjson")
			}
			w := &writeWatcher{ResponseWriter: httptest.NewRecorder(), q: q}
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.panics {
						t.Errorf("panic %v", p)
					}
				}()
				// As the handlers do.
				release, err := s.admitExecution(r)
				if err != nil {
					t.Fatal(err)
				}
				defer release()
				respond(w, r, release, func(emit func(apitype.Event)) (any, error) {
					if q.count() != 0 {
						t.Error("released before running")
					}
					return tc.run(func(ev apitype.Event) {
						if ev.Type != apitype.EventEnd && q.count() != 0 {
							t.Errorf("released before the end, at a %s event", ev.Type)
						}
						emit(ev)
					})
				})
			}()
			if q.admitted != 1 || q.count() != 1 {
				t.Errorf("admitted %d, released %d times; want once", q.admitted, q.count())
			}
			if !tc.stream && w.wroteOnce && w.atWrite != 1 {
				t.Errorf("the answer was written before the release")
			}
		})
	}
}

// respond releases as the end event is emitted, before it is written.
func TestReleaseBeforeEndEvent(t *testing.T) {
	q := &countingQuotas{}
	s := &Server{Quotas: q}
	r := httptest.NewRequest("POST", "/v1/execute", nil)
	r = r.WithContext(identity.With(r.Context(), identity.Identity{Tenant: "a"}))
	r.Header.Set("Accept", "application/x-ndjson")
	release, _ := s.admitExecution(r)
	defer release()
	var atEnd int
	respond(httptest.NewRecorder(), r, release, func(emit func(apitype.Event)) (any, error) {
		emit(apitype.Event{Type: apitype.EventStdout, Text: "x"})
		if q.count() != 0 {
			t.Error("released at a stdout event")
		}
		emit(apitype.Event{Type: apitype.EventEnd, Result: &apitype.Result{}})
		atEnd = q.count()
		return apitype.Result{}, nil
	})
	if atEnd != 1 {
		t.Errorf("released %d times when the end event was emitted, want 1", atEnd)
	}
}
