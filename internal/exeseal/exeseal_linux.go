package exeseal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Exe is a sealed executable.
type Exe struct {
	f      *os.File
	Method Method
	From   string // FromSelf or FromEmbedded
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
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/proc/self/exe", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
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
	wfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(wfd)
		unix.Close(fd)
		return nil, fmt.Errorf("detached mount is writable")
	}
	return &Exe{f: os.NewFile(uintptr(fd), "airlock-exe"), Method: DetachedMount, From: FromSelf}, nil
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
		return nil, fmt.Errorf("exeseal: memfd_create: %w (vm.memfd_noexec is 2: no memfd may be executed)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("exeseal: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-exe")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("exeseal: copy: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("exeseal: seal: %w", err)
	}
	// Refuse here, not at every sandbox's start.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o100 == 0 {
		f.Close()
		return nil, fmt.Errorf("exeseal: the sealed memfd is not executable (mode %#o, %v; see vm.memfd_noexec)", st.Mode&0o777, err)
	}
	return &Exe{f: f, Method: SealedMemfd}, nil
}
