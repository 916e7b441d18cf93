package workspace

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

// resolve is how every path beneath the root is resolved.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Dir is the host's handle on a sandbox's /workspace. Its methods may be
// called from any goroutine, also while Close runs.
type Dir struct {
	mu       sync.Mutex
	fd       int // O_PATH directory fd of the tmpfs root; -1 once closed
	uid, gid int // host ids of the sandbox user, who owns what we create
	copy     Copier
	root     string // how paths beneath are shown: "/workspace", or a host directory
	// tmpfs: the root is a tmpfs directory, whose size counts its
	// entries (Empty). Set by New, never changed.
	tmpfs bool
}

// A Copier writes everything src yields into dst, a regular file Write
// opened beneath the root, and returns the number of bytes written. It
// decides whose memory the file's pages are charged to: tmpfs charges
// whichever process writes them (the jail's Copier has the sandbox's own
// init write them). It runs on the caller's goroutine, on no locked
// thread and with no changed ids, so it may wait for a slow src.
//
// Errors reading src must be returned as they are (or wrapped): they are
// the client's. Errors writing dst must be *os.PathError, mapped like
// every file error. Any other error is the Copier's own and is passed on
// as it is.
type Copier func(dst *os.File, src io.Reader) (int64, error)

// New takes ownership of fd, an O_PATH descriptor of the workspace root.
// Files the host creates are given to uid:gid (host ids); copy writes
// their contents.
func New(fd, uid, gid int, copy Copier) *Dir {
	var fs unix.Statfs_t
	tmpfs := unix.Fstatfs(fd, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
	return &Dir{fd: fd, uid: uid, gid: gid, copy: copy, root: "/workspace", tmpfs: tmpfs}
}

// emptyDirSize is the size tmpfs gives a directory with no entries: it
// counts every entry in the size (BOGO_DIRENT_SIZE, 20 bytes), "." and
// ".." included, and adjusts it on every link, unlink, rename and
// whiteout.
const emptyDirSize = 40

// Empty reports whether the workspace certainly has no entries, for the
// price of one fstat of the root: it is a tmpfs directory of tmpfs's
// empty size with no subdirectory, which the sandbox user owns and may
// read and search (so that a listing as that user would succeed, and
// find nothing). False means nothing: list it.
func (d *Dir) Empty() bool {
	if !d.tmpfs {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Size == emptyDirSize && st.Nlink == 2 &&
		int(st.Uid) == d.uid && st.Mode&0o500 == 0o500
}

// OpenOut opens the host directory dir (made if missing), into which
// files a sandbox wrote are copied out (airlock run --out) with the same
// care as into a workspace: every path is resolved beneath dir, never
// through a symlink or a mount, and only regular files are written,
// under a temporary name first. Files belong to this process's user.
func OpenOut(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, dir, err)
	}
	copy := func(dst *os.File, src io.Reader) (int64, error) { return io.Copy(dst, src) }
	return &Dir{fd: fd, uid: os.Getuid(), gid: os.Getgid(), copy: copy, root: dir}, nil
}

// OpenOutBeneath opens rel, a directory beneath the host directory
// parent, as OpenOut opens a directory, but makes nothing and follows
// nothing on the way from parent: rel is resolved beneath it, never
// through a symlink or a mount, and must be a directory. For host
// directories read back that someone may have tampered with (a live
// session's recovery point after a crash): one of their directories
// replaced by a symlink to a host directory is refused, never used, and
// so is parent replaced by one.
func OpenOutBeneath(parent, rel string) (*Dir, error) {
	// parent itself a symlink is refused too (O_NOFOLLOW: its last
	// component; what leads to it is the server's own configuration).
	pfd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, mapErr(parent, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, parent, err)
	}
	defer unix.Close(pfd)
	shown := path.Join(parent, rel)
	fd, err := unix.Openat2(pfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return nil, mapErr(shown, err)
	}
	copy := func(dst *os.File, src io.Reader) (int64, error) { return io.Copy(dst, src) }
	return &Dir{fd: fd, uid: os.Getuid(), gid: os.Getgid(), copy: copy, root: shown}, nil
}

