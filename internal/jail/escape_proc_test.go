package jail

// Escapes through /proc, the environment and inherited descriptors.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/exeseal"
)

// procProbe tries to reach a host process by its host pid, lists the
// sandbox's /proc, pokes at the init's entries and walks every descriptor
// it can see.
const procProbe = `
import json, os, stat, sys
hostpid = sys.argv[1]

def probe(p):
    # Every way to get at p: read it, list it, follow it.
    out = []
    for how, fn in (("read", lambda: open(p, "rb").read(4096)), ("list", lambda: os.listdir(p)),
                    ("readlink", lambda: os.readlink(p)), ("open", lambda: os.close(os.open(p, os.O_RDONLY)))):
        try:
            out.append("%s ok %r" % (how, fn()))
        except OSError as e:
            out.append("%s %d" % (how, e.errno))
    return out

leaves = ["environ", "cmdline", "status", "stat", "maps", "mem", "root", "cwd", "exe", "fd", "fdinfo",
          "ns/pid", "ns/mnt", "ns/user", "ns/net", "map_files", "task", "auxv", "stack", "syscall", "io",
          "pagemap", "personality", "mountinfo", "root/etc", "cwd/..", "timerslack_ns", "setgroups"]
for leaf in leaves:
    print("HOST", leaf, json.dumps(probe("/proc/%s/%s" % (hostpid, leaf))))

pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("PIDS", json.dumps({"pids": pids, "self": os.getpid()}))

# The init and its threads (their tids are not listed, but exist).
for tid in range(1, os.getpid()):
    for leaf in ("exe", "root", "cwd", "environ", "mem", "maps", "fd", "ns/mnt", "ns/user", "map_files", "auxv", "stack"):
        print("INIT", tid, leaf, json.dumps(probe("/proc/%d/%s" % (tid, leaf))))

# Descriptors: our own, and the init's.
for d in ("/proc/self/fd", "/proc/1/fd", "/proc/thread-self/fd"):
    try:
        names = os.listdir(d)
    except OSError as e:
        print("FDDIR", d, e.errno)
        continue
    for n in names:
        p = d + "/" + n
        try:
            st = os.stat(p)
        except OSError:
            continue
        target = os.readlink(p)
        if target.startswith("/proc/") and target.endswith("/fd"):
            continue  # the directory being listed
        print("FD", p, target, "dir" if stat.S_ISDIR(st.st_mode) else "reg" if stat.S_ISREG(st.st_mode) else "other")
print("DONE")
`

func TestEscapeProcOtherProcesses(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		secret := "airlock-secret-" + randomToken(t)
		sleeper := startHostProcess(t, []string{"AIRLOCK_PROC_SECRET=" + secret}, "/bin/sleep", "60")
		hostPid := sleeper.Process.Pid

		res := p.pythonArgs(t, h, testLimits(), procProbe, strconv.Itoa(hostPid))
		mustFinish(t, res)
		noSecret(t, res, secret)

		// The host process is nowhere in the sandbox's /proc.
		for _, l := range linesWith(res.Stdout, "HOST ") {
			if strings.Contains(l, " ok ") {
				t.Errorf("reached the host process through /proc: %s", l)
			}
		}
		var pids struct {
			Pids []int
			Self int
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(linesWith(res.Stdout, "PIDS ")[0], "PIDS ")), &pids); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pids.Pids, []int{1, pids.Self}) {
			t.Errorf("/proc lists %v, want only the init and the program itself [1 %d]", pids.Pids, pids.Self)
		}
		// Nothing of the init (pid 1 and its threads) is open to the program:
		// it is not dumpable, and runs as another user.
		initLines := linesWith(res.Stdout, "INIT ")
		if len(initLines) < 12 {
			t.Fatalf("the init was not probed: %s", describe(res))
		}
		for _, l := range initLines {
			if strings.Contains(l, " ok ") {
				t.Errorf("reached the init through /proc: %s", l)
			}
		}
		// The program's own descriptors are its three pipes, and /proc/1/fd
		// cannot be listed. A program the template forks runs in the
		// session runtime's own process (program mode): it also sees the
		// runtime's, which are its stdin (/dev/null), saved copies of its
		// stdio pipes and its control socket; nothing else.
		var fds []string
		inodes := map[string]bool{}
		for _, l := range linesWith(res.Stdout, "FD ") {
			f := strings.Fields(l)
			if strings.HasPrefix(f[1], "/proc/thread-self/fd/") {
				continue // the same table as /proc/self/fd
			}
			if !strings.HasPrefix(f[1], "/proc/self/fd/") {
				t.Errorf("reached a descriptor of another process: %s", l)
				continue
			}
			fd := strings.TrimPrefix(f[1], "/proc/self/fd/")
			fds = append(fds, fd)
			switch {
			case f[3] != "other":
				t.Errorf("the program holds %s", l)
			case p.name == "template" && fd == "0" && f[2] == "/dev/null":
			case strings.HasPrefix(f[2], "pipe:"), p.name == "template" && strings.HasPrefix(f[2], "socket:"):
				inodes[f[2]] = true
			default:
				t.Errorf("the program holds %s", l)
			}
		}
		slices.Sort(fds)
		if p.name == "init" && !slices.Equal(fds, []string{"0", "1", "2"}) {
			t.Errorf("the program has descriptors %v, want 0 1 2", fds)
		}
		if p.name == "template" && (len(fds) > 7 || len(inodes) > 4) {
			t.Errorf("the program has descriptors %v to %d files, want at most its stdio, their copies and the control socket", fds, len(inodes))
		}
		if l := linesWith(res.Stdout, "FDDIR /proc/1/fd"); len(l) != 1 || !strings.HasSuffix(l[0], " 13") {
			t.Errorf("listing /proc/1/fd was not refused with EACCES: %v", l)
		}
		if !alive(hostPid) {
			t.Errorf("the host process %d died", hostPid)
		}
	})
}

