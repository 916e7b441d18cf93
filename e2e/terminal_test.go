package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// follower collects a command's output from an attached stream.
type follower struct {
	mu   sync.Mutex
	out  strings.Builder
	more chan struct{} // a token per event
}

func newFollower() *follower { return &follower{more: make(chan struct{}, 1)} }

func (f *follower) event(ev apitype.Event) {
	f.mu.Lock()
	f.out.WriteString(ev.Text)
	if ev.DataBase64 != "" {
		b, _ := base64.StdEncoding.DecodeString(ev.DataBase64)
		f.out.Write(b)
	}
	f.mu.Unlock()
	select {
	case f.more <- struct{}{}:
	default:
	}
}

func (f *follower) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}

// waitFor waits until the output holds want.
func (f *follower) waitFor(t *testing.T, want string) { t.Helper(); f.waitAfter(t, "", want) }

// waitAfter waits until the output after mark holds want.
func (f *follower) waitAfter(t *testing.T, mark, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		_, after, ok := strings.Cut(f.text(), mark)
		if ok && strings.Contains(after, want) {
			return
		}
		select {
		case <-f.more:
		case <-timeout:
			t.Fatalf("no %q in the terminal's output: %q", want, f.text())
		}
	}
}

// A command under a pseudo-terminal: it is a terminal (its size, its
// controlling terminal: Ctrl-C interrupts it), its input is written and
// its size changed while it runs, its output is followed by id, and a
// client that left attaches again and is replayed what it missed. Over
// a WebSocket the same terminal is driven interactively. Nothing of it
// is left after the session ends.
func TestTerminal(t *testing.T) {
	s := sharedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := s.newSession("python", nil)
	// The terminal is the sandbox's own: tty names it in the sandbox's
	// /dev/pts, owned by the sandbox's user.
	script := `stty size; test -t 0 && echo IS-A-TTY; echo "tty:$(tty) $(stat -c %u "$(tty)")"; read line; echo "got:$line"; stty size; exec tr a-z A-Z`
	cmd, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: script, PTY: &apitype.PTYSize{Cols: 80, Rows: 24}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.State != apitype.CommandRunning || !cmd.Background || cmd.PTY == nil || *cmd.PTY != (apitype.PTYSize{Cols: 80, Rows: 24}) {
		t.Fatalf("started: %+v", cmd)
	}
	f := newFollower()
	actx, detach := context.WithCancel(ctx)
	attached := make(chan error, 1)
	go func() {
		_, err := s.c.AttachCommand(actx, id, cmd.ID, true, f.event)
		attached <- err
	}()
	f.waitFor(t, "24 80")
	f.waitFor(t, "IS-A-TTY")
	f.waitFor(t, "tty:/dev/pts/")
	if !regexp.MustCompile(`tty:/dev/pts/[0-9]+ 1000\r?\n`).MatchString(f.text()) {
		t.Errorf("the terminal as the command sees it: %q", f.text())
	}
	resizeAndType(ctx, t, s, id, cmd.ID, f)
	// The client leaves; the command runs on; attached again, it is
	// replayed what it printed.
	detach()
	if err := <-attached; !errors.Is(err, context.Canceled) {
		t.Errorf("a detached client's attach: %v", err)
	}
	if got, err := s.c.Command(ctx, id, cmd.ID, 0); err != nil || got.State != apitype.CommandRunning || *got.PTY != (apitype.PTYSize{Cols: 100, Rows: 30}) {
		t.Fatalf("after the client left: %+v %v", got, err)
	}
	again := newFollower()
	type attachEnd struct {
		res *apitype.CommandResult
		err error
	}
	ended := make(chan attachEnd, 1)
	go func() {
		res, err := s.c.AttachCommand(ctx, id, cmd.ID, true, again.event)
		ended <- attachEnd{res, err}
	}()
	again.waitFor(t, "got:hello")
	if err := s.c.CommandStdin(ctx, id, cmd.ID, "ping\n", false); err != nil {
		t.Fatal(err)
	}
	again.waitFor(t, "PING") // tr runs
	// Ctrl-C is the terminal's: the foreground job gets SIGINT.
	if err := s.c.CommandStdinBytes(ctx, id, cmd.ID, []byte{3}); err != nil {
		t.Fatal(err)
	}
	if e := <-ended; e.err != nil || exitOf(e.res) != 130 {
		t.Errorf("the command's end, attached again: %+v %v", e.res, e.err)
	}
	if err := s.c.ResizeCommand(ctx, id, cmd.ID, 10, 10); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("resizing an ended command: %v", err)
	}

	// Bad sizes, and a command without a terminal.
	for _, size := range []apitype.PTYSize{{}, {Cols: 80}, {Cols: 80, Rows: 1001}, {Cols: -1, Rows: 5}} {
		if _, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "true", PTY: &size}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("pty %+v: %v", size, err)
		}
	}
	plain, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "sleep 600", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.c.ResizeCommand(ctx, id, plain.ID, 80, 24); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("resizing a command without a terminal: %v", err)
	}

	// Over a WebSocket: keys in, the terminal's echo and output out.
	shellOverWebSocket(ctx, t, s, id)

	// A terminal's output is the sandbox's: control characters a JSON
	// encoder leaves raw (DEL, C1's CSI) are escaped in the stream.
	hostile, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: `printf 'a\302\233b\177c'`, PTY: &apitype.PTYSize{Cols: 80, Rows: 24}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.AttachCommand(ctx, id, hostile.ID, false, nil); err != nil {
		t.Fatal(err)
	}
	code, body := s.raw("GET", "/v1/sessions/"+id+"/commands/"+hostile.ID+"/events", nil, nil)
	if code != http.StatusOK || strings.ContainsAny(string(body), "\u009b\u007f") || !strings.Contains(string(body), `a\u009bb\u007fc`) {
		t.Errorf("hostile output, followed: %d %q", code, body)
	}

	// Every command is listed, with its terminal.
	list, err := s.c.Commands(ctx, id)
	if err != nil || len(list) != 4 || list[0].PTY == nil || list[1].PTY != nil || list[2].PTY == nil {
		t.Errorf("commands: %+v %v", list, err)
	}
	// An unknown command's stream and socket are a 404; a socket from
	// another origin is refused.
	if code, _ := s.raw("GET", "/v1/sessions/"+id+"/commands/c99/events", nil, nil); code != http.StatusNotFound {
		t.Errorf("events of an unknown command: %d", code)
	}
	if code, _ := s.raw("GET", "/v1/sessions/"+id+"/commands/"+plain.ID+"/ws", nil, map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a socket from another origin: %d", code)
	}
	if err := s.c.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	// No terminal outlives its session: the server holds no master.
	for deadline := time.Now().Add(30 * time.Second); s.ptyMasters() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server still holds %d pty masters after the session ended", s.ptyMasters())
		}
	}
}

