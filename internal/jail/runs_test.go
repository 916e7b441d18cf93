package jail

// Ordinary programs, isolation between runs, and cleanup whatever happens.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

func TestIsolationBetweenRuns(t *testing.T) {
	h := testHost(t)
	token := "airlock-marker-" + randomToken(t)
	res := runPythonArgs(t, h, testLimits(), `
import os, sys
for d in ("/tmp", "/workspace", "/dev/shm"):
    with open(d + "/marker", "w") as f:
        f.write(sys.argv[1])
    os.mkdir(d + "/markerdir")
os.environ["MARKER"] = sys.argv[1]
print("DONE")
`, token)
	mustFinish(t, res)
	res = runPython(t, h, testLimits(), `
import os
for d in ("/tmp", "/workspace", "/dev/shm"):
    print(d, sorted(os.listdir(d)))
    for n in ("marker", "markerdir"):
        if os.path.exists(d + "/" + n):
            print("FOUND", d + "/" + n)
print("MARKER" in os.environ)
print("DONE")
`)
	mustFinish(t, res)
	noSecret(t, res, token)
	if f := linesWith(res.Stdout, "FOUND"); len(f) > 0 {
		t.Errorf("files of the previous run are visible: %v", f)
	}
	// The next run starts from a clean slate: its own program in
	// /workspace, the copied font cache in /tmp, nothing in /dev/shm.
	if !bytes.Contains(res.Stdout, []byte("/workspace ['main.py']\n")) || !bytes.Contains(res.Stdout, []byte("/dev/shm []\n")) {
		t.Errorf("the scratch trees are not fresh: %s", describe(res))
	}
}

// benignProgram is deterministic, and its output does not depend on its
// own path.
const benignProgram = `
import base64, collections, decimal, fractions, hashlib, json, math, statistics, sys, unicodedata, zlib
print(json.dumps({"a": [1, 2.5, None, True], "b": "\u00fc\u20ac", "c": {"z": 1, "y": 2}}, sort_keys=True))
print(hashlib.sha256(b"airlock").hexdigest())
print([p for p in range(2, 100) if all(p % d for d in range(2, math.isqrt(p) + 1))])
print(decimal.Decimal(1) / decimal.Decimal(7), fractions.Fraction(3, 9), statistics.mean([1, 2, 3, 4]))
print(sorted(collections.Counter("mississippi").items()))
print(base64.b64encode(zlib.compress(b"x" * 100, 9)).decode())
print(unicodedata.name("\u20ac"), "\u00e9\u4e2d\U0001F600", repr(1 / 3), 2 ** 100)
print(sys.maxsize, sys.byteorder, sys.getdefaultencoding(), sys.stdout.encoding)
print("to stderr", sys.version_info[0], file=sys.stderr)
import numpy as np
print(np.arange(12).reshape(3, 4).sum(axis=0), round(float(np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]]))), 6))
`

func TestBenignOutputMatchesHost(t *testing.T) {
	h := testHost(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "main.py")
	if err := os.WriteFile(script, []byte(benignProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("/usr/bin/python3", script)
	cmd.Env = BaseEnv()
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("on the host: %v: %s", err, stderr.String())
	}

	res := runPython(t, h, testLimits(), benignProgram)
	if res.ExitCode != 0 || res.Killed {
		t.Fatalf("in the jail: %s", describe(res))
	}
	if !bytes.Equal(res.Stdout, stdout.Bytes()) {
		t.Errorf("stdout differs:\njail:\n%s\nhost:\n%s", res.Stdout, stdout.Bytes())
	}
	if !bytes.Equal(res.Stderr, stderr.Bytes()) {
		t.Errorf("stderr differs:\njail:\n%s\nhost:\n%s", res.Stderr, stderr.Bytes())
	}
}

func TestExitCodes(t *testing.T) {
	h := testHost(t)
	for _, c := range []struct {
		name     string
		argv     []string
		file     string
		code     string
		exit     int
		stderrRe []string
	}{
		{name: "python exit 0", argv: []string{"/usr/bin/python3", "/workspace/p.py"}, file: "p.py", code: "print('ok')", exit: 0},
		{name: "python sys.exit(3)", argv: []string{"/usr/bin/python3", "/workspace/p.py"}, file: "p.py", code: "import sys\nsys.exit(3)", exit: 3},
		{name: "python exception", argv: []string{"/usr/bin/python3", "/workspace/p.py"}, file: "p.py",
			code: "def f():\n    raise ValueError('boom')\nf()\n", exit: 1,
			stderrRe: []string{"Traceback (most recent call last):", `File "/workspace/p.py", line 3, in <module>`, "ValueError: boom"}},
		{name: "python SIGTERM", argv: []string{"/usr/bin/python3", "/workspace/p.py"}, file: "p.py", code: "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", exit: 143},
		{name: "python abort", argv: []string{"/usr/bin/python3", "/workspace/p.py"}, file: "p.py", code: "import os\nos.abort()", exit: 134},
		{name: "bash exit 42", argv: []string{"/bin/bash", "/workspace/s.sh"}, file: "s.sh", code: "echo hi >&2\nexit 42", exit: 42, stderrRe: []string{"hi"}},
		{name: "bash command not found", argv: []string{"/bin/bash", "/workspace/s.sh"}, file: "s.sh", code: "no-such-command", exit: 127, stderrRe: []string{"no-such-command: command not found"}},
		{name: "node exit 7", argv: []string{"/usr/bin/node", "/workspace/n.js"}, file: "n.js", code: "console.log('js'); process.exit(7)", exit: 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.argv[0]); err != nil {
				testenv.Skip(t, "%s is not installed (scripts/install-deps.sh installs it)", c.argv[0])
			}
			res := runReq(t, h, testLimits(), RunRequest{Argv: c.argv, Files: []InputFile{{Path: c.file, Data: strings.NewReader(c.code)}}})
			if res.ExitCode != c.exit || res.Killed {
				t.Errorf("exit %d, want %d: %s", res.ExitCode, c.exit, describe(res))
			}
			for _, s := range c.stderrRe {
				if !bytes.Contains(res.Stderr, []byte(s)) {
					t.Errorf("stderr lacks %q: %s", s, describe(res))
				}
			}
		})
	}
}

