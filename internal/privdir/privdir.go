// Package privdir owns the check that a directory (or a file in it) the
// server keeps private state in is the server's own, and so is the way
// to it: the directory or regular file is never a symlink, is owned by
// the server's user and writable by nobody else; every directory above
// it, up to /, is root's or the server's and writable by nobody else
// either (whoever may write a directory may rename what is in it away
// and put their own in its place, after any check), unless it is sticky
// (as /tmp: only an entry's owner may rename it, and every entry on the
// way is root's or the server's). A group may write only in the layout
// of Kubernetes' fsGroup: a setgid directory of a group the server's
// process is in (kubelet makes a volume's directories so, and its files
// group-writable), and a file of that group in such a directory. A
// directory that passes is given the mode the server asks for (it is
// the server's own: a wider mode is narrowed, an fsGroup's write bits
// dropped).
//
// The way is walked from / one component at a time on descriptors
// (openat with O_NOFOLLOW), each checked before the next is opened
// beneath it; a symlink on the way is followed only when it is root's
// or the server's, in a directory already checked (nobody else could
// have put it there or changed it since).
//
// It must never follow a symlink it has not checked, change anything it
// refused, or accept what a user other than the server's (and its own
// groups, in the fsGroup layout) could write or replace.
package privdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unsafe"
)

// ErrNotPrivate is what a check refuses: something another user could
// write or replace.
var ErrNotPrivate = errors.New("another user could write it")

const (
	oPath    = 0x200000 // O_PATH: a descriptor that only names the file
	maxLinks = 40       // symlinks followed on one way, as the kernel's
)

// Ensure makes dir (and its missing parents) with mode when it is
// missing, checks it and the way to it (Dir), and gives a directory that
// passes mode (keeping an fsGroup's setgid bit, which the files of that
// group in it need). The check and the change are made on one open
// descriptor of dir, opened beneath its checked parent, never through a
// symlink.
func Ensure(dir string, mode os.FileMode) error {
	w, err := walk(dir, mode.Perm())
	if err != nil {
		return err
	}
	defer w.close()
	if err := syscall.Mkdirat(w.fd, w.leaf, uint32(mode.Perm())); err != nil && err != syscall.EEXIST {
		return &os.PathError{Op: "mkdir", Path: w.path(w.leaf), Err: err}
	}
	fd, err := syscall.Openat(w.fd, w.leaf, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		// A symlink, not a directory: the check says which.
		if _, cerr := w.check(dir, true); cerr != nil {
			return cerr
		}
		return &os.PathError{Op: "open", Path: w.path(w.leaf), Err: err}
	}
	f := os.NewFile(uintptr(fd), w.path(w.leaf))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := verify(dir, st, true, &w.st); err != nil {
		return err
	}
	if afterCheck != nil {
		afterCheck(dir)
	}
	if st.Mode().Perm() != mode.Perm() {
		return f.Chmod(mode.Perm() | st.Mode()&os.ModeSetgid)
	}
	return nil
}

// afterCheck, if set (tests), runs between Ensure's check and its change;
// afterAncestor after each directory on the way is checked.
var afterCheck, afterAncestor func(string)

// Dir checks that dir is a directory of the server's own, and the way to
// it (see the package comment), and returns what it found.
func Dir(dir string) (os.FileInfo, error) {
	return check(dir, true)
}

// File checks that p is a regular file of the server's own, and the way
// to it.
func File(p string) (os.FileInfo, error) {
	return check(p, false)
}

func check(p string, dir bool) (os.FileInfo, error) {
	w, err := walk(p, 0)
	if err != nil {
		return nil, err
	}
	defer w.close()
	return w.check(p, dir)
}

// check checks w's leaf, never followed.
func (w *way) check(p string, dir bool) (os.FileInfo, error) {
	fd, err := syscall.Openat(w.fd, w.leaf, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: w.path(w.leaf), Err: err}
	}
	f := os.NewFile(uintptr(fd), w.path(w.leaf))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := verify(p, st, dir, &w.st); err != nil {
		return nil, err
	}
	return st, nil
}

// way is the walked way to a path's last component: a descriptor of its
// parent, checked with every directory above it.
type way struct {
	fds   []int    // /, then each directory below it
	names []string // the directories' names below /
	fd    int      // the parent's: fds' last
	st    syscall.Stat_t
	leaf  string
}

func (w *way) close() {
	for _, fd := range w.fds {
		syscall.Close(fd)
	}
	w.fds = nil
}

// path is the real path of name in the walked directory.
func (w *way) path(name string) string {
	return "/" + filepath.Join(append(slices.Clone(w.names), name)...)
}

