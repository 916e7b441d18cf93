package runtimes

import (
	"airlock/internal/testenv"
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The bash session runtime (bash/runtime.sh), driven like the JavaScript one
// (see startRuntimeProc in javascript_test.go): blocks of code go to fd 3
// NUL-terminated, the status comes back as digits and a NUL.

const bashRuntimePath = "bash/runtime.sh"

type bashProc struct {
	*rtProc
	r *bufio.Reader
}

// startBash starts the runtime as the server does, in a fresh directory.
func startBash(t *testing.T) (*bashProc, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		testenv.Skip(t, "skipping the bash session runtime tests: bash is not installed (%v)", err)
	}
	script, err := filepath.Abs(bashRuntimePath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}
	p := startRuntimeProc(t, dir, env, bash, "--noprofile", "--norc", script)
	return &bashProc{rtProc: p, r: bufio.NewReader(p.ctl)}, dir
}

// send writes one block.
func (b *bashProc) send(code string) {
	b.t.Helper()
	if strings.ContainsRune(code, 0) {
		b.t.Fatal("code with NUL")
	}
	if _, err := b.ctl.Write([]byte(code + "\x00")); err != nil {
		b.t.Fatalf("write block: %v", err)
	}
}

// status reads one status (failing the test after timeout).
func (b *bashProc) status(timeout time.Duration) int {
	b.t.Helper()
	st, err := b.tryStatus(timeout)
	if err != nil {
		_, stderr := b.output()
		b.t.Fatalf("reading a status: %v (stderr: %q)", err, stderr)
	}
	return st
}

func (b *bashProc) tryStatus(timeout time.Duration) (int, error) {
	b.ctl.SetReadDeadline(time.Now().Add(timeout))
	s, err := b.r.ReadString(0)
	if err != nil {
		return 0, err
	}
	s = strings.TrimSuffix(s, "\x00")
	n, err := strconv.Atoi(s)
	if err != nil || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("malformed status " + strconv.Quote(s))
	}
	return n, nil
}

// run runs one block and returns its status and output.
func (b *bashProc) run(code string) (status int, stdout, stderr string) {
	b.t.Helper()
	b.send(code)
	status = b.status(20 * time.Second)
	stdout, stderr = b.output()
	return status, stdout, stderr
}

// expect runs code and checks its status and stdout.
func (b *bashProc) expect(code string, wantStatus int, wantStdout string) {
	b.t.Helper()
	st, out, errOut := b.run(code)
	if st != wantStatus || out != wantStdout {
		b.t.Errorf("%q: status %d stdout %q (stderr %q); want %d %q", code, st, out, errOut, wantStatus, wantStdout)
	}
}

func TestBashState(t *testing.T) {
	t.Parallel()
	b, dir := startBash(t)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	b.expect("cd sub", 0, "")
	b.expect("pwd", 0, filepath.Join(real, "sub")+"\n")
	b.expect("cd ..; x=1; arr=(a 'b c'); declare -A m=([k]=v); declare -i n=41", 0, "")
	b.expect("n+=1; echo \"$x ${arr[1]} ${m[k]} $n\"", 0, "1 b c v 42\n")
	b.expect("export FOO=bar; LOCAL=local", 0, "")
	b.expect("bash -c 'echo \"$FOO-${LOCAL:-unset}\"'", 0, "bar-unset\n")
	b.expect("greet() { echo \"hello $1\"; }", 0, "")
	b.expect("greet world", 0, "hello world\n")
	b.expect("set -- p1 p2", 0, "")
	b.expect("echo \"$# $2\"", 0, "2 p2\n")
	b.expect("alias ll='ls -l'; shopt -s expand_aliases", 0, "")
	b.expect("type -t ll", 0, "alias\n")
	// A block spanning several lines, with a heredoc and a trailing comment.
	b.expect("cat <<EOF\nline $x\nEOF\n# done", 0, "line 1\n")
}

func TestBashStatuses(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	b.expect("true", 0, "")
	b.expect("false", 1, "")
	b.expect("(exit 7)", 7, "")
	b.expect("echo \"previous $?\"", 0, "previous 7\n") // $? starts as the last block's status
	b.expect(" ", 0, "")                                // "" is the interrupt mark
	b.expect("# only a comment", 0, "")
	st, _, stderr := b.run("if then fi")
	if st != 2 || !strings.Contains(stderr, "syntax error") {
		t.Errorf("syntax error: status %d stderr %q", st, stderr)
	}
	b.expect("nonexistent-command-xyz", 127, "")
	// exit ends the block, not the shell.
	b.expect("y=before; exit 5; y=after", 5, "")
	b.expect("echo $y", 0, "before\n")
	b.expect("f() { exit 3; }; f; echo not reached", 3, "")
	b.expect("(exit 4); exit", 4, "")
	b.expect("bash -c 'exit 6'; echo $?", 0, "6\n") // a child shell's exit is its own
	// A failure under set -e ends the block with its status; the shell stays.
	b.expect("set -e; false; echo not reached", 1, "")
	b.expect("echo still errexit; g() { return 9; }; g; echo not reached", 9, "still errexit\n")
	b.expect("set +e; false; echo errexit off", 0, "errexit off\n")
	// return at the top of a block ends it.
	b.expect("return 3; echo not reached", 3, "")
}

