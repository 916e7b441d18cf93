package mcp_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/server"
	"airlock/internal/testenv"
)

// durableServer starts an embedded server with persistence on dataDir
// and serves its handler (its own /mcp) over HTTP; stop shuts it down
// as SIGTERM does.
func durableServer(t *testing.T, dataDir string, grace time.Duration) (url string, api *client.Client, stop func()) {
	t.Helper()
	testenv.RequireRoot(t, "the MCP tools run code in real sandboxes")
	cfg := config.Default()
	cfg.StateDir = "/run/airlock-mcp-test"
	cfg.CgroupParent = "airlock-mcp-test"
	cfg.IDBase = 1_120_000_000
	cfg.Server.Auth = config.AuthNone
	cfg.DataDir = dataDir
	cfg.Persistence.Enabled = true
	// The grace of the last run's sessions no connection names, short
	// for the test (mcp.session_timeout, at least a minute in a
	// configuration).
	cfg.MCP.SessionTimeout = config.Duration(grace)
	cfg.Pool.Size = map[string]int{"python": 1}
	cfg.Pool.Parallel = 1
	s, err := server.New(cfg, server.Options{Version: "test", Log: slog.New(slog.DiscardHandler), Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	done := false
	stop = func() {
		if done {
			return
		}
		done = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		// The clients' streams too: the server's end is theirs.
		hs.CloseClientConnections()
		hs.Close()
		os.RemoveAll(cfg.StateDir)
	}
	t.Cleanup(stop)
	return hs.URL, client.InProcess(s.Handler()), stop
}

func httpClient(t *testing.T, url string) *sdk.ClientSession {
	t.Helper()
	return clientOn(t, &sdk.StreamableClientTransport{Endpoint: url + "/mcp"})
}

// A restart of the server ends its MCP connections (an Mcp-Session-Id
// is one process's): their default sessions end with them, while the
// sessions create_session made, whose ids the model holds, are paused
// with the others; a new connection that names one resumes it, with its
// files, and it is that connection's from then on (it ends with it).
// One no connection names ends after mcp.session_timeout: nothing is
// left paused with no client to come back for it; one the model paused
// on purpose before the restart is left paused (not the shutdown's).
// checked against a mutant: with every paused airlock.mcp session
// adopted (as before), the purposely paused one ended after the grace.
func TestRestartKeepsNamedSessions(t *testing.T) {
	data := t.TempDir()
	ctx := context.Background()
	url, api, stop := durableServer(t, data, time.Hour)
	cs := httpClient(t, url)
	_, out := call(t, cs, "execute_code", map[string]any{"code": "x = 1"})
	def, _ := out["session_id"].(string)
	_, out = call(t, cs, "create_session", nil)
	made, _ := out["session_id"].(string)
	_, out = call(t, cs, "create_session", nil)
	other, _ := out["session_id"].(string)
	if def == "" || made == "" || other == "" {
		t.Fatalf("sessions: %q %q %q", def, made, other)
	}
	if res, _ := call(t, cs, "write_file", map[string]any{"path": "keep.txt", "content": "kept", "session_id": made}); res.IsError {
		t.Fatal(text(res))
	}
	// Paused on purpose before the restart: not the shutdown's, so not
	// adopted (nor ended after the grace).
	_, out = call(t, cs, "create_session", nil)
	purposed, _ := out["session_id"].(string)
	if res, _ := call(t, cs, "pause_session", map[string]any{"session_id": purposed}); res.IsError {
		t.Fatal(text(res))
	}
	stop()

	url, api, _ = durableServer(t, data, 3*time.Second)
	if _, err := api.Session(ctx, def); client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("the old connection's default session after the restart: %v (want it ended)", err)
	}
	for _, id := range []string{made, other} {
		if info, err := api.Session(ctx, id); err != nil || info.State != apitype.StatePaused {
			t.Fatalf("session %s after the restart: %v %+v", id, err, info)
		}
	}
	cs = httpClient(t, url)
	res, _ := call(t, cs, "list_sessions", nil)
	if !strings.Contains(text(res), made+" python paused") || !strings.Contains(text(res), other+" python paused") {
		t.Errorf("list_sessions does not list the paused sessions: %s", text(res))
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "print(open('keep.txt').read())", "session_id": made})
	if res.IsError || out["stdout"] != "kept\n" {
		t.Fatalf("naming a session of the last run: %s", text(res))
	}
	if note, _ := out["note"].(string); !strings.Contains(note, "resumed") || !strings.Contains(note, "started afresh") {
		t.Errorf("the result does not say the session was resumed and what came back: %q", note)
	}
	// The one nobody named ends once the grace is over (asked through
	// the connection, whose calls keep it open meanwhile:
	// mcp.session_timeout is its quiet time too).
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, _ := call(t, cs, "list_sessions", nil)
		if !strings.Contains(text(res), other) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a paused session no connection named is still there: %s", text(res))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := api.Session(ctx, other); client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("the session no connection named after the grace: %v", err)
	}
	if info, err := api.Session(ctx, purposed); err != nil || info.State != apitype.StatePaused || info.Paused.ByShutdown {
		t.Errorf("the session paused on purpose before the restart, after the grace: %v %+v (want it paused, left alone)", err, info)
	}
	if info, err := api.Session(ctx, made); err != nil || info.State == apitype.StateEnded || info.State == apitype.StatePaused {
		t.Fatalf("the adopted session after the grace: %v %+v", err, info)
	}
	// It is this connection's now: it ends with it.
	cs.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := api.Session(ctx, made)
		if st := client.StatusOf(err); st == http.StatusGone || st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the adopted session outlives the connection that named it: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pause_session, resume_session and fork_session, and a paused session
