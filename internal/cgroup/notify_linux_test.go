package cgroup

import (
	"bufio"
	"errors"
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
	for {
		if line, _ := in.ReadString('\n'); line != "mount\n" {
			os.Exit(0)
		}
		if err := unix.Mount("none", dir, "tmpfs", 0, ""); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
	}
}

// The notifier calls a watch's function when the kernel signals that its
// file changed, and not for a change after it is removed. Cgroup files
// signal only some changes (v1's pids.events none, on recent kernels), so
// the file here is a mount table, which signals the same way (EPOLLPRI):
// that of a process in a mount namespace of its own, which mounts tmpfs.
func TestNotifierCallsOnChange(t *testing.T) {
	h := testCgroupHost(t)
	n, err := h.notifier()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), mounterEnv+"="+t.TempDir())
	// Go makes / private in the new namespace: the mounts stay there.
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
	// watch watches the mounter's mount table; each call of its function
	// is a value on the channel it returns.
	watch := func() (int32, chan struct{}) {
		// Not os.Open: Go's poller would take the descriptor too, and a
		// poll of a mount table takes the change it reports (one of
		// kernfs' does not), so the two would race for it.
		fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/mounts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		calls := make(chan struct{}, 16)
		id, err := n.add(os.NewFile(uintptr(fd), "mounts"), func() {
			select {
			case calls <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return id, calls
	}
	wait := func(calls chan struct{}, what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was not called within 10s of a change", what)
		}
	}
	id, calls := watch()
	_, other := watch() // open while the first is: another number
	in.Write([]byte("mount\n"))
	wait(calls, "the watch's function")
	wait(other, "the other watch's function")
	n.remove(id)
	// Two more changes: once the other watch sees the second, the loop
	// is done with the first (it takes one event after the other).
	for range 2 {
		in.Write([]byte("mount\n"))
		wait(other, "the other watch's function")
	}
	if len(calls) != 0 {
		t.Errorf("the function of a removed watch was called %d times for changes after its removal", len(calls))
	}
}

// A watch added to a closed notifier is refused and its file closed:
// the epoll instance's number may be another file's by then, which the
// watch must not go into (nor be kept open in the notifier's map).
func TestNotifierAddAfterClose(t *testing.T) {
	n, err := newNotifier()
	if err != nil {
		t.Fatal(err)
	}
	go n.loop()
	old := n.fd
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	// Another epoll instance under the closed one's number, as the
	// next open of the process may get it.
	other, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if other != old {
		if err := unix.Dup3(other, old, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(other)
	}
	defer unix.Close(old)
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.add(f, func() {}); !errors.Is(err, errNotifierClosed) {
		t.Errorf("add after close = %v, want errNotifierClosed", err)
	}
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the file of a refused watch is still open (Close: %v)", err)
	}
	if len(n.watches) != 0 {
		t.Errorf("%d watches kept by a closed notifier", len(n.watches))
	}
}
