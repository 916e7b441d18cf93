package jail

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/image/imagetest"
)

// templateRoot is the root of the "python" recipe (Debian 12 minbase with
// python3 and bash, no numpy), imported as a template, as a sandbox root.
func templateRoot(t *testing.T, h *Host) *Root {
	t.Helper()
	s := imagetest.Store(t, "python")
	tm, err := s.Get("python")
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.ImageRoot(tm.Root, "python-test")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const rootProbe = `
import json, os, sys
out = {}
try:
    import numpy
    out["numpy"] = numpy.__file__
except ImportError:
    out["numpy"] = None
out["passwd"] = open("/etc/passwd").read()
out["debian_version"] = os.path.exists("/etc/debian_version")
out["runtime"] = os.path.isdir("/opt/airlock/python")
out["bin"] = os.readlink("/bin")
mounts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    mounts[f[4]] = f[5].split(",")
out["usr"] = mounts.get("/usr")
out["home"] = mounts.get("/home/user")
open("/home/user/h.txt", "w").write("h")
out["home_is_workspace"] = open("/workspace/h.txt").read() == "h"
out["suid"] = [p for d in ("/usr/bin", "/usr/sbin", "/usr/lib") for p in [os.path.join(d, n) for n in os.listdir(d)] if os.path.isfile(p) and os.stat(p).st_mode & 0o6000]
print(json.dumps(out))
print("DONE")
`

// TestTemplateRoot runs a program on a template's root: the template's
// /usr (no numpy, which the host has), its /etc with airlock's generated
// files over it, airlock's own runtimes, /usr read-only, nosuid and nodev,
// and not one setuid file left in it (su, mount, passwd are setuid in
// Debian; the import stripped them).
func TestTemplateRoot(t *testing.T) {
	h := testHost(t)
	testRoot = templateRoot(t, h)
	defer func() { testRoot = nil }()
	res := runPythonArgs(t, h, testLimits(), rootProbe)
	mustFinish(t, res)
	var got struct {
		Numpy         *string
		Passwd        string
		DebianVersion bool `json:"debian_version"`
		Runtime       bool
		Bin           string
		Usr           []string
		Home          []string
		HomeIsWs      bool `json:"home_is_workspace"`
		Suid          []string
	}
	if err := json.Unmarshal([]byte(linesWith(res.Stdout, "{")[0]), &got); err != nil {
		t.Fatal(err, describe(res))
	}
	if got.Numpy != nil {
		t.Errorf("numpy imported from %s: the host's /usr leaked into the template's sandbox", *got.Numpy)
	}
	if !strings.Contains(got.Passwd, "user:x:1000:1000") || strings.Contains(got.Passwd, "_apt") {
		t.Errorf("/etc/passwd is not airlock's: %q", got.Passwd)
	}
	if len(got.Suid) > 0 {
		t.Errorf("setuid or setgid files in the template's root: %v", got.Suid)
	}
	if !got.DebianVersion || !got.Runtime || got.Bin != "usr/bin" {
		t.Errorf("root: %+v", got)
	}
	for _, o := range []string{"ro", "nosuid", "nodev"} {
		if !strings.Contains(strings.Join(got.Usr, ","), o) {
			t.Errorf("/usr mounted %v, without %s", got.Usr, o)
		}
	}
	// E2B's home is the workspace on a template's root too.
	if !got.HomeIsWs || !slices.Contains(got.Home, "nosuid") || !slices.Contains(got.Home, "nodev") {
		t.Errorf("/home/user mounted %v, is the workspace: %v", got.Home, got.HomeIsWs)
	}
}

// TestEscapesOnTemplateRoot runs the filesystem, /proc and syscall escape
// tests with a template's root instead of the host's.
func TestEscapesOnTemplateRoot(t *testing.T) {
	h := testHost(t)
	testRoot = templateRoot(t, h)
	defer func() { testRoot = nil }()
	for name, f := range map[string]func(*testing.T){
		"WriteOutsideWorkspace": TestEscapeWriteOutsideWorkspace,
		"ReadHostFiles":         TestEscapeReadHostFiles,
		"SymlinkOutOfWorkspace": TestEscapeSymlinkOutOfWorkspace,
		"ProcOtherProcesses":    TestEscapeProcOtherProcesses,
		"HostEnvironment":       TestEscapeHostEnvironment,
		"Syscalls":              TestEscapeSyscalls,
		"EveryLayerApplied":     TestEveryLayerApplied,
	} {
		t.Run(name, f)
	}
}

// TestPythonRuntimeOnTemplateRoot runs the Python runtime's own test suite
// (internal/runtimes/python/tests, as TestPythonRuntime runs it on the
// host) inside a sandbox on the code-interpreter template, whose root has
// the real IPython (Debian's python3-ipython), pandas and matplotlib: the
// suite passes on both kinds of root, rich output of IPython's own
// display() included.
func TestPythonRuntimeOnTemplateRoot(t *testing.T) {
	h := testHost(t)
	s := imagetest.Store(t, "code-interpreter")
	tm, err := s.Get("code-interpreter")
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.ImageRoot(tm.Root, "code-interpreter-test")
	if err != nil {
		t.Fatal(err)
	}
	testRoot = r
	defer func() { testRoot = nil }()
	var files []InputFile
	src := filepath.Join("..", "runtimes", "python")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "__pycache__") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(src), p)
		files = append(files, InputFile{Path: filepath.ToSlash(rel), Data: bytes.NewReader(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l := testLimits()
	l.Timeout, l.CPUTime = config.Duration(10*time.Minute), config.Duration(20*time.Minute)
	l.Memory, l.Pids, l.Disk = 2<<30, 1024, 1<<30
	res := runReq(t, h, l, RunRequest{
		Argv:  []string{"/usr/bin/python3", "-B", "-c", "import importlib.metadata as m, sys, unittest; print('IPython', m.version('ipython')); sys.argv[1:] = ['discover', '-s', 'python/tests']; unittest.main(module=None)"},
		Files: files,
		Env:   []string{"PYTHONDONTWRITEBYTECODE=1"},
	})
	if res.ExitCode != 0 || !bytes.Contains(res.Stdout, []byte("IPython 8.")) {
		t.Fatalf("the runtime's tests on the template root: %s", describe(res))
	}
	t.Logf("%s", linesWith(res.Stderr, "Ran ")[0])
}
