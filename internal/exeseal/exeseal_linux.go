package exeseal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Exe is a sealed executable.
type Exe struct {
	f      *os.File
	Method Method
	From   string // FromSelf or FromEmbedded
	// Why says why the ways tried before this one were passed over ("" if
	// none was): a report says it beside Method and From.
	Why string
}

// Open seals the executable the host runs as every sandbox's init: the
// init built into this binary when it has one (scripts/build.sh), which
// starts faster and holds less memory in every sandbox than the whole
// airlock binary, else the running binary itself. An embedded init
// without this build's stamp is refused (ErrStampMismatch).
func Open() (*Exe, error) {
	if embeddedInit != nil {
		return openInit(embeddedInit, initStamp)
	}
	if e, err := openDetached(); err == nil {
		return e, nil
	}
	return openMemfd()
}

// openInit seals init, an executable built into this binary, if it
// carries stamp.
func openInit(init []byte, stamp string) (*Exe, error) {
	if err := checkStamp(init, stamp); err != nil {
		return nil, err
	}
	e, err := sealMemfd(bytes.NewReader(init))
	if err != nil {
		return nil, err
	}
	e.From = FromEmbedded
	return e, nil
}

// Path is the path to execute, valid in this process and in children
// created before Close. It names this process's descriptor, never a file.
func (e *Exe) Path() string { return "/proc/self/fd/" + strconv.Itoa(int(e.f.Fd())) }

// Fd returns the descriptor.
func (e *Exe) Fd() int { return int(e.f.Fd()) }

// Close releases the executable. Running inits keep their own reference.
func (e *Exe) Close() error { return e.f.Close() }

func openDetached() (*Exe, error) {
	return openDetachedFile("/proc/self/exe", FromSelf)
}

// openDetachedFile seals path with a detached read-only mount of it.
func openDetachedFile(path, from string) (*Exe, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount_setattr: %w", err)
	}
	// Prove the seal. A failing writable open alone proves nothing: the
	// binary is running, so the kernel answers ETXTBSY before it looks at
	// the mount. The mount itself must say it is read-only.
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("detached mount is not read-only (%v)", err)
	}
	if st.Flags&unix.ST_NOEXEC != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is on a noexec mount", path)
	}
	wfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(wfd)
		unix.Close(fd)
		return nil, fmt.Errorf("detached mount is writable")
	}
	return &Exe{f: os.NewFile(uintptr(fd), "airlock-exe"), Method: DetachedMount, From: from}, nil
}

// OpenIn is Open, keeping the embedded init in dir, a directory only
// root can write (the state directory), as a file named by its stamp and
// running it from a detached read-only mount of that file: a process that
// starts few sandboxes (airlock run --cold) then neither copies nor scans
// the init each time. The file is written, once per build, only after
// the stamp check; if it cannot be used (dir on a noexec mount), the init
// is copied into a sealed memfd as by Open; if that cannot be executed
// either (vm.memfd_noexec=2), the airlock binary itself is the init, from
// a detached read-only mount, as in a plain build: slower to start, as
// safe. Exe.Why says which ways were passed over, and why. An init
// without this build's stamp is refused whatever the way.
func OpenIn(dir string) (*Exe, error) {
	if embeddedInit == nil {
		return Open()
	}
	return openIn(dir, embeddedInit, initStamp)
}

// openIn is OpenIn for init, an executable carrying stamp.
func openIn(dir string, init []byte, stamp string) (*Exe, error) {
	e, cached := openCached(dir, init, stamp)
	if cached == nil {
		return e, nil
	}
	if errors.Is(cached, ErrStampMismatch) {
		return nil, cached
	}
	e, memfd := openInit(init, stamp)
	if memfd == nil {
		e.Why = fmt.Sprintf("its copy in the state directory cannot be used: %v", cached)
		return e, nil
	}
	if errors.Is(memfd, ErrStampMismatch) {
		return nil, memfd
	}
	why := fmt.Sprintf("the init built into it cannot be run here: its copy in the state directory: %v; a memfd copy: %v", cached, memfd)
	e, err := openDetached()
	if err != nil {
		return nil, fmt.Errorf("exeseal: %s; the airlock binary: %w", why, err)
	}
	e.Why = why
	return e, nil
}

// cachePrefix starts the name of an init kept in a directory.
const cachePrefix = "airlock-init-"

// openCached opens the init kept in dir for stamp, writing it from init
// first if it is not there, and removes those of other builds.
func openCached(dir string, init []byte, stamp string) (*Exe, error) {
	hash, err := stampHash(stamp)
	if err != nil {
		return nil, err
	}
	name := filepath.Join(dir, cachePrefix+hash)
	if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
		if err := checkStamp(init, stamp); err != nil {
			return nil, err
		}
		if err := writeCached(dir, name, init); err != nil {
			return nil, err
		}
		if old, err := filepath.Glob(filepath.Join(dir, cachePrefix+"*")); err == nil {
			for _, o := range old {
				if o != name {
					os.Remove(o)
				}
			}
		}
	}
	e, err := openDetachedFile(name, FromEmbedded)
	if err != nil {
		return nil, err
	}
	// Only root may have written it: root owns it, and no one else can.
	var st unix.Stat_t
	if err := unix.Fstat(e.Fd(), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		e.Close()
		return nil, fmt.Errorf("%s is not a regular file only root can write (%v)", name, err)
	}
	return e, nil
}

// writeCached writes init to name in dir, whole or not at all.
func writeCached(dir, name string, init []byte) error {
	f, err := os.CreateTemp(dir, ".airlock-init-*")
	if err != nil {
		return err
	}
	_, err = f.Write(init)
	if err == nil {
		err = f.Chmod(0o555)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func openMemfd() (*Exe, error) {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("exeseal: %w", err)
	}
	defer src.Close()
	e, err := sealMemfd(src)
	if err != nil {
		return nil, err
	}
	e.From = FromSelf
	return e, nil
}

// sealMemfd copies src into a memfd and seals it against every change.
func sealMemfd(src io.Reader) (*Exe, error) {
	// MFD_EXEC: where vm.memfd_noexec is 1 a memfd is otherwise made
	// non-executable, and every init would fail to start. Kernels before
	// 6.3 know no such flag (EINVAL) and make every memfd executable.
	fd, err := unix.MemfdCreate("airlock", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("airlock", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("memfd_create: %w (vm.memfd_noexec is 2: no memfd may be executed)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-exe")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("copy: %w", err)
	}
	// F_SEAL_EXEC (kernel 6.3) also fixes its mode, so that not even
	// root can make it non-executable under the sandboxes' feet; kernels
	// before know no such seal (EINVAL) and take the rest.
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals|unix.F_SEAL_EXEC)
	if errors.Is(err, unix.EINVAL) {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("seal: %w", err)
	}
	// Refuse here, not at every sandbox's start.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o100 == 0 {
		f.Close()
		return nil, fmt.Errorf("the sealed memfd is not executable (mode %#o, %v; see vm.memfd_noexec)", st.Mode&0o777, err)
	}
	return &Exe{f: f, Method: SealedMemfd}, nil
}
