package jail

// Resource attacks: every limit holds, the run is killed for the right
// reason, and nothing of the sandbox survives the run.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
)

func limits(f func(*config.Limits)) config.Limits {
	l := testLimits()
	l.Timeout = config.Duration(5 * time.Second)
	l.CPUTime = config.Duration(5 * time.Second)
	f(&l)
	return l
}

// mustBeKilled fails unless airlock killed the run for reason.
func mustBeKilled(t *testing.T, res *RunResult, reason apitype.KillReason) {
	t.Helper()
	if !res.Killed || res.KillReason != reason || res.ExitCode != 137 {
		t.Fatalf("want killed for %q (exit 137): %s", reason, describe(res))
	}
}

func TestResourceForkBomb(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Pids = 32 })
	for _, c := range []struct{ name, lang, code string }{
		// The classic bomb detaches; the script stays, so that the pids
		// limit, not the end of the script, ends the run.
		{"bash", "bash", "bomb() { bomb | bomb & }; bomb; sleep 60"},
		{"python", "python", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			var res *RunResult
			if c.lang == "bash" {
				res = runBash(t, h, l, c.code)
			} else {
				res = runPython(t, h, l, c.code)
			}
			mustBeKilled(t, res, apitype.KillPids)
			if d := time.Since(start); d > l.Timeout.D() {
				t.Errorf("the run took %v, longer than its timeout", d)
			}
		})
	}
}

func TestResourceThreadBomb(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Pids = 32 })
	res := runPython(t, h, l, `
import threading, time
ev = threading.Event()
n = 0
try:
    while True:
        threading.Thread(target=ev.wait).start()
        n += 1
except RuntimeError as e:
    print("LIMIT", n, e, flush=True)
time.sleep(60)
`)
	// Thread creation fails at the pids limit (the init's own threads
	// count too), and hitting the limit ends the run.
	m := regexp.MustCompile(`LIMIT (\d+) can't start new thread`).FindSubmatch(res.Stdout)
	if m == nil {
		t.Fatalf("thread creation never failed: %s", describe(res))
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 8 || n >= int(l.Pids) {
		t.Errorf("%d threads started under a pids limit of %d", n, l.Pids)
	}
	mustBeKilled(t, res, apitype.KillPids)
}

func TestResourceMemoryBomb(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Memory = 128 << 20 })
	res := runPython(t, h, l, `
chunks = []
while True:
    chunks.append(b"\x01" * (8 << 20))
`)
	mustBeKilled(t, res, apitype.KillMemory)
	if res.PeakMemory < int64(l.Memory)/2 || res.PeakMemory > int64(l.Memory) {
		t.Errorf("peak memory %d, want close to the limit %d", res.PeakMemory, l.Memory)
	}
}

func TestResourceMemoryBombInChild(t *testing.T) {
	// One OOM kill ends the whole sandbox (cgroup v2: memory.oom.group;
	// v1: airlock, on the OOM event), even when the process killed is not
	// the program itself.
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Memory = 128 << 20 })
	res := runPython(t, h, l, `
import os, time
pid = os.fork()
if pid == 0:
    chunks = []
    while True:
        chunks.append(b"\x01" * (8 << 20))
os.waitpid(pid, 0)
print("child gone", flush=True)
time.sleep(30)
print("PARENT SURVIVED")
`)
	mustBeKilled(t, res, apitype.KillMemory)
	if bytes.Contains(res.Stdout, []byte("SURVIVED")) || res.Duration > 3*time.Second {
		t.Errorf("the sandbox lived on after the OOM kill: %s", describe(res))
	}
}

func TestResourceTmpfsCountsAsMemory(t *testing.T) {
	// /workspace is memory: filling it past the memory limit (below its
	// own size) ends the run out of memory, and the host is unaffected.
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Memory = 128 << 20; l.Disk = 256 << 20 })
	res := runPython(t, h, l, `
chunk = b"\x01" * (1 << 20)
for i in range(1000):
    with open("/workspace/f%d" % i, "wb") as f:
        f.write(chunk)
print("WROTE ALL")
`)
	mustBeKilled(t, res, apitype.KillMemory)
	if bytes.Contains(res.Stdout, []byte("WROTE ALL")) || res.PeakMemory > int64(l.Memory) {
		t.Errorf("%s", describe(res))
	}
}

