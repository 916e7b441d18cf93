package workspace

// Privileged tests of Dir on a real tmpfs, mounted like a sandbox's
// /workspace (nosuid, nodev, owned by the sandbox user) in a private mount
// namespace that only a throwaway thread ever enters: the host's mount
// table never sees it, and the tmpfs lives on through the descriptors.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// testUID owns the tmpfs, as the sandbox user's host id does.
const testUID = 1_999_000

// testDir returns a Dir on a fresh tmpfs mounted with opts, and a second
// O_PATH descriptor of its root through which the test (as root) plays
// the sandbox and sets traps.
func testDir(t testing.TB, opts string) (*Dir, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to mount a tmpfs and take the sandbox user's ids")
	}
	mnt := t.TempDir()
	type result struct {
		fd  int
		err error
	}
	c := make(chan result)
	go func() {
		// Never unlocked: the thread, and its private mount namespace
		// with it, ends with the goroutine.
		runtime.LockOSThread()
		fail := func(err error) { c <- result{-1, err} }
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			fail(fmt.Errorf("unshare: %w", err))
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fail(err)
			return
		}
		data := fmt.Sprintf("%s,mode=0755,uid=%d,gid=%d", opts, testUID, testUID)
		if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			fail(fmt.Errorf("mount: %w", err))
			return
		}
		fd, err := unix.Open(mnt, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		c <- result{fd, err}
	}()
	r := <-c
	if r.err != nil {
		t.Fatal(r.err)
	}
	ctl, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := New(r.fd, testUID, testUID, hostCopy)
	t.Cleanup(func() {
		d.Close()
		unix.Close(ctl)
	})
	return d, ctl
}

// hostCopy writes from the test process itself (the jail's Copier writes
// from the sandbox's init; see package jail).
func hostCopy(dst *os.File, src io.Reader) (int64, error) { return io.Copy(dst, src) }

// outside makes a host directory with a secret file, the target of the
// traps, and checks at the end that nothing in it changed.
func outside(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = t.TempDir()
	secret = "secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o666); err != nil {
		t.Fatal(err)
	}
	// Writable by the sandbox user: only the confinement, not
	// permissions, may stop a write that reaches it.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 || ents[0].Name() != "secret" {
			t.Errorf("the host directory changed: %v", ents)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil || string(b) != secret {
			t.Errorf("the host file changed: %q %v", b, err)
		}
	})
	return dir, secret
}

func readAll(t *testing.T, d *Dir, rel string) (string, Entry, error) {
	t.Helper()
	f, e, err := d.Open(rel)
	if err != nil {
		return "", e, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), e, err
}

func mustWrite(t *testing.T, d *Dir, rel, content string) {
	t.Helper()
	if n, err := d.Write(rel, strings.NewReader(content), 1<<20, 0o644); err != nil || n != int64(len(content)) {
		t.Fatalf("Write(%q) = %d, %v", rel, n, err)
	}
}

func owner(t *testing.T, ctl int, rel string) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstatat(ctl, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatalf("stat %s: %v", rel, err)
	}
	return int(st.Uid)
}

