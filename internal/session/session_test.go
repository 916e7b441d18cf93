package session

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/runtimes"
	"airlock/internal/watch/watchtest"
)

// wait bounds every wait of these tests for something that must happen.
const wait = 20 * time.Second

func create(t *testing.T, m *Manager, lang string) *Session {
	t.Helper()
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: lang})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return s
}

// execute runs code in s while act does what the test does meanwhile
// (fire timers, interrupt), and returns the result.
func execute(t *testing.T, s *Session, code string, act func()) (*apitype.Result, error) {
	t.Helper()
	return within(t, "execution of "+code, func() (*apitype.Result, error) {
		return s.Execute(context.Background(), apitype.ExecuteRequest{Code: code}, nil)
	}, act)
}

// within runs do while act (if set) does what the test does meanwhile,
// and returns do's answer; what never answers fails the test.
func within[T any](t *testing.T, what string, do func() (T, error), act func()) (T, error) {
	t.Helper()
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := do()
		done <- answer{v, err}
	}()
	if act != nil {
		act()
	}
	select {
	case a := <-done:
		return a.v, a.err
	case <-time.After(wait):
		t.Fatalf("%s never ended", what)
		var zero T
		return zero, nil
	}
}

// ended waits for s to end and says why.
func ended(t *testing.T, s *Session) apitype.End {
	t.Helper()
	select {
	case <-s.ended:
		return s.End()
	case <-time.After(wait):
		t.Fatal("the session never ended")
		return apitype.End{}
	}
}

// busy waits until an execution runs in s.
func busy(t *testing.T, s *Session) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for s.Info().State != apitype.StateBusy {
		if time.Now().After(deadline) {
			t.Fatal("no execution started")
		}
		time.Sleep(time.Millisecond)
	}
}

// interrupted waits until an execution runs in s, then interrupts it.
func interrupted(t *testing.T, s *Session) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if ok, err := s.Interrupt(); err != nil {
			t.Fatalf("interrupt: %v", err)
		} else if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no execution to interrupt")
}

// How executions end, and what each way of ending becomes in the result
// and for the session: output, the runtime's errors, a client's
// interrupt, and each limit (timeout, CPU time, memory, processes), with
// the session kept or ended.
func TestExecute(t *testing.T) {
	const big = 3000
	for _, c := range []struct {
		name, lang, code string
		// act runs while the code does.
		act func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock)
		// What the result says.
		stdout, stderr string
		results        int
		errName        string
		errValue       string // a part of it
		exitCode       int
		reason         apitype.KillReason
		killed         bool
		// end: why the session ended ("": it lives on).
		end apitype.EndCode
	}{
		{name: "output, display and done", code: "out hello;err warn;display", stdout: "hello", stderr: "warn", results: 1},
		{name: "an error the code raised", code: "out x;raise ValueError", stdout: "x", errName: "ValueError", exitCode: 1},
		{name: "a client's interrupt: the runtime's KeyboardInterrupt, the state kept", code: "sleep",
			act:     func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock) { interrupted(t, s) },
			errName: "KeyboardInterrupt", exitCode: 1},
		{name: "a client's interrupt in bash: the server says KeyboardInterrupt", lang: "bash", code: "sleep",
			act:     func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock) { interrupted(t, s) },
			errName: "KeyboardInterrupt", exitCode: 1},
		{name: "timeout: interrupted, the state kept", code: "sleep",
			act:     func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock) { clock.Fire(testTimeout) },
			errName: "TimeoutError", errValue: "were kept", exitCode: 1, killed: true, reason: apitype.KillTimeout},
		{name: "timeout, and the code does not stop: the session ends", code: "hang",
			act: func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock) {
				clock.Fire(testTimeout)
				clock.Fire(testGrace)
			},
			errName: "TimeoutError", errValue: "did not stop within the interrupt grace", exitCode: 137, killed: true,
			reason: apitype.KillTimeout, end: apitype.EndUnresponsive},
		{name: "CPU time: interrupted, the state kept", code: "sleep",
			act: func(t *testing.T, s *Session, f *fakeInstance, clock *watchtest.Clock) {
				// The budget's check is due when the code could have
				// spent it on one CPU; by then it has.
				clock.Await(testCPUTime + time.Millisecond)
				f.cpu.Add(int64(testCPUTime))
				clock.Fire(testCPUTime + time.Millisecond)
			},
			errName: "CPUTimeError", errValue: "were kept", exitCode: 1, killed: true, reason: apitype.KillCPUTime},
		{name: "out of memory: the session ends", code: "out a;oom", stdout: "a",
			errName: "MemoryError", errValue: "killed with its sandbox", exitCode: 137, killed: true,
			reason: apitype.KillMemory, end: apitype.EndOOM},
		{name: "the process limit: the session ends", code: "pids",
			errName: "ProcessLimitError", exitCode: 137, killed: true, reason: apitype.KillPids, end: apitype.EndPids},
		{name: "the runtime exits: the session ends", code: "exit 3",
			errName: "SessionEnded", errValue: "status 3", exitCode: 137, killed: true, end: apitype.EndInterpreterExited},
		{name: "output past max_output is dropped and counted", code: "out " + strings.Repeat("x", big),
			stdout: strings.Repeat("x", 1<<10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, clock := newTestManager(t, nil)
			s := create(t, m, c.lang)
			f := src.last()
			var act func()
			if c.act != nil {
				act = func() { c.act(t, s, f, clock) }
			}
			res, err := execute(t, s, c.code, act)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != c.stdout || res.Stderr != c.stderr || len(res.Results) != c.results {
				t.Errorf("stdout %q, stderr %q, %d results; want %q, %q, %d", res.Stdout, res.Stderr, len(res.Results), c.stdout, c.stderr, c.results)
			}
			switch {
			case res.Error == nil && c.errName != "":
				t.Errorf("no error, want %s", c.errName)
			case res.Error != nil && (res.Error.Name != c.errName || !strings.Contains(res.Error.Value, c.errValue)):
				t.Errorf("error %s: %s; want %s with %q", res.Error.Name, res.Error.Value, c.errName, c.errValue)
			}
			if res.ExitCode != c.exitCode || res.Killed != c.killed || res.KillReason != c.reason {
				t.Errorf("exit %d, killed %v (%q); want %d, %v (%q)", res.ExitCode, res.Killed, res.KillReason, c.exitCode, c.killed, c.reason)
			}
			if res.SessionEnded != (c.end != "") || res.EndCode != c.end {
				t.Errorf("session ended %v (%q), want %q", res.SessionEnded, res.EndCode, c.end)
			}
			if c.end != "" {
				if end := ended(t, s); end.Code != c.end {
					t.Errorf("the session ended for %q, want %q", end.Code, c.end)
				}
				if _, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "out x"}, nil); !errors.Is(err, errdefs.ErrGone) {
					t.Errorf("an execution after the end: %v, want gone", err)
				}
				return
			}
			if strings.Contains(c.name, "max_output") && (!res.StdoutTruncated || res.StdoutDroppedBytes != big-1<<10) {
				t.Errorf("truncated %v, %d bytes dropped; want %d", res.StdoutTruncated, res.StdoutDroppedBytes, big-1<<10)
			}
			// The session lives on: its next execution runs.
			next, err := execute(t, s, "out again", nil)
			if err != nil || next.Stdout != "again" || next.ExecutionCount != 2 {
				t.Errorf("the next execution: %+v, %v", next, err)
			}
		})
	}
}

