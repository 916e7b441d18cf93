package cgroup

import (
	"airlock/internal/testenv"
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testParent is where these tests make their cgroups: apart from the jail
// tests' "airlock-test", which may run at the same time.
const testParent = "airlock-test-cgroup"

func TestOpenRejectsBadParents(t *testing.T) {
	// Checked before anything touches the host: no root needed.
	for _, p := range []string{"", "/airlock", "/sys/fs/cgroup", "../airlock", "a/../../b", "..", "a/.."} {
		if h, err := Open(p); err == nil {
			t.Errorf("Open(%q) = %+v", p, h)
		}
	}
}

func testCgroupHost(t *testing.T) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to create cgroups")
	}
	h, err := Open(testParent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// parentDirs are the parent's directories on every hierarchy in use.
func parentDirs(h *Host) []string {
	if h.v2 {
		return []string{h.v2Dir}
	}
	return uniq(h.v1Dirs)
}

// The parent goes with the last Host that closes, and not before: a
// parent with a sandbox in it stays.
func TestCloseRemovesTheParent(t *testing.T) {
	a := testCgroupHost(t)
	b := testCgroupHost(t)
	cg, err := b.New("busy", Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Destroy() })
	dirs := parentDirs(a)
	if len(dirs) == 0 {
		t.Fatal("no parent directories")
	}
	a.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("parent %s removed while a cgroup under it lives: %v", d, err)
		}
	}
	if err := cg.Destroy(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("parent %s left after the last Close: %v", d, err)
		}
	}
	// A Host whose parent was removed under it still makes cgroups.
	c := testCgroupHost(t)
	for _, d := range parentDirs(c) {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	again, err := c.New("again", Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	if err != nil {
		t.Fatalf("New after the parent went: %v", err)
	}
	if err := again.Destroy(); err != nil {
		t.Error(err)
	}
}

var seq int

// newCgroup makes a uniquely named cgroup, checked to be gone when the
// test ends.
func newCgroup(t *testing.T, h *Host, r Resources) *Cgroup {
	t.Helper()
	seq++
	name := "c-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(seq)
	c, err := h.New(name, r)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	t.Cleanup(func() {
		c.Kill()
		c.Destroy()
		if left := dirsOf(h, name); len(left) > 0 {
			t.Errorf("cgroup directories left: %v", left)
		}
	})
	return c
}

// dirsOf lists the directories of cgroup name that exist, in every
// hierarchy.
func dirsOf(h *Host, name string) []string {
	var out []string
	cand := []string{filepath.Join(h.v2Dir, name)}
	if !h.v2 {
		cand = nil
		for _, d := range uniq(h.v1Dirs) {
			cand = append(cand, filepath.Join(d, name))
		}
	}
	for _, d := range cand {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

func read(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sleeper starts a host process that waits for a line on stdin and then
// runs script, and puts it into c.
func sleeper(t *testing.T, c *Cgroup, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := c.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd, in
}

func TestNewRejectsBadNames(t *testing.T) {
	h := testCgroupHost(t)
	for _, name := range []string{"", ".", "..", "a/b", "/x", "../x", "x\x00y"} {
		if c, err := h.New(name, Resources{Memory: 64 << 20, Pids: 8, CPUs: 1}); err == nil {
			c.Destroy()
			t.Errorf("New(%q) succeeded", name)
		}
	}
	// Limits that are not positive: nothing is left behind either.
	for _, r := range []Resources{{Memory: 0, Pids: 8, CPUs: 1}, {Memory: 64 << 20, Pids: 0, CPUs: 1},
		{Memory: 64 << 20, Pids: 8, CPUs: 0}, {Memory: -1, Pids: 8, CPUs: 1}} {
		name := "bad-" + strconv.Itoa(os.Getpid())
		if c, err := h.New(name, r); err == nil {
			c.Destroy()
			t.Errorf("New with %+v succeeded", r)
		}
		if left := dirsOf(h, name); len(left) > 0 {
			t.Errorf("a refused New left %v", left)
		}
	}
}

func TestLimitsApplied(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 16, CPUs: 0.5})
	if h.v2 {
		d := c.dir("")
		for file, want := range map[string]string{"memory.max": strconv.Itoa(64 << 20), "memory.swap.max": "0",
			"pids.max": "16", "cpu.max": "50000 100000", "memory.oom.group": "1"} {
			if got := read(t, d, file); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	} else {
		mem := c.dir("memory")
		if got := read(t, mem, "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
		if h.memsw {
			if got := read(t, mem, "memory.memsw.limit_in_bytes"); got != strconv.Itoa(64<<20) {
				t.Errorf("memory.memsw.limit_in_bytes = %s: swap is not off", got)
			}
		}
		if got := read(t, mem, "memory.swappiness"); got != "0" {
			t.Errorf("memory.swappiness = %s", got)
		}
		if got := read(t, c.dir("pids"), "pids.max"); got != "16" {
			t.Errorf("pids.max = %s", got)
		}
		if got := read(t, c.dir("cpu"), "cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("cpu.cfs_quota_us = %s", got)
		}
		if got := read(t, c.dir("cpu"), "cpu.cfs_period_us"); got != "100000" {
			t.Errorf("cpu.cfs_period_us = %s", got)
		}
	}
	// A tiny CPU share is raised to the kernel's 1ms minimum.
	if err := c.Set(Resources{Memory: 32 << 20, Pids: 4, CPUs: 0.001}); err != nil {
		t.Fatal(err)
	}
	if h.v2 {
		if got := read(t, c.dir(""), "cpu.max"); got != "1000 100000" {
			t.Errorf("cpu.max = %q", got)
		}
	} else if got := read(t, c.dir("cpu"), "cpu.cfs_quota_us"); got != "1000" {
		t.Errorf("cpu.cfs_quota_us = %s", got)
	}
	if err := c.Set(Resources{Memory: 32 << 20, Pids: -1, CPUs: 1}); err == nil {
		t.Error("Set with negative pids succeeded")
	}
}

// A background cgroup has the lowest CPU weight until it is set back;
// Set (a session's limits) leaves the weight alone, and SetBackground the
// limits.
func TestBackgroundWeight(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 16, CPUs: 0.5})
	file, low, normal, quota := "cpu.weight", "1", "100", "cpu.max"
	if !h.v2 {
		file, low, normal, quota = "cpu.shares", "2", "1024", "cpu.cfs_quota_us"
	}
	check := func(want string, bg bool) {
		t.Helper()
		if got := read(t, c.dir("cpu"), file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
		if got, err := c.Background(); err != nil || got != bg {
			t.Errorf("Background() = %v, %v; want %v", got, err, bg)
		}
	}
	check(normal, false)
	if err := c.SetBackground(true); err != nil {
		t.Fatal(err)
	}
	check(low, true)
	if err := c.Set(Resources{Memory: 32 << 20, Pids: 8, CPUs: 0.25}); err != nil {
		t.Fatal(err)
	}
	check(low, true)
	q := read(t, c.dir("cpu"), quota)
	if err := c.SetBackground(false); err != nil {
		t.Fatal(err)
	}
	check(normal, false)
	if got := read(t, c.dir("cpu"), quota); got != q {
		t.Errorf("%s = %q after SetBackground, want %q kept", quota, got, q)
	}
}

func TestAddKillDestroy(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	cmd, in := sleeper(t, c, "sleep 30 & sleep 30 & wait")
	io.WriteString(in, "go\n")
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	if !strings.Contains(string(cg), "/"+testParent+"/"+c.Name()) {
		t.Fatalf("the process is not in the cgroup: %s", cg)
	}
	if _, err := c.Stats(); err != nil {
		t.Errorf("Stats: %v", err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process ended with %v, want SIGKILL", err)
	}
	if err := c.Destroy(); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	if left := dirsOf(h, c.Name()); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

func waitEvent(t *testing.T, c *Cgroup, want Event) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-c.Events():
			if ev == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %v event within 10s", want)
		}
	}
}

func TestPidsEvent(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 4, CPUs: 1})
	_, in := sleeper(t, c, "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; wait")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // as a watch polls
		for again := c.PollPids(); again > 0; again = c.PollPids() {
			select {
			case <-stop:
				return
			case <-time.After(again):
			}
		}
	}()
	io.WriteString(in, "go\n")
	waitEvent(t, c, EventPidsMax)
	if s, err := c.Stats(); err != nil || s.PidsMax == 0 {
		t.Errorf("Stats = %+v, %v; want refused forks counted", s, err)
	}
}

