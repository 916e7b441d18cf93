package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSweepTemplates(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(name string, mtime time.Time) string { return mkTemplate(t, dir, name, mtime) }
	keep := mk("rootfs-current", old)
	mk("rootfs-oldversion", old)
	mk(".rootfs-half1234", old)
	mk("rootfs-justmade", time.Now())
	mk("root", old) // the staging directory
	busy := mk("rootfs-busy", old)
	if os.Geteuid() == 0 {
		// A template some sandbox has mounted stays.
		target := t.TempDir()
		if err := unix.Mount(busy, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(target, unix.MNT_DETACH)
	} else {
		os.RemoveAll(busy)
	}
	if err := SweepTemplates(dir, keep); err != nil {
		t.Fatal(err)
	}
	left := names(dir)
	want := []string{"root", "rootfs-busy", "rootfs-current", "rootfs-justmade"}
	if os.Geteuid() != 0 {
		want = []string{"root", "rootfs-current", "rootfs-justmade"}
	}
	if len(left) != len(want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("left %v, want %v", left, want)
		}
	}
}

// mkTemplate makes a template root named name in dir, last changed at
// mtime, and returns its path.
func mkTemplate(t *testing.T, dir, name string, mtime time.Time) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(p, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return p
}

// names lists what dir holds, sorted.
func names(dir string) []string {
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	return left
}

// holdLease holds the lease of the template at p as another process
// would (its own open file), how (LOCK_SH: a user), until the test ends.
func holdLease(t *testing.T, p string, how int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p+leaseSuffix, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestSweepSparesLeased: a sweep (a server's start, or a cold run's)
// never removes a template a live process leases, however idle (nothing
// mounted, made long ago: an idle server of another version on the same
// state directory); an unleased one goes with its lease file, and so
// does a lease file left without its template; one a process has leased
// before making its template stays.
func TestSweepSparesLeased(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(name string) string { return mkTemplate(t, dir, name, old) }
	keep := mk("rootfs-current")
	holdLease(t, mk("rootfs-idleserver"), unix.LOCK_SH)
	unused := mk("rootfs-unused")
	os.WriteFile(unused+leaseSuffix, nil, 0o600) // its user exited
	os.WriteFile(filepath.Join(dir, "rootfs-gone"+leaseSuffix), nil, 0o600)
	holdLease(t, filepath.Join(dir, "rootfs-pending"), unix.LOCK_SH)
	if err := SweepTemplates(dir, keep); err != nil {
		t.Fatal(err)
	}
	left := names(dir)
	want := []string{"rootfs-current", "rootfs-idleserver", "rootfs-idleserver.lease", "rootfs-pending.lease"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("left %v, want %v", left, want)
	}
}

// TestLeaseAfterASweep: a lease taken while a sweep holds the template
// (and unlinks its lease file) is taken on the file at the path once the
// sweep is done, so that the next sweep sees it: a lease on the unlinked
// file would leave the template to the next sweep.
func TestLeaseAfterASweep(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rootfs-raced")
	sweep := holdLease(t, p, unix.LOCK_EX)
	taken := make(chan error, 1)
	go func() { taken <- lease(p) }()
	defer func() {
		leases.Lock()
		if f := leases.held[p]; f != nil {
			f.Close()
			delete(leases.held, p)
		}
		leases.Unlock()
	}()
	// Once the lease has the sweep's file open (and waits on it), the
	// sweep unlinks it and lets it go.
	for deadline := time.Now().Add(30 * time.Second); opened(p+leaseSuffix) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the lease never opened its file")
		}
		time.Sleep(time.Millisecond)
	}
	os.Remove(p + leaseSuffix)
	sweep.Close()
	if err := <-taken; err != nil {
		t.Fatal(err)
	}
	if release, ok := claim(p); ok {
		release()
		t.Error("a sweep could claim a template leased while the previous sweep held it")
	}
}

// opened counts this process's descriptors of the file at p.
func opened(p string) int {
	n := 0
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); l == p {
			n++
		}
	}
	return n
}
