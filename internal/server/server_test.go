package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/session"
	"airlock/internal/testenv"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { jail.RunTests(m) }

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []any
}

func newRecorder() *recorder {
	r := &recorder{}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *recorder) add(e any) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *recorder) SessionCreated(e session.SessionEvent)     { r.add(created(e)) }
func (r *recorder) SessionEnded(e session.SessionEvent)       { r.add(ended(e)) }
func (r *recorder) ExecutionStarted(e session.ExecutionEvent) { r.add(started(e)) }
func (r *recorder) ExecutionFinished(e session.ExecutionEvent) {
	r.add(e)
}
func (r *recorder) FileTransferred(e session.FileEvent)   { r.add(e) }
func (r *recorder) NetworkChanged(e session.NetworkEvent) { r.add(e) }
func (r *recorder) PortUsed(e session.PortEvent)          { r.add(e) }
func (r *recorder) ToolCalled(e session.ToolCallEvent)    { r.add(e) }

type (
	created session.SessionEvent
	ended   session.SessionEvent
	started session.ExecutionEvent
)

// wait returns the first event after the first from events that match
// want, waiting for it; from moves past it.
func wait[E any](t *testing.T, r *recorder, from *int, want func(E) bool) E {
	t.Helper()
	timeout := time.AfterFunc(30*time.Second, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timeout.Stop()
	deadline := time.Now().Add(30 * time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for i := *from; i < len(r.events); i++ {
			if e, ok := r.events[i].(E); ok && want(e) {
				*from = i + 1
				return e
			}
		}
		if time.Now().After(deadline) {
			var zero E
			t.Fatalf("no %T event came; events: %+v", zero, r.events)
		}
		r.cond.Wait()
	}
}

// anyOf matches every event of its type.
func anyOf[E any](E) bool { return true }

// testConfig is the configuration of the tests' servers: their own
// state directory and cgroup parent, loopback, no authentication.
func testConfig(t testing.TB) config.Config {
	cfg := config.Default()
	cfg.StateDir = "/run/airlock-server-test"
	cfg.CgroupParent = "airlock-server-test"
	// Host ids of its own: a server of the default configuration may run
	// on the host, and a range another server holds is refused.
	cfg.IDBase = 1_100_000_000
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Auth = config.AuthNone
	cfg.DataDir = t.TempDir()
	return cfg
}

// testServer starts a server of its own (state directory, cgroup parent,
// socket) with a small bash pool, the recorder and an extra handler.
func testServer(t testing.TB, rec *recorder, adjust ...func(*config.Config)) (*Server, config.Config) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to build jails (CI runs as root)")
	}
	cfg := testConfig(t)
	cfg.Pool.Size = map[string]int{"bash": 1}
	cfg.Pool.Zygote = false
	for _, f := range adjust {
		f(&cfg)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	var obs []session.Observer
	if rec != nil {
		obs = append(obs, rec)
	}
	s, err := New(cfg, Options{
		Version: "test", Log: log, Observers: obs,
		Handlers: map[string]http.Handler{"GET /x-test": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "extra")
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		os.RemoveAll(cfg.StateDir)
		if t.Failed() {
			logMu.Lock()
			t.Logf("server log:\n%s", logs.String())
			logMu.Unlock()
		}
	})
	return s, cfg
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The composition root wires the manager, the pools, the API, both
// listeners, extra handlers and observers; the observers hear sessions,
// executions (with their outcome, CPU, memory and output), one-shot and
// program runs and file operations; Shutdown ends every session and
// leaves nothing behind.
func TestServerObserved(t *testing.T) {
	rec := newRecorder()
	s, cfg := testServer(t, rec)
	ctx := context.Background()
	tcp := client.New("http://" + s.Addr().String())
	local := client.Unix(cfg.SocketPath())
	defer tcp.CloseIdleConnections()
	defer local.CloseIdleConnections()
	warm, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := tcp.WaitWarm(warm); err != nil {
		t.Fatal(err)
	}
	n := 0

	// An extra handler sits behind the API's request ids.
	resp, err := http.Get("http://" + s.Addr().String() + "/x-test")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "extra" || resp.Header.Get(apitype.RequestIDHeader) == "" {
		t.Errorf("extra handler: %q, request id %q", body, resp.Header.Get(apitype.RequestIDHeader))
	}

	// A session over the unix socket.
	info, err := local.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	c := wait(t, rec, &n, func(e created) bool { return e.Session == info.ID })
	if c.Language != apitype.Bash || c.Sandbox != info.Sandbox || c.Duration <= 0 {
		t.Errorf("created: %+v", c)
	}

	res, err := tcp.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "echo hi; echo err >&2; (exit 4)"}, nil)
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("execute: %v %+v", err, res)
	}
	st := wait(t, rec, &n, anyOf[started])
	if st.Kind != session.ExecSession || st.Session != info.ID || st.Language != apitype.Bash {
		t.Errorf("started: %+v", st)
	}
	fin := wait(t, rec, &n, anyOf[session.ExecutionEvent])
	if fin.Kind != session.ExecSession || fin.OutputBytes != 7 || fin.ExitCode != 4 || fin.Killed || !fin.End.Zero() || fin.Duration <= 0 || fin.PeakMemory <= 0 {
		t.Errorf("finished: %+v", fin)
	}

	res, err = tcp.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "sleep 30", Timeout: config.Duration(time.Second)}, nil)
	if err != nil || !res.Killed {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	fin = wait(t, rec, &n, anyOf[session.ExecutionEvent])
	if !fin.Killed || fin.KillReason != apitype.KillTimeout || !fin.End.Zero() || fin.Duration < time.Second {
		t.Errorf("finished at the timeout: %+v", fin)
	}

	// File operations, with their bytes.
	if _, err := tcp.Upload(ctx, info.ID, "d/a.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	f := wait(t, rec, &n, anyOf[session.FileEvent])
	if f.Op != session.FileUpload || f.Path != "d/a.txt" || f.Bytes != 5 || f.Err != nil {
		t.Errorf("upload: %+v", f)
	}
	if _, err := tcp.ListFiles(ctx, info.ID, "d", false); err != nil {
		t.Fatal(err)
	}
	if f := wait(t, rec, &n, anyOf[session.FileEvent]); f.Op != session.FileList || f.Path != "d" {
		t.Errorf("list: %+v", f)
	}
	rc, err := tcp.Download(ctx, info.ID, "d/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "hello" {
		t.Errorf("download: %q", got)
	}
	if f := wait(t, rec, &n, anyOf[session.FileEvent]); f.Op != session.FileDownload || f.Bytes != 5 {
		t.Errorf("download: %+v", f)
	}
	if err := tcp.DeleteFile(ctx, info.ID, "d/a.txt", false); err != nil {
		t.Fatal(err)
	}
	if f := wait(t, rec, &n, anyOf[session.FileEvent]); f.Op != session.FileRemove || f.Path != "d/a.txt" || f.Err != nil {
		t.Errorf("remove: %+v", f)
	}
	_, err = tcp.Download(ctx, info.ID, "d/a.txt")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("download of a removed file: %v, want ErrNotFound", err)
	}
	if f := wait(t, rec, &n, anyOf[session.FileEvent]); f.Op != session.FileDownload || !errors.Is(f.Err, errdefs.ErrNotFound) {
		t.Errorf("failed download: %+v", f)
	}

	// One-shot and program runs are executions of their kind, not
	// sessions.
	once, err := tcp.RunOnce(ctx, apitype.OneShotRequest{Language: "bash", Code: "echo once"}, nil)
	if err != nil || once.Stdout != "once\n" {
		t.Fatalf("one-shot: %v %+v", err, once)
	}
	if fin := wait(t, rec, &n, anyOf[session.ExecutionEvent]); fin.Kind != session.ExecOneShot || fin.OutputBytes != 5 {
		t.Errorf("one-shot finished: %+v", fin)
	}
	prog, err := local.RunProgram(ctx, apitype.ProgramRequest{Language: "bash", Code: "echo prog; exit 3"}, nil)
	if err != nil || prog.ExitCode != 3 {
		t.Fatalf("program: %v %+v", err, prog)
	}
	if fin := wait(t, rec, &n, anyOf[session.ExecutionEvent]); fin.Kind != session.ExecProgram || fin.ExitCode != 3 {
		t.Errorf("program finished: %+v", fin)
	}

	// Deleting ends the session, for the observers and for clients.
	if err := tcp.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	e := wait(t, rec, &n, func(e ended) bool { return e.Session == info.ID })
	if e.End.Code != apitype.EndDeleted || e.Executions != 2 || e.Language != apitype.Bash {
		t.Errorf("ended: %+v", e)
	}
	_, err = tcp.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "true"}, nil)
	var ae *client.Error
	if !errors.Is(err, errdefs.ErrGone) || !errors.As(err, &ae) || ae.EndCode != apitype.EndDeleted || ae.RequestID == "" {
		t.Errorf("execute after delete: %v (%+v)", err, ae)
	}
	rec.mu.Lock()
	for _, ev := range rec.events {
		if c, ok := ev.(created); ok && c.Session != info.ID {
			t.Errorf("a one-shot or program run was reported as a session: %+v", c)
		}
	}
	rec.mu.Unlock()

	// Shutdown ends the sessions left and removes the socket and every
	// sandbox.
	other, err := tcp.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	s.Shutdown(sctx)
	if e := wait(t, rec, &n, func(e ended) bool { return e.Session == other.ID }); e.End.Code != apitype.EndShutdown {
		t.Errorf("ended at shutdown: %+v", e)
	}
	if _, err := os.Lstat(cfg.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("the socket is left after shutdown: %v", err)
	}
	for _, hier := range []string{"memory", "pids", "unified"} {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", hier, cfg.CgroupParent, "s-*"))
		if len(left) > 0 {
			t.Errorf("sandbox cgroups left after shutdown: %q", left)
		}
	}
	if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", cfg.CgroupParent, "s-*")); len(left) > 0 {
		t.Errorf("sandbox cgroups left after shutdown: %q", left)
	}
	if _, err := local.Health(ctx); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("the socket answers after shutdown: %v", err)
	}
}
