package session

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/watch/watchtest"
)

// commandRunning waits until a command runs in s.
func commandRunning(t *testing.T, s *Session) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for len(s.Commands()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no command started")
		}
		time.Sleep(time.Millisecond)
	}
}

func runCommand(t *testing.T, ctx context.Context, s *Session, req apitype.CommandRequest, act func()) (*apitype.CommandResult, error) {
	t.Helper()
	return within(t, "command "+req.Command, func() (*apitype.CommandResult, error) { return s.RunCommand(ctx, req, nil) }, act)
}

// How a foreground command ends: its status, its output, a signal, and
// the limits that kill it.
func TestRunCommand(t *testing.T) {
	for _, c := range []struct {
		name, line string
		lang       string
		stdin      string
		// leave: its client leaves while it runs.
		leave  bool
		act    func(*testing.T, *Session, *fakeInstance, *watchtest.Clock)
		stdout string
		exit   int
		signal string
		reason apitype.KillReason
		killed bool
		// end: why the session ended ("": it lives on).
		end apitype.EndCode
	}{
		{name: "output and status", line: "out hi;err oops;exit 3", stdout: "hi", exit: 3},
		{name: "stdin", line: "cat", stdin: "fed", stdout: "fed"},
		{name: "timeout: killed", line: "sleep", act: func(t *testing.T, s *Session, f *fakeInstance, c *watchtest.Clock) { c.Fire(testTimeout) },
			exit: 128 + 9, signal: "SIGKILL", reason: apitype.KillTimeout, killed: true},
		{name: "its client leaves: killed, for no limit", line: "sleep", leave: true,
			exit: 128 + 9, signal: "SIGKILL", killed: true},
		// Before the watch was the commands' too, a command killed with
		// its session at the process limit said nothing of why, and
		// one whose V8 heap was full was a plain abort; an execution
		// said both (issue 19: one answer per question).
		{name: "the process limit: the session ends", line: "pids", exit: 137, signal: "SIGKILL", reason: apitype.KillPids, killed: true,
			end: apitype.EndPids},
		{name: "node at the end of its heap, in a JavaScript session", lang: "javascript", line: "abort", exit: 128 + 6, signal: "SIGABRT",
			reason: apitype.KillMemory, killed: true},
		{name: "an abort in a Python session is not memory", line: "abort", exit: 128 + 6, signal: "SIGABRT"},
		{name: "out of memory: the session ends", line: "oom", exit: 137, signal: "SIGKILL", reason: apitype.KillMemory, killed: true,
			end: apitype.EndOOM},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, clock := newTestManager(t, nil)
			s := create(t, m, c.lang)
			f := src.last()
			ctx, leave := context.WithCancel(context.Background())
			defer leave()
			var act func()
			switch {
			case c.act != nil:
				act = func() { c.act(t, s, f, clock) }
			case c.leave:
				act = func() { commandRunning(t, s); leave() }
			}
			res, err := runCommand(t, ctx, s, apitype.CommandRequest{Command: c.line, Stdin: c.stdin}, act)
			if err != nil {
				t.Fatal(err)
			}
			if res.State != apitype.CommandExited || res.Stdout != c.stdout || res.ExitCode == nil || *res.ExitCode != c.exit {
				t.Errorf("state %s, stdout %q, exit %v; want exited, %q, %d", res.State, res.Stdout, res.ExitCode, c.stdout, c.exit)
			}
			if res.Signal != c.signal || res.Killed != c.killed || res.KillReason != c.reason {
				t.Errorf("signal %q, killed %v (%q); want %q, %v (%q)", res.Signal, res.Killed, res.KillReason, c.signal, c.killed, c.reason)
			}
			if c.end != "" {
				if end := ended(t, s); end.Code != c.end {
					t.Errorf("the session ended for %q, want %q", end.Code, c.end)
				}
				return
			}
			if !s.End().Zero() {
				t.Errorf("the session ended: %v", s.End())
			}
		})
	}
}

// A background command runs on after its request, and is described,
// waited for, fed and signalled by its id.
func TestBackgroundCommand(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	q := &countingQuotas{}
	m.SetAdmitter(NewTenants(m.cfg, q))
	s := create(t, m, "")
	ctx := tenantCtx("a")
	cat, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "cat", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := q.count(); n != 0 {
		t.Errorf("a running command's admission given back %d times", n)
	}
	if cat.State != apitype.CommandRunning {
		t.Fatalf("state %s, want running", cat.State)
	}
	if err := s.CommandStdin(cat.ID, []byte("abc"), true); err != nil {
		t.Fatal(err)
	}
	res, err := s.Command(ctx, cat.ID, wait)
	if err != nil || res.State != apitype.CommandExited || res.Stdout != "abc" {
		t.Fatalf("after its stdin closed: %+v, %v", res, err)
	}
	if n := q.count(); n != 1 {
		t.Errorf("the command ended; its admission given back %d times, want once", n)
	}

	sleep, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "sleep", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SignalCommand(sleep.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	res, err = s.Command(ctx, sleep.ID, wait)
	if err != nil || res.State != apitype.CommandExited || res.Signal != "SIGTERM" || res.Killed {
		t.Fatalf("signalled: %+v, %v", res, err)
	}
	if err := s.SignalCommand(sleep.ID, "TERM"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("signalling an ended command: %v, want conflict", err)
	}
	if err := s.CommandStdin(sleep.ID, []byte("x"), false); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("feeding an ended command: %v, want conflict", err)
	}
	if n := len(s.Commands()); n != 2 {
		t.Errorf("%d commands listed, want 2", n)
	}
	if _, err := s.Command(ctx, "c99", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown command: %v, want not found", err)
	}
}

