package exeseal

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"airlock/internal/testenv"
	"golang.org/x/sys/unix"
)

// checkSealed fails unless nothing can change the executable behind e:
// neither by opening its path for writing nor by writing or truncating
// through a descriptor that did open.
func checkSealed(t *testing.T, e *Exe) {
	t.Helper()
	for _, flags := range []int{unix.O_WRONLY, unix.O_RDWR, unix.O_WRONLY | unix.O_TRUNC, unix.O_WRONLY | unix.O_APPEND} {
		fd, err := unix.Open(e.Path(), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // refused outright (EROFS for the detached mount)
		}
		if n, err := unix.Write(fd, []byte{0}); err == nil || n > 0 {
			t.Errorf("%s: wrote through a descriptor opened with %#x", e.Method, flags)
		}
		if err := unix.Ftruncate(fd, 0); err == nil {
			t.Errorf("%s: truncated through a descriptor opened with %#x", e.Method, flags)
		}
		unix.Close(fd)
	}
	if _, err := unix.Write(e.Fd(), []byte{0}); err == nil {
		t.Errorf("%s: wrote through its own descriptor", e.Method)
	}
	// Still the running binary, byte for byte, and still executable.
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := os.ReadFile(e.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(self, sealed) {
		t.Errorf("%s: content differs from /proc/self/exe", e.Method)
	}
	out, err := exec.Command(e.Path(), "-test.run=^$").CombinedOutput()
	if err != nil {
		t.Errorf("%s: cannot execute it: %v %s", e.Method, err, out)
	}
}

func TestOpen(t *testing.T) {
	e, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if os.Geteuid() == 0 && e.Method != DetachedMount {
		t.Logf("as root, expected a detached mount, got %s", e.Method)
	}
	checkSealed(t, e)
}

func TestMemfd(t *testing.T) {
	e, err := openMemfd()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	seals, err := unix.FcntlInt(uintptr(e.Fd()), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if seals&want != want {
		t.Errorf("seals %#x, want %#x", seals, want)
	}
	// Where the kernel knows F_SEAL_EXEC (6.3, with vm.memfd_noexec), the
	// mode is sealed too: not even root can make it non-executable.
	// checked against a mutant: without the seal, the chmod went through.
	if _, err := os.Stat("/proc/sys/vm/memfd_noexec"); err == nil {
		if seals&unix.F_SEAL_EXEC == 0 {
			t.Errorf("seals %#x lack F_SEAL_EXEC", seals)
		}
		if err := unix.Fchmod(e.Fd(), 0o644); !errors.Is(err, unix.EPERM) {
			t.Errorf("chmod 0644 of the sealed memfd: %v, want EPERM", err)
		}
		if err := os.Chmod(e.Path(), 0o444); !errors.Is(err, unix.EPERM) {
			t.Errorf("chmod 0444 through its path: %v, want EPERM", err)
		}
	}
	// The seals themselves cannot be changed any more.
	if _, err := unix.FcntlInt(uintptr(e.Fd()), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE); !errors.Is(err, unix.EPERM) {
		t.Errorf("adding a seal: %v, want EPERM", err)
	}
	checkSealed(t, e)
}

func TestDetached(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: open_tree needs root")
	}
	e, err := openDetached()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// The mount is read-only: not merely busy (a running binary answers
	// ETXTBSY to a writable open whatever its mount).
	var st unix.Statfs_t
	if err := unix.Fstatfs(e.Fd(), &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("the detached mount is not read-only: flags %#x, %v", st.Flags, err)
	}
	fd, err := unix.Open(e.Path(), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.ETXTBSY) {
		t.Errorf("open for writing: %v, want EROFS or ETXTBSY", err)
	}
	checkSealed(t, e)
}

// TestBuildID reads the test binary's Go build ID as debug/elf does, and
// gives up on every truncated header without panicking.
func TestBuildID(t *testing.T) {
	exe, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	sec := exe.Section(".note.go.buildid")
	if sec == nil {
		t.Fatal("the test binary has no .note.go.buildid")
	}
	note, err := sec.Data()
	if err != nil || len(note) < 16 {
		t.Fatalf("the note: %v", err)
	}
	want := string(note[16 : 16+binary.LittleEndian.Uint32(note[4:])])
	if got := BuildID(); got != want || got == "" {
		t.Errorf("BuildID() = %q, want %q", got, want)
	}
	head := make([]byte, 16<<10)
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	for n := range 4200 { // past the note, which the linker puts in the first page
		goBuildID(head[:n])
	}
	if got := goBuildID(head); got != want {
		t.Errorf("goBuildID(the first 16 KB) = %q, want %q", got, want)
	}
	mangled := bytes.Clone(head)
	for i := 0x20; i < 0x40; i++ {
		mangled[i] = 0xff // the program headers' offset, size and count
	}
	if got := goBuildID(mangled); got != "" {
		t.Errorf("goBuildID of a mangled header = %q", got)
	}
}

// Only an ID in the go command's form names a build: one a build system
// sets itself (Bazel and Nix link with -buildid=redacted) is the same
// for every build, and would let a new binary reuse the root template
// an older one made of other embedded files.
func TestGoCommandID(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"VOlmi6oP4Vjg793rAr4p/X8syGsNm-TVV4Et5uPOV/RqDpeXuX4RS3iGhb0MXb/d2nJTSpZL3ScWtjLjSau", "VOlmi6oP4Vjg793rAr4p/X8syGsNm-TVV4Et5uPOV/RqDpeXuX4RS3iGhb0MXb/d2nJTSpZL3ScWtjLjSau"},
		{"redacted", ""},
		{"", ""},
		{"a/b", ""}, // a package archive's form, not an executable's
		{"a/b/c/d/e", ""},
		{"a//c/d", ""},
		{"a/b/c/", ""},
	} {
		if got := goCommandID(c.id); got != c.want {
			t.Errorf("goCommandID(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}

// testStamp is in the test binary, as a build stamp is in the init that
// scripts/build.sh embeds.
const testStamp = stampPrefix + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// An embedded init is run only when it carries this build's stamp: an
// init from other sources (a stale file, another checkout) or a build
// without a stamp is refused, never run. checked against a mutant: with
// openInit's check removed, the mismatches were sealed and run.
func TestOpenInit(t *testing.T) {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(self, []byte(testStamp)) {
		t.Fatal("the test binary lost its stamp")
	}
	e, err := openInit(self, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Method != SealedMemfd || e.From != FromEmbedded {
		t.Errorf("got a %s of %s", e.Method, e.From)
	}
	checkSealed(t, e)

	// Made at run time, so that it is nowhere in the test binary.
	other := strings.Replace(testStamp, "0", "f", 1)
	for name, stamp := range map[string]string{
		"another build's stamp":      other,
		"no stamp":                   "",
		"a stamp without its prefix": testStamp[len(stampPrefix):],
		"a short stamp":              testStamp[:len(testStamp)-1],
		"the prefix alone":           stampPrefix,
		"an upper-case hash":         stampPrefix + strings.ToUpper(testStamp[len(stampPrefix):]),
	} {
		if e, err := openInit(self, stamp); !errors.Is(err, ErrStampMismatch) {
			if e != nil {
				e.Close()
			}
			t.Errorf("%s: %v, want ErrStampMismatch", name, err)
		}
	}
}

// Where vm.memfd_noexec is 1 (a hardened host, or a container's pid
// namespace), a memfd made without MFD_EXEC cannot be executed: the
// sealed init must still run. The sysctl is per pid namespace, so the
// test sets it in a child's own. checked against a mutant: without
// MFD_EXEC, the child's exec failed with EACCES.
func TestMemfdNoexecSysctl(t *testing.T) {
	const child = "AIRLOCK_EXESEAL_NOEXEC_CHILD"
	if os.Getenv(child) == "1" {
		if err := os.WriteFile("/proc/sys/vm/memfd_noexec", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		e, err := openMemfd()
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if out, err := exec.Command(e.Path(), "-test.run=^$").CombinedOutput(); err != nil {
			t.Fatalf("cannot execute it: %v %s", err, out)
		}
		return
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: a pid namespace needs root")
	}
	if _, err := os.Stat("/proc/sys/vm/memfd_noexec"); err != nil {
		t.Logf("no vm.memfd_noexec (kernel before 6.3): every memfd is executable")
		return
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^TestMemfdNoexecSysctl$", "-test.v")
	cmd.Env = append(os.Environ(), child+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
		t.Fatalf("in a pid namespace with vm.memfd_noexec=1: %v\n%s", err, out)
	}
}

// The embedded init kept in a directory: written once, whole, only after
// the stamp check, executable from a read-only detached mount, reused,
// and refused when someone other than root could have written it.
// checked against a mutant: without the owner and mode check, the
// group-writable file was run.
func TestOpenCached(t *testing.T) {
	testenv.RequireRoot(t, "open_tree needs root")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, cachePrefix+"0000")
	if err := os.WriteFile(stale, []byte("old"), 0o555); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(testStamp, "0", "f", 1)
	if _, err := openCached(dir, self, other); !errors.Is(err, ErrStampMismatch) {
		t.Errorf("another build's stamp: %v, want ErrStampMismatch", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a refused init left files: %v", ents)
	}

	e, err := openCached(dir, self, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	if e.Method != DetachedMount || e.From != FromEmbedded {
		t.Errorf("got a %s of %s", e.Method, e.From)
	}
	checkSealed(t, e)
	e.Close()
	name := filepath.Join(dir, cachePrefix+testStamp[len(stampPrefix):])
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != filepath.Base(name) {
		t.Errorf("the directory holds %v, want only %s", ents, filepath.Base(name))
	}
	before, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if before.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want r-xr-xr-x", before.Mode())
	}
	// Reused as it is: not written again, not scanned again (a stamp
	// the bytes passed do not hold is not looked for).
	e, err = openCached(dir, nil, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	checkSealed(t, e)
	e.Close()
	if after, err := os.Stat(name); err != nil || !os.SameFile(before, after) {
		t.Errorf("the kept init was replaced: %v", err)
	}

	if err := os.Chmod(name, 0o575); err != nil {
		t.Fatal(err)
	}
	if e, err := openCached(dir, self, testStamp); err == nil {
		e.Close()
		t.Error("ran a kept init its group could write")
	}
}

// Where vm.memfd_noexec is 2 no memfd may be executed: with the state
// directory on a noexec mount too, the embedded init has no way to run,
// and the airlock binary itself (from a read-only detached mount, as in a
// plain build) is the init instead, and the reason is given; with a state
// directory that can execute, its copy there is used as everywhere. A
// stale init is still refused. Run in a child with pid and mount
// namespaces of its own (the sysctl is per pid namespace; the noexec
// mount stays in the child's). checked against a mutant: without the
// fallback to the airlock binary, openIn failed with EACCES.
func TestOpenInNoexec(t *testing.T) {
	const child = "AIRLOCK_EXESEAL_NOEXEC2_CHILD"
	if os.Getenv(child) != "1" {
		testenv.RequireRoot(t, "pid and mount namespaces need root")
		if _, err := os.Stat("/proc/sys/vm/memfd_noexec"); err != nil {
			t.Logf("no vm.memfd_noexec (kernel before 6.3): every memfd is executable")
			return
		}
		// By its path, not /proc/self/exe: that would name a mount of
		// this namespace, which open_tree cannot clone from the child's.
		bin, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestOpenInNoexec$", "-test.v")
		cmd.Env = append(os.Environ(), child+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("in a pid namespace with vm.memfd_noexec=2: %v\n%s", err, out)
		}
		return
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/vm/memfd_noexec", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	// The sysctl took: no memfd can be sealed executable.
	if e, err := openInit(self, testStamp); !errors.Is(err, unix.EACCES) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("a memfd copy with vm.memfd_noexec=2: %v, want EACCES", err)
	}

	noexec := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(noexec, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", noexec, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(noexec, unix.MNT_DETACH)
	e, err := openIn(noexec, self, testStamp)
	if err != nil {
		t.Fatalf("no way left to run an init: %v", err)
	}
	if e.Method != DetachedMount || e.From != FromSelf {
		t.Errorf("got a %s of %s, want a %s of %s", e.Method, e.From, DetachedMount, FromSelf)
	}
	for _, why := range []string{"noexec", "vm.memfd_noexec is 2"} {
		if !strings.Contains(e.Why, why) {
			t.Errorf("the reason given does not say %q: %q", why, e.Why)
		}
	}
	checkSealed(t, e)
	e.Close()
	other := strings.Replace(testStamp, "0", "f", 1)
	if e, err := openIn(noexec, self, other); !errors.Is(err, ErrStampMismatch) {
		if e != nil {
			e.Close()
		}
		t.Errorf("a stale init: %v, want ErrStampMismatch", err)
	}

	// A state directory that can execute keeps the init as ever.
	e, err = openIn(t.TempDir(), self, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Method != DetachedMount || e.From != FromEmbedded || e.Why != "" {
		t.Errorf("got a %s of %s (%q), want a %s of %s", e.Method, e.From, e.Why, DetachedMount, FromEmbedded)
	}
	checkSealed(t, e)
}
