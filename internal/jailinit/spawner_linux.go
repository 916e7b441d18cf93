package jailinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The spawner exists for the server's CPU: a clone that makes a new user
// namespace cannot share its parent's memory (Go's forkExec uses vfork
// only without one, since the parent must write the id maps while the
// child waits), so every init the server cloned itself copied the
// server's page tables, and the server then took a copy-on-write fault,
// with a TLB shootdown, on every page it wrote afterwards. Cloned from
// this small process, the same init costs a fraction of that. The
// attributes, the cgroup the init is born in and the descriptors it gets
// are the server's; the init is the server's child (CLONE_PARENT), which
// reaps it as before.

// NewCloneMsg describes a clone with attr and env, the inverse of Attr.
// It refuses attr if it sets anything a CloneMsg does not carry (the
// pidfd and the cgroup are the spawner's to fill in), so that the
// spawner never clones with less than the server asked for.
func NewCloneMsg(attr *syscall.SysProcAttr, env []string) (*CloneMsg, error) {
	if attr.PidFD == nil {
		return nil, errors.New("spawner: a clone by the spawner needs a pidfd")
	}
	if attr.Credential != nil && attr.Credential.NoSetGroups {
		return nil, errors.New("spawner: the spawner always sets the groups")
	}
	m := &CloneMsg{Env: env, Cloneflags: attr.Cloneflags, Setgroups: attr.GidMappingsEnableSetgroups, Setsid: attr.Setsid}
	for _, x := range attr.UidMappings {
		m.UidMappings = append(m.UidMappings, IDMap{ContainerID: x.ContainerID, HostID: x.HostID, Size: x.Size})
	}
	for _, x := range attr.GidMappings {
		m.GidMappings = append(m.GidMappings, IDMap{ContainerID: x.ContainerID, HostID: x.HostID, Size: x.Size})
	}
	if c := attr.Credential; c != nil {
		m.Credential = &Credential{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups}
	}
	rest := *attr
	rest.PidFD, rest.UseCgroupFD, rest.CgroupFD = nil, false, 0
	if !reflect.DeepEqual(&rest, m.Attr()) {
		return nil, fmt.Errorf("spawner: the spawner cannot clone with %+v", attr)
	}
	return m, nil
}

// Attr is the clone attributes m describes, without the pidfd and the
// cgroup, which the spawner fills in.
func (m *CloneMsg) Attr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: m.Cloneflags, GidMappingsEnableSetgroups: m.Setgroups, Setsid: m.Setsid}
	for _, x := range m.UidMappings {
		a.UidMappings = append(a.UidMappings, syscall.SysProcIDMap{ContainerID: x.ContainerID, HostID: x.HostID, Size: x.Size})
	}
	for _, x := range m.GidMappings {
		a.GidMappings = append(a.GidMappings, syscall.SysProcIDMap{ContainerID: x.ContainerID, HostID: x.HostID, Size: x.Size})
	}
	if c := m.Credential; c != nil {
		a.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups}
	}
	return a
}

// SpawnerExe is the sealed executable a spawner is started as and clones
// inits of, its fd 4.
const SpawnerExe = "/proc/self/fd/4"

// Spawner runs a server's spawner (argv[0] SpawnerArg0) and never
// returns: fd 3 is its socket to the server, fd 4 the sealed executable,
// and argv[1] counts the cgroup v1 tasks files from fd 5 on, those of the
// cgroups the spawner was started in, to which its cloning thread
// returns. It serves one CloneMsg at a time and exits when the server's
// end closes.
func Spawner() {
	if err := serveClones(); err != nil {
		fatal(err)
	}
	os.Exit(0)
}

func serveClones() error {
	if len(os.Args) != 2 {
		return errors.New("spawner: usage: airlock-spawner HOMEFILES")
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n < 0 || n > 64 {
		return fmt.Errorf("spawner: bad count %q", os.Args[1])
	}
	// Nothing of this process but what a request names may reach an init.
	closeInherited(4 + n)
	for fd := 4; fd < 5+n; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("spawner: fd %d: %w", fd, err)
		}
	}
	home := make([]int, n)
	for i := range home {
		home[i] = 5 + i
	}
	ctl, err := newConn(3, 64<<10)
	if err != nil {
		return err
	}
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	stdout, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	for {
		m, files, err := ctl.recv()
		if err != nil {
			return nil // the server is gone
		}
		pid, pidfd, err := cloneInit(m, files, stdin, stdout, home)
		closeFiles(files)
		reply, fds := Message{Op: MsgCloned, Pid: pid}, []int{pidfd}
		if err != nil {
			// pid, if any, is a child that failed before its exec, or
			// was killed: the server's, dead or dying, for it to reap.
			reply, fds = Message{Op: MsgError, Error: err.Error(), Pid: pid}, nil
		}
		err = ctl.send(reply, fds...)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err != nil {
			return nil
		}
	}
}

