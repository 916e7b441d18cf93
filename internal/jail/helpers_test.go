package jail

// Helpers for the privileged jail tests: one shared Host, a guard that
// checks every test leaves the host as it found it, and small wrappers to
// run Python, bash and raw programs in sandboxes.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/lockfile"
)

// ---------------------------------------------------------------------
// The shared Host.

var shared struct {
	once sync.Once
	h    *Host
	err  error
}

// sharedHost builds the one Host every test uses, sweeps what killed test
// runs left behind, and warms it up with one sandbox, so that what the
// Host and the Go runtime create once and keep (the cgroup notifier's epoll
// instance and its goroutine, the netpoller) exists before any test takes
// its leak snapshot.
func sharedHost() (*Host, error) {
	shared.once.Do(func() {
		h, err := NewHost(newTestHostOptions())
		if err != nil {
			shared.err = err
			return
		}
		h.Cgroups().Sweep("t-", func(name string) bool {
			pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "t-"), "-", 2)[0])
			return err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH
		})
		res, err := runOnce(context.Background(), h, RunRequest{Spec: testSpec(testLimits()), Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("warm-up run exited %d: %s", res.ExitCode, res.Stderr)
		}
		if err != nil {
			h.Close()
			shared.err = fmt.Errorf("warm-up: %w", err)
			return
		}
		// The template (and its reader goroutine) exists before any
		// test's leak snapshot, like the host.
		if TemplateStart != nil {
			templateErr = TemplateStart(h)
		}
		shared.h = h
	})
	return shared.h, shared.err
}

func closeSharedHost() {
	if shared.h == nil {
		return
	}
	if TemplateStop != nil {
		TemplateStop()
	}
	shared.h.Close() // and with it the cgroup parent
	// The state directory (root templates) goes too, unless something is
	// still mounted from it: then it is a leak the tests must show.
	dir := newTestHostOptions().StateDir
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && !strings.Contains(string(mi), dir+"/") {
		os.RemoveAll(dir)
	}
}

// ---------------------------------------------------------------------
// Which sandboxes a test made.

var specLog struct {
	mu    sync.Mutex
	specs []Spec
}

func logSpec(s Spec) {
	specLog.mu.Lock()
	specLog.specs = append(specLog.specs, s)
	specLog.mu.Unlock()
}

func specCount() int {
	specLog.mu.Lock()
	defer specLog.mu.Unlock()
	return len(specLog.specs)
}

func specsSince(n int) []Spec {
	specLog.mu.Lock()
	defer specLog.mu.Unlock()
	return append([]Spec(nil), specLog.specs[n:]...)
}

// ---------------------------------------------------------------------
// The leak guard.

type hostSnapshot struct {
	fds        map[string]string // fd number -> link target
	goroutines int
	mounts     map[string]bool
	specs      int
}

func takeSnapshot() hostSnapshot {
	return hostSnapshot{fds: openFDs(), goroutines: runtime.NumGoroutine(), mounts: mountLines(), specs: specCount()}
}

// guardHost checks, when the test ends, that nothing of the test's
// sandboxes is left on the host and that the test process leaked nothing.
func guardHost(t testing.TB, h *Host) {
	t.Helper()
	before := takeSnapshot()
	t.Cleanup(func() { before.verify(t, h) })
}

func (s hostSnapshot) verify(t testing.TB, h *Host) {
	t.Helper()
	specs := specsSince(s.specs)
	// Processes and cgroups: checked at once, with no grace period. When
	// Run or Close returns, the kernel has already reaped everything.
	for _, p := range sandboxProcesses(h, specs) {
		t.Errorf("leak: process left on the host: %s", p)
	}
	for _, sp := range specs {
		for _, d := range cgroupDirs(sp.Name) {
			t.Errorf("leak: cgroup left on the host: %s", d)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(newTestHostOptions().StateDir, "root")); err != nil || len(ents) != 0 {
		t.Errorf("leak: the staging directory is not empty on the host: %v %v", ents, err)
	}
	for l := range mountLines() {
		if !s.mounts[l] {
			t.Errorf("leak: new mount on the host: %s", l)
		}
	}
	// Descriptors and goroutines: the readers of a finished run end
	// asynchronously, so allow them time (seconds on a loaded host; a
	// leak stays for good, so a long deadline costs a clean run nothing).
	var extraFDs []string
	var goroutines int
	for deadline := time.Now().Add(30 * time.Second); ; {
		extraFDs = extraFDs[:0]
		for fd, target := range openFDs() {
			if s.fds[fd] != target && !templateLease(target) {
				extraFDs = append(extraFDs, fd+" -> "+target)
			}
		}
		goroutines = runtime.NumGoroutine()
		if (len(extraFDs) == 0 && goroutines <= s.goroutines) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	sort.Strings(extraFDs)
	for _, f := range extraFDs {
		t.Errorf("leak: descriptor left open in the test process: %s", f)
	}
	if goroutines > s.goroutines {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("leak: %d goroutines, %d before the test:\n%s", goroutines, s.goroutines, buf)
	}
}

// templateLease reports whether target is a root template's lease in the
// test hosts' state directory: the first test that uses a template makes
// the process lease it for the rest of its life (rootfs.lease), as a
// server does, so it is not a leak of that test.
func templateLease(target string) bool {
	dir, name := filepath.Split(target)
	return filepath.Clean(dir) == newTestHostOptions().StateDir &&
		strings.HasPrefix(name, "rootfs-") && strings.HasSuffix(name, ".lease")
}

// openFDs lists the test process's descriptors.
func openFDs() map[string]string {
	out := map[string]string{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the descriptor ReadDir itself used
		}
		out[e.Name()] = target
	}
	return out
}

// mountLines returns the host's mount table without the mount ids, which
// are the only fields that change when the same mounts are redone.
func mountLines() map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.Contains(f[4], "/gvisor/") {
			// gVisor sandboxes (of servers other packages' tests run at
			// the same time) have their scratch mounts on the host, under
			// <state_dir>/gvisor; the jail never mounts anything there.
			continue
		}
		if len(f) > 2 {
			out[strings.Join(f[2:], " ")] = true
		}
	}
	return out
}