func TestInitExecutableSealed(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, testLimits())
	exe := "/proc/" + strconv.Itoa(sb.InitPid()) + "/exe"
	// The host can read it (so the path is right)...
	if f, err := os.Open(exe); err != nil {
		t.Fatalf("open %s for reading: %v", exe, err)
	} else {
		f.Close()
	}
	// ...but nobody, not even host root, can open it for writing
	// (runc CVE-2019-5736).
	for _, flags := range []int{unix.O_WRONLY, unix.O_RDWR, unix.O_WRONLY | unix.O_TRUNC, unix.O_WRONLY | unix.O_APPEND, unix.O_RDWR | unix.O_CREAT} {
		fd, err := unix.Open(exe, flags|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			t.Errorf("opened the init's executable with flags %#x", flags)
			continue
		}
		if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.ETXTBSY) {
			t.Errorf("open with flags %#x: %v, want EROFS or ETXTBSY", flags, err)
		}
	}
	if err := unix.Truncate(exe, 0); !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.ETXTBSY) {
		t.Errorf("truncate: %v, want EROFS or ETXTBSY", err)
	}
	// ETXTBSY alone would last only while something runs the binary: what
	// the init runs from must be unwritable in itself, a read-only mount or
	// a sealed memfd.
	switch method := h.Protections()["exe"]; method {
	case string(exeseal.DetachedMount):
		fd, err := unix.Open(exe, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Statfs_t
		err = unix.Fstatfs(fd, &st)
		unix.Close(fd)
		if err != nil || st.Flags&unix.ST_RDONLY == 0 {
			t.Errorf("the init runs from a writable mount: flags %#x, %v", st.Flags, err)
		}
	case string(exeseal.SealedMemfd):
		if link, err := os.Readlink(exe); err != nil || !strings.HasPrefix(link, "/memfd:") {
			t.Errorf("the init does not run from a memfd: %q %v", link, err)
		}
		fd, err := unix.Open(exe, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		unix.Close(fd)
		want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if err != nil || seals&want != want {
			t.Errorf("the init's memfd has seals %#x, want %#x: %v", seals, want, err)
		}
	default:
		t.Errorf("unknown sealing method %q", method)
	}
	// From inside, it cannot even be opened, let alone for writing.
	if _, err := sb.Workspace().Write("main.py", strings.NewReader(`
import os
for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR, os.O_PATH):
    for p in ("/proc/1/exe", "/proc/1/root/proc/1/exe", "/proc/1/task/1/exe"):
        try:
            os.close(os.open(p, flags))
            print("OPENED", p, flags)
        except OSError as e:
            print("refused", p, flags, e.errno)
try:
    print("OPENED map_files", os.listdir("/proc/1/map_files"))
except OSError as e:
    print("refused map_files", e.errno)
try:
    print("LINK", os.readlink("/proc/1/exe"))
except OSError as e:
    print("refused readlink", e.errno)
print("DONE")
`), 1<<20, 0o644); err != nil {
		t.Fatal(err)
	}
	r := spawnPipes(t, sb, "/usr/bin/python3", "/workspace/main.py")
	e, out := r.wait(t, sb)
	if e.Code() != 0 || !strings.HasSuffix(out, "DONE\n") {
		t.Fatalf("probe: exit %d, output %q, stderr %q", e.Code(), out, r.stderr.String())
	}
	for _, l := range strings.Split(out, "\n") {
		// O_PATH opens of a non-dumpable process's magic links still
		// fail: the link itself is guarded by ptrace access.
		if strings.HasPrefix(l, "OPENED") || strings.HasPrefix(l, "LINK") {
			t.Errorf("reached the init's executable from inside: %s", l)
		}
	}
}

const envProbe = `
import json, os
print("ENV", json.dumps(dict(os.environ)))
print("SELF", json.dumps(open("/proc/self/environ", "rb").read().decode("utf-8", "replace")))
for p in ("/proc/1/environ", "/proc/2/environ", "/proc/1/task/1/environ"):
    try:
        print("OTHER", p, json.dumps(open(p, "rb").read().decode("utf-8", "replace")))
    except OSError as e:
        print("refused", p, e.errno)
print("DONE")
`

func TestEscapeHostEnvironment(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		key := "AIRLOCK_TEST_SECRET_" + strings.ToUpper(randomToken(t))
		secret := "airlock-secret-" + randomToken(t)
		t.Setenv(key, secret)

		res := p.pythonArgs(t, h, testLimits(), envProbe)
		mustFinish(t, res)
		noSecret(t, res, secret, key)
		if l := linesWith(res.Stdout, "OTHER"); len(l) > 0 {
			t.Errorf("read another process's environment: %v", l)
		}
		if got := len(linesWith(res.Stdout, "refused")); got != 3 {
			t.Errorf("%d of 3 environment reads refused: %s", got, describe(res))
		}
		// Exactly the base environment, nothing of the host's.
		var env map[string]string
		if err := json.Unmarshal([]byte(strings.TrimPrefix(linesWith(res.Stdout, "ENV ")[0], "ENV ")), &env); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, kv := range BaseEnv() {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
		if len(env) != len(want) {
			t.Errorf("environment %v, want %v", env, want)
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("environment %s=%q, want %q", k, env[k], v)
			}
		}

		// Bash too, with everything it exports.
		res = p.bash(t, h, testLimits(), "env; cat /proc/self/environ; cat /proc/1/environ; echo; echo DONE")
		if !bytes.HasSuffix(res.Stdout, []byte("DONE\n")) || !bytes.Contains(res.Stdout, []byte("PATH=")) {
			t.Fatalf("bash probe: %s", describe(res))
		}
		noSecret(t, res, secret, key)
	})
}