// fillProbe fills each directory with 1 MiB files (each below
// RLIMIT_FSIZE, so that only the filesystem's size can stop it) and
// reports the errno and the bytes written.
const fillProbe = `
import os, sys
chunk = b"\x01" * (1 << 20)
for d in sys.argv[1:]:
    total, i = 0, 0
    try:
        while True:
            with open("%s/fill%d" % (d, i), "wb", buffering=0) as f:
                i += 1
                mv = memoryview(chunk)
                while mv:
                    n = f.write(mv)
                    total += n
                    mv = mv[n:]
    except OSError as e:
        print("FULL", d, e.errno, total, flush=True)
print("DONE")
`

func TestResourceDiskFill(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Disk = 16 << 20; l.Memory = 256 << 20 })
	res := runPythonArgs(t, h, l, fillProbe, "/workspace", "/tmp", "/dev/shm")
	mustFinish(t, res)
	full := linesWith(res.Stdout, "FULL ")
	if len(full) != 3 {
		t.Fatalf("not every tree filled up: %s", describe(res))
	}
	for _, line := range full {
		var dir string
		var errno, total int64
		fmt.Sscanf(line, "FULL %s %d %d", &dir, &errno, &total)
		if errno != 28 {
			t.Errorf("%s: filling stopped with errno %d, want ENOSPC", dir, errno)
		}
		// Each tree holds about --disk bytes (the program file takes a
		// page of /workspace), and never more.
		if total > int64(l.Disk) || total < int64(l.Disk)-(1<<20) {
			t.Errorf("%s took %d bytes, want about %d", dir, total, l.Disk)
		}
	}
	// The files stayed in the sandbox; the result lists them.
	if len(res.Files) < 10 {
		t.Errorf("the result lists %d files", len(res.Files))
	}
}

func TestResourceInodeFill(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Inodes = 256 })
	res := runPython(t, h, l, `
import os
for d in ("/workspace", "/tmp", "/dev/shm"):
    n = 0
    try:
        while True:
            open("%s/f%d" % (d, n), "w").close()
            n += 1
    except OSError as e:
        print("FULL", d, e.errno, n)
print("DONE")
`)
	mustFinish(t, res)
	full := linesWith(res.Stdout, "FULL ")
	if len(full) != 3 {
		t.Fatalf("not every tree filled up: %s", describe(res))
	}
	for _, line := range full {
		var dir string
		var errno, n int
		fmt.Sscanf(line, "FULL %s %d %d", &dir, &errno, &n)
		if errno != 28 || n >= int(l.Inodes) || n < int(l.Inodes)-8 {
			t.Errorf("%s: stopped after %d files with errno %d, want ENOSPC just below %d", dir, n, errno, l.Inodes)
		}
	}
	if !res.FilesTruncated && len(res.Files) > int(l.Inodes) {
		t.Errorf("the result lists %d files", len(res.Files))
	}
}

// countWriter counts what it is given.
type countWriter struct {
	mu sync.Mutex
	n  int
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n += len(p)
	c.mu.Unlock()
	return len(p), nil
}

