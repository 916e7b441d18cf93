package runtimes

import (
	"airlock/internal/testenv"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The session runtimes are driven here as host subprocesses, the way the
// server starts them in a sandbox but without the jail: fd 3 is one end of
// a unix socketpair, fds 1 and 2 are pipes, stdin is empty, and the runtime
// leads its own session (so SIGINT can go to its process group).

// rtProc is a running session runtime.
type rtProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	ctl    net.Conn
	stdout *rtOutput
	stderr *rtOutput
	exited chan struct{}
	err    error // from Wait, once exited is closed
	seq    int
}

// rtOutput collects what a runtime writes to one pipe. The test keeps a
// write end of the pipe too, to mark a point in it (sync): what the
// runtime wrote before is read by the time the mark is.
type rtOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed (and replaced) when bytes arrive
	done    chan struct{}

	wmu  sync.Mutex // guards w and marks
	w    *os.File   // the test's write end; nil once the runtime has exited
	mark int
}

func newRTOutput(w *os.File) *rtOutput {
	return &rtOutput{w: w, changed: make(chan struct{}), done: make(chan struct{})}
}

func (o *rtOutput) pump(r io.Reader) {
	defer close(o.done)
	b := make([]byte, 64<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			o.mu.Lock()
			o.buf.Write(b[:n])
			close(o.changed)
			o.changed = make(chan struct{})
			o.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// take returns (and forgets) what arrived so far.
func (o *rtOutput) take() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.buf.String()
	o.buf.Reset()
	return s
}

// await waits until what arrived contains marker, and removes it (the
// rest stays for take).
func (o *rtOutput) await(t *testing.T, marker string, timeout time.Duration) {
	t.Helper()
	o.cut(t, marker, timeout, true)
}

// cut waits until what arrived contains marker and removes it, with what
// came before it unless keep; it returns what came before.
func (o *rtOutput) cut(t *testing.T, marker string, timeout time.Duration, keep bool) string {
	t.Helper()
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for {
		o.mu.Lock()
		s, changed := o.buf.String(), o.changed
		if i := strings.Index(s, marker); i >= 0 {
			o.buf.Reset()
			if keep {
				o.buf.WriteString(s[:i])
			}
			o.buf.WriteString(s[i+len(marker):])
			o.mu.Unlock()
			return s[:i]
		}
		o.mu.Unlock()
		select {
		case <-changed:
		case <-o.done:
			if !strings.Contains(o.peek(), marker) {
				t.Fatalf("no %q on the runtime's output before it ended", marker)
			}
		case <-limit.C:
			t.Fatalf("no %q on the runtime's output within %v", marker, timeout)
		}
	}
}

func (o *rtOutput) peek() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// sync returns (and forgets) everything the runtime wrote to the pipe
// before sync was called: it writes a mark of its own to the pipe (after
// those bytes) and waits until the mark is read. Once the runtime has
// exited, it waits for the end of the pipe instead.
func (o *rtOutput) sync(t *testing.T) string {
	t.Helper()
	o.wmu.Lock()
	if o.w == nil {
		o.wmu.Unlock()
		select {
		case <-o.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the runtime's output did not end within 30s of its exit")
		}
		return o.take()
	}
	o.mark++
	// Shorter than PIPE_BUF: one write, never mixed with the runtime's.
	mark := fmt.Sprintf("\x00<sync %d>\x00", o.mark)
	_, err := o.w.WriteString(mark)
	o.wmu.Unlock()
	if err != nil {
		t.Fatalf("marking the runtime's output: %v", err)
	}
	return o.cut(t, mark, 30*time.Second, false)
}

// closeWriter drops the test's write end, so that the pipe ends once
// the runtime's (and its children's) ends are closed.
func (o *rtOutput) closeWriter() {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	o.w.Close()
	o.w = nil
}

// startRuntimeProc starts argv in dir with the session runtime descriptors.
func startRuntimeProc(t *testing.T, dir string, env []string, argv ...string) *rtProc {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "control")
	theirs := os.NewFile(uintptr(fds[1]), "control (runtime end)")
	ctl, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		t.Fatalf("control socket: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null: end of file at once
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		ctl.Close()
		outR.Close()
		errR.Close()
		outW.Close()
		errW.Close()
		t.Fatalf("start %v: %v", argv, err)
	}
	p := &rtProc{
		t: t, cmd: cmd, ctl: ctl, exited: make(chan struct{}),
		stdout: newRTOutput(outW),
		stderr: newRTOutput(errW),
	}
	go p.stdout.pump(outR)
	go p.stderr.pump(errR)
	go func() {
		p.err = cmd.Wait()
		p.stdout.closeWriter()
		p.stderr.closeWriter()
		<-p.stdout.done
		<-p.stderr.done
		outR.Close()
		errR.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		ctl.Close()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("runtime %d did not exit after SIGKILL", cmd.Process.Pid)
		}
	})
	return p
}

// sigint sends SIGINT to the runtime's process group, as the server does.
func (p *rtProc) sigint() {
	p.t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		p.t.Fatalf("SIGINT: %v", err)
	}
}

// output returns (and forgets) what the runtime wrote to stdout and
// stderr before output was called: every byte written before a done is in
// the pipes by then (a runtime's writes to a pipe are synchronous).
func (p *rtProc) output() (stdout, stderr string) {
	p.t.Helper()
	return p.stdout.sync(p.t), p.stderr.sync(p.t)
}

