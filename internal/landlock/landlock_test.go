package landlock

// Landlock needs no privilege: these tests restrict one throwaway OS
// thread (locked, never unlocked, so that it ends with its goroutine) and
// probe from it. Only the mknod checks need root.

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"airlock/internal/testenv"
	"golang.org/x/sys/unix"
)

func abi(t *testing.T) int {
	t.Helper()
	v, err := ABI()
	if err != nil {
		testenv.Skip(t, "landlock is not enabled: %v", err)
	}
	if v < 1 {
		t.Fatalf("ABI %d", v)
	}
	return v
}

func TestCreateRejects(t *testing.T) {
	v := abi(t)
	if fd, err := Create(SandboxRules(), 0); err == nil {
		unix.Close(fd)
		t.Error("Create with ABI 0 succeeded")
	}
	before := countFDs()
	for _, r := range []Rules{
		{ReadExec: []string{"/no/such/dir"}},
		{ReadExec: []string{"/"}, WritableDirs: []string{"/no/such/dir"}},
		{ReadExec: []string{"/"}, WritableFiles: []string{"/no/such/file"}},
	} {
		if fd, err := Create(r, v); err == nil {
			unix.Close(fd)
			t.Errorf("Create(%+v) succeeded", r)
		}
	}
	if after := countFDs(); after != before {
		t.Errorf("failed Creates leaked %d descriptors", after-before)
	}
}

func TestSymlinkRuleGrantsNothing(t *testing.T) {
	// A rule names the symlink itself (O_NOFOLLOW), never what it points
	// at: a symlinked "writable" tree grants nothing in its target.
	abi(t)
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	var err error
	restricted(t, Rules{ReadExec: []string{"/proc"}, WritableDirs: []string{link}}, func() {
		var fd int
		fd, err = unix.Open(filepath.Join(target, "new"), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
	})
	if !errors.Is(err, unix.EACCES) {
		t.Errorf("creating in the symlink's target: %v, want EACCES", err)
	}
}

func countFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func TestSandboxRules(t *testing.T) {
	r := SandboxRules()
	if !slices.Equal(r.ReadExec, []string{"/"}) {
		t.Errorf("ReadExec = %v", r.ReadExec)
	}
	if !slices.Equal(r.WritableDirs, []string{"/workspace", "/tmp", "/dev/shm"}) {
		t.Errorf("WritableDirs = %v: only the scratch trees may be written", r.WritableDirs)
	}
	for _, f := range r.WritableFiles {
		if !slices.Contains([]string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}, f) {
			t.Errorf("writable file %s", f)
		}
	}
}

