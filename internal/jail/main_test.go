package jail

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/runtimes"
	"airlock/internal/testenv"
)

// The test binary is what Host re-executes as each sandbox's init.
func TestMain(m *testing.M) {
	MainIfInit()
	code := m.Run()
	closeSharedHost()
	os.Exit(code)
}

var testSeq atomic.Uint32

// testSpec returns a spec with a unique name and id slot.
// testRoot is the root of the sandboxes testSpec describes (nil: the
// host's); TestEscapesOnTemplateRoot sets it while it runs.
var testRoot *Root

func testSpec(l config.Limits) Spec {
	n := testSeq.Add(1)
	s := Spec{
		Name:   "t-" + itoa(os.Getpid()) + "-" + itoa(int(n)),
		Slot:   1<<23 | uint32(os.Getpid()&0xffff)<<6 | n&63,
		Limits: l,
		Root:   testRoot,
	}
	logSpec(s) // so that the leak guard knows which ids and cgroups to check
	return s
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// testHost returns the Host for privileged tests, or skips when not root.
// Every test gets the same Host (see sharedHost), and a guard that fails
// the test if it leaves anything behind: a cgroup, a mount, a process with
// one of its sandboxes' host ids, a descriptor or a goroutine. Call it
// before registering any other cleanup, so that the guard runs last.
func testHost(t testing.TB) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to build jails (CI runs as root)")
	}
	h, err := sharedHost()
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	guardHost(t, h)
	return h
}

// newTestHostOptions are the options of every test Host.
func newTestHostOptions() Options {
	cfg := config.Default()
	cfg.StateDir = "/run/airlock-test"
	cfg.CgroupParent = "airlock-test"
	o := OptionsFrom(cfg)
	// The runtimes, for the template start path.
	o.RootFiles = runtimes.RootFiles()
	// A server's inits are cloned by its spawner: the escape tests run
	// on that path (a command's, jailtest's hosts, take the other).
	o.Spawner = true
	return o
}

// testLimits are small, fast limits for tests.
func testLimits() config.Limits {
	l := config.DefaultLimits()
	l.Timeout = config.Duration(20 * time.Second)
	l.CPUTime = config.Duration(20 * time.Second)
	l.Memory = 256 << 20
	l.Disk = 64 << 20
	l.Pids = 64
	return l
}

// runProgram runs argv in a fresh sandbox with limits l.
func runProgram(t testing.TB, h *Host, l config.Limits, argv []string, files ...InputFile) *RunResult {
	t.Helper()
	res, err := runOnce(context.Background(), h, RunRequest{Spec: testSpec(l), Argv: argv, Files: files})
	if err != nil {
		t.Fatalf("Run %v: %v", argv, err)
	}
	return res
}

// runPython runs code as /workspace/main.py.
func runPython(t testing.TB, h *Host, l config.Limits, code string) *RunResult {
	t.Helper()
	return runProgram(t, h, l, []string{"/usr/bin/python3", "/workspace/main.py"},
		InputFile{Path: "main.py", Data: bytes.NewReader([]byte(code))})
}

func TestRunPrint(t *testing.T) {
	h := testHost(t)
	res := runPython(t, h, testLimits(), "print('hello from the jail')")
	if res.ExitCode != 0 || string(res.Stdout) != "hello from the jail\n" || res.Killed {
		t.Fatalf("got exit %d killed %v stdout %q stderr %q", res.ExitCode, res.Killed, res.Stdout, res.Stderr)
	}
}