// Commands a session refuses, and the cap on those running at once.
func TestCommandRefused(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	q := &countingQuotas{}
	m.SetAdmitter(NewTenants(m.cfg, q))
	s := create(t, m, "")
	ctx := tenantCtx("a")
	for range m.cfg.Server.MaxSessionCommands {
		if _, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "sleep", Background: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		req  apitype.CommandRequest
		want error
	}{
		{"past max_session_commands", apitype.CommandRequest{Command: "out x"}, errdefs.ErrLimit},
		{"empty", apitype.CommandRequest{Command: "  "}, errdefs.ErrInvalidArgument},
		{"NUL", apitype.CommandRequest{Command: "out \x00"}, errdefs.ErrInvalidArgument},
		{"too large", apitype.CommandRequest{Command: strings.Repeat("x", MaxCode+1)}, errdefs.ErrTooLarge},
		{"a cwd outside the names a client may give", apitype.CommandRequest{Command: "out x", Cwd: "../x"}, errdefs.ErrInvalidArgument},
		{"command and argv", apitype.CommandRequest{Command: "out x", Argv: []string{"out x"}}, errdefs.ErrInvalidArgument},
		{"argv without a program", apitype.CommandRequest{Argv: []string{"", "x"}}, errdefs.ErrInvalidArgument},
		{"NUL in argv", apitype.CommandRequest{Argv: []string{"ls", "a\x00b"}}, errdefs.ErrInvalidArgument},
		{"argv too large", apitype.CommandRequest{Argv: []string{"ls", strings.Repeat("x", MaxCode)}}, errdefs.ErrTooLarge},
		{"tag too large", apitype.CommandRequest{Command: "out x", Tag: strings.Repeat("t", maxTag+1)}, errdefs.ErrTooLarge},
	} {
		before := q.count()
		c.req.Background = true
		if _, err := s.RunCommand(ctx, c.req, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if q.count() != before+1 {
			t.Errorf("%s: the admission was not given back", c.name)
		}
	}
	// The session's end ends its commands, and they say so.
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	s.cmds.mu.Lock()
	all := maps.Clone(s.cmds.byID)
	s.cmds.mu.Unlock()
	for _, c := range all {
		<-c.done
		if res := c.result(); !res.Killed || res.State != apitype.CommandExited {
			t.Errorf("command %s after the session's end: %+v", c.id, res)
		}
	}
}

// A program's argv is shown as a shell line: a shell's -c script as it
// is, anything else quoted word by word.
func TestArgvLine(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"/bin/bash", "-l", "-c", "echo hi | tr h H"}, "echo hi | tr h H"},
		{[]string{"sh", "-c", "x"}, "x"},
		{[]string{"/usr/bin/python3", "-c", "print('a b')"}, `'/usr/bin/python3' '-c' 'print('\''a b'\'')'`},
		{[]string{"bash", "-c", "x", "arg0"}, `'bash' '-c' 'x' 'arg0'`},
	} {
		if got := ArgvLine(c.argv); got != c.want {
			t.Errorf("ArgvLine(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

// A program run by its argv runs as it is, through the shell's exec (the
// sandbox's PATH finds it); its argv, tag and directory are listed with
// it; a background command's timeout kills it, and it says so.
func TestArgvCommand(t *testing.T) {
	m, src, clock := newTestManager(t, nil)
	s := create(t, m, "")
	f := src.last()
	req := apitype.CommandRequest{Argv: []string{"prog", "it's", "sleep"}, Tag: "server", Cwd: "sub", Background: true, Timeout: apitype.Duration(testTimeout)}
	started, err := s.RunCommand(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.bmu.Lock()
	p := f.lastCmd
	f.bmu.Unlock()
	if want := []string{m.cfg.Runtimes.Bash, "-c", execArgv, "prog", "it's", "sleep"}; !slices.Equal(p.argv, want) || p.dir != "/workspace/sub" {
		t.Errorf("started %q in %s, want %q in /workspace/sub", p.argv, p.dir, want)
	}
	if !slices.Equal(started.Argv, req.Argv) || started.Tag != "server" || started.Cwd != "/workspace/sub" || started.Command != `'prog' 'it'\''s' 'sleep'` {
		t.Errorf("listed as %+v", started)
	}
	clock.Fire(testTimeout)
	res, err := s.Command(context.Background(), started.ID, wait)
	if err != nil || res.State != apitype.CommandExited || !res.Killed || res.KillReason != apitype.KillTimeout || res.Signal != "SIGKILL" {
		t.Fatalf("a background command past its timeout: %+v %v", res, err)
	}
}