// A listing of more sessions than one worker describes (List splits it)
// has each of them once, oldest first.
func TestListMany(t *testing.T) {
	const n = 3*listBatch + 7
	cfg := testConfig()
	cfg.Server.MaxSessions = n
	m, _, _ := newTestManager(t, &cfg)
	var ids []string
	for range n {
		ids = append(ids, create(t, m, "").ID())
	}
	l := m.List()
	if len(l) != n {
		t.Fatalf("%d sessions listed, want %d", len(l), n)
	}
	seen := map[string]bool{}
	for i, info := range l {
		if seen[info.ID] || info.ID == "" || info.State != apitype.StateIdle {
			t.Fatalf("listing %d: %+v (twice, empty or not idle)", i, info)
		}
		seen[info.ID] = true
		if i > 0 && info.CreatedAt.Before(l[i-1].CreatedAt) {
			t.Fatalf("listing %d is older than the one before it", i)
		}
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("session %s not listed", id)
		}
	}
}

// A session's life: found while it lives, ended by its deletion (again:
// done, not an error), remembered as ended with why, and its sandbox
// freed.
func TestSessionLifecycle(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	s := create(t, m, "")
	if got, err := m.Get(s.ID()); err != nil || got != s {
		t.Fatalf("get: %v, %v", got, err)
	}
	if info := s.Info(); info.State != apitype.StateIdle || info.Language != "python" {
		t.Errorf("info: %+v", info)
	}
	if ok, err := s.Interrupt(); ok || err != nil {
		t.Errorf("interrupt with nothing running: %v, %v", ok, err)
	}
	if n := len(m.List()); n != 1 {
		t.Errorf("%d sessions listed, want 1", n)
	}
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Errorf("a second delete: %v, want none", err)
	}
	var end *EndedError
	if _, err := m.Get(s.ID()); !errors.As(err, &end) || end.End.Code != apitype.EndDeleted {
		t.Errorf("get after delete: %v, want ended (deleted)", err)
	}
	if _, err := s.Interrupt(); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("interrupt after delete: %v, want gone", err)
	}
	select {
	case <-s.gone:
	case <-time.After(wait):
		t.Fatal("the session's sandbox was never freed")
	}
	if !src.last().closed.Load() {
		t.Error("the instance is not closed")
	}
	if n := m.Count(); n != 0 {
		t.Errorf("%d sessions live, want 0", n)
	}
}