// resizeAndType resizes a terminal command (the script of TestTerminal's
// kind) to 100x30 and types a line, which it echoes with its new size.
func resizeAndType(ctx context.Context, t *testing.T, s *server, id, cid string, f *follower) {
	t.Helper()
	if err := s.c.ResizeCommand(ctx, id, cid, 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := s.c.CommandStdin(ctx, id, cid, "hello\n", false); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "got:hello")
	f.waitFor(t, "30 100")
}

// shellOverWebSocket drives an interactive bash in a terminal over the
// command's WebSocket: keys in, the terminal's echo and output out, a
// resize, and job control (Ctrl-C interrupts the foreground job and the
// shell lives on; Ctrl-Z stops one). Bad messages are rejected, and the
// shell's exit ends the socket.
func shellOverWebSocket(ctx context.Context, t *testing.T, s *server, id string) {
	t.Helper()
	sh, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "exec bash --norc -i", PTY: &apitype.PTYSize{Cols: 80, Rows: 24}, Env: map[string]string{"PS1": "$ "}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ptyMasters(); n == 0 {
		t.Errorf("a terminal runs, and the server holds no pty master (the leak check below could not fail)")
	}
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.URL, "http", "ws", 1)+"/v1/sessions/"+id+"/commands/"+sh.ID+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	wf := newFollower()
	var end *apitype.CommandResult
	var rejected []string
	var bad []byte // a message that was no event
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var ev apitype.Event
			if err := json.Unmarshal(b, &ev); err != nil {
				bad = b
				return
			}
			switch ev.Type {
			case apitype.EventEnd:
				end = ev.Command
			case apitype.EventRejected:
				wf.mu.Lock()
				rejected = append(rejected, ev.Error.Name)
				wf.mu.Unlock()
			}
			wf.event(ev)
		}
	}()
	send := func(in apitype.TerminalInput) {
		b, _ := json.Marshal(in)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(apitype.TerminalInput{Type: apitype.InputResize, Cols: 120, Rows: 40})
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "echo $((6*7)) $(stty size)\n"})
	wf.waitFor(t, "42 40 120")
	// Job control: Ctrl-C interrupts the shell's foreground job, and
	// the shell lives on.
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "tr a-z A-Z\n"})
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "ping\n"})
	wf.waitFor(t, "PING") // tr runs
	send(apitype.TerminalInput{Type: apitype.InputStdin, DataBase64: base64.StdEncoding.EncodeToString([]byte{3})})
	wf.waitAfter(t, "^C", "$ ") // the prompt again
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "echo after-$((1+1))\n"})
	wf.waitFor(t, "after-2")
	// Ctrl-Z stops the foreground job, which the shell then lists as
	// stopped and brings back: the terminal is the shell's controlling
	// terminal, and its foreground process group the job's. Typed once
	// the program the job execs echoes what it reads, never while it
	// execs: gVisor's execve discards a pending stop signal (see
	// TestGVisorExecDropsStopSignals), and run-5 is said before it.
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "sh -c 'echo run-$((2+3)); exec tr a-z A-Z'\n"})
	wf.waitFor(t, "run-5") // it runs: the terminal is its, in cooked mode
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "zed\n"})
	wf.waitFor(t, "ZED") // tr runs
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "\x1a"})
	wf.waitAfter(t, "ZED", "Stopped")
	// Killed, then brought back to be waited for: bash learns that a
	// job ended only when it handles the SIGCHLD, so a plain `wait` (or
	// `wait %1`) right after the kill finds the job still stopped in
	// its table, skips it ("wait: warning: job 1 stopped"), and an exit
	// soon after may meet "There are stopped jobs." (on either kernel:
	// no signal is lost, it is only later). fg sends SIGCONT again and
	// waits for the job in the foreground, or says it has already
	// ended; either way bash has reaped it, and says Terminated, before
	// the next prompt.
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "jobs -l; kill %1; fg; echo jobs-$((3+4))\n"})
	wf.waitFor(t, "jobs-7") // not the echo of the line typed
	wf.waitAfter(t, "ZED", "Terminated")
	send(apitype.TerminalInput{Type: "bogus"})
	send(apitype.TerminalInput{Type: apitype.InputResize, Cols: 0, Rows: 3})
	send(apitype.TerminalInput{Type: apitype.InputStdin, Data: "exit 3\n"})
	select {
	case <-read:
	case <-time.After(30 * time.Second):
		ws.CloseNow()
		<-read
		t.Errorf("the shell did not end after exit 3: %q", wf.text())
	}
	if bad != nil {
		t.Errorf("a bad message: %q", bad)
	}
	if end == nil || end.ExitCode == nil || *end.ExitCode != 3 {
		t.Errorf("the shell's end over the WebSocket: %+v (terminal: %q)", end, wf.text())
	}
	if len(rejected) != 2 || rejected[0] != "invalid_argument" || rejected[1] != "invalid_argument" {
		t.Errorf("bad messages: %v", rejected)
	}
}

