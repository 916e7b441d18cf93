package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/jailinit"
)

// spawner is a host's spawner process (jailinit.Spawner): the inits of
// sandboxes, cloned with a new user namespace, are cloned there instead
// of in this process, whose page tables such a clone would copy. It is
// started when first needed and again after it fails.
type spawner struct {
	h *Host

	mu  sync.Mutex // one request at a time
	cmd *exec.Cmd
	ctl *conn
}

// spawnerTimeout bounds one clone by the spawner.
const spawnerTimeout = 10 * time.Second

// clone starts an init with env and attr, born in cg, through the
// spawner; initEnd and errW become its fd 3 and stderr. The init is this
// process's child; *attr.PidFD gets its pidfd.
func (s *spawner) clone(env []string, attr *syscall.SysProcAttr, cg *cgroup.Cgroup, initEnd, errW *os.File) (*os.Process, error) {
	msg, err := jailinit.NewCloneMsg(attr, env)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	fds := []int{int(initEnd.Fd()), int(errW.Fd())}
	if fd, ok := cg.IntoFD(); ok {
		msg.IntoFD = true
		fds = append(fds, fd)
	} else {
		tasks, err := cg.ProcsFiles()
		if err != nil {
			return nil, err
		}
		for _, f := range tasks {
			defer f.Close()
			fds = append(fds, int(f.Fd()))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctl == nil {
		if err := s.start(); err != nil {
			return nil, err
		}
	}
	req := jailinit.Message{Op: jailinit.MsgClone, Clone: msg}
	m, files, err := s.request(req, fds)
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		// It ended since its last clone, before it read this request
		// (the request was refused, or left unread): no clone was made,
		// so once more with a new one.
		s.stop()
		if err = s.start(); err != nil {
			return nil, err
		}
		m, files, err = s.request(req, fds)
	}
	if err != nil {
		// A spawner that does not answer is replaced. (Had it died
		// between its clone and its answer, the init, unknown here,
		// would end when its control socket closes, but stay a zombie.)
		s.stop()
		return nil, fmt.Errorf("jail: spawner: %w", err)
	}
	s.ctl.setDeadline(time.Time{})
	if m.Op == jailinit.MsgError {
		closeAll(files)
		if m.Pid > 0 {
			// A clone that failed: this process's child, which only this
			// process can reap.
			reapFailed(m.Pid, spawnerTimeout)
		}
		return nil, fmt.Errorf("jail: %s", m.Error)
	}
	if m.Op != jailinit.MsgCloned || len(files) != 1 || m.Pid <= 0 {
		closeAll(files)
		s.stop()
		return nil, fmt.Errorf("jail: spawner: unexpected %q", m.Op)
	}
	pidfd, err := unix.FcntlInt(files[0].Fd(), unix.F_DUPFD_CLOEXEC, 0)
	files[0].Close()
	if err != nil {
		return nil, err
	}
	// The pid is this process's child: not reaped, it names no other.
	p, err := os.FindProcess(m.Pid)
	if err != nil {
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		unix.Close(pidfd)
		return nil, err
	}
	*attr.PidFD = pidfd
	return p, nil
}

// reapFailed reaps child pid, a clone that failed (see jailinit's
// cloneInit): it has told its failure, or was killed, but may not have
// ended yet, so a WNOHANG wait could miss it and leave a zombie. Its end
// is waited for through a pidfd, for at most wait; one still there then
// is killed, and if even that does not end it in spawnerTimeout, a
// goroutine waits on, so that the server never hangs here.
func reapFailed(pid int, wait time.Duration) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	if !pidfdEnded(fd, wait) {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		if !pidfdEnded(fd, spawnerTimeout) {
			go func() {
				pidfdEnded(fd, -1)
				unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED, nil)
				unix.Close(fd)
			}()
			return
		}
	}
	// It has ended: this returns at once (ECHILD if not a child).
	unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED, nil)
	unix.Close(fd)
}

// pidfdEnded waits at most wait (< 0: without bound) for the process of
// pidfd to end (a pidfd polls readable then), and says whether it did.
func pidfdEnded(pidfd int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		ms := -1
		if wait >= 0 {
			ms = int(max(time.Until(deadline), 0).Milliseconds())
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// request sends req with fds and waits for the answer (s.mu held).
func (s *spawner) request(req jailinit.Message, fds []int) (jailinit.Message, []*os.File, error) {
	if err := s.ctl.send(req, fds...); err != nil {
		return jailinit.Message{}, nil, err
	}
	s.ctl.setDeadline(time.Now().Add(spawnerTimeout))
	return s.ctl.recv()
}

// start starts the spawner (s.mu held), in this process's cgroups, which
// its cloning thread returns to.
func (s *spawner) start() error {
	hostEnd, spEnd, err := socketpair()
	if err != nil {
		return err
	}
	defer spEnd.Close()
	exeFD, err := unix.FcntlInt(uintptr(s.h.exe.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		hostEnd.Close()
		return fmt.Errorf("jail: spawner: %w", err)
	}
	exe := os.NewFile(uintptr(exeFD), "exe")
	defer exe.Close()
	// Every thread of this process but one cloning an init (locked to
	// its goroutine) is in the process's own cgroups.
	home, err := s.h.cg.HomeFiles()
	if err != nil {
		hostEnd.Close()
		return fmt.Errorf("jail: spawner: %w", err)
	}
	s.cmd = &exec.Cmd{
		// Its fd 4 once started: the host's own number may be one of
		// the descriptors the start moves into place.
		Path: jailinit.SpawnerExe, Args: []string{jailinit.SpawnerArg0, strconv.Itoa(len(home))},
		Env: []string{"GOMAXPROCS=1"}, ExtraFiles: append([]*os.File{spEnd, exe}, home...), Stderr: os.Stderr,
	}
	err = s.cmd.Start()
	closeAll(home)
	if err != nil {
		hostEnd.Close()
		s.cmd = nil
		return fmt.Errorf("jail: spawner: %w", err)
	}
	if s.ctl, err = newConn(hostEnd, 4<<10); err != nil {
		s.stop()
		return err
	}
	return nil
}

// stop ends the spawner, if it runs (s.mu held). The inits it cloned are
// this process's children and live on.
func (s *spawner) stop() {
	if s.ctl != nil {
		s.ctl.close()
		s.ctl = nil
	}
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *spawner) close() {
	s.mu.Lock()
	s.stop()
	s.mu.Unlock()
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