// cgroupDirs returns the cgroup directories of the sandbox named name that
// exist on the host, in every hierarchy.
func cgroupDirs(name string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/airlock-test/" + name, "/sys/fs/cgroup/airlock-test/" + name} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// sandboxProcesses describes every host process that runs with one of the
// host ids of specs' sandboxes or sits in one of their cgroups.
func sandboxProcesses(h *Host, specs []Spec) []string {
	ids := map[string]bool{}
	cgs := map[string]bool{}
	for _, sp := range specs {
		root, user := h.IDs(sp.Slot)
		ids[strconv.Itoa(root)] = true
		ids[strconv.Itoa(user)] = true
		cgs["/airlock-test/"+sp.Name] = true
	}
	var out []string
	for _, p := range hostPids() {
		// Every thread: ids are per thread, and a host thread that kept a
		// sandbox's filesystem ids counts as much as a process.
		tasks, _ := os.ReadDir("/proc/" + p + "/task")
		for _, task := range tasks {
			status, err := os.ReadFile("/proc/" + p + "/task/" + task.Name() + "/status")
			if err != nil {
				continue // gone meanwhile
			}
			for _, l := range strings.Split(string(status), "\n") {
				k, v, _ := strings.Cut(l, ":")
				if k != "Uid" && k != "Gid" {
					continue
				}
				for _, id := range strings.Fields(v) {
					if ids[id] {
						out = append(out, fmt.Sprintf("pid %s thread %s with %s %s", p, task.Name(), k, strings.TrimSpace(v)))
						break
					}
				}
			}
		}
		cg, _ := os.ReadFile("/proc/" + p + "/cgroup")
		for _, l := range strings.Split(string(cg), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) == 3 && cgs[strings.TrimSuffix(parts[2], "/")] {
				out = append(out, fmt.Sprintf("pid %s in cgroup %s", p, parts[2]))
			}
		}
	}
	return out
}

func hostPids() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// cgroupPids lists the host pids in the sandbox's cgroup.
func cgroupPids(t testing.TB, name string) []int {
	t.Helper()
	var file string
	for _, d := range append([]string{"/sys/fs/cgroup/pids/airlock-test/" + name}, "/sys/fs/cgroup/airlock-test/"+name) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			file = filepath.Join(d, "cgroup.procs")
			break
		}
	}
	if file == "" {
		t.Fatalf("no cgroup.procs for %s", name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// ---------------------------------------------------------------------
// Running things.

// randomToken returns 16 random hex digits.
func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// runReq runs req with a fresh test spec with limits l.
func runReq(t testing.TB, h *Host, l config.Limits, req RunRequest) *RunResult {
	t.Helper()
	req.Spec = testSpec(l)
	res, err := runOnce(context.Background(), h, req)
	if err != nil {
		t.Fatalf("Run %v: %v", req.Argv, err)
	}
	return res
}

// runPythonArgs runs code as /workspace/main.py with extra arguments.
func runPythonArgs(t testing.TB, h *Host, l config.Limits, code string, args ...string) *RunResult {
	t.Helper()
	return runReq(t, h, l, RunRequest{
		Argv:  append([]string{"/usr/bin/python3", "/workspace/main.py"}, args...),
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader(code)}},
	})
}