func TestOOMEvent(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 32 << 20, Pids: 16, CPUs: 1})
	cmd, in := sleeper(t, c, `exec /usr/bin/python3 -c 'b = [b"x" * (4 << 20) for _ in range(64)]'`)
	io.WriteString(in, "go\n")
	waitEvent(t, c, EventOOM)
	cmd.Wait()
	s, err := c.Stats()
	if err != nil || s.OOMKills == 0 || s.MemoryPeak > 32<<20 || s.MemoryPeak < 16<<20 {
		t.Errorf("Stats = %+v, %v; want an OOM kill at a peak close to 32M", s, err)
	}
	if s.CPU <= 0 {
		t.Errorf("no CPU time counted: %+v", s)
	}
}

func TestSweep(t *testing.T) {
	h := testCgroupHost(t)
	prefix := "sweep-" + strconv.Itoa(os.Getpid()) + "-"
	r := Resources{Memory: 64 << 20, Pids: 8, CPUs: 1}
	stale, err := h.New(prefix+"stale", r)
	if err != nil {
		t.Fatal(err)
	}
	live, err := h.New(prefix+"live", r)
	if err != nil {
		stale.Destroy()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		live.Kill()
		live.Destroy()
		stale.Destroy()
	})
	cmd, in := sleeper(t, stale, "sleep 30")
	io.WriteString(in, "go\n")
	var asked []string
	if err := h.Sweep(prefix, func(name string) bool {
		asked = append(asked, name)
		return name == prefix+"stale"
	}); err != nil {
		t.Fatal(err)
	}
	// (Asked once per hierarchy on v1.)
	seen := map[string]bool{}
	for _, n := range asked {
		seen[n] = true
	}
	if len(seen) != 2 || !seen[prefix+"stale"] || !seen[prefix+"live"] {
		t.Errorf("Sweep asked about %v, want the two cgroups with the prefix", asked)
	}
	if left := dirsOf(h, prefix+"stale"); len(left) > 0 {
		t.Errorf("the stale cgroup is still there: %v", left)
	}
	if len(dirsOf(h, prefix+"live")) == 0 {
		t.Error("Sweep removed a live cgroup")
	}
	// The stale cgroup's process was killed with it.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("the stale cgroup's process survived the sweep")
	}
}