// Close releases the descriptor; the tmpfs goes away with its last user.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

func (d *Dir) open(rel string, flags uint64, mode uint64) (int, error) {
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(d.fd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC | unix.O_NOFOLLOW, Mode: mode, Resolve: resolve})
	if err != nil {
		return -1, mapErr(d.shown(rel), err)
	}
	return fd, nil
}

// mapErr turns err, met at where (a path as shown), into an error of a
// kind.
func mapErr(where string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %s: no such file or directory", errdefs.ErrNotFound, where)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s: path goes through a symlink or mount, which the host never follows", errdefs.ErrInvalidArgument, where)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s: not a directory (or a parent is not)", errdefs.ErrInvalidArgument, where)
	case errors.Is(err, unix.EISDIR):
		return fmt.Errorf("%w: %s: is a directory", errdefs.ErrInvalidArgument, where)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return fmt.Errorf("%w: %s: the workspace is full", errdefs.ErrTooLarge, where)
	case errors.Is(err, unix.ENOMEM):
		// The sandbox's memory cgroup refused the pages (files in
		// /workspace count towards limits.memory).
		return fmt.Errorf("%w: %s: the session's memory is full", errdefs.ErrTooLarge, where)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return fmt.Errorf("%w: %s: %v", errdefs.ErrConflict, where, err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %s: the sandbox user may not access it", errdefs.ErrPermission, where)
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("%w: %s: name too long", errdefs.ErrInvalidArgument, where)
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%w: %s: a socket or device, not a regular file", errdefs.ErrInvalidArgument, where)
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ETXTBSY), errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%w: %s: in use by the sandbox (try again)", errdefs.ErrConflict, where)
	}
	return fmt.Errorf("workspace: %s: %w", where, err)
}

func (d *Dir) shown(rel string) string {
	if rel == "" || rel == "." {
		return d.root
	}
	return path.Join(d.root, rel)
}

// Open opens a regular file for reading. Anything else (directory, FIFO,
// device, socket, symlink) is refused. The returned info is taken from the
// open descriptor, so it describes exactly what will be read.
func (d *Dir) Open(rel string) (f *os.File, e Entry, err error) {
	err = d.asUser(func(d *Dir) error {
		f, e, err = d.openFile(rel)
		return err
	})
	return f, e, err
}

func (d *Dir) openFile(rel string) (*os.File, Entry, error) {
	if rel == "" {
		return nil, Entry{}, fmt.Errorf("%w: %s: is a directory", errdefs.ErrInvalidArgument, d.root)
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	fd, err := d.open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, Entry{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, Entry{}, mapErr(d.shown(rel), err)
	}
	e := entryOf(rel, &st)
	if e.Type != "file" {
		unix.Close(fd)
		what := map[string]string{"dir": "a directory", "symlink": "a symlink"}[e.Type]
		if what == "" {
			what = "a FIFO, socket or device"
		}
		return nil, Entry{}, fmt.Errorf("%w: %s: is %s, not a regular file", errdefs.ErrInvalidArgument, d.shown(rel), what)
	}
	// Back to blocking reads for a regular file (no effect, but explicit).
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, Entry{}, mapErr(d.shown(rel), err)
	}
	return os.NewFile(uintptr(fd), d.shown(rel)), e, nil
}

// Stat describes rel without following a final symlink.
func (d *Dir) Stat(rel string) (e Entry, err error) {
	err = d.asUser(func(d *Dir) error {
		e, err = d.stat(rel)
		return err
	})
	return e, err
}

func (d *Dir) stat(rel string) (Entry, error) {
	fd, err := d.open(rel, unix.O_PATH, 0)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Entry{}, mapErr(d.shown(rel), err)
	}
	return entryOf(rel, &st), nil
}