// fdProbe lists its descriptors, then tries to use any descriptor number
// a host could have leaked, the CVE-2024-21626 way: as a directory to
// resolve ".." from, and as a working directory.
const fdProbe = `
import json, os, stat, sys
host_fds = json.loads(sys.argv[1])
name = sys.argv[2]
fds = []
for n in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + n)
    except FileNotFoundError:
        continue  # the descriptor listdir used
    fds.append([int(n), target])
print("FDS", json.dumps(sorted(fds)))
for n in sorted(set(list(range(3, 1100)) + host_fds)):
    try:
        st = os.fstat(n)
    except OSError:
        continue
    print("OPEN", n, stat.S_IFMT(st.st_mode))
for n in host_fds + [3, 4, 5, 6, 7, 8, 9, 10]:
    for p in ("/proc/self/fd/%d" % n, "/proc/self/fd/%d/.." % n, "/proc/self/fd/%d/%s" % (n, name), "/proc/1/fd/%d" % n, "/dev/fd/%d" % n):
        try:
            print("REACHED", p, os.listdir(p))
        except OSError:
            pass
        try:
            os.chdir(p)
            print("CHDIR", p, os.getcwd(), os.listdir("."))
        except OSError:
            pass
        try:
            print("READ", p, open(p, "rb").read(100))
        except OSError:
            pass
    for rel in ("..", ".", name):
        try:
            fd = os.open(rel, os.O_RDONLY, dir_fd=n)
            print("OPENAT", n, rel, os.readlink("/proc/self/fd/%d" % fd))
        except OSError:
            pass
print("READY", flush=True)
sys.stdin.read()  # hold on, so that the host can look at our descriptors
print("DONE")
`

