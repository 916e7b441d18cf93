package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// A shell command runs in the session's own sandbox, beside the
// interpreter, whose state it does not touch; it works in sessions of
// every language.
func TestCommandsInEveryLanguage(t *testing.T) { testCommandsInEveryLanguage(t, sharedServer(t)) }

func testCommandsInEveryLanguage(t *testing.T, s *server) {
	ctx := context.Background()
	for _, tc := range []struct{ lang, setup, check, want string }{
		{"python", "x = 41\nopen('made-by-python', 'w').write('p')", "x + 1", "42"},
		{"bash", "X=41; printf b > made-by-bash", "echo $((X + 1))", "42"},
		{"javascript", "globalThis.x = 41; require('fs').writeFileSync('made-by-javascript', 'j')", "x + 1", "42"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			id := s.newSession(tc.lang, map[string]any{"env": map[string]string{"SESSION_VAR": "from-session"}})
			s.exec(id, tc.setup)
			res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{
				Command: "cat made-by-" + tc.lang + "; echo; echo $SESSION_VAR $CMD_VAR; id -u; pwd; echo oops >&2; exit 3",
				Env:     map[string]string{"CMD_VAR": "from-command"},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"python": "p", "bash": "b", "javascript": "j"}[tc.lang] + "\nfrom-session from-command\n1000\n/workspace\n"
			if res.Stdout != want || res.Stderr != "oops\n" || exitOf(res) != 3 || res.Killed || res.State != apitype.CommandExited {
				t.Fatalf("command: %+v, want stdout %q", res, want)
			}
			// The interpreter kept its state.
			r := s.exec(id, tc.check)
			got := strings.TrimSpace(r.Stdout)
			if tc.lang != "bash" {
				got = text(r, "result")
			}
			if got != tc.want {
				t.Fatalf("interpreter state after a command: %+v", r)
			}
		})
	}
}

// A command runs while the session's interpreter is busy, in the same
// sandbox: it sees the execution's processes and files.
func TestCommandWhileBusy(t *testing.T) { testCommandWhileBusy(t, sharedServer(t)) }

func testCommandWhileBusy(t *testing.T, s *server) {
	ctx := context.Background()
	id := s.newSession("bash", nil)
	started := make(chan struct{})
	done := make(chan *apitype.Result, 1)
	go func() {
		var once sync.Once
		r, _ := s.c.Execute(ctx, id, apitype.ExecuteRequest{Code: "echo busy > marker; echo go; sleep 600"}, func(ev apitype.Event) {
			if ev.Type == apitype.EventStdout {
				once.Do(func() { close(started) })
			}
		})
		done <- r
	}()
	<-started
	res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "cat marker; pgrep -c sleep"}, nil)
	if err != nil || res.Stdout != "busy\n1\n" {
		t.Fatalf("command while busy: %+v %v", res, err)
	}
	s.c.Interrupt(ctx, id)
	<-done
}

// Limits apply: a command is killed at its timeout, output beyond the
// session's max_output is dropped, and a command cannot exceed the
// session's memory.
func TestCommandLimits(t *testing.T) { testCommandLimits(t, sharedServer(t)) }

func testCommandLimits(t *testing.T, s *server) {
	ctx := context.Background()
	id := s.newSession("python", map[string]any{"limits": map[string]any{"max_output": "1K", "memory": "128M"}})
	res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "sleep 600 & sleep 600", Timeout: duration(t, "500ms")}, nil)
	if err != nil || !res.Killed || res.KillReason != apitype.KillTimeout || exitOf(res) != 137 || res.DurationMs > 10_000 {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	// The whole process group went: nothing is left sleeping.
	if res, _ := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "pgrep -c sleep || true"}, nil); strings.TrimSpace(res.Stdout) != "0" {
		t.Fatalf("processes left after a killed command: %q", res.Stdout)
	}
	res, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "head -c 100000 /dev/zero | tr '\\0' x; echo; echo end >&2"}, nil)
	if err != nil || len(res.Stdout) != 1024 || !res.StdoutTruncated || res.StdoutDroppedBytes != 100001-1024 || res.Stderr != "end\n" || exitOf(res) != 0 {
		t.Fatalf("output cap: %d bytes truncated=%v %+v %v", len(res.Stdout), res.StdoutTruncated, res.Stderr, err)
	}
	_, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "   "}, nil)
	wantError(t, "empty command", err, 400, "invalid_argument")
	// cwd is relative to /workspace like a file's path; an absolute one
	// is the sandbox's own business; what no file path may be is refused.
	s.exec(id, "import os; os.makedirs('sub/dir')")
	for cwd, want := range map[string]string{"sub/dir": "/workspace/sub/dir", "./sub": "/workspace/sub", "/workspace/sub": "/workspace/sub", "": "/workspace", "/tmp": "/tmp"} {
		res, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "pwd", Cwd: cwd}, nil)
		if err != nil || res.Stdout != want+"\n" {
			t.Errorf("cwd %q: %+v %v, want %s", cwd, res, err, want)
		}
	}
	for _, cwd := range []string{"../etc", "sub/../..", "a\x1bb", "/tmp/\u0085"} {
		_, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "true", Cwd: cwd}, nil)
		wantError(t, "cwd "+cwd, err, 400, "invalid_argument")
	}
	_, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "true", Timeout: duration(t, "999h")}, nil)
	wantError(t, "timeout above the maximum", err, 400, "invalid_argument")
	// Out of memory, the whole sandbox goes (as for an execution), and
	// the command says why.
	res, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "python3 -c 'x = bytearray(512 << 20); print(\"allocated\")'"}, nil)
	gvisorKill := s.gvisor() && err == nil && res.Signal == "SIGKILL" && !res.Killed
	if err != nil || strings.Contains(res.Stdout, "allocated") || (!gvisorKill && (!res.Killed || res.KillReason != apitype.KillMemory)) {
		// gVisor may refuse the allocation and SIGKILL the program itself
		// before the host's memory limit is reached (docs/guides/gvisor.md).
		t.Fatalf("memory: %+v %v", res, err)
	}
	if gvisorKill && res.KillReason == "" {
		return // only the program went; the sandbox lives on
	}
	// The session ends as its monitor hears of the OOM kill.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err = s.c.Session(ctx, id); err != nil || time.Now().After(deadline) {
			break
		}
	}
	wantError(t, "the session after a command ran out of memory", err, 410, "session_ended")
}