// dup is a Dir of its own on a duplicate of d's root descriptor, which
// the caller closes: d may be closed meanwhile, and a descriptor number
// closed under the caller could be reused for another sandbox's
// workspace. A closed d is ErrGone, saying gone.
func (d *Dir) dup(gone string) (*Dir, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, gone)
	}
	fd, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &Dir{fd: fd, uid: d.uid, gid: d.gid, root: d.root}, nil
}

// asUser runs fn on a thread whose filesystem ids are the sandbox user's.
// Files it creates belong to that user (the tmpfs belongs to the sandbox's
// user namespace, where host root has no id), and it can write only where
// the sandbox user could. The thread is never given back to the Go
// runtime: it exits with the goroutine.
//
// fn gets a Dir of its own, on a duplicate of the root descriptor: the
// session may end (and Close run) meanwhile, and a descriptor number
// closed under fn could be reused for another sandbox's workspace.
func (d *Dir) asUser(fn func(root *Dir) error) error {
	root, err := d.dup("its workspace is gone")
	if err != nil {
		return err
	}
	defer root.Close()
	errc := make(chan error, 1)
	go func() {
		var err error
		// Answered last, once the thread has its own ids back: the
		// caller may look at its threads as soon as it has the answer.
		defer func() { errc <- err }()
		runtime.LockOSThread()
		// setfs[ug]id answers the ids before the call, and never fails
		// (it ignores an id it may not take): each change is read back.
		prevGID, _ := unix.SetfsgidRetGid(d.gid)
		prevUID, _ := unix.SetfsuidRetUid(d.uid)
		defer func() {
			// Give the thread back to the Go runtime only once it has its
			// own ids again; otherwise it stays locked, and Go ends it (or,
			// for the main thread, parks it for good) with this goroutine.
			unix.Setfsuid(prevUID)
			unix.Setfsgid(prevGID)
			uid, _ := unix.SetfsuidRetUid(-1)
			gid, _ := unix.SetfsgidRetGid(-1)
			if uid == prevUID && gid == prevGID {
				runtime.UnlockOSThread()
			}
		}()
		gid, _ := unix.SetfsgidRetGid(-1)
		uid, _ := unix.SetfsuidRetUid(-1)
		if uid != d.uid || gid != d.gid {
			err = fmt.Errorf("workspace: cannot take the sandbox user's ids")
			return
		}
		err = fn(root)
	}()
	return <-errc
}