// ptyMasters counts the server's open pty masters (a sandbox's O_PATH
// handle on its ptmx is none).
func (s *server) ptyMasters() int {
	dir := fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid)
	fds, _ := os.ReadDir(dir)
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); strings.HasSuffix(target, "ptmx") {
			info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", s.cmd.Process.Pid, fd.Name()))
			var flags int
			if _, after, ok := strings.Cut(string(info), "flags:"); ok {
				fmt.Sscanf(strings.TrimSpace(after), "%o", &flags)
			}
			if flags&unix.O_PATH == 0 {
				n++
			}
		}
	}
	return n
}

// TestTerminalPtys: each sandbox has pseudo-terminals of its own, at most
// server.max_session_ptys. Code that opens them all exhausts only its
// own: its terminal commands are then refused (429), while another
// session's terminal and the host's own open as before.
func TestTerminalPtys(t *testing.T) {
	s := startServer(t, map[string]any{"server": map[string]any{"max_session_ptys": 4}})
	defer s.stop()
	ctx := context.Background()
	greedy, other := s.newSession("python", nil), s.newSession("python", nil)
	hoard := s.exec(greedy, `import os
held = []
try:
    while True:
        held.append(os.openpty())
except OSError as e:
    print(len(held), e.errno == __import__("errno").ENOSPC)`)
	if strings.TrimSpace(hoard.Stdout) != "4 True" {
		t.Fatalf("opening every pty of a sandbox: %+v", hoard)
	}
	if per, open := s.metric("", "airlock_sandbox_ptys_max"), s.metric("", "airlock_host_ptys_open"); per != 4 || open < 4 {
		t.Errorf("metrics: %v ptys per sandbox, %v open on the host; want 4, and at least the 4 held", per, open)
	}
	_, err := s.c.RunCommand(ctx, greedy, apitype.CommandRequest{Command: "tty", PTY: &apitype.PTYSize{Cols: 80, Rows: 24}}, nil)
	wantError(t, "a terminal command in a sandbox that holds all its ptys", err, 429, "limit_reached")
	term, err := s.c.RunCommand(ctx, other, apitype.CommandRequest{Command: "tty", PTY: &apitype.PTYSize{Cols: 80, Rows: 24}}, nil)
	if err != nil {
		t.Fatalf("another session's terminal: %v", err)
	}
	f := newFollower()
	if res, err := s.c.AttachCommand(ctx, other, term.ID, true, f.event); err != nil || exitOf(res) != 0 || !strings.Contains(f.text(), "/dev/pts/0") {
		t.Errorf("another session's terminal: %+v %v %q", res, err, f.text())
	}
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("the host cannot open a pty: %v", err)
	}
	m.Close()
	// Closed, they are the sandbox's again.
	s.exec(greedy, "for m, sl in held:\n    os.close(m)\n    os.close(sl)")
	again, err := s.c.RunCommand(ctx, greedy, apitype.CommandRequest{Command: "exit 0", PTY: &apitype.PTYSize{Cols: 80, Rows: 24}}, nil)
	if err != nil {
		t.Fatalf("a terminal once the code closed its own: %v", err)
	}
	if res, err := s.c.Command(ctx, greedy, again.ID, 30*time.Second); err != nil || exitOf(res) != 0 {
		t.Errorf("its end: %+v %v", res, err)
	}
}