// cloneInit starts the init m asks for, the server's child, and returns
// its pid and a pidfd. On failure, pid is a child that was cloned but
// failed before its exec, or was killed after it (or 0): Go's ForkExec
// cannot reap it, the server's child, nor does it say its pid.
func cloneInit(m Message, files []*os.File, stdin, stdout *os.File, home []int) (pid, pidfd int, err error) {
	c := m.Clone
	if m.Op != MsgClone || c == nil || len(files) < 2 || c.IntoFD && len(files) != 3 {
		return 0, -1, errors.New("spawner: bad request")
	}
	attr := c.Attr()
	attr.Cloneflags |= unix.CLONE_PARENT
	pidfd = -1
	attr.PidFD = &pidfd
	var into []int
	for _, f := range files[2:] {
		into = append(into, int(f.Fd()))
	}
	if c.IntoFD {
		attr.UseCgroupFD, attr.CgroupFD, into = true, into[0], nil
	}
	pa := &syscall.ProcAttr{Env: c.Env, Files: []uintptr{stdin.Fd(), stdout.Fd(), files[1].Fd(), files[0].Fd()}, Sys: attr}
	var failed int
	err = inCgroup(into, home, func() (err error) {
		// The thread's name marks the child until its exec: a child that
		// fails before it is found by that name.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		clones++
		mark := "airlock-c" + strconv.Itoa(clones%1000000)
		var old, name [16]byte
		copy(name[:15], mark)
		named := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&old[0])), 0, 0, 0) == nil &&
			unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0) == nil
		pid, err = syscall.ForkExec(SpawnerExe, []string{InitArg0}, pa)
		if named {
			unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&old[0])), 0, 0, 0)
			if err != nil {
				failed = failedChild(mark, os.Getppid(), c.Cloneflags&unix.CLONE_NEWPID != 0)
			}
		}
		return err
	})
	if err != nil {
		if pidfd >= 0 {
			// Started, but its thread could not leave the cgroup: it
			// must not live, and the server reaps it.
			unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			unix.Close(pidfd)
			return pid, -1, err
		}
		return failed, -1, err
	}
	return pid, pidfd, nil
}

// clones counts the spawner's clones, to name each (see cloneInit).
var clones int

// failedChild is the pid of the child of parent named mark (0: none): a
// clone that failed before its exec, and so still bears the name of the
// thread that cloned it. It has told its failure but may still be
// exiting, not yet a zombie, so its state does not matter. newPid: the
// clone made a pid namespace, so the child is its init, which a process
// of a sandbox handed to the server (a child subreaper) and named alike
// is not.
func failedChild(mark string, parent int, newPid bool) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
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
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || string(b[open+1:end]) != mark {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		if newPid && !nsInit(e.Name()) {
			continue
		}
		return pid
	}
	return 0
}

// nsInit says whether process pid is the init of a pid namespace (its
// innermost pid is 1).
func nsInit(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			return f[len(f)-1] == "1"
		}
	}
	return false
}

// inCgroup runs start on a thread of its own that first writes "0" to
// each of the tasks files into (cgroup v1: it moves itself alone, so the
// process start clones is born there), then to home's. A thread that
// cannot make its way back ends with its goroutine.
func inCgroup(into, home []int, start func() error) error {
	if len(into) == 0 {
		return start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := writeZero(into); err != nil {
			done <- fmt.Errorf("spawner: enter the cgroup: %w", err) // the thread ends
			return
		}
		err := start()
		if berr := writeZero(home); berr != nil {
			done <- errors.Join(err, fmt.Errorf("spawner: leave the cgroup: %w", berr)) // the thread ends
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func writeZero(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.Pwrite(fd, []byte("0"), 0); err != nil {
			return err
		}
	}
	return nil
}
