package jail

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/testenv"
)

// A clone the spawner starts that fails before its exec (here: a uid the
// init's user namespace does not map) leaves no zombie child behind in
// the host, which alone could reap it.
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
	pidfd := -1
	rootID, userID := h.IDs(0)
	attr := initAttr(rootID, userID, &pidfd)
	attr.Credential.Uid = 4242 // not mapped: setuid fails in the child
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
	if _, err := h.spawner.clone(nil, attr, cg, b, w); err == nil {
		t.Fatal("the clone did not fail")
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil {
		// si_pid follows signo, errno, code and padding.
		if pid := int(*(*int32)(unsafe.Pointer(uintptr(unsafe.Pointer(&info)) + 16))); pid != 0 {
			stat, _ := os.ReadFile("/proc/" + itoa(pid) + "/stat")
			t.Errorf("a zombie child is left: %s", strings.TrimSpace(string(stat)))
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	}
}
