package jail

// Real programs run unchanged: what CPython's own test suite showed
// failing inside a sandbox for reasons that were not security, and the
// refusals that stay by design.

import (
	"os"
	"strings"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/testenv"
)

// Each case prints one line per check; every line must be "ok <name>".
func TestRealProgramsRun(t *testing.T) {
	h := testHost(t)
	for _, tc := range []struct {
		name string
		code string
	}{
		{"script in /tmp runs and is found", `
import os, shutil, subprocess
os.makedirs("/tmp/bin", exist_ok=True)
with open("/tmp/bin/hello-tool", "w") as f:
    f.write("#!/bin/sh\necho hello from tmp\n")
os.chmod("/tmp/bin/hello-tool", 0o755)
os.environ["PATH"] = "/tmp/bin:" + os.environ["PATH"]
assert shutil.which("hello-tool") == "/tmp/bin/hello-tool", shutil.which("hello-tool")
out = subprocess.run(["hello-tool"], capture_output=True, text=True, check=True).stdout
assert out == "hello from tmp\n", out
print("ok tmp-exec")
print("DONE")
`},
		{"mmap PROT_EXEC of files in /tmp and /dev/shm", `
import mmap
for d in ("/tmp", "/dev/shm", "/workspace"):
    with open(d + "/code.bin", "wb+") as f:
        f.write(b"\xc3" * 4096)
        f.flush()
        m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)
        assert m[0] == 0xc3
        m.close()
print("ok mmap-exec")
print("DONE")
`},
		{"a pty of the sandbox's own", `
import os, pty, tty, termios, sys
assert os.path.islink("/dev/ptmx") and os.readlink("/dev/ptmx") == "pts/ptmx"
before = sorted(n for n in os.listdir("/dev/pts") if n != "ptmx")
assert before == [], before
master, slave = os.openpty()
name = os.ttyname(slave)
assert name.startswith("/dev/pts/"), name
assert os.isatty(slave)
termios.tcgetattr(slave)
tty.setraw(slave)
os.write(master, b"ping\n")
assert os.read(slave, 5) == b"ping\n"
after = sorted(n for n in os.listdir("/dev/pts") if n != "ptmx")
assert after == [name.rsplit("/", 1)[1]], after
os.close(master); os.close(slave)
# A program run on a pty sees a terminal.
pid, fd = pty.fork()
if pid == 0:
    os.execv("/bin/sh", ["sh", "-c", "test -t 0 && test -t 1 && echo IS-A-TTY"])
out = b""
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
assert b"IS-A-TTY" in out, out
print("ok pty")
print("DONE")
`},
		{"sparse write at a large offset", `
import os
for d in ("/tmp", "/workspace"):
    with open(d + "/sparse", "wb") as f:
        f.seek(3 << 30)
        f.write(b"x")
    st = os.stat(d + "/sparse")
    assert st.st_size == (3 << 30) + 1 and st.st_blocks * 512 < (1 << 20), st
    os.unlink(d + "/sparse")
print("ok sparse")
print("DONE")
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runPython(t, h, testLimits(), tc.code)
			mustFinish(t, res)
			if !strings.HasPrefix(string(res.Stdout), "ok ") {
				t.Fatalf("%s", describe(res))
			}
		})
	}
}

// The tmpfs size is what bounds a file now that there is no RLIMIT_FSIZE:
// writing real data past it fails with ENOSPC, not SIGXFSZ/EFBIG.
func TestFileSizeBoundByTheDisk(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Disk = 8 << 20 })
	res := runPython(t, h, l, `
import errno
try:
    with open("/tmp/big", "wb", buffering=0) as f:
        while True:
            f.write(b"x" * (1 << 20))
except OSError as e:
    print("stopped", errno.errorcode[e.errno])
print("DONE")
`)
	mustFinish(t, res)
	if got := string(res.Stdout); got != "stopped ENOSPC\nDONE\n" {
		t.Fatalf("got %q: %s", got, describe(res))
	}
}

// What stays refused by design, next to what now works.
func TestStillRefusedByDesign(t *testing.T) {
	h := testHost(t)
	res := runPython(t, h, testLimits(), `
import os, errno
def attempt(name, fn):
    try:
        fn()
        print("ALLOWED", name)
    except OSError as e:
        print("refused", name, errno.errorcode[e.errno])
attempt("setuid", lambda: os.setuid(0))
attempt("setgroups", lambda: os.setgroups([0]))
attempt("write /usr", lambda: open("/usr/airlock-probe", "w"))
attempt("write /dev/pts", lambda: open("/dev/pts/new", "w"))
attempt("mknod in /tmp", lambda: os.mknod("/tmp/dev", 0o600 | 0o020000, os.makedev(1, 3)))
print("DONE")
`)
	mustFinish(t, res)
	if strings.Contains(string(res.Stdout), "ALLOWED") || strings.Count(string(res.Stdout), "refused") != 5 {
		t.Fatalf("%s", describe(res))
	}
}

// cpythonModules is a sample of CPython's own regression tests that pass
// outside a sandbox and must pass inside one: files, processes, ptys,
// temporary files, maps, signals, threads, sockets, parsers.
var cpythonModules = []string{
	"test_os", "test_posix", "test_shutil", "test_tempfile", "test_mmap", "test_pty",
	"test_subprocess", "test_threading", "test_json", "test_re", "test_fileio",
	"test_glob", "test_select", "test_pathlib", "test_fcntl", "test_ioctl",
	"test_largefile", "test_resource", "test_socket",
}

// cpythonByDesign are the test cases that fail inside by design, each with
// why: the runner's own --ignore leaves them out by name, so that any
// other failure in these modules fails this test.
var cpythonByDesign = map[string]string{
	"*.POSIXProcessTestCase.test_user":  "becomes another user (setuid): the sandbox user has no privilege",
	"*.POSIXProcessTestCase.test_group": "becomes another group (setgid): the sandbox user has no privilege",
}

// CPython's test suite runs inside a sandbox as it does outside, but for
// what the sandbox refuses by design. It needs Debian's
// libpython3.11-testsuite (scripts/install-deps.sh installs it).
func TestCPythonTestSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the CPython test suite takes about a minute; skipped with -short")
	}
	if _, err := os.Stat("/usr/lib/python3.11/test/regrtest.py"); err != nil {
		testenv.Skip(t, "CPython's test suite is not installed (Debian package libpython3.11-testsuite; scripts/install-deps.sh --tests installs it): %v", err)
	}
	h := testHost(t)
	l := limits(func(l *config.Limits) {
		l.Timeout = config.Duration(4 * time.Minute)
		l.CPUTime = config.Duration(4 * time.Minute)
		l.Memory = 2 << 30
		l.Pids = 1024
		l.Disk = 1 << 30
		l.MaxOutput = 4 << 20
	})
	argv := []string{"/usr/bin/python3", "-m", "test", "-j2", "--slowest"}
	for pattern := range cpythonByDesign {
		argv = append(argv, "--ignore", pattern)
	}
	res := runProgram(t, h, l, append(argv, cpythonModules...))
	out := string(res.Stdout) + string(res.Stderr)
	if res.Killed || res.ExitCode != 0 || !strings.Contains(out, "Tests result: SUCCESS") {
		t.Fatalf("CPython's tests failed inside the sandbox (exit %d, killed %v %s):\n%s", res.ExitCode, res.Killed, res.KillReason, clip([]byte(out)))
	}
	t.Logf("%s", clip([]byte(out)))
}
