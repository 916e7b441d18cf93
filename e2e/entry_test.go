package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/exeseal"
	"airlock/internal/testenv"
)

// The sandbox entry, seen from inside real sessions: a pooled Python
// session (its runtime forked by the template, never exec'd) and a bash
// session (spawned by the sandbox's init) read their own
// /proc/self/status and try what only Landlock refuses. Both must show
// every layer (jail.planEntry's expectation).
func TestSessionEntryStatus(t *testing.T) {
	checkEntryStatus(t, sharedServer(t))
}

// checkEntryStatus checks the entry of a pooled python and a bash session
// of s.
func checkEntryStatus(t *testing.T, s *server) {
	filters := ownSeccompFilters(t) + 1
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
		"Seccomp": "2", "Seccomp_filters": strconv.Itoa(filters),
		"Uid": "1000\t1000\t1000\t1000", "Gid": "1000\t1000\t1000\t1000", "Groups": "",
		// A character device in /tmp: refused by Landlock (EACCES) before
		// the missing CAP_MKNOD (EPERM) is looked at.
		"mknod": "EACCES",
	}
	pyCode := `
import errno, os
print(open("/proc/self/status").read())
print("cmdline:", open("/proc/self/cmdline").read().replace("\0", " "))
try:
    os.mknod("/tmp/dev", 0o20600, os.makedev(1, 3))
    print("mknod: ok")
except OSError as e:
    print("mknod:", errno.errorcode[e.errno])
`
	cases := []struct {
		name, lang, code string
		// oneShot: run as a one-shot, whose code needs none of the
		// preloads: its runtime is forked by the lean template.
		oneShot bool
		// cold: run as a program by `airlock run --cold`, whose runtime,
		// started for it, runs without site (the code is lean).
		cold bool
	}{
		{"python", "python", pyCode, false, false},
		{"python lean one-shot", "python", pyCode, true, false},
		{"python lean program, cold", "python", pyCode, false, true},
		{"bash", "bash", `
while IFS= read -r line; do echo "$line"; done < /proc/$$/status
if python3 -c 'import os; os.mknod("/tmp/dev", 0o20600, os.makedev(1, 3))' 2>/tmp/err; then echo "mknod: ok"
else grep -q "Permission denied" /tmp/err && echo "mknod: EACCES" || { echo -n "mknod: "; cat /tmp/err; }; fi
`, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r *apitype.Result
			if c.cold {
				prog := filepath.Join(t.TempDir(), "entry.py")
				if err := os.WriteFile(prog, []byte(c.code), 0o644); err != nil {
					t.Fatal(err)
				}
				out, errOut, code := runCLI(t, "", "run", "--cold", prog)
				if code != 0 {
					t.Fatalf("airlock run --cold: status %d\n%s", code, errOut)
				}
				r = &apitype.Result{Stdout: out, Stderr: errOut}
			} else if c.oneShot {
				lean := s.leanUses()
				res, err := s.c.RunOnce(context.Background(), apitype.OneShotRequest{Language: c.lang, Code: c.code}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if s.leanUses() != lean+1 {
					t.Errorf("the one-shot did not take a lean sandbox (lean pool uses %d, then %d)", lean, s.leanUses())
				}
				r = res.Result
			} else {
				r = s.exec(s.newSession(c.lang, nil), c.code)
			}
			got := map[string]string{}
			for _, l := range strings.Split(r.Stdout, "\n") {
				k, v, ok := strings.Cut(l, ":")
				if ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q\n%s%s", k, got[k], v, r.Stdout, r.Stderr)
				}
			}
			// The Python session is the template's child: the start path
			// this test is about.
			if c.cold {
				if !strings.Contains(got["cmdline"], " -S ") {
					t.Errorf("the cold lean program's runtime was not started without site: cmdline %q", got["cmdline"])
				}
			} else if c.lang == "python" && !strings.Contains(got["cmdline"], "airlock_zygote") {
				t.Errorf("the python session was not forked by the template: cmdline %q\n%s", got["cmdline"], s.stderr.String())
			}
		})
	}
}

// ownSeccompFilters is how many seccomp filters the test (and so the
// server it starts) already runs under.
func ownSeccompFilters(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp_filters:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	testenv.Skip(t, "this kernel does not report Seccomp_filters")
	return 0
}