// An empty block is an empty cell: status 0, no output, and the state
// (including $?, which a comment does not reset either) as it was, as
// after an empty line at a prompt.
func TestBashEmptyBlock(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	b.expect("x=kept; cd /; (exit 3)", 3, "")
	for _, code := range []string{" ", " \t\n\n"} { // "" is the interrupt mark
		b.expect(code, 0, "")
		b.expect("echo \"$? $x $PWD\"; (exit 3)", 3, "3 kept /\n")
	}
}

func TestBashInterrupt(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	b.expect("v=kept", 0, "")
	// A SIGINT that comes while the shell's child is forked but not yet
	// sleep (the child still bash, with its traps) is lost: bash waits
	// for a child that did not die of it. The SIGINT waits for sleep.
	const sleeping = "sleep\x00100\x00"
	for _, c := range []struct{ code, stdout, child string }{
		// Each says it runs (on stderr) right before what is interrupted.
		{"echo '<running>' >&2; sleep 100; echo not reached", "", sleeping},
		{"echo start; echo '<running>' >&2; while :; do sleep 1; done; echo not reached", "start\n", ""},
		{"echo '<running>' >&2; while :; do :; done", "", ""},
		{"spin() { while :; do :; done; }; echo '<running>' >&2; spin; echo not reached", "", ""},
		{"echo '<running>' >&2; sleep 100 | cat; echo not reached", "", sleeping},
		{"trap 'echo cleanup' INT; echo '<running>' >&2; sleep 100; echo not reached", "cleanup\n", sleeping}, // user traps run first
	} {
		b.send(c.code)
		b.stderr.await(b.t, runningMarker, 30*time.Second)
		if c.child != "" {
			b.awaitGroupMember(c.child, 30*time.Second)
		}
		sent := time.Now()
		b.sigint()
		st := b.status(60 * time.Second)
		out, _ := b.output()
		if st != 130 || out != c.stdout {
			t.Errorf("%q: status %d stdout %q; want 130 %q", c.code, st, out, c.stdout)
		}
		// (what an interrupt missed runs for 100 s; a loaded host may
		// take seconds to deliver one that works)
		if d := time.Since(sent); d > 30*time.Second {
			t.Errorf("%q: the interrupt took %v", c.code, d)
		}
	}
	b.expect("trap - INT; echo \"$v\"", 0, "kept\n")
	b.ignoresIdleSIGINT()
	b.expect("echo \"$v\"", 0, "kept\n")
}

// The server repeats an interrupt's SIGINT until the block's status is
// read, as a single one can be lost (see runtime.sh): a child of the
// shell that takes the first SIGINT (here a subshell with a trap, as the
// shell's child between its fork and its exec does) and then runs a
// program is stopped by a repeat, and the shell takes the repeats as one:
// the user's INT trap runs once, and the command it runs is not
// interrupted by them. Interrupts work as before in the next block.
func TestBashRepeatedSIGINT(t *testing.T) {
	t.Parallel()
	b, dir := startBash(t)
	b.send("( trap 'exec sleep 100' INT; echo '<running>' >&2; while :; do :; done ); echo not reached")
	b.stderr.await(b.t, runningMarker, 30*time.Second)
	b.sigint() // taken by the subshell's trap, which then runs sleep
	b.awaitGroupMember("sleep\x00100\x00", 30*time.Second)
	b.sigint() // the server's repeat
	if st := b.status(30 * time.Second); st != 130 {
		t.Errorf("a block whose first SIGINT a child took: status %d, want 130", st)
	}
	if out, _ := b.output(); out != "" {
		t.Errorf("stdout %q", out)
	}

	fifo := filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	b.send(`trap 'echo "<trapped>" >&2; cat go; echo cleanup' INT; echo '<running>' >&2; sleep 100; echo not reached`)
	b.stderr.await(b.t, runningMarker, 30*time.Second)
	b.awaitGroupMember("sleep\x00100\x00", 30*time.Second)
	b.sigint()
	b.stderr.await(b.t, "<trapped>\n", 30*time.Second)
	b.awaitGroupMember("cat\x00go\x00", 30*time.Second)
	b.sigint() // repeats, while the user's trap runs cat
	b.sigint()
	f, err := os.OpenFile(fifo, os.O_RDWR, 0) // never blocks, even with no reader left
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	if st := b.status(30 * time.Second); st != 130 {
		t.Errorf("interrupted, its trap's command running through the repeats: status %d, want 130", st)
	}
	if out, errOut := b.output(); out != "go\ncleanup\n" || strings.Contains(errOut, "<trapped>") {
		t.Errorf("the user's INT trap through the repeats: stdout %q (want \"go\\ncleanup\\n\"), stderr %q (want no second <trapped>)", out, errOut)
	}
	b.send("trap - INT; echo '<running>' >&2; sleep 100; echo not reached")
	b.stderr.await(b.t, runningMarker, 30*time.Second)
	b.awaitGroupMember("sleep\x00100\x00", 30*time.Second)
	b.sigint()
	if st := b.status(30 * time.Second); st != 130 {
		t.Errorf("the next block, interrupted: status %d, want 130", st)
	}
	b.ignoresIdleSIGINT()
	b.expect("echo still", 0, "still\n")
}