// runBash runs script with bash.
func runBash(t testing.TB, h *Host, l config.Limits, script string) *RunResult {
	t.Helper()
	return runReq(t, h, l, RunRequest{
		Argv:  []string{"/bin/bash", "/workspace/main.sh"},
		Files: []InputFile{{Path: "main.sh", Data: strings.NewReader(script)}},
	})
}

// jsonArg encodes v for passing as a program argument.
func jsonArg(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// describe formats a result for failure messages.
func describe(res *RunResult) string {
	return fmt.Sprintf("exit %d killed %v (%q) duration %v cpu %v peak memory %d\nstdout:\n%s\nstderr:\n%s",
		res.ExitCode, res.Killed, res.KillReason, res.Duration, res.CPU, res.PeakMemory, clip(res.Stdout), clip(res.Stderr))
}

func clip(b []byte) string {
	if len(b) > 8192 {
		return string(b[:8192]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return string(b)
}

// mustFinish fails unless the program exited 0, unkilled, and printed the
// sentinel "DONE" as its last line: proof that every probe before it ran.
func mustFinish(t testing.TB, res *RunResult) {
	t.Helper()
	if res.ExitCode != 0 || res.Killed || !bytes.HasSuffix(res.Stdout, []byte("DONE\n")) {
		t.Fatalf("the probe did not run to the end: %s", describe(res))
	}
}

// noSecret fails if any secret appears in the program's output.
func noSecret(t testing.TB, res *RunResult, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			t.Fatal("empty secret")
		}
		if bytes.Contains(res.Stdout, []byte(s)) || bytes.Contains(res.Stderr, []byte(s)) {
			t.Errorf("the secret %q leaked into the sandbox: %s", s, describe(res))
		}
	}
}

// linesWith returns the lines of out that start with prefix.
func linesWith(out []byte, prefix string) []string {
	var l []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			l = append(l, sc.Text())
		}
	}
	return l
}

// startHostProcess starts argv on the host as the test's child, with env,
// and kills it when the test ends.
func startHostProcess(t testing.TB, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// alive reports whether pid exists and is neither a zombie nor on its
// way to be one (a process just killed may still be exiting).
func alive(pid int) bool { return lockfile.Alive(pid) }

// startSandbox starts a sandbox the test drives itself; it is closed when
// the test ends.
func startSandbox(t testing.TB, h *Host, l config.Limits) *Sandbox {
	t.Helper()
	sb, err := h.Start(context.Background(), testSpec(l))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

// running is a program started with spawnPipes.
type running struct {
	pid    int // inside the sandbox
	stdin  *os.File
	stdout *bufio.Reader
	outF   *os.File
	stderr bytes.Buffer
	errW   sync.WaitGroup
}

// spawnPipes starts argv in sb with pipes on its stdio.
func spawnPipes(t testing.TB, sb *Sandbox, argv ...string) *running {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := sb.Spawn(Process{Argv: argv, Env: BaseEnv(), Dir: "/workspace", Files: []*os.File{inR, outW, errW}})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		t.Fatalf("Spawn %v: %v", argv, err)
	}
	r := &running{pid: pid, stdin: inW, stdout: bufio.NewReader(outR), outF: outR}
	r.errW.Add(1)
	go func() {
		io.Copy(&r.stderr, errR)
		errR.Close()
		r.errW.Done()
	}()
	t.Cleanup(func() {
		r.stdin.Close()
		r.outF.Close()
	})
	return r
}

// readLine reads one line of the program's stdout, failing after 10s.
func (r *running) readLine(t testing.TB) string {
	t.Helper()
	type line struct {
		s   string
		err error
	}
	c := make(chan line, 1)
	go func() {
		s, err := r.stdout.ReadString('\n')
		c <- line{s, err}
	}()
	select {
	case l := <-c:
		if l.err != nil {
			r.errW.Wait()
			t.Fatalf("reading the program's output: %v (stderr %q)", l.err, r.stderr.String())
		}
		return strings.TrimSuffix(l.s, "\n")
	case <-time.After(10 * time.Second):
		t.Fatal("no output from the program within 10s")
	}
	return ""
}

// wait closes stdin and waits for the program's exit, reading its remaining
// output.
func (r *running) wait(t testing.TB, sb *Sandbox) (Exit, string) {
	t.Helper()
	r.stdin.Close()
	rest, _ := io.ReadAll(r.stdout)
	r.errW.Wait()
	select {
	case e := <-sb.Exits():
		if e.Pid != r.pid {
			t.Fatalf("exit of pid %d, want %d", e.Pid, r.pid)
		}
		return e, string(rest)
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not exit within 10s")
	}
	return Exit{}, ""
}

// errnoName maps the errno values the tests expect to their names.
func errnoName(e int) string {
	if e == 0 {
		return "0"
	}
	return syscall.Errno(e).Error()
}