// A default `go build ./cmd/airlock` turns cgo on when a C compiler is
// there; the runtime then has no syscall.AllThreadsSyscall, which the
// init once needed for its cgroup namespace ("unshare cgroup namespace:
// operation not supported"). Such a binary must build jails like the one
// the tests use: a one-shot run, and a server's pooled python (forked by
// the template, which joins the init's namespaces) and bash sessions.
func TestDefaultBuildWithCgo(t *testing.T) {
	airlockBinary(t) // the privileged tier's skip
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CGO_ENABLED=") {
			env = append(env, kv)
		}
	}
	if _, err := exec.LookPath("gcc"); err == nil {
		env = append(env, "CGO_ENABLED=1") // what the default is then
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	build := exec.Command("go", "build", "-o", bin, "../cmd/airlock")
	build.Env = env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	_, gccErr := exec.LookPath("gcc")
	if withCgo := strings.Contains(string(info), "CGO_ENABLED=1"); withCgo != (gccErr == nil) {
		t.Fatalf("gcc found: %v, but the binary was built with cgo %v:\n%s", gccErr == nil, withCgo, info)
	}

	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(open('/proc/self/cgroup').read().splitlines()[-1])\nprint([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].strip())\n"), 0o644)
	cmd := exec.Command(bin, "run", "--cold", prog)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "NoNewPrivs:\t1") || !strings.Contains(string(out), "::/") {
		t.Fatalf("airlock run: %v\n%s", err, out)
	}
	checkEntryStatus(t, startServerBin(t, bin, nil))
}

// The binary scripts/build.sh makes runs every sandbox's init, and its
// spawner, from the small init built into it (cmd/airlock-init, package
// exeseal), not from a copy of itself. checked against a mutant: with
// the harness building by a plain go build, the server's inits ran the
// whole binary and the test failed.
func TestEmbeddedInit(t *testing.T) {
	s := sharedServer(t)
	s.exec(s.newSession("python", nil), "x = 1")
	bin, err := os.Stat(airlockBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.stderr.String(), "init:"+exeseal.FromEmbedded) {
		t.Errorf("the server does not say its init is the embedded one:\n%s", s.stderr.String())
	}
	found := map[string]int{}
	for _, pid := range descendants(t, s.cmd.Process.Pid) {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue // gone
		}
		arg0, _, _ := strings.Cut(string(cmdline), "\x00")
		if arg0 != "airlock-init" && arg0 != "airlock-spawner" {
			continue
		}
		exe, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil {
			continue // exited, or exec'd the template
		}
		found[arg0]++
		if exe.Size() >= bin.Size()/4 {
			t.Errorf("%s (pid %d) runs a %d-byte executable, the airlock binary is %d bytes", arg0, pid, exe.Size(), bin.Size())
		}
		checkSealedExe(t, "/proc/"+strconv.Itoa(pid)+"/exe")
	}
	if found["airlock-init"] == 0 || found["airlock-spawner"] == 0 {
		t.Errorf("found %v under the server, want inits and its spawner", found)
	}
}

// checkSealedExe fails unless the executable at path is a memfd sealed
// against every change or a file on a read-only mount.
func checkSealedExe(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Errorf("open %s: %v", path, err)
		return
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if link, _ := os.Readlink(path); strings.HasPrefix(link, "/memfd:") {
		want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || seals&want != want {
			t.Errorf("%s has seals %#x, want %#x: %v", path, seals, want, err)
		}
	} else if unix.Fstatfs(fd, &st) != nil || st.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("%s (%s) is neither a sealed memfd nor on a read-only mount", path, link)
	}
	if wfd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		if n, err := unix.Write(wfd, []byte{0}); err == nil || n > 0 {
			t.Errorf("wrote to %s", path)
		}
		unix.Close(wfd)
	}
}

// descendants lists the processes under pid.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for q, n := parent[p], 0; q > 1 && n < 100; q, n = parent[q], n+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// leanUses counts the sandboxes the server's lean pool has handed out.
func (s *server) leanUses() uint64 {
	h, err := s.c.Health(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var q apitype.PoolStats
	json.Unmarshal(h.Pool["python"+apitype.LeanPoolSuffix], &q)
	return q.Hits + q.Misses
}