// walk opens p's parent from /, one component at a time, checking each
// directory (ancestor) before it opens the next beneath it. With mode,
// a missing directory on the way is made with it.
func walk(p string, mode os.FileMode) (*way, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	if abs == "/" {
		return nil, fmt.Errorf("%s: %w: it is the root directory", p, ErrNotPrivate)
	}
	w := &way{leaf: filepath.Base(abs)}
	ok := false
	defer func() {
		if !ok {
			w.close()
		}
	}()
	root := func() error {
		w.close()
		w.names = nil
		fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: "/", Err: err}
		}
		w.fds = []int{fd}
		return w.ancestor(p, fd)
	}
	if err := root(); err != nil {
		return nil, err
	}
	todo := strings.Split(filepath.Dir(abs), "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if n := len(w.fds); n > 1 {
				syscall.Close(w.fds[n-1])
				w.fds, w.names = w.fds[:n-1], w.names[:len(w.names)-1]
			}
			continue
		}
		top := w.fds[len(w.fds)-1]
		fd, err := syscall.Openat(top, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err == syscall.ENOENT && mode != 0 {
			if err = syscall.Mkdirat(top, name, uint32(mode)); err == nil || err == syscall.EEXIST {
				fd, err = syscall.Openat(top, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: w.path(name), Err: err}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return nil, &os.PathError{Op: "stat", Path: w.path(name), Err: err}
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			// In a directory checked: root's or the server's, nobody
			// else's, can be followed.
			target, err := readlink(top, name)
			syscall.Close(fd)
			if err != nil {
				return nil, &os.PathError{Op: "readlink", Path: w.path(name), Err: err}
			}
			if !trusted(st.Uid) {
				return nil, fmt.Errorf("%s: %w: the symlink %s on the way to it belongs to uid %d, not to root nor this server's (uid %d): chown -h root %s",
					p, ErrNotPrivate, w.path(name), st.Uid, os.Geteuid(), w.path(name))
			}
			if links++; links > maxLinks {
				return nil, &os.PathError{Op: "open", Path: p, Err: syscall.ELOOP}
			}
			if filepath.IsAbs(target) {
				if err := root(); err != nil {
					return nil, err
				}
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		w.fds, w.names = append(w.fds, fd), append(w.names, name)
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return nil, &os.PathError{Op: "open", Path: w.path(""), Err: syscall.ENOTDIR}
		}
		if err := w.ancestor(p, fd); err != nil {
			return nil, err
		}
		if afterAncestor != nil {
			afterAncestor(w.path(""))
		}
	}
	w.fd = w.fds[len(w.fds)-1]
	if err := syscall.Fstat(w.fd, &w.st); err != nil {
		return nil, err
	}
	ok = true
	return w, nil
}

// ancestor checks the directory fd, on the way to p: root's or the
// server's, and writable by nobody else but in a sticky directory, or by
// a group in the fsGroup layout.
func (w *way) ancestor(p string, fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	at := w.path("")
	refuse := func(f string, a ...any) error {
		return fmt.Errorf("%s: %w: %s", p, ErrNotPrivate, fmt.Sprintf(f, a...))
	}
	perm := st.Mode & 0o7777
	switch {
	case !trusted(st.Uid):
		return refuse("the directory %s above it belongs to uid %d, who could replace what is in it; it must be root's or this server's (uid %d): chown root %s",
			at, st.Uid, os.Geteuid(), at)
	case perm&syscall.S_ISVTX != 0:
		// Sticky: only an entry's owner (root or the server, checked
		// next) or the directory's may rename it.
	case perm&0o002 != 0:
		return refuse("every user may write the directory %s above it (mode %04o), and so replace what is in it: chmod o-w %s (or +t, as /tmp)", at, perm, at)
	case perm&0o020 != 0 && !fsGroupDir(&st):
		return refuse("group %d may write the directory %s above it (mode %04o), and so replace what is in it (only a setgid directory of a group this server is in, Kubernetes' fsGroup, may be): chmod g-w %s",
			st.Gid, at, perm, at)
	}
	return nil
}

// trusted: root's or the server's.
func trusted(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid()
}

// fsGroupDir reports whether st is a directory in Kubernetes' fsGroup
// layout: setgid, of a group the server's process is in.
func fsGroupDir(st *syscall.Stat_t) bool {
	return st.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Mode&syscall.S_ISGID != 0 && ownGroup(int(st.Gid))
}

func readlink(dirfd int, name string) (string, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 0, 0)
		if e != 0 {
			return "", e
		}
		if int(n) < size {
			return string(buf[:n]), nil
		}
	}
}

// verify checks st, what p is (never followed), as check does; parent is
// the directory holding it.
func verify(p string, st os.FileInfo, dir bool, parent *syscall.Stat_t) error {
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
	// A group's write: a setgid directory of the server's group, or a
	// file of that group in one (kubelet's fsGroup), nothing else.
	fsGroup := fsGroupDir(sys)
	if !dir {
		fsGroup = fsGroupDir(parent) && sys.Gid == parent.Gid
	}
	switch perm := st.Mode().Perm(); {
	case int(sys.Uid) != uid:
		return refuse("it belongs to uid %d, not to this server's (uid %d): chown it", sys.Uid, uid)
	case perm&0o002 != 0:
		return refuse("every user may write it (mode %04o): chmod o-w it", perm)
	case perm&0o020 != 0 && !fsGroup:
		return refuse("group %d may write it (mode %04o), outside Kubernetes' fsGroup layout (a setgid directory of a group this server is in, and its files of that group): chmod g-w it", sys.Gid, perm)
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
