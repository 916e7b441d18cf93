// Package lockfile owns the lock files by which an airlock process says
// "this is mine while I live" on the host (a state directory, a range of
// host ids, a cgroup parent): an exclusive flock, taken without waiting,
// with the pid of the process that took it written in the file.
//
// A flock belongs to an open file description, which a child forked but
// not yet exec'd shares (close-on-exec only closes it at exec). A server
// killed with SIGKILL while it forked left its locks held by such children
// for a moment, and a restart at once was refused. So a lock held while
// the process that took it is gone is waited for, briefly, until those
// children have exec'd or died.
//
// It must never take a lock another process holds, never wait while the
// process that took it lives, and never wait without bound.
package lockfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Linger bounds the wait for a lock whose taker is gone: children between
// fork and exec hold it for milliseconds.
const Linger = 5 * time.Second

// ErrOrphaned says a lock stayed held for Linger after the process that
// took it was gone (a descendant of it still holds its descriptor).
var ErrOrphaned = errors.New("the process that took the lock has exited, but one it started still holds it")

// TryLock opens path (created 0600, never through a symlink) and takes an
// exclusive lock on it. held reports that another process holds it (the
// file is then closed; err is ErrOrphaned when that process has exited
// and its lock outlived Linger). The returned file holds the lock until
// it is closed; processes it starts get no copy after they exec.
func TryLock(path string) (f *os.File, held bool, err error) {
	return tryLock(path, Linger)
}

func tryLock(path string, linger time.Duration) (*os.File, bool, error) {
	var deadline time.Time
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, false, err
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			// Whoever finds it held reads who holds it.
			f.Truncate(0)
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			return f, false, nil
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("locking %s: %w", path, err)
		}
		if Alive(Holder(path)) {
			return nil, true, nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(linger)
		}
		if time.Now().After(deadline) {
			return nil, true, fmt.Errorf("%w (`fuser %s` names it)", ErrOrphaned, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Holder is the pid written in the lock file path by the process that
// last took it (0: none, as in a lock file of an older airlock).
func Holder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Alive reports whether process pid may still run (a zombie does not);
// an unknown holder (0) is taken to live.
func Alive(pid int) bool {
	if pid <= 0 {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// No /proc: the kernel's word alone.
		return !errors.Is(unix.Kill(pid, 0), unix.ESRCH)
	}
	// The state follows the command, whose name may hold anything.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		switch b[i+2] {
		case 'Z', 'X':
			return false
		}
	}
	return true
}
