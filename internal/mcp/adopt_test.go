package mcp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/mcp"
)

// fakeAPI answers the v1 routes adoption uses for one session the last
// run's shutdown paused, and counts the calls of each route.
type fakeAPI struct {
	mu    sync.Mutex
	calls map[string]int // "METHOD path" -> calls
	state string
	// after, if set, runs after a call of a route ("METHOD path") is
	// done and before it answers (f.mu not held).
	after map[string]func()
}

func newFakeAPI() (*fakeAPI, *client.Client) {
	f := &fakeAPI{calls: map[string]int{}, state: apitype.StatePaused}
	mux := http.NewServeMux()
	route := func(pattern string, h func() any) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.calls[r.Method+" "+r.URL.Path]++
			body := h()
			hook := f.after[r.Method+" "+r.URL.Path]
			f.mu.Unlock()
			if hook != nil {
				hook()
			}
			if body == nil {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(body)
		})
	}
	route("GET /v1/sessions", func() any {
		if f.state != apitype.StatePaused {
			return apitype.SessionList{Sessions: []apitype.Session{}}
		}
		return apitype.SessionList{Sessions: []apitype.Session{f.session()}}
	})
	route("GET /v1/sessions/{id}", func() any { return f.session() })
	route("POST /v1/sessions/{id}/resume", func() any {
		f.state = apitype.StateIdle
		return f.session()
	})
	route("POST /v1/sessions/{id}/pause", func() any {
		f.state = apitype.StatePaused
		return f.session()
	})
	route("POST /v1/sessions/{id}/fork", func() any {
		fork := f.session()
		fork.ID, fork.State, fork.Paused = "s-2", apitype.StateIdle, nil
		return fork
	})
	route("DELETE /v1/sessions/{id}", func() any { f.state = apitype.StateEnded; return nil })
	return f, client.InProcess(mux)
}

// session is the session as the API describes it (f.mu held).
func (f *fakeAPI) session() apitype.Session {
	s := apitype.Session{ID: "s-1", Language: "python", State: f.state, Metadata: map[string]string{mcp.DurableKey: "connection"}}
	if f.state == apitype.StatePaused {
		s.Paused = &apitype.PausedInfo{PausedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), ByShutdown: true}
	} else {
		s.Restored = "files"
	}
	return s
}

func (f *fakeAPI) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// adopting is an MCP server that adopted the fake's paused session (its
// sweep an hour away), and a connection to it; closed ends the
// connection and returns once its sessions have ended.
func adopting(t *testing.T) (f *fakeAPI, cs *sdk.ClientSession, closed func()) {
	f, _, cs, closed = adoptingServer(t)
	return f, cs, closed
}

// adoptingServer is adopting, with the MCP server.
func adoptingServer(t *testing.T) (f *fakeAPI, srv *mcp.Server, cs *sdk.ClientSession, closed func()) {
	t.Helper()
	f, api := newFakeAPI()
	srv = mcp.New(mcp.Options{
		Client: func(http.Header) *client.Client { return api }, Ender: api, Durable: true,
		Languages: []string{"python"}, Version: "test", Log: slog.New(slog.DiscardHandler),
	})
	ctx := context.Background()
	if err := srv.Adopt(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.CloseAll) // stops the sweep
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.SDK().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs = clientOn(t, ct)
	return f, srv, cs, func() {
		cs.Close()
		ss.Wait()
		srv.CloseAll()
	}
}

// resume_session naming a session of the last run's connections adopts
// it, which resumes it: once, not a second time on top (an extra call
// of the API per adoption, and a second resume of a session that was
// paused again in between). It says what came back, and the session is
// the connection's from then on (it ends with it). checked against a
// mutant: resume_session resuming again after the adoption (2 resumes).
func TestResumeSessionAdoptsOnce(t *testing.T) {
	f, cs, closed := adopting(t)
	res, out := call(t, cs, "resume_session", map[string]any{"session_id": "s-1"})
	if res.IsError || out["state"] != apitype.StateIdle || !strings.Contains(text(res), "restarted") || !strings.Contains(text(res), "started afresh") {
		t.Fatalf("resume_session of an adopted session: %s %v", text(res), out)
	}
	if n := f.count("POST /v1/sessions/s-1/resume"); n != 1 {
		t.Errorf("the adopted session was resumed %d times, want once", n)
	}
	// The connection's now: it ends with it.
	closed()
	if n := f.count("DELETE /v1/sessions/s-1"); n != 1 {
		t.Errorf("the adopted session was ended %d times with its connection, want once", n)
	}
}

// pause_session and fork_session naming a session of the last run's
// connections make it the connection's too, as every tool that names
// one does (Adopt), without resuming it: pause_session's answer says it
// is kept paused, and the sweep of those nobody named must not end it;
// it ends with the connection. checked against a mutant: without the
// claim (as before), neither was ended with the connection (left to the
// sweep).
func TestNamingClaimsWithoutResume(t *testing.T) {
	for _, tool := range []string{"pause_session", "fork_session"} {
		t.Run(tool, func(t *testing.T) {
			f, cs, closed := adopting(t)
			if res, _ := call(t, cs, tool, map[string]any{"session_id": "s-1"}); res.IsError {
				t.Fatal(text(res))
			}
			if n := f.count("POST /v1/sessions/s-1/resume"); n != 0 {
				t.Errorf("%s resumed the session it named (%d)", tool, n)
			}
			closed()
			if n := f.count("DELETE /v1/sessions/s-1"); n != 1 {
				t.Errorf("the session %s named was ended %d times with the connection, want once", tool, n)
			}
		})
	}
}

// The sweep of the sessions nobody named, running while a call that
// named one works on it (its timer fires then: the grace is over while
// the resume, pause or fork is under way), leaves it to that call: it
// is the connection's, ends with it and not before. checked against a
// mutant: taken out of the orphans only once the call was done (as
// before), the resumed and the forked session outlived the connection
// (the sweep found them running or gone from its list, and the claim
// found them no longer orphans), and the paused one was ended by the
// sweep under the model that had just named it.
func TestSweepDuringNamingCall(t *testing.T) {
	for _, c := range []struct{ tool, route string }{
		{"execute_code", "POST /v1/sessions/s-1/resume"},
		{"resume_session", "POST /v1/sessions/s-1/resume"},
		{"pause_session", "POST /v1/sessions/s-1/pause"},
		{"fork_session", "POST /v1/sessions/s-1/fork"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			f, srv, cs, closed := adoptingServer(t)
			f.mu.Lock()
			f.after = map[string]func(){c.route: srv.Sweep}
			f.mu.Unlock()
			args := map[string]any{"session_id": "s-1"}
			if c.tool == "execute_code" {
				args["code"] = "x = 1"
			}
			call(t, cs, c.tool, args)
			if n := f.count(c.route); n != 1 {
				t.Fatalf("%s: %s called %d times, want once", c.tool, c.route, n)
			}
			if n := f.count("DELETE /v1/sessions/s-1"); n != 0 {
				t.Errorf("%s: the sweep ended the session the call named (%d)", c.tool, n)
			}
			closed()
			if n := f.count("DELETE /v1/sessions/s-1"); n != 1 {
				t.Errorf("%s: the named session was ended %d times with the connection, want once", c.tool, n)
			}
		})
	}
}