// that a call names resumes itself, saying so.
func TestPauseResumeFork(t *testing.T) {
	url, _, _ := durableServer(t, t.TempDir(), time.Hour)
	cs := httpClient(t, url)
	_, out := call(t, cs, "execute_code", map[string]any{"code": "open('a.txt', 'w').write('a')"})
	def, _ := out["session_id"].(string)
	res, out := call(t, cs, "pause_session", nil)
	if res.IsError || out["state"] != "paused" || out["session_id"] != def {
		t.Fatalf("pause_session: %s %v", text(res), out)
	}
	res, out = call(t, cs, "fork_session", nil)
	fork, _ := out["session_id"].(string)
	if res.IsError || fork == "" || fork == def {
		t.Fatalf("fork_session: %s", text(res))
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "print(open('a.txt').read())", "session_id": fork})
	if res.IsError || out["stdout"] != "a\n" {
		t.Fatalf("the fork: %s", text(res))
	}
	// The default session resumes on its next call, saying so.
	res, out = call(t, cs, "execute_code", map[string]any{"code": "print(open('a.txt').read())"})
	if note, _ := out["note"].(string); res.IsError || out["stdout"] != "a\n" || out["session_id"] != def || !strings.Contains(note, "resumed") {
		t.Fatalf("the paused default session: %s", text(res))
	}
	if res, out = call(t, cs, "pause_session", map[string]any{"session_id": fork}); res.IsError {
		t.Fatal(text(res))
	}
	res, out = call(t, cs, "resume_session", map[string]any{"session_id": fork})
	if res.IsError || out["state"] == "paused" || out["restored"] != "files" || !strings.Contains(text(res), "started afresh") {
		t.Fatalf("resume_session: %s %v", text(res), out)
	}
	if res, _ = call(t, cs, "resume_session", nil); !res.IsError || !strings.Contains(text(res), "session_id") {
		t.Errorf("resume_session without a session: %s", text(res))
	}
	if res, _ = call(t, cs, "pause_session", map[string]any{"restores": "disk"}); !res.IsError {
		t.Errorf("pause_session with a bad restores: %s", text(res))
	}
}