// waitExit waits for the runtime to exit and returns its exit status.
func (p *rtProc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("runtime did not exit within %v", timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

func (p *rtProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// survives waits d and fails the test if the runtime has exited by then.
func (p *rtProc) survives(d time.Duration, what string) {
	p.t.Helper()
	time.Sleep(d)
	if !p.alive() {
		p.t.Fatalf("%s ended the runtime", what)
	}
}

// awaitGroupMember waits until a process of the runtime's process group
// has the command line cmdline (NUL-separated, as /proc shows it).
func (p *rtProc) awaitGroupMember(cmdline string, limit time.Duration) {
	p.t.Helper()
	pgid := p.cmd.Process.Pid
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
				continue
			}
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == cmdline {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.t.Fatalf("no process %q in the runtime's process group after %v", cmdline, limit)
}

// runningMarker is what code under test prints to stderr once it runs.
const runningMarker = "<running>\n"

// interrupt interrupts execution id as the server does: its interrupt
// message, then SIGINT to the runtime's process group.
func (p *rtProc) interrupt(id string) {
	p.t.Helper()
	p.sendJS(jsMsg{Type: "interrupt", ID: id})
	p.sigint()
}

// sigintWhenRunning sends SIGINT once the code just started has printed
// runningMarker on stderr, and returns when it was sent.
func (p *rtProc) sigintWhenRunning() time.Time {
	p.t.Helper()
	p.stderr.await(p.t, runningMarker, 30*time.Second)
	sent := time.Now()
	p.sigint()
	return sent
}

// ignoresIdleSIGINT sends SIGINT twice while nothing runs: the runtime must
// survive it.
func (p *rtProc) ignoresIdleSIGINT() {
	p.t.Helper()
	p.sigint()
	time.Sleep(100 * time.Millisecond)
	p.sigint()
	p.survives(100*time.Millisecond, "SIGINT while idle")
}

// --- JavaScript --------------------------------------------------------------

const jsRuntimePath = "javascript/runtime.js"

// jsRuntimeDir is the directory of the runtime's files (none of which a
// traceback may show).
func jsRuntimeDir(t *testing.T) string {
	dir, err := filepath.Abs(filepath.Dir(jsRuntimePath))
	if err != nil {
		t.Fatal(err)
	}
	return dir + "/"
}

// jsMsg is one frame in either direction (docs/runtime-protocol.md).
type jsMsg struct {
	Type           string                     `json:"type"`
	ID             string                     `json:"id,omitempty"`
	Code           string                     `json:"code"` // always sent: "" is a valid cell
	Argv           []string                   `json:"argv,omitempty"`
	Env            map[string]string          `json:"env,omitempty"`
	Cwd            string                     `json:"cwd,omitempty"`
	Language       string                     `json:"language,omitempty"`
	Version        string                     `json:"version,omitempty"`
	Pid            int                        `json:"pid,omitempty"`
	Data           map[string]json.RawMessage `json:"data,omitempty"`
	Metadata       json.RawMessage            `json:"metadata,omitempty"`
	Name           string                     `json:"name,omitempty"`
	Value          *string                    `json:"value,omitempty"`
	Traceback      []string                   `json:"traceback,omitempty"`
	Status         string                     `json:"status,omitempty"`
	ExecutionCount int                        `json:"execution_count,omitempty"`
	ExitCode       *int                       `json:"exit_code,omitempty"`
	Error          string                     `json:"error,omitempty"`
}

// jsExec is what one execution produced.
type jsExec struct {
	displays []map[string]json.RawMessage
	result   *jsMsg
	err      *jsMsg
	done     jsMsg
	stdout   string
	stderr   string
}

// text returns the JSON string value of mime in data ("" if absent).
func jsText(t *testing.T, data map[string]json.RawMessage, mime string) string {
	t.Helper()
	raw, ok := data[mime]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s is not a string: %s", mime, raw)
	}
	return s
}

// resultText is the text/plain of the result ("" if there is none).
func (e jsExec) resultText(t *testing.T) string {
	t.Helper()
	if e.result == nil {
		return ""
	}
	return jsText(t, e.result.Data, "text/plain")
}

func (e jsExec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "done=%+v", e.done)
	if e.result != nil {
		fmt.Fprintf(&b, " result=%s", e.result.Data)
	}
	if e.err != nil {
		fmt.Fprintf(&b, " error=%s: %v\n%s", e.err.Name, e.err.Value, strings.Join(e.err.Traceback, "\n"))
	}
	fmt.Fprintf(&b, " stdout=%q stderr=%q", e.stdout, e.stderr)
	return b.String()
}

// jsValidMIME mirrors the server's check of MIME keys.
var jsValidMIME = regexp.MustCompile(`^[A-Za-z0-9.+_-]+/[A-Za-z0-9.+_-]+$`)

func jsEnv(t *testing.T) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "LANG=C.UTF-8"}
}

// startJS starts the JavaScript runtime, checks hello and configures it
// with env and cwd (the cwd is returned).
func startJS(t *testing.T) (*rtProc, string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "skipping the JavaScript session runtime tests: node is not installed (%v)", err)
	}
	script, err := filepath.Abs(jsRuntimePath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startRuntimeProc(t, "/", jsEnv(t), node, script)
	hello := p.recvJS()
	if hello.Type != "hello" || hello.Language != "javascript" || hello.Pid != p.cmd.Process.Pid || hello.Version == "" {
		t.Fatalf("hello: %+v (pid %d)", hello, p.cmd.Process.Pid)
	}
	p.sendJS(jsMsg{Type: "configure", Env: map[string]string{"AIRLOCK_TEST": "yes", "PATH": "/usr/bin:/bin"}, Cwd: dir})
	if m := p.recvJS(); m.Type != "configured" || m.Error != "" {
		t.Fatalf("configure: %+v", m)
	}
	return p, dir
}

func (p *rtProc) sendJS(m jsMsg) {
	p.t.Helper()
	body, err := json.Marshal(m)
	if err != nil {
		p.t.Fatal(err)
	}
	p.sendFrame(body)
}

