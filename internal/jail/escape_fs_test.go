package jail

// Filesystem escapes: writing outside the scratch trees, and reading host
// files planted by the test through every path a sandbox can name.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeProbe tries every way to modify each directory and file it is
// given. It never writes a byte into an existing file, so that it cannot
// damage the host even if a protection failed: opening for writing is
// already the escape. Each refusal prints "refused", each success
// "ESCAPED"; the allowed scratch trees print "wrote".
const writeProbe = `
import json, os, sys
NAME = sys.argv[1]
dirs, files, generated, scratch = (json.loads(a) for a in sys.argv[2:6])

def attempt(what, fn):
    try:
        fn()
    except OSError as e:
        print("refused", what, e.errno)
        return
    print("ESCAPED", what)

def same_mode(p):
    os.chmod(p, os.stat(p).st_mode & 0o7777)

def same_times(p):
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))

def open_w(p, flags):
    os.close(os.open(p, flags))

for d in dirs:
    p = os.path.join(d, NAME)
    attempt("create " + p, lambda: open_w(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    attempt("mkdir " + p, lambda: os.mkdir(p))
    attempt("symlink " + p, lambda: os.symlink("/workspace", p))
    attempt("mkfifo " + p, lambda: os.mkfifo(p))
    attempt("chmod " + d, lambda: same_mode(d))
    attempt("utime " + d, lambda: same_times(d))
    attempt("setxattr " + d, lambda: os.setxattr(d, "user." + NAME, b"1"))
for f in files + generated:
    attempt("open for writing " + f, lambda: open_w(f, os.O_WRONLY))
    attempt("open for appending " + f, lambda: open_w(f, os.O_WRONLY | os.O_APPEND))
    attempt("chmod " + f, lambda: same_mode(f))
# Only the sandbox's own generated files: removing a host file would do
# harm if this failed.
for f in generated:
    attempt("unlink " + f, lambda: os.unlink(f))
    attempt("rename " + f, lambda: os.rename(f, f + "." + NAME))
for d in scratch:
    p = os.path.join(d, NAME)
    with open(p, "w") as fh:
        fh.write("scratch")
    os.mkdir(p + ".d")
    os.symlink(p, p + ".l")
    os.rename(p + ".d", p + ".e")
    print("wrote", p)
print("DONE")
`

