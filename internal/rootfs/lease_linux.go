package rootfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Leases: a root template is shared by every airlock process on a state
// directory (a server, `airlock run --cold`, of any version), and any of
// them may sweep the templates of other builds. Each user holds a shared
// flock on the template's lease file (<template>.lease, beside it: never
// inside, which sandboxes see) from before it first looks at the
// template until it exits; a sweep removes a template only while it holds
// the lease exclusively, taken without waiting, so never one a live
// process uses, however idle.
const leaseSuffix = ".lease"

// leases are this process's: held until it exits (a template, once
// used, may be used again by any host of the process).
var leases struct {
	sync.Mutex
	held map[string]*os.File
}

// lease takes a shared lease on the template at final for the rest of
// the process's life. A sweep that holds it now is waited for (it only
// removes the template and unlinks the lease file); the lease taken is
// on the file at the path then, never on one a sweep unlinked meanwhile.
func lease(final string) error {
	leases.Lock()
	defer leases.Unlock()
	if leases.held[final] != nil {
		return nil
	}
	p := final + leaseSuffix
	for {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("rootfs: template lease: %w", err)
		}
		if err := flock(f, unix.LOCK_SH); err != nil {
			f.Close()
			return fmt.Errorf("rootfs: template lease: %w", err)
		}
		if sameFile(f, p) {
			if leases.held == nil {
				leases.held = map[string]*os.File{}
			}
			leases.held[final] = f
			return nil
		}
		f.Close() // a sweep unlinked it while we waited: again
	}
}

// claim takes the lease of the template at p exclusively, for a sweep,
// without waiting: ok is false while any process holds it. release
// unlinks the lease file (no process holds it: one waiting to takes the
// file at the path again, see lease) and lets it go.
func claim(p string) (release func(), ok bool) {
	lp := p + leaseSuffix
	f, err := os.OpenFile(lp, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false
	}
	if flock(f, unix.LOCK_EX|unix.LOCK_NB) != nil || !sameFile(f, lp) {
		f.Close()
		return nil, false
	}
	return func() {
		os.Remove(lp)
		f.Close()
	}, true
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// sameFile reports whether f is the file at p now.
func sameFile(f *os.File, p string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(p)
	return err == nil && os.SameFile(a, b)
}

// isLease reports whether name is a template's lease file.
func isLease(name string) bool {
	return strings.HasPrefix(name, "rootfs-") && strings.HasSuffix(name, leaseSuffix)
}