// TestBashInterruptBeforeStart: the server's interrupt mark (a block of no
// bytes, sent after the block and before its SIGINT) that the shell has
// before it starts the block refuses it (130, nothing run); a mark whose
// block has ended is skipped.
func TestBashInterruptBeforeStart(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	b.expect("ran=no", 0, "")
	// One write: the shell has both before it starts the block. (No
	// SIGINT: the one the server sends may find the shell idle.)
	if _, err := b.ctl.Write([]byte("ran=yes; while :; do :; done\x00\x00")); err != nil {
		t.Fatal(err)
	}
	if st := b.status(30 * time.Second); st != 130 {
		t.Fatalf("interrupted before it started: status %d, want 130", st)
	}
	b.expect("echo $ran", 0, "no\n")
	if _, err := b.ctl.Write([]byte{0}); err != nil { // late: skipped, no status
		t.Fatal(err)
	}
	b.expect("echo still", 0, "still\n")
}

func TestBashOutput(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	st, out, errOut := b.run("echo to-stdout; echo to-stderr >&2; printf 'no newline'")
	if st != 0 || out != "to-stdout\nno newline" || errOut != "to-stderr\n" {
		t.Errorf("output: %d %q %q", st, out, errOut)
	}
	st, out, _ = b.run("head -c 1000000 /dev/zero | tr '\\0' x")
	if st != 0 || len(out) != 1000000 {
		t.Errorf("large output: %d, %d bytes", st, len(out))
	}
	// xtrace goes to stderr and does not disturb the loop.
	st, out, errOut = b.run("set -x; echo traced; set +x")
	if st != 0 || out != "traced\n" || !strings.Contains(errOut, "echo traced") {
		t.Errorf("xtrace: %d %q %q", st, out, errOut)
	}
}

func TestBashStdinAndDescriptors(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	// Commands reading stdin get end of file at once.
	b.expect("read line; echo \"read=$? line=$line\"", 0, "read=1 line=\n")
	b.expect("cat; echo \"cat=$?\"", 0, "cat=0\n")
	// The control socket is not reachable from the block or from its commands.
	b.expect("{ echo 1 >&3; } 2>/dev/null; echo \"block=$?\"", 0, "block=1\n")
	b.expect("bash -c 'echo 1 >&3' 2>/dev/null; echo \"child=$?\"", 0, "child=1\n")
	// No descriptor of a command started by a block is the control socket.
	ctl, err := os.Readlink("/proc/" + strconv.Itoa(b.cmd.Process.Pid) + "/fd/3")
	if err != nil {
		t.Fatalf("the runtime's control socket: %v", err)
	}
	st, out, _ := b.run("ls -l /proc/self/fd")
	if st != 0 || !strings.Contains(out, " 2 -> ") || strings.Contains(out, ctl) {
		t.Errorf("a command's descriptors (control socket %s): %d\n%s", ctl, st, out)
	}
	// A block may use fd 3 for itself; the loop gets its socket back.
	b.expect("exec 3>fd3.txt; echo via-fd3 >&3; exec 3>&-; cat fd3.txt", 0, "via-fd3\n")
	b.expect("echo after", 0, "after\n")
}

func TestBashFatalError(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	// bash ends a non-interactive shell on an unset variable under set -u;
	// the runtime reports the block's status before it goes.
	b.send("set -u; echo \"$undefined_variable\"")
	if st := b.status(30 * time.Second); st != 1 {
		t.Errorf("status %d, want 1", st)
	}
	if code := b.waitExit(30 * time.Second); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if _, stderr := b.output(); !strings.Contains(stderr, "undefined_variable: unbound variable") {
		t.Errorf("stderr %q", stderr)
	}
}

func TestBashEndOfInput(t *testing.T) {
	t.Parallel()
	b, _ := startBash(t)
	b.expect("trap 'echo bye' EXIT", 0, "")
	b.ctl.(interface{ CloseWrite() error }).CloseWrite()
	if code := b.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if out, _ := b.output(); out != "bye\n" {
		t.Errorf("user EXIT trap: %q", out)
	}
}