// What ends a session besides a client: its runtime dying between
// executions, its idle timeout, the server's shutdown.
func TestSessionEnds(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(*testing.T, *Manager, *Session, *fakeInstance)
		want apitype.EndCode
	}{
		{"the runtime exits", func(_ *testing.T, _ *Manager, _ *Session, f *fakeInstance) {
			f.die(apitype.Ended(apitype.EndInterpreterExited))
		}, apitype.EndInterpreterExited},
		{"idle", func(_ *testing.T, _ *Manager, s *Session, _ *fakeInstance) {
			s.mu.Lock()
			s.lastUsed = time.Now().Add(-2 * s.idle)
			s.mu.Unlock()
			s.checkIdle()
		}, apitype.EndIdle},
		{"shutdown", func(_ *testing.T, m *Manager, _ *Session, _ *fakeInstance) { m.Close() }, apitype.EndShutdown},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, _ := newTestManager(t, nil)
			s := create(t, m, "")
			c.end(t, m, s, src.last())
			if end := ended(t, s); end.Code != c.want {
				t.Errorf("ended for %q, want %q", end.Code, c.want)
			}
			if _, err := execute(t, s, "out x", nil); !errors.Is(err, errdefs.ErrGone) {
				t.Errorf("execute after the end: %v, want gone", err)
			}
		})
	}
}

// A session in use (a file transfer, an execution) does not idle out.
func TestSessionInUseDoesNotIdle(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	done := s.Use()
	s.mu.Lock()
	s.lastUsed = time.Now().Add(-2 * s.idle)
	s.mu.Unlock()
	s.checkIdle()
	if end := s.End(); !end.Zero() {
		t.Fatalf("ended while in use: %v", end)
	}
	done()
	s.mu.Lock()
	s.lastUsed = time.Now().Add(-2 * s.idle)
	s.mu.Unlock()
	s.checkIdle()
	if end := ended(t, s); end.Code != apitype.EndIdle {
		t.Errorf("ended for %q, want idle", end.Code)
	}
}

// Requests a session refuses before any code runs.
func TestExecuteRefused(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	py, sh := create(t, m, "python"), create(t, m, "bash")
	first := make(chan struct{})
	go func() {
		defer close(first)
		py.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
	}()
	busy(t, py)
	for _, c := range []struct {
		name string
		s    *Session
		req  apitype.ExecuteRequest
		want error
	}{
		{"a second execution at once", py, apitype.ExecuteRequest{Code: "out x"}, errdefs.ErrConflict},
		{"code over MaxCode", sh, apitype.ExecuteRequest{Code: strings.Repeat("x", MaxCode+1)}, errdefs.ErrTooLarge},
		{"NUL in bash code", sh, apitype.ExecuteRequest{Code: "out \x00"}, errdefs.ErrInvalidArgument},
		{"a timeout above the server's maximum", sh, apitype.ExecuteRequest{Code: "out x", Timeout: config.Duration(time.Hour)}, errdefs.ErrInvalidArgument},
	} {
		if _, err := c.s.Execute(context.Background(), c.req, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	interrupted(t, py)
	<-first
	if n := len(src.last().execs); n != 0 {
		t.Errorf("%d refused executions reached the runtime", n)
	}
}

// A runtime that does not take the code ends its session: it can no
// longer be trusted to be reading.
func TestExecuteSendFails(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	s := create(t, m, "")
	src.last().sendErr = os.ErrDeadlineExceeded
	_, err := execute(t, s, "out x", nil)
	var end *EndedError
	if !errors.As(err, &end) || end.End.Code != apitype.EndNotReading {
		t.Errorf("%v, want the session ended (not reading)", err)
	}
}

// The server's cap on sessions, and what a closed manager refuses.
func TestCreateRefused(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	for range m.cfg.Server.MaxSessions {
		create(t, m, "")
	}
	if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{}); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("past max_sessions: %v, want limit", err)
	}
	for _, c := range []struct {
		name string
		req  apitype.CreateSessionRequest
		want error
	}{
		{"an unknown language", apitype.CreateSessionRequest{Language: "cobol"}, errdefs.ErrInvalidArgument},
		{"a limit above the server's", apitype.CreateSessionRequest{Limits: config.Limits{Memory: 1 << 50}}, errdefs.ErrInvalidArgument},
		{"an idle timeout above the server's", apitype.CreateSessionRequest{IdleTimeout: config.Duration(1000 * time.Hour)}, errdefs.ErrInvalidArgument},
		{"an isolation not allowed", apitype.CreateSessionRequest{Isolation: config.GVisor}, errdefs.ErrPermission},
	} {
		if _, err := m.Create(context.Background(), c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	n := len(src.all)
	m.Close()
	if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("after Close: %v, want unavailable", err)
	}
	if len(src.all) != n {
		t.Errorf("refused creations took %d sandboxes", len(src.all)-n)
	}
}

// Sandboxes handed out dead (their runtime gone before it could be
// configured: a pool's ready ones killed together, their deaths not
// noticed yet) are replaced: however many the source holds dead, a
// creation, a one-shot and a program succeed, on a sandbox built for them
// (instance.ForFresh) once the ready ones have failed them, and every
// dead one is closed. A dead one built for the request fails it.
func TestDeadReadySandboxesReplaced(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(m *Manager) error
	}{
		{"a session", func(m *Manager) error {
			_, err := m.Create(context.Background(), apitype.CreateSessionRequest{})
			return err
		}},
		{"a one-shot", func(m *Manager) error {
			_, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Code: "out hi"}, nil)
			return err
		}},
		{"a program", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Code: "out hi"}, nil)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, _ := newTestManager(t, nil)
			src.setup = func(f *fakeInstance) {
				if !f.fresh {
					f.configErr = errors.New("the runtime went away")
				}
			}
			if err := c.do(m); err != nil {
				t.Fatalf("with every ready sandbox dead: %v", err)
			}
			src.mu.Lock()
			var took []bool
			for _, f := range src.all {
				took = append(took, f.fresh)
			}
			src.mu.Unlock()
			if want := []bool{false, false, true}; !slices.Equal(took, want) {
				t.Errorf("sandboxes built for the request: %v, want %v (the ready ones first, then one built)", took, want)
			}
			// One built for the request that dies too: the request fails,
			// saying so, and tries no further.
			src.setup = func(f *fakeInstance) { f.configErr = errors.New("the runtime went away") }
			n := len(src.all)
			if err := c.do(m); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer its configuration") {
				t.Errorf("with every sandbox dead: %v, want unavailable", err)
			}
			if got := len(src.all) - n; got != readyAttempts+1 {
				t.Errorf("with every sandbox dead: %d taken, want %d", got, readyAttempts+1)
			}
		})
	}
}

