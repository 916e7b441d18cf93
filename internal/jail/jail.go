// Package jail owns the sandbox itself: starting an init process in new
// user, pid, mount, network, ipc, uts and cgroup namespaces, inside its own
// cgroup, from a sealed copy of the airlock binary; having that init build
// the root filesystem, bring up loopback and prepare the Landlock ruleset
// (the init itself is package jailinit);
// the sandbox entry (planEntry: the one ordered plan, with its expected end
// state, that both the init and the Python template's children execute
// and verify: every capability dropped, no_new_privs, Landlock, seccomp,
// rlimits, the sandbox user); starting programs; reporting their exit; writing
// files the host opened into the workspace from inside, so that their
// memory is the sandbox's; and tearing everything down so that nothing is
// left.
//
// The host side (Host, Sandbox) never trusts the sandbox: it learns only
// pids, exit statuses and byte counts from the init, and only descriptors
// the init made before any sandboxed code ran; the init never resolves a
// path for the host. The init side (package jailinit) is re-executed
// airlock code and must never run sandboxed code with more privilege than
// the sandbox user has.
package jail

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"airlock/internal/config"
	"airlock/internal/jailinit"
)

// Hostname of every sandbox.
const Hostname = "sandbox"

// InitArg0 is argv[0] of a re-executed sandbox init.
const InitArg0 = jailinit.InitArg0

// Entry is the sandbox entry (see planEntry), which both the init and the
// Python template execute.
type Entry = jailinit.Entry

// MainIfInit runs the sandbox init (jailinit.Main, which never returns)
// when this process is one, re-executed by Host.Start with argv[0]
// InitArg0, and returns at once otherwise. jailinit's own initialiser
// already does it in every binary that starts jails; this says so where
// main and the test binaries begin.
func MainIfInit() {
	if jailinit.IsInit() {
		jailinit.Main()
	}
}

// RunTests is the TestMain of a test package that builds jails: a
// sandbox's init when the test binary was re-executed as one, the
// package's tests otherwise.
//
//	func TestMain(m *testing.M) { jail.RunTests(m) }
func RunTests(m interface{ Run() int }) {
	MainIfInit()
	os.Exit(m.Run())
}

// Options configure a Host. They come from config.Config.
type Options struct {
	StateDir     string
	CacheDir     string
	LockDir      string
	CgroupParent string
	IDBase       uint32
	IDCount      uint32 // 0: a host's layout (see Layout)
	Seccomp      bool   // required by configuration
	Landlock     bool   // required by configuration
	// RootFiles are extra read-only files under /opt in every sandbox.
	RootFiles map[string]string
	// EmbeddedFiles, when set, gives more of them, embedded in this
	// binary: its build ID stands for them in the root template's key, so
	// that they are read only when the template is made (see
	// rootfs.Spec.LoadFiles). RootFiles wins on the same path.
	EmbeddedFiles func() map[string]string
	// PrepareRoot finishes the host's root template when it is first
	// made (see rootfs.Spec.Prepare); PrepareKey names what it depends on.
	PrepareRoot func(root string) error
	PrepareKey  string
	// Ptys caps the pseudo-terminals of each sandbox (its devpts
	// instance's max; 0: the kernel's).
	Ptys int
	// Spawner has the inits of sandboxes cloned by a small process of
	// the host's (see jailinit.Spawner) rather than by this one: a
	// long-lived process with a large heap (a server) saves copying its
	// page tables for each sandbox; a short one (a CLI run) would only
	// pay that process's start.
	Spawner bool
}

// OptionsFrom derives Options from the configuration.
func OptionsFrom(c config.Config) Options {
	return Options{
		StateDir:     c.StateDir,
		CacheDir:     c.CacheDir,
		LockDir:      c.LockDir,
		CgroupParent: c.CgroupParent,
		IDBase:       c.IDBase,
		IDCount:      c.IDCount,
		Seccomp:      c.Protections.Seccomp == config.Required,
		Landlock:     c.Protections.Landlock == config.Required,
		Ptys:         sessionPtys(c),
	}
}

// Spec describes one sandbox.
type Spec struct {
	// Name names the sandbox's cgroup; it must be unique among live ones.
	Name string
	// Slot picks the sandbox's pair of host ids; it must be unique among
	// live sandboxes (see CLISlot and ServerSlotBase).
	Slot uint32
	// Limits bound the sandbox.
	Limits config.Limits
	// ReadyTimeout bounds the start; 10s when zero.
	ReadyTimeout time.Duration
	// Root is the sandbox's root (Host.ImageRoot); nil is the host's.
	Root *Root
}

// CLISlot returns the id slot of a one-shot CLI run on a host (no
// id_count): its own pid, unique among live processes for as long as the
// run lives. Host.CLISlot is what works in pod mode too.
func CLISlot() uint32 { return uint32(os.Getpid()) }

// ServerSlotBase is the first slot the server allocates, above every pid.
const ServerSlotBase = 1 << 22

// Process is a program to start in a sandbox.
type Process struct {
	Argv []string
	Env  []string
	Dir  string
	// Files become the program's fds 0, 1, 2, ... Nothing else is open.
	Files []*os.File
	// Terminal makes fd 0, a terminal, the program's controlling
	// terminal (in its new session).
	Terminal bool
}

// Exit is how a program in a sandbox ended.
type Exit struct {
	Pid    int
	Status syscall.WaitStatus
	// CPU is the user+system time of the program and its reaped children.
	CPU time.Duration
}

// Code is the exit code in shell convention: 128+N for a signal.
func (e Exit) Code() int {
	if e.Status.Signaled() {
		return 128 + int(e.Status.Signal())
	}
	return e.Status.ExitStatus()
}

// Sandbox user identity inside every sandbox.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// BaseEnv is the environment every sandboxed program starts from; callers
// add their own variables on top.
func BaseEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/workspace",
		"USER=user",
		"LOGNAME=user",
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
		// Tools' caches (fontconfig, pip) are not the user's files: they
		// stay out of /workspace and of files_changed.
		"XDG_CACHE_HOME=/tmp/.cache",
		"MPLBACKEND=Agg",
		"MPLCONFIGDIR=/tmp/matplotlib",
		"PYTHONDONTWRITEBYTECODE=1",
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
	}
}

// RunName names the sandbox of this process's own run (`airlock run
// --cold`, doctor's probes): "r-<pid>", which whoever finds the process
// gone removes (StaleRun).
func RunName() string { return "r-" + strconv.Itoa(os.Getpid()) }

// StaleRun reports whether the cgroup of a CLI run ("r-<pid>") belongs to
// a process that no longer exists.
func StaleRun(name string) bool {
	pid, err := strconv.Atoi(strings.TrimPrefix(name, "r-"))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