func TestDirRoundTrip(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	mustWrite(t, d, "a/b/c.txt", "hello")
	got, e, err := readAll(t, d, "a/b/c.txt")
	if err != nil || got != "hello" || e.Type != "file" || e.Size != 5 || e.Path != "a/b/c.txt" || e.Mode != "0644" {
		t.Fatalf("Open = %q %+v %v", got, e, err)
	}
	// Created as the sandbox user, parents included.
	for _, p := range []string{"a", "a/b", "a/b/c.txt"} {
		if u := owner(t, ctl, p); u != testUID {
			t.Errorf("%s is owned by %d, want %d", p, u, testUID)
		}
	}
	// Replacing is atomic: a new inode, the old content never half-written.
	var before, after unix.Stat_t
	unix.Fstatat(ctl, "a/b/c.txt", &before, 0)
	if _, err := d.Write("a/b/c.txt", strings.NewReader("bye"), 1<<20, 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Fstatat(ctl, "a/b/c.txt", &after, 0)
	if before.Ino == after.Ino {
		t.Error("Write replaced the file in place")
	}
	if got, e, _ := readAll(t, d, "a/b/c.txt"); got != "bye" || e.Mode != "0600" {
		t.Errorf("after rewrite: %q %+v", got, e)
	}
	if err := d.Mkdir("x/y/z"); err != nil {
		t.Fatal(err)
	}
	if e, err := d.Stat("x/y"); err != nil || e.Type != "dir" {
		t.Errorf("Stat(x/y) = %+v, %v", e, err)
	}
	if e, err := d.Stat(""); err != nil || e.Type != "dir" {
		t.Errorf("Stat(root) = %+v, %v", e, err)
	}
	entries, truncated, err := d.List("", true)
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	want := "a:dir a/b:dir a/b/c.txt:file x:dir x/y:dir x/y/z:dir"
	if err != nil || truncated || strings.Join(paths, " ") != want {
		t.Errorf("List = %v %v %v, want %s", paths, truncated, err, want)
	}
	if entries, _, err := d.List("a", false); err != nil || len(entries) != 1 || entries[0].Path != "a/b" {
		t.Errorf("List(a) = %+v, %v", entries, err)
	}

	// Remove: a file, a non-empty directory only when recursive.
	if err := d.Remove("a/b/c.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stat("a/b/c.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("removed file: %v", err)
	}
	if err := d.Remove("x", false); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Remove(non-empty, not recursive) = %v, want ErrConflict", err)
	}
	if err := d.Remove("x", true); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("x", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Remove(gone) = %v, want ErrNotFound", err)
	}
	if err := d.Remove("", true); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Remove(root) = %v", err)
	}
	// Directories are not files.
	if _, _, err := d.Open("a"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Open(dir) = %v", err)
	}
	if _, _, err := d.Open(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Open(root) = %v", err)
	}
	if _, err := d.Write("", strings.NewReader("x"), 10, 0o644); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Write(root) = %v", err)
	}
	if _, err := d.Write("a", strings.NewReader("x"), 10, 0o644); err == nil {
		t.Error("Write over a directory succeeded")
	}
	// A parent that is a file.
	mustWrite(t, d, "file", "f")
	if _, err := d.Write("file/child", strings.NewReader("x"), 10, 0o644); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Write under a file = %v", err)
	}
}

func TestDirSizeLimits(t *testing.T) {
	d, _ := testDir(t, "size=256k,nr_inodes=64")
	if n, err := d.Write("ten", strings.NewReader("0123456789"), 10, 0o644); err != nil || n != 10 {
		t.Errorf("Write at the limit = %d, %v", n, err)
	}
	if _, err := d.Write("eleven", strings.NewReader("0123456789A"), 10, 0o644); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Write over the limit = %v, want ErrTooLarge", err)
	}
	// The filesystem fills up before the per-file limit: ENOSPC is
	// ErrTooLarge too, and neither leaves a partial file.
	_, err := d.Write("big", bytes.NewReader(make([]byte, 1<<20)), 10<<20, 0o644)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Write of 1M into 256k = %v, want ErrTooLarge", err)
	}
	// Out of inodes.
	var ierr error
	for i := 0; i < 100 && ierr == nil; i++ {
		_, ierr = d.Write("n"+strconv.Itoa(i), strings.NewReader(""), 10, 0o644)
	}
	if !errors.Is(ierr, errdefs.ErrTooLarge) {
		t.Errorf("running out of inodes: %v, want ErrTooLarge", ierr)
	}
	entries, _, err := d.List("", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Path, ".airlock-upload") || e.Path == "eleven" || e.Path == "big" {
			t.Errorf("a failed write left %s", e.Path)
		}
	}
}