func (p *rtProc) sendFrame(body []byte) {
	p.t.Helper()
	buf := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := p.ctl.Write(append(buf, body...)); err != nil {
		p.t.Fatalf("write frame: %v", err)
	}
}

// recvJS reads one frame (failing the test after 20 s).
func (p *rtProc) recvJS() jsMsg {
	p.t.Helper()
	m, err := p.tryRecvJS(20 * time.Second)
	if err != nil {
		_, stderr := p.output()
		p.t.Fatalf("reading a frame: %v (stderr: %s)", err, stderr)
	}
	return m
}

func (p *rtProc) tryRecvJS(timeout time.Duration) (jsMsg, error) {
	p.ctl.SetReadDeadline(time.Now().Add(timeout))
	var hdr [4]byte
	if _, err := io.ReadFull(p.ctl, hdr[:]); err != nil {
		return jsMsg{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrameForTests {
		return jsMsg{}, fmt.Errorf("frame length %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(p.ctl, body); err != nil {
		return jsMsg{}, err
	}
	var m jsMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return jsMsg{}, fmt.Errorf("bad JSON %q: %v", body, err)
	}
	return m, nil
}

// MaxFrameForTests is the protocol's frame limit (64 MiB).
const MaxFrameForTests = 64 << 20

// startExec sends an execute and returns its id.
func (p *rtProc) startExec(code string) string {
	p.t.Helper()
	p.seq++
	id := fmt.Sprintf("e%d", p.seq)
	p.sendJS(jsMsg{Type: "execute", ID: id, Code: code})
	return id
}

// waitExec collects the messages of execution id up to its done, checking
// the protocol's order: displays, at most one result, at most one error,
// done last.
func (p *rtProc) waitExec(id string) jsExec {
	p.t.Helper()
	var e jsExec
	for {
		m := p.recvJS()
		if m.ID != id {
			p.t.Fatalf("message for %q while waiting for %q: %+v", m.ID, id, m)
		}
		for k := range m.Data {
			if !jsValidMIME.MatchString(k) || len(k) > 128 {
				p.t.Errorf("invalid MIME key %q", k)
			}
		}
		switch m.Type {
		case "display":
			if e.result != nil || e.err != nil {
				p.t.Errorf("display after result/error: %+v", m)
			}
			e.displays = append(e.displays, m.Data)
		case "result":
			if e.result != nil {
				p.t.Errorf("second result: %+v", m)
			}
			e.result = &m
		case "error":
			if e.err != nil {
				p.t.Errorf("second error: %+v", m)
			}
			if m.Value == nil {
				p.t.Errorf("error without value: %+v", m)
			}
			for _, l := range m.Traceback {
				if strings.Contains(l, "\x1b[") {
					p.t.Errorf("ANSI escape in traceback line %q", l)
				}
			}
			e.err = &m
		case "done":
			e.done = m
			if m.ExitCode == nil || m.ExecutionCount == 0 {
				p.t.Errorf("done without exit_code or execution_count: %+v", m)
			}
			if e.result != nil && e.result.ExecutionCount != m.ExecutionCount {
				p.t.Errorf("result execution_count %d, done %d", e.result.ExecutionCount, m.ExecutionCount)
			}
			e.stdout, e.stderr = p.output()
			return e
		default:
			p.t.Fatalf("unexpected message %+v", m)
		}
	}
}

// execJS runs code and returns what it produced.
func (p *rtProc) execJS(code string) jsExec {
	p.t.Helper()
	return p.waitExec(p.startExec(code))
}

// mustOK runs code, requires status ok, and returns the result text.
func (p *rtProc) mustOK(code string) string {
	p.t.Helper()
	e := p.execJS(code)
	if e.done.Status != "ok" || *e.done.ExitCode != 0 || e.err != nil {
		p.t.Fatalf("%q: want ok, got %v", code, e)
	}
	return e.resultText(p.t)
}

func (p *rtProc) expectResult(code, want string) {
	p.t.Helper()
	if got := p.mustOK(code); got != want {
		p.t.Errorf("%q: result %q, want %q", code, got, want)
	}
}

// expectError runs code and requires an error named name and status.
func (p *rtProc) expectError(code, name, status string, exitCode int) jsExec {
	p.t.Helper()
	e := p.execJS(code)
	if e.err == nil || e.err.Name != name || e.done.Status != status || *e.done.ExitCode != exitCode {
		p.t.Fatalf("%q: want error %s, status %s, exit code %d; got %v", code, name, status, exitCode, e)
	}
	if e.result != nil {
		p.t.Errorf("%q: result despite the error: %v", code, e)
	}
	return e
}

// TestJavaScriptTransform runs the cell transform's own tests
// (javascript/tests, node --test): its rewrites, and a differential fuzz of
// acorn against V8 with a fixed seed.
func TestJavaScriptTransform(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "skipping the JavaScript transform tests: node is not installed (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "--test", "javascript/tests/transform.test.js").CombinedOutput()
	if err != nil {
		t.Fatalf("javascript transform tests failed: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}

// Program mode: run starts `node FILE ARGS` with exactly the given
// environment, reports its status in done and ends the runtime.
func TestJavaScriptProgram(t *testing.T) {
	node, _ := exec.LookPath("node")
	cases := []struct {
		name, source string
		argv0        string
		want         int
		stdout       string
		stderr       string
		stderrPart   bool // stderr is only part of it (Node's report of an uncaught error)
	}{
		{"exit status", `console.log(process.argv.slice(2).join('|'), process.env.ONLY, Object.keys(process.env).length, process.cwd() === require('path').dirname(__filename), typeof display);
console.error('to stderr'); process.exitCode = 3;`, "", 3, "a|b c| only 1 true undefined\n", "to stderr\n", false},
		{"uncaught", "throw new Error('boom')", "", 1, "", "\nError: boom\n", true},
		{"signal", "process.kill(process.pid, 'SIGKILL')", "", 137, "", "", false},
		{"stdin is empty", "console.log(require('fs').readFileSync(0).length)", "", 0, "0\n", "", false},
		{"missing interpreter", "", "/nonexistent/node", 127, "", "airlock: cannot start /nonexistent/node: spawnSync /nonexistent/node ENOENT\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, dir := startJS(t)
			file := filepath.Join(dir, "prog.js")
			if err := os.WriteFile(file, []byte(c.source), 0o644); err != nil {
				t.Fatal(err)
			}
			argv0 := node
			if c.argv0 != "" {
				argv0 = c.argv0
			}
			p.sendJS(jsMsg{Type: "run", ID: "p1", Argv: []string{argv0, file, "a", "b c", ""}, Env: map[string]string{"ONLY": "only"}, Cwd: dir})
			m := p.recvJS()
			if m.Type != "done" || m.ID != "p1" || m.Status != "exited" || m.ExitCode == nil || *m.ExitCode != c.want {
				t.Fatalf("done: %+v, want exit code %d", m, c.want)
			}
			if code := p.waitExit(30 * time.Second); code != c.want&0xff {
				t.Errorf("runtime exit status %d, want %d", code, c.want)
			}
			stdout, stderr := p.output()
			if stdout != c.stdout {
				t.Errorf("stdout %q, want %q", stdout, c.stdout)
			}
			if c.stderrPart && !strings.Contains(stderr, c.stderr) || !c.stderrPart && stderr != c.stderr {
				t.Errorf("stderr %q, want %q (part of it: %v)", stderr, c.stderr, c.stderrPart)
			}
		})
	}
}

func TestJavaScriptStatePersists(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.expectResult("x = 1", "1")
	p.expectResult("x + 1", "2")
	p.mustOK("var v = 'var'; function twice(n) { return 2 * n }\nconst k = 10")
	p.expectResult("v + twice(k)", "'var20'")
	p.mustOK("globalThis.g = {n: 0}; async function inc() { g.n++; return g.n }")
	p.expectResult("await inc(); await inc()", "2")
	p.expectResult("g.n", "2")
	// Execution counts go up by one per execute.
	e := p.execJS("1")
	if e.done.ExecutionCount != 8 || e.result.ExecutionCount != 8 {
		t.Errorf("execution_count: %v", e)
	}
}

func TestJavaScriptRedeclaration(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.expectResult("let a = 1; const b = 2; a + b", "3")
	p.expectResult("let a = 10; const b = 20; a + b", "30") // redeclared, as in a notebook
	p.expectResult("const b = 'again'\nb", "'again'")
	p.mustOK("class Point { constructor(x) { this.x = x } }")
	p.mustOK("class Point { constructor(x) { this.x = x * 2 } }")
	p.expectResult("new Point(2).x", "4")
	p.mustOK("let u = 1")
	p.mustOK("let u") // re-running `let u` resets it
	p.expectResult("typeof u", "'undefined'")
	p.mustOK("let [d1, {d2}] = [1, {d2: 2}], d3 = 3")
	p.expectResult("let [d1, {d2}] = [4, {d2: 5}]; [d1, d2, d3]", "[ 4, 5, 3 ]")
	// A line ending in a keyword used as a property name ends the statement.
	p.mustOK("const dd = {default: 1}.default\nlet after = 2")
	p.expectResult("let after = 3; after + dd", "4")
	// Block-scoped declarations stay block-scoped.
	p.mustOK("{ let inner = 1 }\nfor (let i = 0; i < 2; i++) {}")
	p.expectResult("[typeof inner, typeof i]", "[ 'undefined', 'undefined' ]")
	// Declarations in cells with top-level await persist too.
	p.mustOK("const fromAwait = await Promise.resolve(7); function fa() { return fromAwait }; class CA {}")
	p.expectResult("const fromAwait = await Promise.resolve(8); [fromAwait, fa(), typeof CA]", "[ 8, 8, 'function' ]")
	// Cells are read as V8 reads them (acorn): the line after an import
	// is not part of it (the hand-written tokenizer dropped it), and a
	// name declared twice in one cell is an error, as in JavaScript.
	p.expectResult("let sw = [1, 2]\nimport path from 'path'\n[sw[0], sw[1]] = [sw[1], sw[0]]\nsw", "[ 2, 1 ]")
	p.expectError("let twice = 1; let twice = 2", "SyntaxError", "error", 1)
	p.expectResult("await 1; (3)", "3")
}

func TestJavaScriptResults(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.expectResult("'str'", "'str'")
	p.expectResult("[1, 'two', {three: [3]}]", "[ 1, 'two', { three: [ 3 ] } ]")
	p.expectResult("({a: 1, b: {c: [1, 2]}})", "{ a: 1, b: { c: [ 1, 2 ] } }")
	p.expectResult("{a: 1}", "{ a: 1 }") // a cell that is one object literal
	p.expectResult("new Map([[1, 'one']])", "Map(1) { 1 => 'one' }")
	p.expectResult("function named() {}\nnamed", "[Function: named]")
	p.expectResult("null", "null")
	p.expectResult("10n ** 20n", "100000000000000000000n")
	// No result: undefined, or a last statement that is not an expression.
	for _, code := range []string{"undefined", "void 0", "let nothing = 5", "function f() {}", "if (true) { 5 }", "for (const q of [1]) q", ""} {
		if e := p.execJS(code); e.result != nil || e.done.Status != "ok" {
			t.Errorf("%q: want no result, got %v", code, e)
		}
	}
	// Promises are awaited.
	p.expectResult("new Promise(r => setTimeout(() => r('later'), 20))", "'later'")
	p.expectResult("Promise.resolve([1])", "[ 1 ]")
	// Rich results.
	e := p.execJS("({_repr_html_() { return '<b>rich</b>' }, toString() { return 'R' }})")
	if e.result == nil || jsText(t, e.result.Data, "text/html") != "<b>rich</b>" || jsText(t, e.result.Data, "text/plain") == "" {
		t.Errorf("rich result: %v", e)
	}
	e = p.execJS("({toHTML: () => '<i>h</i>'})")
	if e.result == nil || jsText(t, e.result.Data, "text/html") != "<i>h</i>" {
		t.Errorf("toHTML result: %v", e)
	}
	// A long array is shortened, deep objects are cut.
	if got := p.mustOK("Array.from({length: 1000}, (_, i) => i)"); !strings.Contains(got, "more items") {
		t.Errorf("long array: %q", got)
	}
	if got := p.mustOK("({a: {b: {c: {d: {e: {f: 1}}}}}})"); !strings.Contains(got, "[Object]") {
		t.Errorf("deep object: %q", got)
	}
}

func TestJavaScriptDisplay(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	e := p.execJS(`display({"text/html": "<b>hi</b>", "text/plain": "hi"})
display("plain text")
display({a: 1})
display({"image/png": Buffer.from([1, 2, 3])})
display({"application/json": {k: [1, 2]}})
display({_repr_html_() { return "<p>obj</p>" }})
display.html("<hr>")
display(1, 2)
"done"`)
	if e.done.Status != "ok" || e.resultText(t) != "'done'" {
		t.Fatalf("display cell: %v", e)
	}
	if len(e.displays) != 9 {
		t.Fatalf("want 9 displays, got %d: %v", len(e.displays), e.displays)
	}
	d := e.displays
	if jsText(t, d[0], "text/html") != "<b>hi</b>" || jsText(t, d[0], "text/plain") != "hi" || len(d[0]) != 2 {
		t.Errorf("bundle: %s", d[0])
	}
	if jsText(t, d[1], "text/plain") != "plain text" || len(d[1]) != 1 {
		t.Errorf("string: %s", d[1])
	}
	if jsText(t, d[2], "text/plain") != "{ a: 1 }" {
		t.Errorf("object: %s", d[2])
	}
	if jsText(t, d[3], "image/png") != "AQID" {
		t.Errorf("png: %s", d[3])
	}
	if string(d[4]["application/json"]) != `{"k":[1,2]}` {
		t.Errorf("json: %s", d[4])
	}
	if jsText(t, d[5], "text/html") != "<p>obj</p>" || jsText(t, d[5], "text/plain") == "" {
		t.Errorf("_repr_html_: %s", d[5])
	}
	if jsText(t, d[6], "text/html") != "<hr>" {
		t.Errorf("display.html: %s", d[6])
	}
	if jsText(t, d[7], "text/plain") != "1" || jsText(t, d[8], "text/plain") != "2" {
		t.Errorf("display(1, 2): %s %s", d[7], d[8])
	}
	// Keys the server would reject are dropped, not sent.
	e = p.execJS(`display({"text/plain": "kept", "bad key/x y": "dropped"})`)
	if len(e.displays) != 1 || len(e.displays[0]) != 1 || jsText(t, e.displays[0], "text/plain") != "kept" {
		t.Errorf("invalid MIME key: %v", e.displays)
	}
	// display from a timer that fires during the execution belongs to it;
	// one that fires after done is dropped.
	e = p.execJS("setTimeout(() => display('timer'), 5); setTimeout(() => { display('late'); require('fs').writeSync(2, '<late>\\n') }, 300); await new Promise(r => setTimeout(r, 50))")
	if len(e.displays) != 1 || jsText(t, e.displays[0], "text/plain") != "timer" {
		t.Errorf("timer display: %v", e.displays)
	}
	p.stderr.await(t, "<late>\n", 30*time.Second) // the late display was sent, or dropped
	p.expectResult("'after the late display'", "'after the late display'")
}

func TestJavaScriptErrors(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.mustOK("let before = 'kept'")
	e := p.expectError("function inner() { throw new TypeError('bad thing') }\nfunction outer() { inner() }\nouter()", "TypeError", "error", 1)
	tb := strings.Join(e.err.Traceback, "\n")
	if *e.err.Value != "bad thing" {
		t.Errorf("value %q", *e.err.Value)
	}
	for _, want := range []string{"TypeError: bad thing", "at inner (Cell In[2]:1:", "at outer (Cell In[2]:2:", "Cell In[2]:3", "function inner() { throw new TypeError('bad thing') }"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	for _, bad := range []string{jsRuntimeDir(t), "node:vm", "node:internal"} {
		if strings.Contains(tb, bad) {
			t.Errorf("traceback shows the runtime (%q):\n%s", bad, tb)
		}
	}
	// The session goes on with its state.
	p.expectResult("before", "'kept'")
	// Errors from Node's own modules keep their properties.
	e = p.expectError("require('fs').readFileSync('/nonexistent/file')", "Error", "error", 1)
	if tb := strings.Join(e.err.Traceback, "\n"); !strings.Contains(tb, "ENOENT") || !strings.Contains(tb, "Cell In[4]:1") {
		t.Errorf("ENOENT traceback:\n%s", tb)
	}
	// Throwing a non-Error.
	e = p.expectError("throw 'just a string'", "Error", "error", 1)
	if *e.err.Value != "just a string" {
		t.Errorf("thrown string: %v", e)
	}
	// A rejected top-level await, and an unhandled rejection during the execution.
	p.expectError("await Promise.reject(new RangeError('nope'))", "RangeError", "error", 1)
	p.expectError("Promise.reject(new Error('unhandled')); 5", "Error", "error", 1)
	// An exception in a callback while the execution awaits ends it.
	e = p.expectError("setTimeout(() => { throw new Error('from a timer') }, 5); await new Promise(r => setTimeout(r, 2000))", "Error", "error", 1)
	if *e.err.Value != "from a timer" {
		t.Errorf("timer error: %v", e)
	}
	// One while idle goes to stderr; the session survives.
	p.mustOK("setTimeout(() => { throw new Error('idle boom') }, 200)")
	p.stderr.await(t, "idle boom", 30*time.Second) // on stderr, and the session lives on
	p.expectResult("before", "'kept'")
}

func TestJavaScriptSyntaxError(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	e := p.expectError("let ok = 1\nlet broken = ;\nok", "SyntaxError", "error", 1)
	tb := strings.Join(e.err.Traceback, "\n")
	for _, want := range []string{"Cell In[1]:2", "let broken = ;", "^", "SyntaxError: Unexpected token ';'"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	if strings.Contains(tb, "node:vm") || strings.Contains(tb, jsRuntimeDir(t)) {
		t.Errorf("traceback shows the runtime:\n%s", tb)
	}
	// Nothing of the cell ran.
	p.expectResult("typeof ok", "'undefined'")
	// Syntax errors next to top-level await report the cell's line too.
	e = p.expectError("await 1\nfoo(", "SyntaxError", "error", 1)
	if tb := strings.Join(e.err.Traceback, "\n"); !strings.Contains(tb, "Cell In[3]:") {
		t.Errorf("await syntax error traceback:\n%s", tb)
	}
}

func TestJavaScriptTopLevelAwait(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.expectResult("await new Promise(r => setTimeout(r, 10)); 42", "42")
	p.expectResult("const r = await Promise.resolve({v: 1})\nr.v + 1", "2")
	p.expectResult("r", "{ v: 1 }")
	e := p.execJS("for (const i of [1, 2, 3]) { await new Promise(r => setTimeout(r, 1)); console.log('step', i) }")
	if e.done.Status != "ok" || e.stdout != "step 1\nstep 2\nstep 3\n" {
		t.Errorf("awaiting loop: %v", e)
	}
	p.expectResult("(await import('path')).basename('/a/b.txt')", "'b.txt'")
	p.expectResult("const {sep} = await import('node:path'); sep", "'/'")
	// `await (x)` is an await, not a call of a function named await.
	p.expectResult("await (Promise.resolve(3))", "3")
	p.mustOK("let q = await 1; await null")
	p.expectResult("q", "1")
}

func TestJavaScriptInterrupt(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	// A cell's own SIGINT listener does not take SIGINT from the runtime.
	p.mustOK("let n = 0; process.on('SIGINT', () => { globalThis.heard = true })")
	for _, c := range []struct{ code, after, want, child string }{
		// Each says it runs, on fd 2 directly (whatever the runtime does with
		// process.stderr), once it is where the interrupt must land: inside
		// the synchronous part, or from a timer once the cell awaits.
		{"n++; require('fs').writeSync(2, '<running>\\n'); while (true) { n++ }", "n > 0", "true", ""}, // state kept
		{"setTimeout(() => require('fs').writeSync(2, '<running>\\n'), 0); await new Promise(() => {})", "", "", ""},
		// The marker comes before execSync has a child: the SIGINT waits
		// for the child too (one that comes first never reaches it). The
		// child dies of it, which can end the run before Node's watchdog
		// thread breaks it off: the interrupt message decides.
		// The next cell (sent at once, while Node's watchdog thread may
		// not have taken that SIGINT yet) is not broken off by it.
		{"require('fs').writeSync(2, '<running>\\n'); const child = require('child_process').execSync('sleep 30')", "let k = 0; for (let j = 0; j < 1e6; j++) k++; typeof child + k", "'undefined1000000'", "sleep\x0030\x00"},
		{"n = -1; setTimeout(() => require('fs').writeSync(2, '<running>\\n'), 0); await new Promise(r => setTimeout(r, 60000)); n = 1", "n", "-1", ""},
		{"require('fs').writeSync(2, '<running>\\n'); require('child_process').execFileSync('sleep', ['30'])", "", "", "sleep\x0030\x00"},
	} {
		id := p.startExec(c.code)
		p.stderr.await(p.t, runningMarker, 30*time.Second)
		if c.child != "" {
			p.awaitGroupMember(c.child, 30*time.Second)
		}
		p.interrupt(id)
		e := p.waitExec(id)
		if e.err == nil || e.err.Name != "KeyboardInterrupt" || e.done.Status != "interrupted" || *e.done.ExitCode != 1 {
			t.Fatalf("%q: want an interrupt, got %v", c.code, e)
		}
		if c.after != "" {
			p.expectResult(c.after, c.want)
		}
	}
	// SIGINT alone (no message) still interrupts, synchronous code and a wait.
	for _, code := range []string{
		"require('fs').writeSync(2, '<running>\\n'); while (true) {}",
		"setTimeout(() => require('fs').writeSync(2, '<running>\\n'), 0); await new Promise(() => {})",
	} {
		id := p.startExec(code)
		p.sigintWhenRunning()
		if e := p.waitExec(id); e.err == nil || e.err.Name != "KeyboardInterrupt" || e.done.Status != "interrupted" {
			t.Fatalf("%q: want an interrupt, got %v", code, e)
		}
	}
	p.ignoresIdleSIGINT()
	p.expectResult("typeof heard", "'undefined'")
}

// TestJavaScriptInterruptQueued: an interrupt that comes before its
// execution starts (the runtime still busy with the one before) is not
// lost: the execution is refused as interrupted, without running; one for
// an execution that has ended touches nothing.
func TestJavaScriptInterruptQueued(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	// One write: the runtime reads all three before the first ends.
	var frames []byte
	for _, m := range []jsMsg{
		{Type: "execute", ID: "w", Code: "let ran = 'no'; await new Promise(r => setTimeout(r, 10)); 'first'"},
		{Type: "execute", ID: "x", Code: "ran = 'yes'"},
		{Type: "interrupt", ID: "x"},
	} {
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(binary.BigEndian.AppendUint32(frames, uint32(len(body))), body...)
	}
	if _, err := p.ctl.Write(frames); err != nil {
		t.Fatal(err)
	}
	if e := p.waitExec("w"); e.resultText(t) != "'first'" {
		t.Fatalf("first: %v", e)
	}
	e := p.waitExec("x")
	if e.err == nil || e.err.Name != "KeyboardInterrupt" || e.done.Status != "interrupted" || *e.done.ExitCode != 1 {
		t.Fatalf("interrupted before it started: %v", e)
	}
	p.expectResult("ran", "'no'")
	// Late: the execution has ended.
	p.sendJS(jsMsg{Type: "interrupt", ID: "x"})
	p.expectResult("ran = 'later'; ran", "'later'")
}

func TestJavaScriptProcessExit(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	e := p.expectError("let s = 'before exit'\nprocess.exit(3)\ns = 'not reached'", "SystemExit", "error", 3)
	if !strings.Contains(strings.Join(e.err.Traceback, "\n"), "Cell In[1]:2") {
		t.Errorf("exit traceback: %v", e)
	}
	p.expectResult("s", "'before exit'")
	// exit(0) stops the cell without an error.
	e = p.execJS("process.exit(0); 5")
	if e.done.Status != "ok" || *e.done.ExitCode != 0 || e.err != nil || e.result != nil {
		t.Errorf("process.exit(0): %v", e)
	}
	for _, c := range []struct {
		code string
		exit int
	}{
		// Codes are what a process would exit with.
		{"process.exit(256)", 1},
		{"process.exit(-1)", 255},
		{"process.exitCode = 6; process.exit()", 6},
		// From a callback while the execution awaits.
		{"setTimeout(() => process.exit(4), 5); await new Promise(r => setTimeout(r, 2000))", 4},
	} {
		p.expectError(c.code, "SystemExit", "error", c.exit)
	}
	// While idle it is ignored.
	p.mustOK("setTimeout(() => process.exit(9), 10)")
	p.stderr.await(t, "airlock: process.exit(9) ignored: no execution is running\n", 30*time.Second)
	p.expectResult("'alive'", "'alive'")
}

func TestJavaScriptRequire(t *testing.T) {
	t.Parallel()
	p, dir := startJS(t)
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("file contents"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib.js"), []byte("module.exports = { twice: (n) => 2 * n }"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.expectResult("const fs = require('fs'); fs.readFileSync('data.txt', 'utf8')", "'file contents'")
	p.expectResult("require('./lib.js').twice(21)", "42")
	p.expectResult("fs.readdirSync('.') instanceof Array && Buffer.from('x') instanceof Uint8Array", "true")
	p.expectResult("import path from 'path'\nimport { join as j } from 'node:path'\nimport * as os from 'os'\nj('a', path.basename('/x/b'), typeof os.cpus)", "'a/b/function'")
	p.expectResult("const { execSync } = require('child_process'); execSync('echo from a child').toString()", "'from a child\\n'")
	p.expectResult("require.main === module && typeof module.exports", "'object'")
	p.expectResult("[setTimeout, setInterval, clearTimeout, setImmediate, queueMicrotask, URL, TextEncoder, TextDecoder, structuredClone, Buffer, display].map(f => typeof f).join()",
		"'"+strings.Repeat("function,", 10)+"function'")
	p.expectResult("typeof process.env + typeof process.argv + typeof process.cwd()", "'objectobjectstring'")
}

func TestJavaScriptOutput(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	e := p.execJS("console.log('out 1'); console.error('err 1'); process.stdout.write('out 2\\n'); 'r'")
	if e.stdout != "out 1\nout 2\n" || e.stderr != "err 1\n" || e.resultText(t) != "'r'" {
		t.Errorf("output: %v", e)
	}
	// What timers print before the execution settles is there at done; what
	// they print later is not.
	e = p.execJS("setTimeout(() => console.log('t1'), 5); setTimeout(() => console.log('late'), 500)\nawait new Promise(r => setTimeout(r, 50)); console.log('end')")
	if e.stdout != "t1\nend\n" {
		t.Errorf("timer output: %v", e)
	}
	p.stdout.await(t, "late\n", 30*time.Second)
	if out, _ := p.output(); out != "" {
		t.Errorf("output besides the late line: %q", out)
	}
	// Large output is complete at done.
	e = p.execJS("process.stdout.write('x'.repeat(1 << 20)); console.log('!'); 1")
	if len(e.stdout) != 1<<20+2 || !strings.HasSuffix(e.stdout, "x!\n") {
		t.Errorf("large output: %d bytes", len(e.stdout))
	}
	// No colours in console output.
	e = p.execJS("console.log({a: 'x', b: 1})")
	if e.stdout != "{ a: 'x', b: 1 }\n" {
		t.Errorf("console.log object: %q", e.stdout)
	}
}

func TestJavaScriptConfigure(t *testing.T) {
	t.Parallel()
	p, dir := startJS(t)
	p.expectResult("JSON.stringify(process.env)", `'{"AIRLOCK_TEST":"yes","PATH":"/usr/bin:/bin"}'`)
	real, _ := filepath.EvalSymlinks(dir)
	if got := p.mustOK("process.cwd()"); got != "'"+real+"'" && got != "'"+dir+"'" {
		t.Errorf("cwd %s, want %s", got, dir)
	}
	// A child process sees the same environment.
	p.expectResult("require('child_process').execSync('echo $AIRLOCK_TEST').toString().trim()", "'yes'")
}

// An empty cell (no code, "" or blanks) does nothing: status ok, no
// result, no output, and the state is kept.
func TestJavaScriptEmptyCell(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	p.mustOK("let kept = 41")
	for i, body := range []string{`{"type":"execute","id":"%s"}`, `{"type":"execute","id":"%s","code":""}`, `{"type":"execute","id":"%s","code":" \n\t"}`} {
		id := fmt.Sprintf("empty%d", i)
		p.sendFrame([]byte(fmt.Sprintf(body, id)))
		e := p.waitExec(id)
		if e.done.Status != "ok" || *e.done.ExitCode != 0 || e.result != nil || e.err != nil || len(e.displays) != 0 || e.stdout != "" || e.stderr != "" {
			t.Fatalf("%s: %v", body, e)
		}
		p.expectResult("kept + 1", "42")
	}
}

func TestJavaScriptProtocol(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "skipping the JavaScript session runtime tests: node is not installed (%v)", err)
	}
	script, _ := filepath.Abs(jsRuntimePath)
	start := func(t *testing.T) *rtProc {
		p := startRuntimeProc(t, "/", jsEnv(t), node, script)
		if m := p.recvJS(); m.Type != "hello" {
			t.Fatalf("hello: %+v", m)
		}
		return p
	}
	raw := func(body string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	// Each malformed input ends the runtime with status 2 and the reason
	// (after "fatal protocol error: ") on stderr.
	bad := map[string]struct {
		input []byte
		why   string
	}{
		"bad JSON":         {raw("{x}"), "bad JSON: "},
		"unknown type":     {raw(`{"type":"bad"}`), `unknown message type "bad"`},
		"not an object":    {raw("[1]"), `a message must be an object with a string "type"`},
		"zero length":      {raw(""), "frame length 0"},
		"too long":         {binary.BigEndian.AppendUint32(nil, MaxFrameForTests+1), "frame length 67108865"},
		"execute no id":    {raw(`{"type":"execute","code":"1"}`), `execute needs a string "id" and a string "code"`},
		"execute bad code": {raw(`{"type":"execute","id":"x","code":1}`), `execute needs a string "id" and a string "code"`},
		// A well-formed execute but for one byte that is not UTF-8.
		"invalid UTF-8":   {raw("{\"type\":\"execute\",\"id\":\"x\",\"code\":\"'\xff'\"}"), "bad JSON: The encoded data was not valid for encoding utf-8"},
		"env not a map":   {raw(`{"type":"configure","env":["x"]}`), `configure: "env" must map strings to strings`},
		"env not strings": {raw(`{"type":"configure","env":{"A":1}}`), `configure: "env" must map strings to strings`},
		"truncated":       {raw(`{"type":"execute","id":"x","code":"1"}`)[:10], "truncated frame at end of input"},
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := start(t)
			if _, err := p.ctl.Write(bad[name].input); err != nil {
				t.Fatal(err)
			}
			if name == "truncated" {
				p.ctl.(*net.UnixConn).CloseWrite()
			}
			if code := p.waitExit(30 * time.Second); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			want := "airlock runtime: fatal protocol error: " + bad[name].why
			if _, stderr := p.output(); !strings.HasPrefix(stderr, want) {
				t.Errorf("stderr %q, want it to start with %q", stderr, want)
			}
		})
	}
	t.Run("shutdown", func(t *testing.T) {
		p := start(t)
		p.sendJS(jsMsg{Type: "shutdown"})
		if code := p.waitExit(30 * time.Second); code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
	})
	t.Run("end_of_input", func(t *testing.T) {
		p := start(t)
		p.ctl.(*net.UnixConn).CloseWrite()
		if code := p.waitExit(30 * time.Second); code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		// Messages sent back to back (in one write) are handled in order.
		p := start(t)
		var buf []byte
		for _, m := range []jsMsg{{Type: "configure", Env: map[string]string{"ONLY": "1"}, Cwd: "/nonexistent"}, {Type: "execute", ID: "a", Code: "Object.keys(process.env).join()"}, {Type: "execute", ID: "b", Code: "'b'"}} {
			body, _ := json.Marshal(m)
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
			buf = append(buf, body...)
		}
		p.ctl.Write(buf)
		if m := p.recvJS(); m.Type != "configured" || !strings.Contains(m.Error, "/nonexistent") {
			t.Errorf("configured with a bad cwd: %+v", m)
		}
		if e := p.waitExec("a"); e.resultText(t) != "'ONLY'" {
			t.Errorf("a: %v", e)
		}
		if e := p.waitExec("b"); e.resultText(t) != "'b'" {
			t.Errorf("b: %v", e)
		}
	})
}

// TestJavaScriptManyExecutions: trivial executions back to back each end
// with their result and done, status ok, counted in order. How fast they are
// is airlock bench's (a warm context's next `x = 1`), not a test's.
func TestJavaScriptManyExecutions(t *testing.T) {
	t.Parallel()
	p, _ := startJS(t)
	for i := 1; i <= 200; i++ {
		e := p.execJS("x = 1")
		if e.done.Status != "ok" || e.done.ExecutionCount != i || e.resultText(t) != "1" || e.err != nil {
			t.Fatalf("execution %d of `x = 1`: %v", i, e)
		}
	}
}