func TestStdinAndArgs(t *testing.T) {
	h := testHost(t)
	res := runReq(t, h, testLimits(), RunRequest{
		Argv:  []string{"/usr/bin/python3", "/workspace/main.py", "a b", "--flag", ""},
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader("import sys\nprint(sys.argv[1:], sys.stdin.read().upper())")}},
		Stdin: strings.NewReader("from stdin"),
		Env:   []string{"EXTRA=1", "LANG=C"},
	})
	if res.ExitCode != 0 || string(res.Stdout) != "['a b', '--flag', ''] FROM STDIN\n" {
		t.Errorf("%s", describe(res))
	}
}

func TestStdinNotRead(t *testing.T) {
	// Far more input than a pipe holds, for a program that never reads
	// it: Run still returns, and the copying goroutine ends (the guard
	// checks).
	h := testHost(t)
	res := runReq(t, h, testLimits(), RunRequest{
		Argv:  []string{"/bin/true"},
		Stdin: bytes.NewReader(make([]byte, 10<<20)),
	})
	if res.ExitCode != 0 || res.Killed {
		t.Errorf("%s", describe(res))
	}
}

func TestConcurrentRuns(t *testing.T) {
	// Sandboxes running side by side see only their own files and get
	// only their own output.
	h := testHost(t)
	const n = 6
	type out struct {
		token string
		res   *RunResult
		err   error
	}
	results := make(chan out, n)
	for i := 0; i < n; i++ {
		token := "run-" + strconv.Itoa(i) + "-" + randomToken(t)
		spec := testSpec(testLimits())
		go func() {
			res, err := runOnce(context.Background(), h, RunRequest{
				Spec:  spec,
				Argv:  []string{"/usr/bin/python3", "/workspace/main.py", token},
				Files: []InputFile{{Path: "main.py", Data: strings.NewReader(concurrentProbe)}, {Path: token, Data: strings.NewReader(token)}},
			})
			results <- out{token, res, err}
		}()
	}
	for i := 0; i < n; i++ {
		o := <-results
		if o.err != nil {
			t.Errorf("run %s: %v", o.token, o.err)
			continue
		}
		want := "['main.py', '" + o.token + "'] " + o.token + "\n"
		if o.res.ExitCode != 0 || string(o.res.Stdout) != want {
			t.Errorf("run %s: want %q, got %s", o.token, want, describe(o.res))
		}
	}
}