func TestCPUAccounting(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 8, CPUs: 1})
	cmd, in := sleeper(t, c, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	io.WriteString(in, "go\n")
	cmd.Wait()
	used, err := c.CPU()
	if err != nil || used < 10*time.Millisecond {
		t.Errorf("CPU = %v, %v; want the loop's CPU time", used, err)
	}
}

// The counters kept open read afresh each time (a descriptor read again
// at its end would give nothing), and Destroy closes them: no descriptor
// outlives the cgroup, and a read after it fails.
func TestCountersReadAfresh(t *testing.T) {
	h := testCgroupHost(t)
	var c *Cgroup
	// fds counts this process's descriptors of c's counter files.
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			p, _ := os.Readlink("/proc/self/fd/" + e.Name())
			if strings.Contains(p, "/"+c.Name()+"/") && !strings.HasSuffix(p, "memory.oom_control") {
				n++
			}
		}
		return n
	}
	c = newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 8, CPUs: 1})
	before := fds()
	// The watched files: pids.events and memory.events on v2, none on
	// v1 (which never signals pids.events: PollPids reads it).
	if want := map[bool]int{true: 2, false: 0}[h.v2]; before != want {
		t.Errorf("%d descriptors of watched files, want %d", before, want)
	}
	first, err := c.CPU()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // the same descriptor, read again
		if _, err := c.Stats(); err != nil {
			t.Fatalf("Stats: %v", err)
		}
	}
	// The CPU counter, the memory peak, pids.events, and on v2
	// memory.events (v1's memory.oom_control is not counted: its watch
	// keeps one open anyway).
	if opened := fds() - before; opened < 3 || opened > 4 {
		t.Errorf("%d descriptors kept open, want Stats' counters", opened)
	}
	cmd, in := sleeper(t, c, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	io.WriteString(in, "go\n")
	cmd.Wait()
	used, err := c.CPU()
	if err != nil || used < first+10*time.Millisecond {
		t.Errorf("CPU = %v, %v after the loop (%v before): want it read afresh", used, err, first)
	}
	if st, err := c.Stats(); err != nil || st.CPU != used {
		t.Errorf("Stats = %+v, %v; want CPU %v", st, err, used)
	}
	c.Kill()
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	// None at all: neither the counters nor the watched files.
	if left := fds(); left != 0 {
		t.Errorf("%d descriptors left open after Destroy", left)
	}
	if _, err := c.CPU(); err == nil {
		t.Error("CPU read after Destroy succeeded")
	}
}