// Write streams r into rel, replacing an existing file atomically, and
// creating missing parent directories. At most max bytes are accepted;
// more is an ErrTooLarge and leaves nothing behind. It returns the number
// of bytes written.
//
// Only opening the file and renaming it into place run as the sandbox
// user, on a thread of their own; r is read, and the file written, by
// the Dir's Copier on the caller's goroutine, so a client that sends
// slowly holds no thread.
func (d *Dir) Write(rel string, r io.Reader, max int64, mode os.FileMode) (int64, error) {
	var up *upload
	err := d.asUser(func(root *Dir) (err error) {
		up, err = root.create(rel, mode)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer up.close()
	src := &source{r: io.LimitReader(r, min(max, math.MaxInt64-1)+1)}
	n, err := d.copy(up.f, src)
	switch {
	case err != nil:
		err = up.copyErr(err, src.err)
	case n > max:
		err = fmt.Errorf("%w: %s: larger than the limit of %d bytes", errdefs.ErrTooLarge, d.shown(rel), max)
	default:
		// As the sandbox user again: the session may have ended meanwhile
		// (ErrGone), and nothing is renamed where it could not rename.
		err = d.asUser(func(*Dir) error { return up.commit() })
	}
	if err != nil {
		d.asUser(func(*Dir) error { up.abort(); return nil })
		return 0, err
	}
	return n, nil
}

// upload is a file being written under a temporary name.
type upload struct {
	where string // its path as shown
	pfd   int    // O_PATH descriptor of its directory
	tmp   string // its temporary name there
	name  string // its final name there
	f     *os.File
	done  bool // renamed into place
}

func (d *Dir) create(rel string, mode os.FileMode) (*upload, error) {
	if rel == "" {
		return nil, fmt.Errorf("%w: %s: is a directory", errdefs.ErrInvalidArgument, d.root)
	}
	dir, name := path.Split(rel)
	pfd, err := d.mkdirAll(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	// A name the sandbox cannot guess, so that it cannot take it first.
	tmp := ".airlock-upload-" + rand.Text()
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		unix.Close(pfd)
		return nil, mapErr(d.shown(rel), err)
	}
	return &upload{where: d.shown(rel), pfd: pfd, tmp: tmp, name: name, f: os.NewFile(uintptr(fd), tmp)}, nil
}

// source remembers the error of the last read, to tell the client's
// errors from the Copier's.
type source struct {
	r   io.Reader
	err error
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// copyErr classifies an error of the Copier (see Copier); srcErr is the
// error its source returned, if any.
func (u *upload) copyErr(err, srcErr error) error {
	var pe *os.PathError
	switch {
	case srcErr != nil && errors.Is(err, srcErr):
		if errdefs.Code(srcErr) != "internal" {
			return srcErr // the caller's own words (a stalled client)
		}
		// The client stopped sending, or sent a broken body.
		return fmt.Errorf("%w: %s: reading the upload: %v", errdefs.ErrInvalidArgument, u.where, srcErr)
	case errors.As(err, &pe):
		return mapErr(u.where, pe.Err)
	}
	return err
}

func (u *upload) commit() error {
	if err := unix.Renameat(u.pfd, u.tmp, u.pfd, u.name); err != nil {
		return mapErr(u.where, err)
	}
	u.done = true
	return nil
}

func (u *upload) abort() {
	if !u.done {
		unix.Unlinkat(u.pfd, u.tmp, 0)
	}
}

func (u *upload) close() {
	u.f.Close()
	unix.Close(u.pfd)
}

// Mkdir creates rel and its missing parents.
func (d *Dir) Mkdir(rel string) error {
	return d.asUser(func(d *Dir) error {
		fd, err := d.mkdirAll(rel)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
}

// mkdirAll creates the directories of rel one component at a time, each
// resolved beneath the root, and returns a descriptor of the last one.
func (d *Dir) mkdirAll(rel string) (int, error) {
	cur, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return cur, nil
	}
	done := ""
	for _, part := range strings.Split(rel, "/") {
		done = path.Join(done, part)
		err := unix.Mkdirat(cur, part, 0o755)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, mapErr(d.shown(done), err)
		}
		next, err := unix.Openat2(cur, part, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: resolve,
		})
		unix.Close(cur)
		if err != nil {
			return -1, mapErr(d.shown(done), err)
		}
		cur = next
	}
	return cur, nil
}

// Remove deletes a file, a symlink (not its target) or, if recursive, a
// directory tree.
func (d *Dir) Remove(rel string, recursive bool) error {
	return d.asUser(func(d *Dir) error { return d.remove(rel, recursive) })
}

func (d *Dir) remove(rel string, recursive bool) error {
	if rel == "" {
		return fmt.Errorf("%w: refusing to remove %s itself", errdefs.ErrInvalidArgument, d.root)
	}
	dir, name := path.Split(rel)
	pfd, err := d.open(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	r := remover{where: d.shown(rel), recursive: recursive, budget: 4 * MaxListLength * MaxPathDepth}
	return r.removeAt(pfd, name, 0)
}

// remover removes a tree the sandbox built, and may still be changing: its
// depth and the number of entries it visits are bounded, and errors name
// the path asked for (building every entry's path would cost memory
// quadratic in the depth).
type remover struct {
	where     string // the path asked for, as shown
	recursive bool
	budget    int // entries left to visit
}

func (r *remover) removeAt(pfd int, name string, depth int) error {
	r.budget--
	if r.budget < 0 {
		return fmt.Errorf("%w: %s: too many entries, or the sandbox keeps adding them", errdefs.ErrConflict, r.where)
	}
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return mapErr(r.where, err)
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err == nil {
		return nil
	} else if !errors.Is(err, unix.ENOTEMPTY) || !r.recursive {
		return mapErr(r.where, err)
	}
	if depth >= 4*MaxPathDepth {
		return fmt.Errorf("%w: %s: more than %d levels deep; it goes with the session", errdefs.ErrInvalidArgument, r.where, 4*MaxPathDepth)
	}
	fd, err := unix.Openat2(pfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return mapErr(r.where, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if err := r.removeAt(fd, n, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return mapErr(r.where, err)
		}
	}
	// mapErr turns every error, nil included, into a non-nil one: a
	// successful removal of the emptied directory must return nil.
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
		return mapErr(r.where, err)
	}
	return nil
}

// List returns the entries under rel, recursively if asked, sorted by
// path, without following symlinks. At most MaxListLength entries are
// returned; truncated says whether there were more.
func (d *Dir) List(rel string, recursive bool) (entries []Entry, truncated bool, err error) {
	err = d.asUser(func(d *Dir) error {
		entries, truncated, err = d.list(rel, recursive)
		return err
	})
	return entries, truncated, err
}

func (d *Dir) list(rel string, recursive bool) (entries []Entry, truncated bool, err error) {
	var out []Entry
	truncated, err = d.walk(rel, recursive, func(p string, st *unix.Stat_t) { out = append(out, entryOf(p, st)) })
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, truncated, err
}

// snapshot is TakeSnapshot's listing: List's walk, recursive, keeping
// only what a Snapshot holds of each regular file (no Entry, no mode
// string, no sort: a warm execution takes two).
func (d *Dir) snapshot() (s Snapshot, err error) {
	err = d.asUser(func(d *Dir) error {
		files := map[string]fileState{}
		truncated, err := d.walk("", true, func(p string, st *unix.Stat_t) {
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				files[p] = fileState{size: st.Size, mtime: st.Mtim.Nano(), ino: st.Ino}
			}
		})
		s = Snapshot{files: files, Truncated: truncated}
		return err
	})
	return s, err
}

// walk calls add for each entry under rel (recursively if asked), in
// no order, without following symlinks: at most MaxListLength entries;
// truncated says whether there were more.
func (d *Dir) walk(rel string, recursive bool, add func(p string, st *unix.Stat_t)) (truncated bool, err error) {
	fd, err := d.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return false, err
	}
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	l := lister{root: d.root, recursive: recursive, buf: *buf, add: add}
	depth := 1 // components in the path of rel's entries
	if rel != "" {
		depth += strings.Count(rel, "/") + 1
	}
	err = l.list(fd, rel, depth)
	if errors.Is(err, errFull) {
		l.truncated, err = true, nil
	}
	return l.truncated, err
}

var errFull = errors.New("list full")

// direntBufs are getdents' buffers: a warm execution lists its workspace
// twice.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

// lister walks a tree the sandbox built: what it keeps is bounded by
// MaxListLength entries of at most MaxPathLen bytes, whatever the tree.
type lister struct {
	root      string // how paths are shown
	recursive bool
	add       func(p string, st *unix.Stat_t) // each entry kept
	n         int                             // entries kept
	truncated bool                            // something was left out
	buf       []byte                          // getdents' buffer, parsed before anything recurses
}

// list reads the directory fd (and closes it); depth counts the
// components of its entries' paths.
func (l *lister) list(fd int, rel string, depth int) error {
	defer unix.Close(fd)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, l.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return mapErr(path.Join(l.root, rel), err)
		}
		if n <= 0 {
			return nil
		}
		// ParseDirent copies the names (without . and ..): the buffer
		// is free again for the directories beneath.
		_, _, names = unix.ParseDirent(l.buf[:n], -1, names[:0])
		for _, name := range names {
			if l.n >= MaxListLength {
				return errFull
			}
			// path.Join(rel, name), without its copies: rel is clean
			// and a name is one component, never "." or "..".
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			if len(p) > MaxPathLen {
				// No client could name it anyway.
				l.truncated = true
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // vanished meanwhile
			}
			l.n++
			l.add(p, &st)
			if !l.recursive || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			if depth >= MaxPathDepth {
				l.truncated = true
				continue
			}
			cfd, err := unix.Openat2(fd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
			if err != nil {
				// Swapped for something else meanwhile, or made
				// unreadable: its contents are not in the list.
				l.truncated = true
				continue
			}
			if err := l.list(cfd, p, depth+1); err != nil {
				return err
			}
		}
	}
}

