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
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Linger bounds the wait for a lock whose taker is gone: children between
// fork and exec hold it for milliseconds.
const Linger = 5 * time.Second

// ErrOrphaned says a lock stayed held for Linger after the process that
// took it was gone (a descendant of it still holds its descriptor).
var ErrOrphaned = errors.New("the process that took the lock has exited, but one it started still holds it")

// ErrExiting says a lock stayed held for Linger while the process that
// took it was still on its way out (a large address space to tear down,
// an uninterruptible wait): trying again later will do.
var ErrExiting = errors.New("the process that took the lock is still exiting")

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
		if alive(Holder(path)) {
			return nil, true, nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(linger)
		}
		if time.Now().After(deadline) {
			if pid := Holder(path); exiting(pid) {
				return nil, true, fmt.Errorf("%w (pid %d): try again once it is gone", ErrExiting, pid)
			}
			return nil, true, fmt.Errorf("%w (`fuser %s` names it)", ErrOrphaned, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Held reports whether a process holds the lock file path now, without
// taking it (a shared lock is tried and let go at once; the file is
// never created or written).
func Held(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
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

// Alive reports whether process pid may still run: not a zombie, nor
// exiting (a process that has begun its exit keeps its descriptors, and
// so its locks, for a moment before it is a zombie: a server killed with
// SIGKILL and still tearing down its memory must be waited for, not
// taken to live); an unknown holder (0) is taken to live.
func Alive(pid int) bool {
	if pid <= 0 {
		return true
	}
	proc := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		// No /proc: the kernel's word alone.
		return !errors.Is(unix.Kill(pid, 0), unix.ESRCH)
	}
	status, _ := os.ReadFile(proc + "/status")
	return running(stat, status)
}

// alive is Alive; a test makes a live holder look like one on its way
// out.
var alive = Alive

// exiting says whether process pid, not Alive, is still there and not
// yet a zombie: its descriptors, and so its locks, are not yet let go.
func exiting(pid int) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !dead(stat)
}

// dead says whether a process whose /proc stat reads so is a zombie or
// dead.
func dead(stat []byte) bool {
	// The fields follow the command, whose name may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(stat[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X" || f[0] == "x")
}

// pfExiting is the kernel's PF_EXITING task flag: do_exit has begun.
const pfExiting = 0x4

// running says whether a process whose /proc stat and status files read
// so runs, and is not on its way out: its state is not zombie or dead,
// its main thread has not begun to exit, and no SIGKILL is pending (sent,
// not yet acted on: a process in an uninterruptible wait may hold it for
// long).
func running(stat, status []byte) bool {
	// The fields follow the command, whose name may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return true
	}
	// state ppid pgrp session tty_nr tpgid flags ...
	f := strings.Fields(string(stat[i+1:]))
	if dead(stat) {
		return false
	}
	if len(f) > 6 {
		if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfExiting != 0 {
			return false
		}
	}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if k != "SigPnd" && k != "ShdPnd" {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(unix.SIGKILL-1)) != 0 {
			return false
		}
	}
	return true
}