// A command's output streams as it comes, then its result.
func TestCommandStreams(t *testing.T) { testCommandStreams(t, sharedServer(t)) }

func testCommandStreams(t *testing.T, s *server) {
	ctx := context.Background()
	id := s.newSession("python", nil)
	var events []apitype.Event
	res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "echo one; echo two >&2; echo three", Stdin: "ignored"}, func(ev apitype.Event) { events = append(events, ev) })
	if err != nil || res.Stdout != "one\nthree\n" || res.Stderr != "two\n" {
		t.Fatalf("%+v %v", res, err)
	}
	var out strings.Builder
	for _, ev := range events {
		if ev.Type == apitype.EventStdout {
			out.WriteString(ev.Text)
		}
	}
	if out.String() != "one\nthree\n" || events[len(events)-1].Type != apitype.EventEnd || events[len(events)-1].Command == nil {
		t.Fatalf("events: %+v", events)
	}
	// stdin, then end of file.
	res, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "tr a-z A-Z", Stdin: "hello\n"}, nil)
	if err != nil || res.Stdout != "HELLO\n" {
		t.Fatalf("stdin: %+v %v", res, err)
	}
}

// A background command runs on while the client does other things: its
// status and output can be read, it can be fed and signalled, and it ends
// with the session.
func TestBackgroundCommands(t *testing.T) { testBackgroundCommands(t, sharedServer(t)) }

func testBackgroundCommands(t *testing.T, s *server) {
	ctx := context.Background()
	id := s.newSession("python", nil)
	bg, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "echo ready; while read line; do echo got $line; done; echo eof", Background: true}, nil)
	if err != nil || bg.State != apitype.CommandRunning || bg.ID == "" || bg.ExitCode != nil {
		t.Fatalf("background: %+v %v", bg, err)
	}
	// Running, it has no exit status yet: null on the wire, not 0.
	if code, body := s.raw("GET", "/v1/sessions/"+id+"/commands/"+bg.ID, nil, nil); code != 200 || !strings.Contains(string(body), `"exit_code":null`) {
		t.Fatalf("a running command: %d %s", code, body)
	}
	if err := s.c.CommandStdin(ctx, id, bg.ID, "a\nb\n", true); err != nil {
		t.Fatal(err)
	}
	res, err := s.c.Command(ctx, id, bg.ID, 30*time.Second)
	if err != nil || res.State != apitype.CommandExited || res.Stdout != "ready\ngot a\ngot b\neof\n" || exitOf(res) != 0 {
		t.Fatalf("after stdin: %+v %v", res, err)
	}
	err = s.c.CommandStdin(ctx, id, bg.ID, "more", false)
	wantError(t, "stdin of an ended command", err, 409, "conflict")

	// Signalled: it ends by the signal.
	bg, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.05; done", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, _ := s.c.Command(ctx, id, bg.ID, 0)
		if strings.Contains(r.Stdout, "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background command did not start")
		}
	}
	if err := s.c.SignalCommand(ctx, id, bg.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	res, err = s.c.Command(ctx, id, bg.ID, 30*time.Second)
	if err != nil || res.State != apitype.CommandExited || !strings.Contains(res.Stdout, "term") || exitOf(res) != 7 {
		t.Fatalf("signalled: %+v %v", res, err)
	}
	err = s.c.SignalCommand(ctx, id, bg.ID, "NOPE")
	wantError(t, "bad signal", err, 400, "invalid_argument")
	_, err = s.c.Command(ctx, id, "c999", 0)
	wantError(t, "unknown command", err, 404, "not_found")
	list, err := s.c.Commands(ctx, id)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Commands end with the session.
	bg, err = s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "sleep 600", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.c.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = s.c.Command(ctx, id, bg.ID, 0)
	wantError(t, "command of a deleted session", err, 410, "session_ended")
}

// At most server.max_session_commands run at once in one session.
func TestCommandCap(t *testing.T) {
	s := startServer(t, map[string]any{"server": map[string]any{"max_session_commands": 2}})
	defer s.stop()
	ctx := context.Background()
	id := s.newSession("bash", nil)
	for i := 0; i < 2; i++ {
		if _, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "sleep 600", Background: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "true"}, nil)
	wantError(t, "a third command", err, 429, "limit_reached")
	list, _ := s.c.Commands(ctx, id)
	if err := s.c.SignalCommand(ctx, id, list[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Command(ctx, id, list[0].ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "echo again"}, nil); err != nil || res.Stdout != "again\n" {
		t.Fatalf("after one ended: %+v %v", res, err)
	}
}

// exitOf is a command's exit status, -1 while it has none.
func exitOf(res *apitype.CommandResult) int {
	if res == nil || res.ExitCode == nil {
		return -1
	}
	return *res.ExitCode
}