func TestDirRefusesSymlinks(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	host, secret := outside(t)
	for name, target := range map[string]string{
		"abs":      filepath.Join(host, "secret"),
		"rel":      "../../../../../../../../" + strings.TrimPrefix(filepath.Join(host, "secret"), "/"),
		"dirlink":  host,
		"proclink": "/proc/self/root" + filepath.Join(host, "secret"),
		"fdlink":   "/proc/self/fd/" + strconv.Itoa(ctl),
		"self":     "self",
		"inside":   "real",
	} {
		if err := unix.Symlinkat(target, ctl, name); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, d, "real", "inside")

	for _, p := range []string{"abs", "rel", "proclink", "fdlink", "self", "inside", "dirlink/secret", "fdlink/secret", "dirlink/../real"} {
		got, _, err := readAll(t, d, p)
		if err == nil {
			t.Errorf("Open(%q) followed a symlink and read %q", p, got)
		}
		if strings.Contains(got, secret) {
			t.Errorf("Open(%q) leaked the secret", p)
		}
	}
	// Stat and List describe a link without following it.
	if e, err := d.Stat("abs"); err != nil || e.Type != "symlink" {
		t.Errorf("Stat(abs) = %+v, %v", e, err)
	}
	for _, p := range []string{"dirlink", "dirlink/", "fdlink"} {
		if _, _, err := d.List(p, true); err == nil {
			t.Errorf("List(%q) followed a symlink", p)
		}
	}
	entries, _, _ := d.List("", true)
	for _, e := range entries {
		if strings.HasPrefix(e.Path, "dirlink/") || strings.HasPrefix(e.Path, "fdlink/") {
			t.Errorf("List descended through a symlink: %s", e.Path)
		}
	}
	// Writing, creating and removing through a linked directory fail.
	if _, err := d.Write("dirlink/new", strings.NewReader("x"), 10, 0o644); err == nil {
		t.Error("Write through a directory symlink succeeded")
	}
	if _, err := d.Write("dirlink/secret", strings.NewReader("x"), 10, 0o644); err == nil {
		t.Error("Write over a file through a directory symlink succeeded")
	}
	if err := d.Mkdir("dirlink/sub"); err == nil {
		t.Error("Mkdir through a directory symlink succeeded")
	}
	if err := d.Remove("dirlink/secret", false); err == nil {
		t.Error("Remove through a directory symlink succeeded")
	}
	if err := d.Remove("fdlink/secret", true); err == nil {
		t.Error("Remove through a magic link succeeded")
	}
	// Writing a link's own name replaces the link, not its target;
	// removing it removes the link.
	mustWrite(t, d, "abs", "replaced")
	if e, err := d.Stat("abs"); err != nil || e.Type != "file" {
		t.Errorf("after Write, abs is %+v, %v", e, err)
	}
	if err := d.Remove("dirlink", true); err != nil {
		t.Errorf("Remove(dirlink) = %v", err)
	}
}

func TestDirSymlinkSwappedForParent(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	host, secret := outside(t)
	mustWrite(t, d, "d/f1", "one")
	// The sandbox swaps the directory for a link to the host.
	if err := unix.Renameat(ctl, "d", ctl, "d.old"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Symlinkat(host, ctl, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write("d/f2", strings.NewReader("two"), 10, 0o644); err == nil {
		t.Error("Write followed the swapped-in link")
	}
	if _, err := d.Write("d/secret", strings.NewReader("owned"), 10, 0o644); err == nil {
		t.Error("Write over the host file through the swapped-in link")
	}
	if got, _, err := readAll(t, d, "d/secret"); err == nil || strings.Contains(got, secret) {
		t.Errorf("Open through the swapped-in link: %q %v", got, err)
	}
	if err := d.Remove("d/secret", false); err == nil {
		t.Error("Remove through the swapped-in link succeeded")
	}
	if got, _, err := readAll(t, d, "d.old/f1"); err != nil || got != "one" {
		t.Errorf("the moved directory: %q %v", got, err)
	}
	// An exchange that swaps the link in while Write creates the parent
	// chain: the race is lost at every step because each component is
	// opened beneath the previous one without following links.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			unix.Renameat2(ctl, "d", ctl, "d.old", unix.RENAME_EXCHANGE)
		}
	}()
	for i := 0; i < 200; i++ {
		d.Write("d/race"+strconv.Itoa(i), strings.NewReader("r"), 10, 0o644)
	}
	<-done
}