func TestEscapeWriteOutsideWorkspace(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		name := "airlock-probe-" + randomToken(t)
		dirs := []string{"/", "/etc", "/etc/ssl", "/etc/ssl/certs", "/etc/fonts", "/usr", "/usr/bin", "/usr/lib",
			"/opt", "/run", "/root", "/dev", "/proc", "/proc/sys", "/proc/sys/kernel", "/proc/1", "/proc/self",
			"/proc/acpi", "/proc/driver", "/proc/tty", "/proc/irq", "/proc/fs", "/bin", "/lib"}
		generated := []string{"/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname"}
		files := []string{"/usr/bin/python3", "/bin/sh", "/etc/ssl/certs/ca-certificates.crt",
			"/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe",
			"/proc/sys/vm/drop_caches", "/proc/sys/net/ipv4/ip_forward", "/proc/sysrq-trigger",
			// (Masked /proc files are bind mounts of /dev/null: "writing" them
			// discards the data. TestRootMounts checks the masks.)
			// Writable for the sandbox user without Landlock; Landlock keeps
			// writes to the scratch trees and device files.
			"/proc/self/comm", "/proc/self/oom_score_adj", "/proc/self/mem", "/proc/self/attr/current",
			"/proc/1/oom_score_adj", "/proc/1/comm"}
		scratch := []string{"/workspace", "/tmp", "/dev/shm"}

		type fileState struct {
			mode  os.FileMode
			mtime time.Time
			size  int64
		}
		stat := func(p string) fileState {
			st, err := os.Lstat(p)
			if err != nil {
				return fileState{}
			}
			return fileState{st.Mode(), st.ModTime(), st.Size()}
		}
		// Should a protection fail, what the probe made on the host goes away
		// again (after the test has reported it).
		t.Cleanup(func() {
			for _, d := range append(append([]string{}, dirs...), "/tmp", "/var/tmp", "/run/airlock-test/root") {
				os.RemoveAll(filepath.Join(d, name))
				unix.Lremovexattr(d, "user."+name)
			}
		})
		watched := []string{"/usr", "/usr/bin", "/usr/lib", "/usr/bin/python3", "/etc", "/etc/passwd", "/etc/hosts", "/", "/root", "/run"}
		before := map[string]fileState{}
		for _, p := range watched {
			before[p] = stat(p)
		}
		hostname, _ := os.ReadFile("/proc/sys/kernel/hostname")
		corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")

		res := p.pythonArgs(t, h, testLimits(), writeProbe, name, jsonArg(t, dirs), jsonArg(t, files), jsonArg(t, generated), jsonArg(t, scratch))
		mustFinish(t, res)
		if esc := linesWith(res.Stdout, "ESCAPED"); len(esc) > 0 {
			t.Errorf("writes outside the scratch trees succeeded:\n%s", strings.Join(esc, "\n"))
		}
		if got, want := len(linesWith(res.Stdout, "refused")), 7*len(dirs)+3*len(files)+5*len(generated); got != want {
			t.Errorf("%d attempts refused, want all %d: %s", got, want, describe(res))
		}
		if got := len(linesWith(res.Stdout, "wrote")); got != len(scratch) {
			t.Errorf("writes to the scratch trees: %d of %d succeeded: %s", got, len(scratch), describe(res))
		}
		// Landlock, not only the read-only mounts: /proc/self/comm is a file
		// the sandbox user may write without it.
		if !bytes.Contains(res.Stdout, []byte("refused open for writing /proc/self/comm 13")) {
			t.Errorf("writing /proc/self/comm was not refused with EACCES (Landlock): %s", describe(res))
		}

		// The host is unchanged.
		for _, d := range append(append([]string{}, dirs...), "/tmp", "/var/tmp", "/run/airlock-test", "/run/airlock-test/root") {
			if _, err := os.Lstat(filepath.Join(d, name)); err == nil {
				t.Errorf("%s appeared on the host", filepath.Join(d, name))
			}
		}
		for _, p := range watched {
			if got := stat(p); got != before[p] {
				t.Errorf("host %s changed: %+v, was %+v", p, got, before[p])
			}
			if _, err := unix.Lgetxattr(p, "user."+name, nil); err == nil {
				t.Errorf("host %s got the xattr user.%s", p, name)
			}
		}
		if b, _ := os.ReadFile("/proc/sys/kernel/hostname"); !bytes.Equal(b, hostname) {
			t.Errorf("host hostname changed from %q to %q", hostname, b)
		}
		if b, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(b, corePattern) {
			t.Errorf("host core_pattern changed from %q to %q", corePattern, b)
		}
	})
}

// readProbe searches for a planted file, knowing only its name (never its
// content), through every path a sandbox can name. It prints "READ" with
// whatever it manages to read.
const readProbe = `
import json, os, sys
NAME, CONTROL = sys.argv[1], sys.argv[2]
hostdirs = json.loads(sys.argv[3])

def read(p):
    try:
        with open(p, "rb") as f:
            return f.read(4096)
    except OSError:
        return None

roots = {"/", "/proc/self/root", "/proc/thread-self/root", "/proc/1/root", "/proc/self/cwd", "/proc/1/cwd",
         "/workspace/..", "/tmp/../..", "/usr/..", "/usr/lib/../..", "/etc/ssl/certs/..", "/etc/ssl/certs/../..",
         "/etc/fonts/..", "/dev/..", "/dev/shm/../..", "/proc/..", "/proc/sys/..", "/proc/self/root/..",
         "/proc/self/fd/0/..", "/dev/fd/..", "/proc/self/ns/.."}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    # The mount point, its parent, and the root of the mount as the host
    # names it (for bind mounts, the host path).
    roots.update([f[4], f[4] + "/..", f[3], f[4] + "/" + f[3]])
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(n) for n in range(1, 16)]:
    for leaf in ("root", "cwd"):
        roots.add("/proc/%s/%s" % (pid, leaf))
        roots.add("/proc/%s/task/%s/%s" % (pid, pid, leaf))
    for fddir in ("/proc/%s/fd" % pid, "/proc/%s/map_files" % pid):
        try:
            for fd in os.listdir(fddir):
                roots.update([fddir + "/" + fd, fddir + "/" + fd + "/.."])
        except OSError:
            pass

tried = 0
for r in sorted(roots):
    cands = [r + "/" + NAME]
    for d in hostdirs:
        d = d.strip("/")
        cands += [r + "/" + d + "/" + NAME, r + "/" + "../" * 12 + d + "/" + NAME]
    for c in cands:
        tried += 1
        data = read(c)
        if data is not None:
            print("READ", c, data)

# Everything outside /usr and /proc, by name and by content.
for top, dirs, files in os.walk("/", followlinks=False):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("usr", "proc")]
    for n in files + dirs:
        if NAME in n:
            print("READ", os.path.join(top, n), read(os.path.join(top, n)))

# Control: a file the sandbox itself made in /tmp is found through the
# same roots, so the search works.
with open("/tmp/" + CONTROL, "w") as f:
    f.write("control")
if read("/proc/self/root/tmp/" + CONTROL) == b"control" and read("/proc/self/cwd/../tmp/" + CONTROL) == b"control":
    print("CONTROL found")
print("tried", tried)
print("DONE")
`