func TestIsolationBetweenLiveSandboxes(t *testing.T) {
	// Sandbox A holds a TCP listener on its loopback, an abstract socket,
	// a SysV shared memory segment, a process and a file in /tmp. Sandbox
	// B, running at the same time, reaches none of them.
	h := testHost(t)
	a := startSandbox(t, h, testLimits())
	token := randomToken(t)
	if _, err := a.Workspace().Write("main.py", strings.NewReader(`
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
tcp = socket.socket()
tcp.bind(("127.0.0.1", 45678))
tcp.listen(8)
ab = socket.socket(socket.AF_UNIX)
ab.bind("\0airlock-live-" + sys.argv[1])
ab.listen(8)
shm = libc.shmget(0x41424344, 4096, 0o1666)
with open("/tmp/a-" + sys.argv[1], "w") as f:
    f.write("a")
print("READY", os.getpid(), shm, flush=True)
sys.stdin.read()
`), 1<<20, 0o644); err != nil {
		t.Fatal(err)
	}
	r := spawnPipes(t, a, "/usr/bin/python3", "/workspace/main.py", token)
	ready := strings.Fields(r.readLine(t))
	if len(ready) != 3 || ready[0] != "READY" || ready[2] == "-1" {
		t.Fatalf("sandbox A: %v (stderr %s)", ready, r.stderr.String())
	}

	res := runPythonArgs(t, h, testLimits(), `
import ctypes, os, signal, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
token = sys.argv[1]
def attempt(what, fn):
    try:
        fn()
        print("REACHED", what)
    except OSError as e:
        print("refused", what, e.errno)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 45678), timeout=2))
attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0airlock-live-" + token))
def shm():
    if libc.shmget(0x41424344, 0, 0) < 0:
        raise OSError(ctypes.get_errno(), "shmget")
attempt("shm", shm)
attempt("tmp", lambda: open("/tmp/a-" + token).read())
# Pids are per sandbox (A's program may well have B's pid), so A cannot
# even be named: everything B may signal dies, and A must not.
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:
    pass  # nobody else to signal
print("DONE")
`, token)
	mustFinish(t, res)
	if reached := linesWith(res.Stdout, "REACHED"); len(reached) > 0 {
		t.Errorf("sandbox B reached sandbox A: %v", reached)
	}
	if n := len(linesWith(res.Stdout, "refused")); n != 4 {
		t.Errorf("%d of 4 attempts refused: %s", n, describe(res))
	}
	// A is unharmed: its program ends only now, normally.
	if e, _ := r.wait(t, a); e.Code() != 0 {
		t.Errorf("sandbox A exited %d: %s", e.Code(), r.stderr.String())
	}
}

const concurrentProbe = `
import os, sys, time
with open("/tmp/mine", "w") as f:
    f.write(sys.argv[1])
time.sleep(0.2)  # overlap with the others
print(sorted(os.listdir("/workspace")), open("/tmp/mine").read())
`

func TestRunCancelled(t *testing.T) {
	h := testHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := runOnce(ctx, h, RunRequest{
		Spec:  testSpec(testLimits()),
		Argv:  []string{"/usr/bin/python3", "/workspace/main.py"},
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader("import time\ntime.sleep(60)")}},
	})
	if !errors.Is(err, errdefs.ErrTimeout) {
		t.Errorf("Run: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 30*time.Second { // not the program's 60 s; a loaded host may take seconds
		t.Errorf("cancelling took %v", d)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	h := testHost(t)
	// Limits the cgroup refuses, and a program that does not exist: the
	// run fails, and the guard checks nothing was left behind.
	l := testLimits()
	l.Pids = 0
	if _, err := runOnce(context.Background(), h, RunRequest{Spec: testSpec(l), Argv: []string{"/bin/true"}}); err == nil {
		t.Error("a run with no pids limit started")
	}
	_, err := runOnce(context.Background(), h, RunRequest{Spec: testSpec(testLimits()), Argv: []string{"/no/such/program"}})
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("running a missing program: %v", err)
	}
	// Input files are checked before anything runs.
	_, err = runOnce(context.Background(), h, RunRequest{Spec: testSpec(testLimits()), Argv: []string{"/bin/true"},
		Files: []InputFile{{Path: "big", Data: strings.NewReader(strings.Repeat("x", 100))}}, MaxFileBytes: 10})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("an oversized input file: %v, want ErrTooLarge", err)
	}
}

func TestLeakDetectorSeesLiveSandbox(t *testing.T) {
	// The guard and the daemon test rely on sandboxProcesses: it must see
	// a live sandbox's processes, by host id and by cgroup.
	h := testHost(t)
	n := specCount()
	sb := startSandbox(t, h, testLimits())
	r := spawnPipes(t, sb, "/bin/sh", "-c", "echo up; exec sleep 30")
	if l := r.readLine(t); l != "up" {
		t.Fatalf("got %q", l)
	}
	found := sandboxProcesses(h, specsSince(n))
	var byID, byCgroup bool
	for _, f := range found {
		byID = byID || strings.Contains(f, "Uid")
		byCgroup = byCgroup || strings.Contains(f, "cgroup")
	}
	if !byID || !byCgroup {
		t.Fatalf("sandboxProcesses missed the live sandbox: %v", found)
	}
	if len(cgroupDirs(sb.Name())) == 0 {
		t.Fatalf("cgroupDirs missed the live sandbox's cgroup")
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if left := sandboxProcesses(h, specsSince(n)); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
}
