package cgroup

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mounterEnv makes this test binary, re-executed, the mounter of
// TestNotifierCallsOnChange: in a mount namespace of its own it mounts a
// tmpfs on the directory the variable names when told to, then waits to
// be told to exit.
const mounterEnv = "AIRLOCK_CGROUP_TEST_MOUNTER"

func init() {
	dir := os.Getenv(mounterEnv)
	if dir == "" {
		return
	}
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	if err := unix.Mount("none", dir, "tmpfs", 0, ""); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	in.ReadString('\n')
	os.Exit(0)
}

// The notifier calls a watch's function when the kernel signals that its
// file changed, and no more once it is removed. Cgroup files signal only
// some changes (v1's pids.events none, on recent kernels), so the file
// here is a mount table, which signals the same way (EPOLLPRI): that of a
// process in a mount namespace of its own, which mounts a tmpfs.
func TestNotifierCallsOnChange(t *testing.T) {
	h := testCgroupHost(t)
	n, err := h.notifier()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), mounterEnv+"="+t.TempDir())
	// Go makes / private in the new namespace: the mount stays there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	calls := make(chan struct{}, 16)
	// Not os.Open: Go's poller would take the descriptor too, and a poll
	// of a mount table takes the change it reports (one of kernfs' does
	// not), so the two would race for it.
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/mounts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.add(os.NewFile(uintptr(fd), "mounts"), func() {
		select {
		case calls <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("mount\n"))
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch's function was not called within 10s of a change")
	}
	n.remove(id)
	n.mu.Lock()
	left := len(n.watches)
	n.mu.Unlock()
	if left != 0 {
		t.Errorf("%d watches left after remove", left)
	}
}