// A tenant finds only its own sessions, live or ended; another's is
// exactly an unknown id to it. An admin finds every one.
func TestFindByTenant(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	as := func(tenant string, admin bool) context.Context {
		return identity.With(context.Background(), identity.Identity{Tenant: tenant, Admin: admin})
	}
	s, err := m.Create(as("a", false), apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Tenant() != "a" {
		t.Errorf("tenant %q, want a", s.Tenant())
	}
	var other *OtherTenantError
	if _, err := m.Find(as("b", false), s.ID()); !errors.As(err, &other) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's: %v, want not found", err)
	}
	for _, ctx := range []context.Context{as("a", false), as("", true)} {
		if got, err := m.Find(ctx, s.ID()); err != nil || got != s {
			t.Errorf("find: %v, %v", got, err)
		}
	}
	if err := m.DeleteFor(as("b", false), s.ID()); !errors.As(err, &other) {
		t.Errorf("another tenant's delete: %v", err)
	}
	if err := m.DeleteFor(as("a", false), s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Find(as("b", false), s.ID()); !errors.As(err, &other) {
		t.Errorf("another tenant's ended session: %v, want not found", err)
	}
	if _, err := m.Find(as("a", false), s.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("its own ended session: %v, want gone", err)
	}
}

// Every type of an execution's messages has its handler, and nothing else
// does.
func TestEveryExecutionMessageHasAHandler(t *testing.T) {
	for _, typ := range runtimes.ExecutionTypes {
		if handlers[typ] == nil {
			t.Errorf("no handler for %q", typ)
		}
	}
	if len(handlers) != len(runtimes.ExecutionTypes) {
		t.Errorf("%d handlers for %d types", len(handlers), len(runtimes.ExecutionTypes))
	}
}

// A cell's install request is answered while the cell waits, with the
// API's checks; the execution goes on.
func TestInstallRequestFromACell(t *testing.T) {
	for _, c := range []struct {
		name, lang, code, want string
	}{
		{"pip, not configured", "python", "install pip demo", "not configured"},
		{"npm from a cell", "javascript", "install npm left-pad", "only pip installs"},
		{"pip in a JavaScript session", "javascript", "install pip demo", "pip installs into python contexts only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _, _ := newTestManager(t, nil)
			s := create(t, m, c.lang)
			res, err := execute(t, s, c.code+";out done", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Stdout, c.want) || !strings.HasSuffix(res.Stdout, "done") {
				t.Errorf("stdout %q, want the answer %q, then done", res.Stdout, c.want)
			}
		})
	}
}
