package jail

import (
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"airlock/internal/jailinit"
	"airlock/internal/testenv"
)

// The spawner clones an init with exactly the attributes Host.Start
// gives its own clone (jailinit's TestCloneMsg checks the mapping field
// by field).
func TestSpawnerCarriesInitAttr(t *testing.T) {
	pidfd := -1
	attr := initAttr(100000, 100001, &pidfd)
	m, err := jailinit.NewCloneMsg(attr, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	want := *attr
	want.PidFD = nil
	if got := m.Attr(); !reflect.DeepEqual(got, &want) {
		t.Errorf("the spawner would clone with\n%+v\nnot\n%+v", got, &want)
	}
}

// spawnerPid is the pid of h's spawner (0: none runs).
func spawnerPid(h *Host) int {
	h.spawner.mu.Lock()
	defer h.spawner.mu.Unlock()
	if h.spawner.cmd == nil {
		return 0
	}
	return h.spawner.cmd.Process.Pid
}

// cgroupsOf is what /proc/<pid>/task/<tid>/cgroup says.
func cgroupsOf(t *testing.T, pid, tid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/task/" + tid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A spawner started after the host process leaked descriptors and kept
// supplementary groups holds none of them (nor do the inits it clones,
// which the escape tests check again), its cloning thread returns to the
// host's cgroups, and the inits are the host's children, which it reaps.
func TestSpawner(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to build jails (CI runs as root)")
	}
	// Not testHost: its guard would see the spawner's socket replaced.
	h, err := sharedHost()
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	if h.spawner == nil {
		t.Fatal("the test host clones its inits itself")
	}
	// A spawner of its own, started after the leaks below (the others
	// came before them); after the test, a fresh one again, started
	// before the next test's guard looks at this process's descriptors.
	h.spawner.close()
	t.Cleanup(func() {
		h.spawner.mu.Lock()
		defer h.spawner.mu.Unlock()
		h.spawner.stop()
		if err := h.spawner.start(); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Setgroups([]int{4242}); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setgroups(nil)

	for i := 0; i < 3; i++ {
		sb := startSandbox(t, h, testLimits())
		init := strconv.Itoa(sb.InitPid())
		status, err := os.ReadFile("/proc/" + init + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "\nPPid:\t"+strconv.Itoa(os.Getpid())+"\n") {
			t.Errorf("the init is not the host's child:\n%s", status)
		}
		for _, l := range strings.Split(string(status), "\n") {
			if g, ok := strings.CutPrefix(l, "Groups:"); ok && strings.TrimSpace(g) != "" {
				t.Errorf("the init has supplementary groups %q", g)
			}
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}

	pid := strconv.Itoa(spawnerPid(h))
	if pid == "0" {
		t.Fatal("no spawner runs")
	}
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		if strings.HasPrefix(target, dir) {
			t.Errorf("the spawner holds the host's descriptor %s -> %s", e.Name(), target)
		}
	}
	home := cgroupsOf(t, "self", strconv.Itoa(syscall.Gettid()))
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got := cgroupsOf(t, pid, task.Name()); got != home {
			t.Errorf("spawner thread %s is in\n%s\nnot the host's\n%s", task.Name(), got, home)
		}
	}

	// A spawner that died is replaced.
	syscall.Kill(spawnerPid(h), syscall.SIGKILL)
	for {
		// Its socket is closed once it is a zombie.
		if b, err := os.ReadFile("/proc/" + pid + "/stat"); err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		runtime.Gosched()
	}
	startSandbox(t, h, testLimits())
	if p := spawnerPid(h); p == 0 || strconv.Itoa(p) == pid {
		t.Errorf("the spawner (pid %s) was not replaced: %d", pid, p)
	}
}