func TestEscapeHostDescriptorLeak(t *testing.T) {
	h := testHost(t)
	dir := t.TempDir()
	secret := "airlock-secret-" + randomToken(t)
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	// Descriptors without close-on-exec in the process that starts the
	// sandbox: a directory, a file, and an O_PATH of the host's root.
	var leaked []int
	for _, o := range []struct {
		path  string
		flags int
	}{
		{dir, syscall.O_RDONLY | syscall.O_DIRECTORY},
		{filepath.Join(dir, "secret"), syscall.O_RDONLY},
		{"/", unix.O_PATH | syscall.O_DIRECTORY},
		{"/etc", syscall.O_RDONLY | syscall.O_DIRECTORY},
	} {
		fd, err := syscall.Open(o.path, o.flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		leaked = append(leaked, fd)
		t.Cleanup(func() { syscall.Close(fd) })
	}

	sb := startSandbox(t, h, testLimits())
	// The init itself kept none of them.
	checkNoHostFDs := func(who string, pid int) {
		t.Helper()
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		for _, e := range ents {
			target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name())
			if target == "/" || target == "/etc" || strings.HasPrefix(target, dir) {
				t.Errorf("%s (host pid %d) holds host descriptor %s -> %s", who, pid, e.Name(), target)
			}
		}
	}
	checkNoHostFDs("the init", sb.InitPid())

	if _, err := sb.Workspace().Write("main.py", strings.NewReader(fdProbe), 1<<20, 0o644); err != nil {
		t.Fatal(err)
	}
	r := spawnPipes(t, sb, "/usr/bin/python3", "/workspace/main.py", jsonArg(t, leaked), "secret")
	var lines []string
	for {
		l := r.readLine(t)
		if l == "READY" {
			break
		}
		lines = append(lines, l)
	}
	// The program, seen from the host: nothing of the host either.
	pids := cgroupPids(t, sb.Name())
	if len(pids) < 2 {
		t.Fatalf("cgroup holds %v, want the init and the program", pids)
	}
	for _, pid := range pids {
		checkNoHostFDs("sandbox process", pid)
	}
	e, rest := r.wait(t, sb)
	out := strings.Join(lines, "\n") + "\n" + rest
	if e.Code() != 0 || !strings.HasSuffix(rest, "DONE\n") {
		t.Fatalf("probe: exit %d\n%s\nstderr: %s", e.Code(), out, r.stderr.String())
	}
	if strings.Contains(out, secret) || strings.Contains(r.stderr.String(), secret) {
		t.Errorf("the secret leaked:\n%s", out)
	}
	var fds [][2]any
	for _, l := range lines {
		if f, ok := strings.CutPrefix(l, "FDS "); ok {
			if err := json.Unmarshal([]byte(f), &fds); err != nil {
				t.Fatal(err)
			}
		}
	}
	var nums []float64
	for _, f := range fds {
		nums = append(nums, f[0].(float64))
	}
	if !slices.Equal(nums, []float64{0, 1, 2}) {
		t.Errorf("the program has descriptors %v, want only 0 1 2", fds)
	}
	for _, prefix := range []string{"OPEN", "REACHED", "CHDIR", "READ", "OPENAT"} {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix+" ") {
				t.Errorf("reached a host descriptor: %s", l)
			}
		}
	}
}

// The host's supplementary groups never reach a sandbox: not its init's
// threads (it skips the all-threads drop when the start already made it),
// nor what runs inside.
func TestEscapeHostSupplementaryGroups(t *testing.T) {
	h := testHost(t)
	if err := syscall.Setgroups([]int{4242, 4243}); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setgroups(nil)
	sb := startSandbox(t, h, testLimits())
	pid := sb.proc.Pid
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the init's threads: %v", err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if g, ok := strings.CutPrefix(line, "Groups:"); ok && strings.TrimSpace(g) != "" {
				t.Errorf("init thread %s has supplementary groups %q", task.Name(), strings.TrimSpace(g))
			}
		}
	}
	r := spawnPipes(t, sb, "/bin/sh", "-c", "grep Groups: /proc/self/status")
	if got := strings.TrimSpace(strings.TrimPrefix(r.readLine(t), "Groups:")); got != "" {
		t.Errorf("a program in the sandbox has supplementary groups %q", got)
	}
	r.wait(t, sb)
}