func TestDirRefusesSpecialFiles(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	for name, mode := range map[string]uint32{"fifo": unix.S_IFIFO | 0o666, "sock": unix.S_IFSOCK | 0o666, "null": unix.S_IFCHR | 0o666} {
		dev := 0
		if name == "null" {
			dev = int(unix.Mkdev(1, 3))
		}
		if err := unix.Mknodat(ctl, name, mode, dev); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := d.Open(name)
			done <- err
		}()
		select {
		case err := <-done:
			// A client's mistake (or the sandbox's doing), never a
			// server error.
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrPermission) {
				t.Errorf("Open(%s) = %v, want an invalid-argument or permission error", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("Open(%s) blocked", name)
		}
		if e, err := d.Stat(name); err != nil || e.Type != "other" || e.Size != 0 {
			t.Errorf("Stat(%s) = %+v, %v", name, e, err)
		}
	}
}

func TestDirHardlinks(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	mustWrite(t, d, "h1", "original")
	if err := unix.Linkat(ctl, "h1", ctl, "h2", 0); err != nil {
		t.Fatal(err)
	}
	// A write never goes through a hardlink into the other name.
	mustWrite(t, d, "h1", "new")
	if got, _, err := readAll(t, d, "h2"); err != nil || got != "original" {
		t.Errorf("h2 = %q, %v; the write went through the hardlink", got, err)
	}
	// And a hardlink to a file outside the tmpfs cannot be made at all.
	host, _ := outside(t)
	hfd, err := unix.Open(host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)
	if err := unix.Linkat(hfd, "secret", ctl, "hostlink", 0); !errors.Is(err, unix.EXDEV) {
		t.Errorf("hardlink across filesystems: %v", err)
	}
}

func TestDirRefusesTraversal(t *testing.T) {
	// Dir's methods take cleaned paths, but refuse escapes anyway.
	//
	// Only reads aim at host files. Removes and writes aim only at paths
	// that, were the confinement broken, would land in this test's own
	// directory, so that a regression fails the test without harming the
	// host.
	d, _ := testDir(t, "size=4m,nr_inodes=1024")
	host, secret := outside(t)
	up := strings.Repeat("../", 40)
	for _, p := range []string{"..", "../x", "a/../../x", up + "etc/passwd", "/etc/passwd", "/proc/self/root/etc/passwd",
		filepath.Join(host, "secret"), up + strings.TrimPrefix(host, "/") + "/secret"} {
		if got, _, err := readAll(t, d, p); err == nil || strings.Contains(got, secret) {
			t.Errorf("Open(%q) succeeded", p)
		}
		if _, err := d.Stat(p); err == nil {
			t.Errorf("Stat(%q) succeeded", p)
		}
		if _, _, err := d.List(p, false); err == nil {
			t.Errorf("List(%q) succeeded", p)
		}
	}
	for _, p := range []string{filepath.Join(host, "secret"), up + strings.TrimPrefix(host, "/") + "/secret",
		"/proc/self/root" + filepath.Join(host, "secret")} {
		if err := d.Remove(p, false); err == nil {
			t.Errorf("Remove(%q) succeeded", p)
		}
	}
	if err := d.Remove("..", false); err == nil {
		t.Error("Remove(..) succeeded")
	}
	for _, p := range []string{filepath.Join(host, "new"), up + strings.TrimPrefix(host, "/") + "/new", "/proc/self/root" + host + "/new"} {
		if _, err := d.Write(p, strings.NewReader("x"), 10, 0o644); err == nil {
			t.Errorf("Write(%q) succeeded", p)
		}
		if err := d.Mkdir(p); err == nil {
			t.Errorf("Mkdir(%q) succeeded", p)
		}
	}
}