func TestEscapeReadHostFiles(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		name := "airlock-plant-" + randomToken(t)
		secret := "airlock-secret-" + randomToken(t)
		// Every place a secret could be on the host, including /etc (the
		// sandbox's /etc is generated; only a few subdirectories are bound),
		// the parent of a bound directory, the host's root and the state dir.
		hostDirs := []string{"/tmp", "/root", "/run", "/var/tmp", "/etc", "/etc/ssl", "/", "/dev/shm", "/run/airlock-test", "/var", "/home", "/srv", "/opt"}
		var planted []string
		for _, d := range hostDirs {
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				continue
			}
			p := filepath.Join(d, name)
			if err := os.WriteFile(p, []byte(secret), 0o644); err != nil {
				t.Fatal(err)
			}
			planted = append(planted, p)
			t.Cleanup(func() { os.Remove(p) })
		}
		if len(planted) < 6 {
			t.Fatalf("could plant only %v", planted)
		}
		control := "control-" + randomToken(t)

		res := p.pythonArgs(t, h, testLimits(), readProbe, name, control, jsonArg(t, hostDirs))
		mustFinish(t, res)
		noSecret(t, res, secret)
		if r := linesWith(res.Stdout, "READ"); len(r) > 0 {
			t.Errorf("host files were found from inside:\n%s", strings.Join(r, "\n"))
		}
		if !bytes.Contains(res.Stdout, []byte("CONTROL found")) {
			t.Errorf("the search did not find the sandbox's own control file: %s", describe(res))
		}
		for _, p := range planted {
			if b, err := os.ReadFile(p); err != nil || string(b) != secret {
				t.Errorf("planted %s changed: %q %v", p, b, err)
			}
		}
	})
}

func TestEscapeSymlinkOutOfWorkspace(t *testing.T) {
	// The sandbox plants symlinks pointing at host paths in its workspace;
	// the host reads the workspace after the run and must not follow them.
	h := testHost(t)
	secret := "airlock-secret-" + randomToken(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import os, sys
os.symlink(sys.argv[1], "/workspace/link")
os.symlink(os.path.dirname(sys.argv[1]), "/workspace/dirlink")
os.symlink("/proc/1/root" + sys.argv[1], "/workspace/proclink")
os.mkfifo("/workspace/fifo")
print("DONE")
`
	var opened []string
	req := RunRequest{
		Argv:  []string{"/usr/bin/python3", "/workspace/main.py", target},
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader(script)}},
		Spec:  testSpec(testLimits()),
	}
	res, err := runOnceWith(t.Context(), h, req, func(sb *Sandbox, _ *RunResult) {
		for _, p := range []string{"link", "dirlink/secret", "proclink", "fifo"} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if f, _, err := sb.Workspace().Open(p); err == nil {
					b := make([]byte, 100)
					n, _ := f.Read(b)
					f.Close()
					opened = append(opened, p+": "+string(b[:n]))
				}
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("Workspace().Open(%q) blocked", p)
				return
			}
		}
		if err := sb.Workspace().Remove("dirlink", true); err != nil {
			t.Errorf("removing the symlink: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	mustFinish(t, res)
	if len(opened) > 0 {
		t.Errorf("the host followed the sandbox's links: %v", opened)
	}
	// Links and fifos are not files the program left: none is listed.
	if len(res.Files) > 0 {
		t.Errorf("result lists %+v as files", res.Files)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != secret {
		t.Errorf("the link target changed: %q %v", b, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Errorf("removing the symlink removed its target directory: %v", err)
	}
}