// restricted runs fn on a fresh OS thread restricted by rules, and lets
// the thread die afterwards.
func restricted(t *testing.T, r Rules, fn func()) {
	t.Helper()
	v := abi(t)
	fd, err := Create(r, v)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			done <- err
			return
		}
		if err := RestrictThread(fd); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRestrictThread(t *testing.T) {
	v := abi(t)
	base := t.TempDir()
	ro, rw, other := filepath.Join(base, "ro"), filepath.Join(base, "rw"), filepath.Join(base, "other")
	for _, d := range []string{ro, rw, other} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "file"), []byte("data"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	single := filepath.Join(other, "file")

	type result struct {
		what string
		err  error
	}
	var got []result
	try := func(what string, err error) { got = append(got, result{what, err}) }
	open := func(p string, flags int) error {
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	restricted(t, Rules{ReadExec: []string{ro}, WritableDirs: []string{rw}, WritableFiles: []string{single}}, func() {
		try("read ro", open(filepath.Join(ro, "file"), unix.O_RDONLY))
		try("write ro", open(filepath.Join(ro, "file"), unix.O_WRONLY))
		try("create in ro", open(filepath.Join(ro, "new"), unix.O_WRONLY|unix.O_CREAT))
		try("mkdir in ro", unix.Mkdir(filepath.Join(ro, "d"), 0o755))
		try("unlink in ro", unix.Unlink(filepath.Join(ro, "file")))
		try("read outside", open("/etc/passwd", unix.O_RDONLY))
		try("list outside", open("/", unix.O_RDONLY|unix.O_DIRECTORY))
		try("read rw", open(filepath.Join(rw, "file"), unix.O_RDONLY))
		try("write rw", open(filepath.Join(rw, "file"), unix.O_WRONLY))
		try("create in rw", open(filepath.Join(rw, "new"), unix.O_WRONLY|unix.O_CREAT))
		try("mkdir in rw", unix.Mkdir(filepath.Join(rw, "d"), 0o755))
		try("mkfifo in rw", unix.Mkfifo(filepath.Join(rw, "fifo"), 0o644))
		try("rename in rw", unix.Rename(filepath.Join(rw, "new"), filepath.Join(rw, "new2")))
		try("unlink in rw", unix.Unlink(filepath.Join(rw, "new2")))
		try("symlink in rw", unix.Symlink("/etc/passwd", filepath.Join(rw, "link")))
		try("read through symlink", open(filepath.Join(rw, "link"), unix.O_RDONLY))
		try("link rw into ro", unix.Link(filepath.Join(rw, "file"), filepath.Join(ro, "hard")))
		try("rename rw into other", unix.Rename(filepath.Join(rw, "file"), filepath.Join(other, "moved")))
		try("write single file", open(single, unix.O_WRONLY))
		try("read single file", open(single, unix.O_RDONLY))
		try("create beside single file", open(filepath.Join(other, "new"), unix.O_WRONLY|unix.O_CREAT))
		if v >= 3 {
			try("truncate ro", unix.Truncate(filepath.Join(ro, "file"), 0))
		}
		if os.Geteuid() == 0 {
			// Root may mknod; Landlock says no, even in a writable tree.
			try("mknod char in rw", unix.Mknod(filepath.Join(rw, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			try("mknod whiteout in rw", unix.Mknod(filepath.Join(rw, "wh"), unix.S_IFCHR, 0))
			try("mknod block in rw", unix.Mknod(filepath.Join(rw, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
		}
	})
	allowed := map[string]bool{"read ro": true, "read rw": true, "write rw": true, "create in rw": true, "mkdir in rw": true,
		"mkfifo in rw": true, "rename in rw": true, "unlink in rw": true, "symlink in rw": true,
		"write single file": true, "read single file": true}
	if len(got) < 21 {
		t.Fatalf("only %d probes ran", len(got))
	}
	for _, r := range got {
		switch {
		case allowed[r.what] && r.err != nil:
			t.Errorf("%s: %v, want allowed", r.what, r.err)
		case !allowed[r.what] && r.err == nil:
			t.Errorf("%s: allowed, want refused", r.what)
		case !allowed[r.what] && !errors.Is(r.err, unix.EACCES) && !errors.Is(r.err, unix.EXDEV):
			t.Errorf("%s: %v, want EACCES (or EXDEV for a cross-tree link)", r.what, r.err)
		}
	}
	// Nothing the restricted thread was refused happened, and the rest
	// of the process is not restricted.
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Error("a file was created in the read-only tree")
	}
	if err := os.WriteFile(filepath.Join(ro, "unrestricted"), []byte("x"), 0o644); err != nil {
		t.Errorf("the test's other threads are restricted too: %v", err)
	}
}

func TestScopes(t *testing.T) {
	if v := abi(t); v < 6 {
		testenv.Skip(t, "signal and abstract socket scoping need ABI 6, have %d", v)
	}
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	name := "airlock-landlock-test-" + strconv.Itoa(os.Getpid())
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var killErr, connectErr error
	restricted(t, Rules{ReadExec: []string{"/"}}, func() {
		killErr = unix.Kill(cmd.Process.Pid, 0)
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			connectErr = err
			return
		}
		connectErr = unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name})
		unix.Close(fd)
	})
	if !errors.Is(killErr, unix.EPERM) {
		t.Errorf("signalling a process outside the domain: %v, want EPERM", killErr)
	}
	if !errors.Is(connectErr, unix.EPERM) {
		t.Errorf("connecting to an abstract socket outside the domain: %v, want EPERM", connectErr)
	}
	// Unrestricted, both work.
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the test itself cannot signal: %v", err)
	}
	c, err := net.Dial("unix", "@"+name)
	if err != nil {
		t.Errorf("the test itself cannot connect: %v", err)
	} else {
		c.Close()
	}
}
