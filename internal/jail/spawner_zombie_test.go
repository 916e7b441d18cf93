package jail

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/testenv"
)

// A clone the spawner starts that fails before its exec (here: a uid the
// init's user namespace does not map) leaves nothing behind in the host,
// which alone could reap it: no zombie, and no child still exiting that
// would become one. The failed child has told its failure when the clone
// returns, but may not have ended yet; whether it has is a race, so the
// clone is repeated (the old Z-only search and WNOHANG reap lost it in
// CI).
func TestSpawnerFailedCloneLeavesNoZombie(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to build jails (CI runs as root)")
	}
	h, err := sharedHost()
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	cg, err := h.cg.New(testSpec(testLimits()).Name, cgroup.Resources{Memory: 64 << 20, Pids: 16, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cg.Kill(); cg.Destroy() }()
	a, b, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	rootID, userID := h.IDs(0)
	for i := range 50 {
		pidfd := -1
		attr := initAttr(rootID, userID, &pidfd)
		attr.Credential.Uid = 4242 // not mapped: setuid fails in the child
		// Only this clone's: children of this process that appear
		// during it and are still there after (the spawner aside, which
		// a clone may start).
		before := childrenOf(t, os.Getpid())
		_, err := h.spawner.clone(nil, attr, cg, b, w)
		if err == nil {
			t.Fatal("the clone did not fail")
		}
		for pid, stat := range childrenOf(t, os.Getpid()) {
			if _, ok := before[pid]; !ok && pid != spawnerPid(h) {
				t.Errorf("clone %d (%v) left its child: %s", i, err, stat)
				unix.Kill(pid, unix.SIGKILL)
				var ws unix.WaitStatus
				unix.Wait4(pid, &ws, 0, nil)
			}
		}
		if t.Failed() {
			break
		}
	}
}

// childrenOf maps the pids of parent's children, zombies and those still
// exiting included, to their /proc stat lines.
func childrenOf(t *testing.T, parent int) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kids := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 1 && f[1] == strconv.Itoa(parent) {
			kids[pid] = strings.TrimSpace(string(b))
		}
	}
	return kids
}

// The host reaps a failed clone the spawner names even if it has not
// ended yet (a WNOHANG wait would leave it, a zombie once it ends), and
// one that does not end in time is killed, not waited for forever: a
// child that would not end by itself is reaped all the same.
func TestReapFailedClone(t *testing.T) {
	cmd := startHostProcess(t, nil, "/bin/sleep", "60")
	reapFailed(cmd.Process.Pid, time.Millisecond)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); !errors.Is(err, unix.ECHILD) {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		t.Errorf("the child was not reaped (waitid: %v): %s", err, stat)
	}
}