func TestResourceHugeOutput(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.MaxOutput = 64 << 10 })
	for _, stream := range []string{"stdout", "stderr"} {
		t.Run(stream, func(t *testing.T) {
			live := &countWriter{}
			req := RunRequest{
				Argv: []string{"/usr/bin/python3", "/workspace/main.py"},
				// 64 MiB past a 64 KiB cap, then a word on the other stream.
				Files: []InputFile{{Path: "main.py", Data: strings.NewReader("import sys\nchunk = b'A' * 65536\nfor _ in range(1024):\n    sys." + stream + ".buffer.write(chunk)\nprint('done', file=sys." + map[string]string{"stdout": "stderr", "stderr": "stdout"}[stream] + ")\n")}},
			}
			if stream == "stdout" {
				req.Stdout = live
			} else {
				req.Stderr = live
			}
			res := runReq(t, h, l, req)
			// Past the cap the output is dropped and counted; the program
			// runs on to its end (as in Jupyter).
			if res.Killed || res.ExitCode != 0 {
				t.Fatalf("%s: killed %v %s, exit %d", stream, res.Killed, res.KillReason, res.ExitCode)
			}
			got, truncated, dropped, other := res.Stdout, res.StdoutTruncated, res.StdoutDropped, res.Stderr
			if stream == "stderr" {
				got, truncated, dropped, other = res.Stderr, res.StderrTruncated, res.StderrDropped, res.Stdout
			}
			if len(got) != int(l.MaxOutput) || !truncated || len(bytes.Trim(got, "A")) != 0 || dropped != 1024*65536-int64(l.MaxOutput) {
				t.Errorf("%s: %d bytes kept, truncated %v, %d dropped; want exactly %d kept", stream, len(got), truncated, dropped, l.MaxOutput)
			}
			if string(other) != "done\n" {
				t.Errorf("the other stream got %q", other)
			}
			// The host never held more than the cap: neither in the
			// result nor on the way to the live writer.
			if live.n != int(l.MaxOutput) {
				t.Errorf("the live writer got %d bytes, want %d", live.n, l.MaxOutput)
			}
		})
	}
}

func TestResourceBinaryOutput(t *testing.T) {
	h := testHost(t)
	res := runPython(t, h, testLimits(), `
import sys
data = bytes(range(256)) * 64 + b"\xff\xfe\x00\xc3\x28\xed\xa0\x80\xf8\x88\x80\x80\x80\r\n\x1b[31m"
sys.stdout.buffer.write(data)
sys.stderr.buffer.write(data[::-1])
`)
	want := append(bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 64), []byte("\xff\xfe\x00\xc3\x28\xed\xa0\x80\xf8\x88\x80\x80\x80\r\n\x1b[31m")...)
	rev := make([]byte, len(want))
	for i := range want {
		rev[i] = want[len(want)-1-i]
	}
	if res.ExitCode != 0 || !bytes.Equal(res.Stdout, want) || !bytes.Equal(res.Stderr, rev) {
		t.Errorf("binary output not captured byte for byte: exit %d, stdout %d bytes (want %d), stderr %d bytes",
			res.ExitCode, len(res.Stdout), len(want), len(res.Stderr))
	}
}

func TestResourceCPUTime(t *testing.T) {
	h := testHost(t)
	// A generous wall-clock limit: on a loaded host the program gets its
	// second of CPU late, but it must be the CPU-time limit that ends it.
	l := limits(func(l *config.Limits) {
		l.CPUTime = config.Duration(time.Second)
		l.Timeout = config.Duration(10 * time.Second)
	})
	res := runPython(t, h, l, "while True:\n    pass\n")
	mustBeKilled(t, res, apitype.KillCPUTime)
	if res.CPU < time.Second || res.CPU > 1500*time.Millisecond {
		t.Errorf("killed after %v of CPU (in %v); want just over 1s", res.CPU, res.Duration)
	}
}

func TestResourceTimeout(t *testing.T) {
	h := testHost(t)
	l := limits(func(l *config.Limits) { l.Timeout = config.Duration(time.Second) })
	res := runPython(t, h, l, "import time\ntime.sleep(60)\n")
	mustBeKilled(t, res, apitype.KillTimeout)
	if res.Duration < time.Second || res.Duration > 3*time.Second {
		t.Errorf("killed after %v, want just over 1s", res.Duration)
	}
}