func TestDirWritesOnlyAsTheSandboxUser(t *testing.T) {
	d, ctl := testDir(t, "size=4m,nr_inodes=1024")
	// A directory the sandbox user cannot write: the host cannot either.
	if err := unix.Mkdirat(ctl, "rootonly", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write("rootonly/x", strings.NewReader("x"), 10, 0o644); err == nil {
		t.Error("Write into a directory the sandbox user cannot write succeeded")
	}
	if err := d.Mkdir("rootonly/sub"); err == nil {
		t.Error("Mkdir in a directory the sandbox user cannot write succeeded")
	}
	// No thread of this process keeps the sandbox user's ids afterwards
	// (Go parks rather than ends the main thread when a locked goroutine
	// ends on it).
	for i := 0; i < 20; i++ {
		mustWrite(t, d, "f"+strconv.Itoa(i), "x")
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if (strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:")) && strings.Contains(l, strconv.Itoa(testUID)) {
				t.Errorf("thread %s kept the sandbox user's ids: %s", task.Name(), l)
			}
		}
	}
}

func TestDirListLimit(t *testing.T) {
	d, ctl := testDir(t, "size=8m,nr_inodes=20000")
	if err := unix.Mkdirat(ctl, "many", 0o755); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Openat(ctl, "many", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for i := 0; i < MaxListLength+5; i++ {
		fd, err := unix.Openat(dfd, strconv.Itoa(i), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	entries, truncated, err := d.List("", true)
	if err != nil || !truncated || len(entries) != MaxListLength {
		t.Errorf("List of %d entries = %d entries, truncated %v, %v", MaxListLength+6, len(entries), truncated, err)
	}
}

// A tree the sandbox builds deeper and longer than any client may name:
// listings and snapshots stop at the limits (and say so), and removal
// works to a bounded depth.
func TestDirDeepTree(t *testing.T) {
	d, ctl := testDir(t, "size=16m,nr_inodes=4096")
	long := strings.Repeat("d", MaxNameLen)
	mkchain := func(top string, levels int) {
		t.Helper()
		// Owned by the sandbox user, as if its code had built it.
		mkdir := func(dfd int, name string) {
			t.Helper()
			if err := unix.Mkdirat(dfd, name, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fchownat(dfd, name, testUID, testUID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
		}
		mkdir(ctl, top)
		cur, err := unix.Openat(ctl, top, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < levels; i++ {
			mkdir(cur, long)
			next, err := unix.Openat(cur, long, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			unix.Close(cur)
			if err != nil {
				t.Fatal(err)
			}
			cur = next
		}
		fd, err := unix.Openat(cur, "bottom", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		unix.Close(cur)
	}
	mkchain("deep", 40)
	entries, truncated, err := d.List("", true)
	if err != nil || !truncated {
		t.Fatalf("List = %d entries, truncated %v, %v; want truncated", len(entries), truncated, err)
	}
	for _, e := range entries {
		if len(e.Path) > MaxPathLen || strings.Count(e.Path, "/")+1 > MaxPathDepth {
			t.Fatalf("listed %d bytes, %d levels deep: beyond what a client may name", len(e.Path), strings.Count(e.Path, "/")+1)
		}
	}
	if len(entries) == 0 {
		t.Fatal("nothing listed")
	}
	// The same limits hold listing from inside the tree.
	sub := "deep/" + long + "/" + long
	entries, truncated, err = d.List(sub, true)
	if err != nil || !truncated || len(entries) == 0 {
		t.Fatalf("List(%s...) = %d entries, truncated %v, %v", sub[:10], len(entries), truncated, err)
	}
	for _, e := range entries {
		if len(e.Path) > MaxPathLen || strings.Count(e.Path, "/")+1 > MaxPathDepth {
			t.Fatalf("listed %d bytes, %d levels deep", len(e.Path), strings.Count(e.Path, "/")+1)
		}
	}
	if snap := TakeSnapshot(d); !snap.Truncated {
		t.Error("snapshot of a tree beyond the limits not marked truncated")
	}
	if err := d.Remove("deep", true); err != nil {
		t.Fatalf("Remove of a 40-level tree: %v", err)
	}
	mkchain("deeper", 4*MaxPathDepth+10)
	if err := d.Remove("deeper", true); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Remove of a %d-level tree = %v, want an invalid-argument error", 4*MaxPathDepth+10, err)
	}
}

// Close may run (the session ending) while requests use the workspace:
// they then fail with ErrGone, never on a stale descriptor.
func TestDirCloseWhileInUse(t *testing.T) {
	d, _ := testDir(t, "size=4m,nr_inodes=1024")
	mustWrite(t, d, "f", "content")
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				_, _, err := d.List("", true)
				if err == nil {
					var f *os.File
					if f, _, err = d.Open("f"); err == nil {
						_, err = io.ReadAll(f)
						f.Close()
					}
				}
				if err != nil && !errors.Is(err, errdefs.ErrGone) {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	d.Close()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("a request racing Close: %v, want ErrGone", err)
		}
	}
	if _, _, err := d.List("", false); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("List after Close = %v, want ErrGone", err)
	}
	if _, err := d.Write("g", strings.NewReader("x"), 10, 0o644); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("Write after Close = %v, want ErrGone", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// An upload whose body ends early is the client's failure, and leaves
// nothing behind.
func TestDirWriteBodyFails(t *testing.T) {
	d, _ := testDir(t, "size=4m,nr_inodes=1024")
	_, err := d.Write("up", io.MultiReader(strings.NewReader("partial"), failingReader{}), 1<<20, 0o644)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Write with a failing body = %v, want an invalid-argument error", err)
	}
	if entries, _, err := d.List("", true); err != nil || len(entries) != 0 {
		t.Errorf("left behind: %v %v", entries, err)
	}
}

// threads is the number of threads of the test process.
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

// stalledBody sends one byte, then nothing until released, like a client
// that stalls.
type stalledBody struct {
	waiting chan<- struct{}
	release <-chan struct{}
	reads   int
}

func (b *stalledBody) Read(p []byte) (int, error) {
	b.reads++
	switch b.reads {
	case 1:
		return copy(p, "x"), nil
	case 2:
		b.waiting <- struct{}{}
		<-b.release
	}
	return 0, io.EOF
}

// Writes whose bodies stall hold no OS thread: only opening and renaming
// the file run on a thread of the sandbox user's, never the reading of the
// body (thousands of stalled uploads would otherwise be thousands of
// locked threads, and the Go runtime aborts at 10000).
func TestDirStalledWritesHoldNoThread(t *testing.T) {
	d, _ := testDir(t, "size=4m,nr_inodes=1024")
	mustWrite(t, d, "warm", "x") // the thread pool as it is with no write waiting
	before := threads(t)
	const n = 64
	waiting := make(chan struct{}, n)
	release := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := d.Write(fmt.Sprintf("f%d", i), &stalledBody{waiting: waiting, release: release}, 10, 0o644)
			errs <- err
		}()
	}
	for range n {
		<-waiting
	}
	during := threads(t)
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Write: %v", err)
		}
	}
	if during > before+n/4 {
		t.Errorf("%d writes waiting for their bodies: %d threads, %d before", n, during, before)
	}
	if entries, _, err := d.List("", false); err != nil || len(entries) != n+1 {
		t.Errorf("List = %d entries, %v; want %d", len(entries), err, n+1)
	}
}

// Write tells the client's errors (its body's) from the file's and from
// the Copier's own, and leaves nothing behind after any of them.
func TestDirCopierErrors(t *testing.T) {
	d, _ := testDir(t, "size=4m,nr_inodes=1024")
	broken := errors.New("the copier broke")
	for _, c := range []struct {
		name string
		copy Copier
		code string // errdefs code
		msg  string
		body io.Reader
	}{
		{"body", hostCopy, "invalid_argument", "reading the upload: unexpected EOF",
			io.MultiReader(strings.NewReader("partial"), failingReader{})},
		{"body already classified", hostCopy, "invalid_argument", "the client stalled", stalledClient{}},
		{"file", func(dst *os.File, src io.Reader) (int64, error) {
			return 0, &os.PathError{Op: "write", Path: dst.Name(), Err: unix.ENOSPC}
		}, "too_large", "the workspace is full", nil},
		{"memory", func(dst *os.File, src io.Reader) (int64, error) {
			return 0, &os.PathError{Op: "write", Path: dst.Name(), Err: unix.ENOMEM}
		}, "too_large", "the session's memory is full", nil},
		{"sandbox gone", func(dst *os.File, src io.Reader) (int64, error) {
			return 0, fmt.Errorf("%w: the sandbox ended", errdefs.ErrGone)
		}, "session_ended", "the sandbox ended", nil},
		{"copier's own", func(dst *os.File, src io.Reader) (int64, error) {
			io.Copy(dst, src)
			return 0, broken
		}, "internal", "the copier broke", nil},
	} {
		d.copy = c.copy
		if c.body == nil {
			c.body = strings.NewReader("data")
		}
		_, err := d.Write("f", c.body, 10, 0o644)
		if errdefs.Code(err) != c.code || !strings.Contains(fmt.Sprint(err), c.msg) {
			t.Errorf("%s: Write = %v, want code %s saying %q", c.name, err, c.code, c.msg)
		}
		if entries, _, err := d.List("", true); err != nil || len(entries) != 0 {
			t.Errorf("%s: left behind %+v %v", c.name, entries, err)
		}
	}
}

type stalledClient struct{}

func (stalledClient) Read([]byte) (int, error) {
	return 0, fmt.Errorf("%w: the client stalled", errdefs.ErrInvalidArgument)
}

// BenchmarkSnapshot is what a warm execution pays twice: a snapshot of a
// small workspace.
func BenchmarkSnapshot(b *testing.B) {
	for _, files := range []int{0, 1, 100} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			d, _ := testDir(b, "size=1m")
			for i := range files {
				if _, err := d.Write(fmt.Sprintf("f%d", i), strings.NewReader("a"), 1, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for range b.N {
				if s := TakeSnapshot(d); s.Truncated || len(s.files) != files {
					b.Fatalf("%+v", s)
				}
			}
		})
	}
}

// A snapshot is what the snapshot of a listing is (the warm path takes
// it without List's entries): every regular file at any depth, by path,
// with its size, time stamp and inode; nothing else; truncated alike
// where a directory cannot be read, the tree is too deep or a path too
// long, or there are more entries than a listing holds.
func TestSnapshotIsTheListings(t *testing.T) {
	d, ctl := testDir(t, "size=16m,nr_inodes=20000")
	same := func(what string) {
		t.Helper()
		got := TakeSnapshot(d)
		ents, truncated, err := d.List("", true)
		if err != nil {
			t.Fatal(err)
		}
		want := SnapshotOf(ents, truncated)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the snapshot\n%+v\nnot the listing's\n%+v", what, got, want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mkfile(ctl, "top.csv"))
	must(mkfile(ctl, ".hidden"))
	must(unix.Mkdirat(ctl, "a", 0o755))
	must(unix.Mkdirat(ctl, "a/b", 0o755))
	must(mkfile(ctl, "a/b/c.txt"))
	must(mkfile(ctl, "a/x"))
	must(unix.Symlinkat("top.csv", ctl, "link"))
	must(unix.Mkfifoat(ctl, "fifo", 0o644))
	same("files, directories, a symlink, a fifo")
	if s := TakeSnapshot(d); len(s.files) != 4 || s.Truncated {
		t.Fatalf("want the 4 regular files: %+v", s)
	}
	must(unix.Mkdirat(ctl, "closed", 0o700)) // root's: the sandbox user cannot read it
	must(mkfile(ctl, "closed/f"))
	same("an unreadable directory")
	deep := "d"
	for range MaxPathDepth + 1 {
		must(unix.Mkdirat(ctl, deep, 0o755))
		must(mkfile(ctl, deep+"/f"))
		deep += "/d"
	}
	same("deeper than a listing goes")
	long := strings.Repeat("l", 250)
	dir := long
	for range 4 {
		must(unix.Mkdirat(ctl, dir, 0o755))
		dir += "/" + long
	}
	must(mkfile(ctl, dir[:len(dir)-len(long)]+"f"))
	must(mkfile(ctl, dir[:len(dir)-len(long)]+strings.Repeat("f", 100)))
	same("paths longer than a listing shows")
	must(unix.Mkdirat(ctl, "many", 0o755))
	for i := range MaxListLength {
		must(mkfile(ctl, fmt.Sprintf("many/%d", i)))
	}
	same("more entries than a listing holds")
	if !TakeSnapshot(d).Truncated {
		t.Fatal("a snapshot of more entries than a listing holds is not truncated")
	}
}

// An empty workspace is seen empty from its root's size alone (tmpfs
// counts the entries), and a snapshot of it is what a listing gives;
// any entry, of any kind, or a root its user may not list, sends the
// snapshot to the listing as before.
func TestSnapshotOfAnEmptyWorkspace(t *testing.T) {
	d, ctl := testDir(t, "size=1m")
	empty := func(want bool) {
		t.Helper()
		if got := d.Empty(); got != want {
			t.Fatalf("Empty() = %v, want %v", got, want)
		}
		ents, truncated, err := d.List("", true)
		if want && (err != nil || truncated || len(ents) != 0) {
			t.Fatalf("Empty() with a listing of %v (truncated %v, %v)", ents, truncated, err)
		}
	}
	empty(true)
	before := TakeSnapshot(d)
	if before.Truncated || len(before.files) != 0 {
		t.Fatalf("snapshot of an empty workspace: %+v", before)
	}
	// The sandbox makes each kind of entry, then removes it.
	for _, tc := range []struct {
		name       string
		make, undo func() error
	}{
		{"file", func() error { return mkfile(ctl, "a") }, func() error { return unix.Unlinkat(ctl, "a", 0) }},
		{"hidden file", func() error { return mkfile(ctl, ".h") }, func() error { return unix.Unlinkat(ctl, ".h", 0) }},
		{"directory", func() error { return unix.Mkdirat(ctl, "d", 0o755) }, func() error { return unix.Unlinkat(ctl, "d", unix.AT_REMOVEDIR) }},
		{"symlink", func() error { return unix.Symlinkat("/etc/passwd", ctl, "l") }, func() error { return unix.Unlinkat(ctl, "l", 0) }},
		{"fifo", func() error { return unix.Mkfifoat(ctl, "f", 0o644) }, func() error { return unix.Unlinkat(ctl, "f", 0) }},
		{"file renamed", func() error {
			if err := mkfile(ctl, "x"); err != nil {
				return err
			}
			return unix.Renameat(ctl, "x", ctl, "y")
		}, func() error { return unix.Unlinkat(ctl, "y", 0) }},
	} {
		if err := tc.make(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		empty(false)
		if tc.name == "file" {
			if ch := before.Changes(TakeSnapshot(d)); len(ch) != 1 || ch[0].Path != "a" || ch[0].Change != "created" {
				t.Errorf("a file made in an empty workspace: %+v", ch)
			}
		}
		if err := tc.undo(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		empty(true)
	}
	// A root its user may not list: the listing fails (a truncated
	// snapshot), and Empty says nothing.
	if err := unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", ctl), 0o300, 0); err != nil {
		t.Fatal(err)
	}
	if d.Empty() {
		t.Error("Empty() of a root its user may not read")
	}
	if s := TakeSnapshot(d); !s.Truncated {
		t.Errorf("snapshot of a root its user may not read: %+v", s)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", ctl), 0o755, 0); err != nil {
		t.Fatal(err)
	}
	empty(true)
	// Not a tmpfs: never taken as empty.
	hfd, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	host := New(hfd, os.Getuid(), os.Getgid(), hostCopy)
	defer host.Close()
	if host.Empty() {
		t.Error("Empty() of a host directory")
	}
	d.Close()
	if d.Empty() {
		t.Error("Empty() of a closed workspace")
	}
}

// mkfile makes an empty regular file rel beneath dirfd.
func mkfile(dirfd int, rel string) error {
	fd, err := unix.Openat(dirfd, rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