func TestEventString(t *testing.T) {
	for ev, want := range map[Event]string{EventOOM: "oom", EventPidsMax: "pids", 0: "unknown", 99: "unknown"} {
		if ev.String() != want {
			t.Errorf("%d.String() = %q", ev, ev.String())
		}
	}
}

// threadCgroups is the cgroup file of every thread of this process.
func threadCgroups(t *testing.T) map[string]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, task := range tasks {
		if b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup"); err == nil {
			out[task.Name()] = string(b)
		}
	}
	return out
}

// A process StartIn starts is born in the cgroup: what it reads of its
// own cgroups as its first act names the cgroup in every hierarchy. And
// no thread of this process is left in the cgroup afterwards (on v1 one
// enters it to clone the process).
func TestStartInBornThere(t *testing.T) {
	h := testCgroupHost(t)
	c := newCgroup(t, h, Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	before := threadCgroups(t)
	for i := 0; i < 3; i++ {
		cmd := exec.Command("/bin/sh", "-c", "cat /proc/self/cgroup; echo END; read go")
		if fd, ok := c.IntoFD(); ok {
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartIn(cmd.Start); err != nil {
			t.Fatal(err)
		}
		// sh reads it as its first act: nothing moves the process later.
		var first strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != "END" {
			first.WriteString(sc.Text() + "\n")
		}
		got := 0
		for _, l := range strings.Split(first.String(), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) < 3 {
				continue
			}
			inIt := strings.TrimSuffix(parts[2], "/") == "/"+testParent+"/"+c.Name()
			for _, ctl := range append(strings.Split(parts[1], ","), "unified") {
				if (h.v2 && parts[0] == "0" && ctl == "unified") || (!h.v2 && slices.Contains(v1Controllers, ctl)) {
					if !inIt {
						t.Errorf("the process started in %s for %s, not in the cgroup", parts[2], ctl)
					}
					got++
				}
			}
		}
		if got == 0 || (!h.v2 && got < len(v1Controllers)) {
			t.Errorf("no cgroup of the sandbox's hierarchies in:\n%s", first.String())
		}
		pids, err := c.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pids, []int{cmd.Process.Pid}) {
			t.Errorf("the cgroup holds %v, want only the process, %d", pids, cmd.Process.Pid)
		}
		if ok, err := c.Holds(cmd.Process.Pid); !ok || err != nil {
			t.Errorf("Holds(%d) = %v, %v", cmd.Process.Pid, ok, err)
		}
		if ok, err := c.Holds(os.Getpid()); ok || err != nil {
			t.Errorf("Holds(this process) = %v, %v", ok, err)
		}
		in.Close()
		cmd.Wait()
	}
	for task, cg := range threadCgroups(t) {
		if was, ok := before[task]; ok && was != cg {
			t.Errorf("thread %s moved from\n%s\nto\n%s", task, was, cg)
		}
		if strings.Contains(cg, c.Name()) {
			t.Errorf("thread %s left in the cgroup:\n%s", task, cg)
		}
	}
}

// The limit pools size themselves from sees one set on the sandboxes'
// parent (as an operator, or a pod's cgroup above it, would set it), and
// a sandbox's PSS is its processes'.
func TestMemoryLimitAndPSS(t *testing.T) {
	h := testCgroupHost(t)
	before := h.MemoryLimit()
	file, dir, none := "memory.limit_in_bytes", h.v1Dirs["memory"], "-1"
	if h.v2 {
		file, dir, none = "memory.max", h.v2Dir, "max"
	}
	const limit = 3 << 30
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(filepath.Join(dir, file), []byte(none), 0o644) })
	want := int64(limit)
	if before > 0 && before < want {
		want = before // this test runs under a lower one
	}
	if got := h.MemoryLimit(); got != want {
		t.Errorf("MemoryLimit with the parent at %d: %d, want %d (before: %d)", limit, got, want, before)
	}
	cg, err := h.New("pss", Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if n, err := cg.PSS(); err != nil || n != 0 {
		t.Fatalf("PSS of an empty cgroup: %d, %v", n, err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if n, err := cg.PSS(); err != nil || n <= 0 || n > 64<<20 {
		t.Fatalf("PSS of a sleep: %d, %v", n, err)
	}
}
