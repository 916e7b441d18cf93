// Package privdir owns the check that a directory (or a file in it) the
// server keeps private state in is the server's own: a directory or
// regular file, never a symlink, owned by the server's user, and
// writable by nobody else: not by every user, and by a group only when
// the server's process is in that group itself (Kubernetes' fsGroup,
// which kubelet adds to a volume's files, group-writable, at mount, and
// gives the pod's processes). A directory that passes is given the mode
// the server asks for (it is the server's own: a wider mode is
// narrowed, an fsGroup's bits dropped).
//
// It must never follow a symlink, change anything it refused, or accept
// what a user other than the server's (and its own groups) could write.
package privdir

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
)

// ErrNotPrivate is what a check refuses: something another user could
// write.
var ErrNotPrivate = errors.New("another user could write it")

// Ensure makes dir (and its missing parents) with mode when it is
// missing, checks it (Dir), and gives a directory that passes mode. The
// check and the change are made on one open descriptor of dir, never
// through a symlink: a directory swapped for a symlink in between
// (whoever may write dir's parent) is refused or left alone, never the
// symlink's target changed.
func Ensure(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		// A symlink, not a directory, another's: Dir says which.
		if _, cerr := Dir(dir); cerr != nil {
			return cerr
		}
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := verify(dir, st, true); err != nil {
		return err
	}
	if afterCheck != nil {
		afterCheck()
	}
	if st.Mode().Perm() != mode.Perm() {
		return f.Chmod(mode.Perm())
	}
	return nil
}

// afterCheck, if set (tests), runs between Ensure's check and its change.
var afterCheck func()

// Dir checks that dir is a directory of the server's own (see the
// package comment), and returns what it found.
func Dir(dir string) (os.FileInfo, error) {
	return check(dir, true)
}

// File checks that p is a regular file of the server's own.
func File(p string) (os.FileInfo, error) {
	return check(p, false)
}

func check(p string, dir bool) (os.FileInfo, error) {
	st, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if err := verify(p, st, dir); err != nil {
		return nil, err
	}
	return st, nil
}

// verify checks st, what p is (never followed), as check does.
func verify(p string, st os.FileInfo, dir bool) error {
	refuse := func(f string, a ...any) error {
		return fmt.Errorf("%s: %w: %s", p, ErrNotPrivate, fmt.Sprintf(f, a...))
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return refuse("it is a symlink")
	case dir && !st.IsDir():
		return refuse("it is not a directory")
	case !dir && !st.Mode().IsRegular():
		return refuse("it is not a regular file")
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return refuse("its owner cannot be read")
	}
	uid := os.Geteuid()
	switch perm := st.Mode().Perm(); {
	case int(sys.Uid) != uid:
		return refuse("it belongs to uid %d, not to this server's (uid %d): chown it", sys.Uid, uid)
	case perm&0o002 != 0:
		return refuse("every user may write it (mode %04o): chmod o-w it", perm)
	case perm&0o020 != 0 && !ownGroup(int(sys.Gid)):
		return refuse("group %d may write it (mode %04o), and this server is not in that group: chmod g-w it", sys.Gid, perm)
	}
	return nil
}

// ownGroup reports whether the server's process is in group gid.
func ownGroup(gid int) bool {
	if gid == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}
