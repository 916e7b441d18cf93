package landlock

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Filesystem rights by ABI version (linux/landlock.h).
const (
	fsExecute    = ll.AccessFSExecute
	fsWriteFile  = ll.AccessFSWriteFile
	fsReadFile   = ll.AccessFSReadFile
	fsReadDir    = ll.AccessFSReadDir
	fsRemoveDir  = ll.AccessFSRemoveDir
	fsRemoveFile = ll.AccessFSRemoveFile
	fsMakeChar   = ll.AccessFSMakeChar
	fsMakeDir    = ll.AccessFSMakeDir
	fsMakeReg    = ll.AccessFSMakeReg
	fsMakeSock   = ll.AccessFSMakeSock
	fsMakeFifo   = ll.AccessFSMakeFifo
	fsMakeBlock  = ll.AccessFSMakeBlock
	fsMakeSym    = ll.AccessFSMakeSym
	fsRefer      = ll.AccessFSRefer    // ABI 2
	fsTruncate   = ll.AccessFSTruncate // ABI 3
	fsIoctlDev   = ll.AccessFSIoctlDev // ABI 5
)

// ABI returns the Landlock ABI version the kernel supports, or an error
// when Landlock is not enabled.
func ABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("landlock unavailable: %w", err)
	}
	return v, nil
}

// handled returns the filesystem rights and scopes ABI abi can enforce.
func handled(abi int) (fs uint64, scoped uint64) {
	fs = fsExecute | fsWriteFile | fsReadFile | fsReadDir | fsRemoveDir | fsRemoveFile |
		fsMakeChar | fsMakeDir | fsMakeReg | fsMakeSock | fsMakeFifo | fsMakeBlock | fsMakeSym
	if abi >= 2 {
		fs |= fsRefer
	}
	if abi >= 3 {
		fs |= fsTruncate
	}
	if abi >= 5 {
		fs |= fsIoctlDev
	}
	if abi >= 6 {
		scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	return fs, scoped
}

// Create builds a ruleset fd for r with the best rights ABI abi supports.
// The caller owns the fd; it may be handed to another process, which
// enforces it on itself with RestrictThread.
func Create(r Rules, abi int) (int, error) {
	if abi < 1 {
		return -1, fmt.Errorf("landlock: ABI %d", abi)
	}
	fs, scoped := handled(abi)
	attr := ll.RulesetAttr{HandledAccessFS: fs}
	if abi >= 6 {
		attr.Scoped = scoped
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	read := uint64(fsExecute | fsReadFile | fsReadDir)
	write := fs &^ (fsMakeChar | fsMakeBlock | fsIoctlDev)
	fileWrite := uint64(fsWriteFile | fsReadFile)
	if abi >= 3 {
		fileWrite |= fsTruncate
	}
	if abi >= 5 {
		fileWrite |= fsIoctlDev
	}
	add := func(path string, access uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("landlock: open %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return fmt.Errorf("landlock: stat %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// Rules on files may only carry file rights.
			access &= fileWrite | fsExecute
		}
		if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: access, ParentFd: pfd}, 0); err != nil {
			return fmt.Errorf("landlock: rule for %s: %w", path, err)
		}
		return nil
	}
	for _, p := range r.ReadExec {
		if err := add(p, read); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for _, p := range r.WritableDirs {
		if err := add(p, write); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for _, p := range r.WritableFiles {
		if err := add(p, fileWrite); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for _, p := range r.DeviceDirs {
		if err := add(p, fileWrite|fsReadDir); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// RestrictThread enforces the ruleset on the calling OS thread only. The
// thread must already have no_new_privs set.
func RestrictThread(rulesetFD int) error {
	if err := ll.LandlockRestrictSelf(rulesetFD, 0); err != nil {
		return fmt.Errorf("landlock: restrict self: %w", err)
	}
	return nil
}
