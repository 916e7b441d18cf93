package gvisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/testenv"
)

func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		code         int
		exited       bool
		exit, signal int
	}{
		{0, true, 0, 0},
		{3, true, 3, 0},
		{127, true, 127, 0},
		{128, false, 0, 9}, // runsc failed: the sandbox is gone
		{137, false, 0, 9},
		{130, false, 0, 2},
		{-1, false, 0, 9},
	} {
		st := statusOf(c.code)
		if st.Exited() != c.exited || (c.exited && st.ExitStatus() != c.exit) || (!c.exited && int(st.Signal()) != c.signal) {
			t.Errorf("statusOf(%d) = %#x: exited %v status %d signal %d", c.code, int(st), st.Exited(), st.ExitStatus(), st.Signal())
		}
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b/c\011`); got != "/a b/c\t" {
		t.Errorf("unescape: %q", got)
	}
}

// testHost is a gVisor host in a state directory of the test's own, under
// a cgroup parent of its own.
func testHost(t *testing.T) (*Host, *cgroup.Host) { return testHostOn(t, "systrap") }

// testHostOn is testHost on one of runsc's platforms.
func testHostOn(t *testing.T, platform string) (*Host, *cgroup.Host) {
	t.Helper()
	return testHostWith(t, platform, "")
}

// testHostWith is testHostOn whose sandboxes' keeper is keeper ("": none).
func testHostWith(t *testing.T, platform, keeper string) (*Host, *cgroup.Host) {
	t.Helper()
	return testHostOpts(t, platform, func(o *Options) { o.Keeper = keeper })
}

// testHostOpts is testHostOn with options set by opt.
func testHostOpts(t *testing.T, platform string, opt func(*Options)) (*Host, *cgroup.Host) {
	t.Helper()
	testenv.RequireRoot(t, "gVisor sandboxes")
	runsc := testenv.Runsc(t)
	state := t.TempDir()
	parent := "airlock-gvtest-" + filepath.Base(state)
	cg, err := cgroup.Open(parent)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Runsc: runsc, Platform: platform, StateDir: state, CacheDir: t.TempDir(), CgroupParent: parent}
	opt(&o)
	h, err := NewHost(context.Background(), o, cg)
	if err != nil {
		cg.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		cg.Close()
		for _, root := range cgroupRoots() {
			if _, err := os.Stat(filepath.Join(root, parent)); err == nil {
				t.Errorf("cgroup parent left in %s", root)
			}
		}
	})
	return h, cg
}

func limits() config.Limits {
	l := config.DefaultLimits()
	l.Memory = 256 << 20
	l.Disk = 16 << 20
	return l
}

// runIn runs argv in sb and returns its exit, stdout and stderr.
func runIn(t *testing.T, sb *Sandbox, argv []string, extra ...*os.File) (Exit, string, string) {
	t.Helper()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	files := append([]*os.File{devnull, outW, errW}, extra...)
	_, exit, err := sb.Exec(Process{Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Files: files})
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	var out, errb []byte
	done := make(chan struct{})
	go func() { errb, _ = io.ReadAll(errR); close(done) }()
	out, _ = io.ReadAll(outR)
	<-done
	e := <-exit
	return e, string(out), string(errb)
}

// TestSandbox runs on both platforms airlock offers (gvisor.platform).
func TestSandbox(t *testing.T) {
	for _, p := range []string{"systrap", "ptrace"} {
		t.Run(p, func(t *testing.T) { testSandbox(t, p) })
	}
}

func testSandbox(t *testing.T, platform string) {
	h, _ := testHostOn(t, platform)
	sb, err := h.Start(context.Background(), Spec{Name: "g-test", Limits: limits(), Background: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	dir := sb.dir
	// Booted in the background (a pool's refill): its cgroup had the
	// lowest CPU weight before runsc started.
	if bg, err := sb.cg.Background(); err != nil || !bg {
		t.Errorf("a sandbox started with Background: Background() = %v, %v; want true", bg, err)
	}

	t.Run("a different kernel, the sandbox user, no capabilities", func(t *testing.T) {
		var host unix.Utsname
		unix.Uname(&host)
		e, out, errs := runIn(t, sb, []string{"/bin/sh", "-c", "id -u; uname -r; grep CapEff /proc/self/status; echo err >&2; exit 3"})
		if !e.Status.Exited() || e.Status.ExitStatus() != 3 {
			t.Errorf("exit %v, want status 3", e.Status)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || lines[0] != "1000" || lines[1] == unix.ByteSliceToString(host.Release[:]) || !strings.HasSuffix(lines[2], "0000000000000000") {
			t.Errorf("stdout %q: want uid 1000, a kernel release other than the host's, no capabilities", out)
		}
		if errs != "err\n" {
			t.Errorf("stderr %q", errs)
		}
	})

	t.Run("no network but loopback", func(t *testing.T) {
		_, out, _ := runIn(t, sb, []string{"/bin/sh", "-c", "cat /proc/net/dev | tail -n +3 | cut -d: -f1"})
		if strings.TrimSpace(out) != "lo" {
			t.Errorf("interfaces: %q, want only lo", out)
		}
	})

	t.Run("a signal kills the program", func(t *testing.T) {
		e, _, _ := runIn(t, sb, []string{"/bin/sh", "-c", "kill -TERM $$"})
		if !e.Status.Signaled() || e.Status.Signal() != syscall.SIGTERM {
			t.Errorf("exit %v, want SIGTERM", e.Status)
		}
	})

	t.Run("the control socket passes as fd 3", func(t *testing.T) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
		defer ours.Close()
		go func() { ours.Write([]byte("ping\n")) }()
		e, out, errs := runIn(t, sb, []string{"/bin/sh", "-c", "read x <&3; echo got $x; echo back >&3"}, theirs)
		theirs.Close()
		if e.Status.ExitStatus() != 0 || out != "got ping\n" {
			t.Fatalf("exit %v out %q err %q", e.Status, out, errs)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(ours, b); err != nil || string(b) != "back\n" {
			t.Errorf("read back %q %v", b, err)
		}
	})

	t.Run("address spaces shared by processes count once", func(t *testing.T) {
		// A running program has its stubs; systrap's come in pairs
		// sharing one address space, each reporting all of it.
		devnull, _ := os.Open(os.DevNull)
		defer devnull.Close()
		outR, outW, _ := os.Pipe()
		defer outR.Close()
		pid, exit, err := sb.Exec(Process{Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 60"}, Files: []*os.File{devnull, outW, outW}})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { sb.Signal(pid, syscall.SIGKILL, false); <-exit }()
		io.ReadFull(outR, make([]byte, 3))
		pids, err := sb.cg.Pids()
		if err != nil {
			t.Fatal(err)
		}
		shared := 0
		for i, a := range pids {
			for _, b := range pids[:i] {
				if cgroup.SameAddressSpace(a, b) {
					shared++
					break
				}
			}
		}
		if platform == "systrap" && shared == 0 {
			t.Errorf("none of the sandbox's %d processes shares an address space: systrap's stubs changed, and what PSS deduplicates with them", len(pids))
		}
		if n, err := sb.cg.PSS(); err != nil || n <= 0 {
			t.Errorf("PSS %d, %v", n, err)
		}
	})

	t.Run("workspace files reach the host, owned by the sandbox user", func(t *testing.T) {
		e, _, errs := runIn(t, sb, []string{"/bin/sh", "-c", "echo data > /workspace/f && touch /tmp/t"})
		if e.Status.ExitStatus() != 0 {
			t.Fatalf("exit %v: %s", e.Status, errs)
		}
		b, err := os.ReadFile(filepath.Join(dir, "workspace", "f"))
		if err != nil || string(b) != "data\n" {
			t.Errorf("host sees %q %v", b, err)
		}
		e, _, _ = runIn(t, sb, []string{"/bin/sh", "-c", "touch /usr/x || touch /etc/x || touch /x"})
		if e.Status.ExitStatus() == 0 {
			t.Errorf("the root is writable")
		}
	})

	t.Run("signal a process group", func(t *testing.T) {
		devnull, _ := os.Open(os.DevNull)
		defer devnull.Close()
		outR, outW, _ := os.Pipe()
		defer outR.Close()
		pid, exit, err := sb.Exec(Process{Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 60"}, Files: []*os.File{devnull, outW, outW}})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 3)
		io.ReadFull(outR, b)
		if !runscExecReadsItsPidFile(t, sb) {
			t.Error("runsc exec holds no read end of its pid FIFO: killed before it writes the pid, the server would leave it waiting in open")
		}
		if err := sb.Signal(pid, syscall.SIGKILL, true); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-exit:
			if !e.Status.Signaled() || e.Status.Signal() != syscall.SIGKILL || e.Pid != pid {
				t.Errorf("exit %+v, want pid %d killed", e, pid)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the program outlived its signal")
		}
	})

	if err := sb.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", dir, err)
	}
	if m := mountsUnder(h.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, root := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, h.opts.CgroupParent, "g-test")); err == nil {
			t.Errorf("cgroup left in %s", root)
		}
	}
	if _, _, err := sb.Exec(Process{Argv: []string{"true"}, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}); err == nil {
		t.Errorf("exec after close worked")
	}
}

// Going over the memory limit kills the whole sandbox, and airlock's
// cgroup says it was the memory.
func TestMemoryLimitKillsTheSandbox(t *testing.T) {
	h, _ := testHost(t)
	l := limits()
	l.Memory = 128 << 20
	sb, err := h.Start(context.Background(), Spec{Name: "g-oom", Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	e, _, _ := runIn(t, sb, []string{"/usr/bin/python3", "-c", "x = bytearray(400 << 20); x[::4096] = b'x' * len(x[::4096])"})
	if e.Status.Exited() && e.Status.ExitStatus() == 0 {
		t.Fatalf("allocating 400 MiB under 128 MiB worked")
	}
	select {
	case <-sb.Dead():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox outlived its OOM kill")
	}
	st, err := sb.Cgroup().Stats()
	if err != nil || st.OOMKills == 0 {
		t.Errorf("stats %+v %v: want an OOM kill", st, err)
	}
}

// A killed server leaves sandboxes behind; the next one's Sweep removes
// them all.
func TestSweep(t *testing.T) {
	h, cg := testHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: "g-leak", Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	// As after kill -9 of the server: nothing closed.
	if err := cg.Sweep("g-", func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Dead():
	case <-time.After(10 * time.Second):
		t.Fatal("runsc outlived its sandbox's cgroup")
	}
	if err := h.Sweep("g-"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(h.dir); len(ents) > 0 {
		t.Errorf("left in %s: %v", h.dir, ents)
	}
	if m := mountsUnder(h.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, root := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, h.opts.CgroupParent, "g-leak")); err == nil {
			t.Errorf("cgroup left in %s", root)
		}
	}
	sb.ws.Close()
}

// A sandbox ends with its server: when the server's end of the life pipe
// closes (as the kernel does when the server is killed), the init exits
// and runsc tears the sandbox down.
func TestSandboxEndsWithItsServer(t *testing.T) {
	h, _ := testHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: "g-orphan", Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sb.life.Close()
	select {
	case <-sb.Dead():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox outlived its server's end of the life pipe")
	}
	if pids, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", h.opts.CgroupParent, "g-orphan", "cgroup.procs")); len(strings.TrimSpace(string(pids))) > 0 {
		t.Errorf("processes left in the sandbox's cgroup: %s", pids)
	}
}

// runscExecReadsItsPidFile reports whether a `runsc exec` of sb holds a
// read end of its pid FIFO (exec-N.pid) itself.
func runscExecReadsItsPidFile(t *testing.T, sb *Sandbox) bool {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		b, _ := os.ReadFile(c)
		if !strings.Contains(string(b), "\x00exec\x00") || !strings.Contains(string(b), sb.dir) {
			continue
		}
		dir := filepath.Join(filepath.Dir(c), "fd")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			target, _ := os.Readlink(filepath.Join(dir, fd.Name()))
			info, _ := os.ReadFile(filepath.Join(filepath.Dir(c), "fdinfo", fd.Name()))
			var flags int
			if _, after, ok := strings.Cut(string(info), "flags:"); ok {
				fmt.Sscanf(strings.TrimSpace(after), "%o", &flags)
			}
			if strings.HasPrefix(filepath.Base(target), "exec-") && strings.Contains(target, ".pid") && flags&unix.O_ACCMODE == unix.O_RDONLY {
				return true
			}
		}
	}
	return false
}