func entryOf(rel string, st *unix.Stat_t) Entry {
	e := Entry{
		Path:    rel,
		Size:    st.Size,
		Mode:    fmt.Sprintf("%04o", st.Mode&0o7777),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		Ino:     st.Ino,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "dir"
		e.Size = 0
	case unix.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "other"
		e.Size = 0
	}
	return e
}

// Rename moves from to to (both beneath the root), replacing a file at
// to; neither parent is reached through a symlink or a mount.
func (d *Dir) Rename(from, to string) error {
	if from == "" || to == "" {
		return fmt.Errorf("%w: refusing to move %s itself", errdefs.ErrInvalidArgument, d.root)
	}
	return d.asUser(func(d *Dir) error {
		fdir, fname := path.Split(from)
		tdir, tname := path.Split(to)
		fp, err := d.open(strings.TrimSuffix(fdir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fp)
		tp, err := d.open(strings.TrimSuffix(tdir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(tp)
		if err := unix.Renameat(fp, fname, tp, tname); err != nil {
			return mapErr(d.shown(from), err)
		}
		return nil
	})
}

// MoveFrom moves the entry from beneath src's root to to beneath d's
// (both on one filesystem), making to's missing parent directories and
// replacing a file there: neither side is reached through a symlink or
// a mount. For host directories that hold copies of a workspace (a live
// session's recovery point), never a sandbox's own.
func (d *Dir) MoveFrom(src *Dir, from, to string) error {
	if from == "" || to == "" {
		return fmt.Errorf("%w: refusing to move %s itself", errdefs.ErrInvalidArgument, d.root)
	}
	from_, err := src.dup(src.root + " is closed")
	if err != nil {
		return err
	}
	defer from_.Close()
	return d.asUser(func(d *Dir) error {
		fdir, fname := path.Split(from)
		tdir, tname := path.Split(to)
		fp, err := from_.open(strings.TrimSuffix(fdir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fp)
		tp, err := d.mkdirAll(strings.TrimSuffix(tdir, "/"))
		if err != nil {
			return err
		}
		defer unix.Close(tp)
		if err := unix.Renameat(fp, fname, tp, tname); err != nil {
			return mapErr(d.shown(to), err)
		}
		return nil
	})
}

// Fsync flushes each of rels beneath d (a file or a directory; ""
// is d itself) to its disk: a file's contents, a directory's names.
// Only what is named is flushed, never the whole filesystem (syncfs
// would write back every other writer's data on it too, at the cost of
// whoever asked). Never through a symlink; a FIFO is not waited for.
func (d *Dir) Fsync(rels ...string) error {
	dup, err := d.dup(d.root + " is closed")
	if err != nil {
		return err
	}
	defer dup.Close()
	for _, rel := range rels {
		// fsync needs a descriptor that is not O_PATH.
		fd, err := dup.open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		err = unix.Fsync(fd)
		unix.Close(fd)
		if err != nil {
			return mapErr(d.shown(rel), err)
		}
	}
	return nil
}