// daemonProbe leaves a daemon behind: double fork, setsid, every signal
// it can ignore ignored. It prints the daemon's pid and exits 0.
const daemonProbe = `
import os, signal, sys, time
keep_stdout = sys.argv[1] == "keep"
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    for s in range(1, 65):
        try:
            signal.signal(s, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass
    os.write(w, str(os.getpid()).encode())
    os.close(w)
    if not keep_stdout:
        fd = os.open("/dev/null", os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(fd, i)
    while True:
        try:
            if keep_stdout:
                os.write(1, b"tick\n")
            with open("/workspace/alive", "w") as f:
                f.write(str(time.time()))
            time.sleep(0.01)
        except BaseException:
            pass
os.close(w)
os.waitpid(pid, 0)
print("DAEMON", os.read(r, 32).decode(), flush=True)
time.sleep(0.2)  # the daemon is running
`

func TestResourceDaemonDoesNotSurvive(t *testing.T) {
	h := testHost(t)
	for _, mode := range []string{"detached", "keep"} {
		t.Run(mode, func(t *testing.T) {
			n := specCount()
			start := time.Now()
			res := runPythonArgs(t, h, testLimits(), daemonProbe, mode)
			elapsed := time.Since(start)
			specs := specsSince(n)
			if res.ExitCode != 0 || res.Killed || len(linesWith(res.Stdout, "DAEMON ")) != 1 {
				t.Fatalf("the probe did not start its daemon: %s", describe(res))
			}
			// Run returns once the program exits, daemon or not (which
			// runs for ever: a loaded host may take seconds, never that).
			if elapsed > 30*time.Second {
				t.Errorf("Run took %v", elapsed)
			}
			// Right away: no process with the sandbox's ids or in its cgroup.
			if left := sandboxProcesses(h, specs); len(left) > 0 {
				t.Errorf("the daemon survived the run: %v", left)
			}
			for _, sp := range specs {
				if d := cgroupDirs(sp.Name); len(d) > 0 {
					t.Errorf("cgroup left: %v", d)
				}
			}
		})
	}
}

func TestEscapeKillEverything(t *testing.T) {
	h := testHost(t)
	// The host process runs as the sandbox user's own host id, so that
	// permissions would not stop a signal: only the pid namespace does.
	spec := testSpec(testLimits())
	_, user := h.IDs(spec.Slot)
	sleeper := exec.Command("/bin/sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(user), Gid: uint32(user)}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	res, err := runOnce(context.Background(), h, RunRequest{Spec: spec, Argv: []string{"/usr/bin/python3", "/workspace/main.py", strconv.Itoa(sleeper.Process.Pid)},
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader(`
import os, signal, sys, time
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
os.kill(-1, signal.SIGKILL)  # everyone we may signal, but ourselves
for k in kids:
    _, st = os.waitpid(k, 0)
    print("child", os.WTERMSIG(st) if os.WIFSIGNALED(st) else "exited")
for pid in (1, int(sys.argv[1])):
    try:
        os.kill(pid, signal.SIGKILL)
        print("KILLED", pid)
    except OSError as e:
        print("refused", pid, e.errno)
print("DONE")
`)}}})
	if err != nil {
		t.Fatal(err)
	}
	// The program survived its own kill(-1), its children did not, the
	// init did not get the signal (the run ended normally), and the host
	// process is untouched: not even visible (ESRCH, not EPERM).
	mustFinish(t, res)
	if want := "refused " + strconv.Itoa(sleeper.Process.Pid) + " 3"; len(linesWith(res.Stdout, want)) != 1 {
		t.Errorf("the host process was not invisible (want %q): %s", want, describe(res))
	}
	if got := len(linesWith(res.Stdout, "child 9")); got != 3 {
		t.Errorf("%d of 3 children killed: %s", got, describe(res))
	}
	if k := linesWith(res.Stdout, "KILLED"); len(k) > 0 {
		t.Errorf("signalled from inside: %v", k)
	}
	if !alive(sleeper.Process.Pid) {
		t.Errorf("the host process %d died", sleeper.Process.Pid)
	}
}