// The kernel's pty.max is one count for the whole host: a server whose
// sandboxes could together hold more ptys than it gives sandboxes
// refuses to start, saying what to change, and doctor fails the same way
// (checked against a mutant: config.Ptys not comparing the product to
// the budget). By default each sandbox gets its share.
func TestPtyBudget(t *testing.T) {
	name, cfg := serverConfig(map[string]any{"server": map[string]any{"listen": "127.0.0.1:0", "auth": "none", "max_session_ptys": 64, "max_sessions": 512}})
	b, _ := json.Marshal(cfg)
	path := writeFile(t, "ptys.json", string(b))
	_, errOut, code := runCLI(t, "", "serve", "--config", path)
	if code != 69 || !strings.Contains(errOut, "lower server.max_session_ptys or server.max_sessions, or raise kernel.pty.max") {
		t.Errorf("serve with 512 sessions × 64 ptys: %d %s", code, errOut)
	}
	if left := checkNothingLeft(name); len(left) > 0 {
		t.Errorf("a refused server left: %v", left)
	}
	// Doctor seals the init in the state directory as the server would.
	defer os.RemoveAll("/run/" + name)
	out, _, code := runCLI(t, "", "doctor", "--json", "--config", path)
	if code == 0 || !strings.Contains(out, `"name":"ptys","status":"FAIL"`) {
		t.Errorf("doctor with 512 sessions × 64 ptys: %d %s", code, out)
	}

	s := startServer(t, nil)
	defer s.stop()
	budget, per := s.metric("", "airlock_ptys_budget"), s.metric("", "airlock_sandbox_ptys_max")
	if budget < 1 || per < 1 || per > 64 {
		t.Errorf("derived: a budget of %v, %v per sandbox", budget, per)
	}
}
