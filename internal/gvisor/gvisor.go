// Package gvisor owns gVisor as a second kernel under a sandbox: finding
// and checking the runsc binary, writing the OCI bundle of one sandbox (the
// read-only root template, /usr and the /etc trees bound read-only, the
// airlock-owned tmpfs mounts of /workspace and /tmp, uid 1000 without
// capabilities, the limits), running it with `runsc run` from the host
// side with --network=none (or, for a sandbox given a network namespace
// of airlock's, --network=host inside that namespace only, checked once
// it runs), starting programs in it with `runsc exec`
// (stdio and the control socket passed as descriptors, never as files
// runsc would write at an offset) or, with a keeper (Options.Keeper), as
// children of airlock's keeper, its init, through relays (keeper_linux.go),
// checkpointing such a sandbox and restoring it into a new one with the
// keeper it was checkpointed with (keepercopy_linux.go), signalling
// programs, and tearing everything down: runsc's state, the null-netns
// mount it leaves, the tmpfs mounts, the cgroups it creates beside
// airlock's.
//
// It must never be started from inside airlock's jail (runsc needs
// namespaces, mounts and a writable /proc), never let runsc touch the
// host's network (--network=none, or host networking only inside a
// namespace airlock made and holds), never fall back to running code
// without gVisor when runsc fails, and never leave anything behind: every
// sandbox's state lives in one directory of its own, which Close and
// Sweep remove. A sandbox restored from a checkpoint is handed over only
// once the checkpoint's size and digest, summed while runsc reads it,
// match what Checkpoint returned; one that does not match is killed
// unused (runsc parses it, and it is made of what the sandbox held).
package gvisor

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// Find returns the runsc binary: configured, or runsc on PATH, or
// /usr/local/bin/runsc.
func Find(configured string) (string, error) {
	if configured != "" {
		if err := executable(configured); err != nil {
			return "", fmt.Errorf("%w: gvisor.runsc %s: %v", errdefs.ErrUnavailable, configured, err)
		}
		return configured, nil
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	if executable("/usr/local/bin/runsc") == nil {
		return "/usr/local/bin/runsc", nil
	}
	return "", fmt.Errorf("%w: runsc not found (set gvisor.runsc, or install it: %s)", errdefs.ErrUnavailable, InstallHint)
}

// InstallHint is how to install the runsc airlock is tested with.
const InstallHint = "CGO_ENABLED=0 GOBIN=/usr/local/bin go install gvisor.dev/gvisor/runsc@" + PinnedVersion

// PinnedVersion is the gVisor module version airlock's tests and scripts
// build runsc from.
const PinnedVersion = "v0.0.0-20260905035102-160fafc42237"

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// Version says which runsc runsc is: what `runsc --version` says, or,
// for a runsc built with `go install` (which has no release stamp: it
// says "VERSION_MISSING"), the gVisor module version it was built from,
// read from its Go build information.
func Version(ctx context.Context, runsc string) (string, error) {
	if v := moduleVersion(runsc); v != "" {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runsc, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("runsc --version: %v", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// gvisorModule is the module runsc is built from.
const gvisorModule = "gvisor.dev/gvisor"

// moduleVersion is "runsc version <module>@<version>" for a runsc built
// from a gVisor module version (PinnedVersion, by the scripts), read
// from the binary's Go build information; "" for anything else (a
// release binary, which stamps its own version, or one built from a
// checkout).
func moduleVersion(runsc string) string {
	bi, err := buildinfo.ReadFile(runsc)
	if err != nil {
		return ""
	}
	return versionOf(bi)
}

// versionOf is moduleVersion of a binary's build information.
func versionOf(bi *debug.BuildInfo) string {
	if bi.Main.Path != gvisorModule {
		return ""
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return "runsc version " + gvisorModule + "@" + v
	}
	return ""
}

// Process is a program to start in a sandbox.
type Process struct {
	Argv []string
	Env  []string
	Dir  string
	// Files become the program's fds 0, 1, 2, ... (at least three).
	Files []*os.File
	// NoFile is the program's RLIMIT_NOFILE (0: the sandbox's).
	NoFile uint64
	// Terminal: Files[0] is a host pseudo-terminal's slave, which the
	// program gets as its terminal (see Sandbox.Exec).
	Terminal bool
}

// Exit is how a program ended, as a wait status.
type Exit struct {
	Pid    int // inside the sandbox; 0 if runsc never said
	Status syscall.WaitStatus
	// Lost: runsc could not wait for the program because the sandbox
	// went away under it (Status then says SIGKILL).
	Lost bool
}

// statusOf turns `runsc exec`'s exit code into a wait status: runsc
// exits 128+N for a program killed by signal N, and 128 when it failed
// itself (the sandbox went away: reported as SIGKILL).
func statusOf(code int) syscall.WaitStatus {
	switch {
	case code == 128:
		return syscall.WaitStatus(syscall.SIGKILL)
	case code > 128 && code < 128+65:
		return syscall.WaitStatus(code - 128)
	case code < 0:
		return syscall.WaitStatus(syscall.SIGKILL)
	}
	return syscall.WaitStatus(code << 8)
}

// Layers describes what gVisor provides and what airlock still applies
// around it, for doctor and the server's log.
func Layers() (gvisor, airlock []string) {
	return []string{
			"system calls served by gVisor's Sentry (a user-space kernel): sandboxed code never reaches the host kernel's syscall table",
			"the Sentry and gofer run under runsc's own seccomp filters, in their own namespaces, chrooted",
			"in-sandbox cgroups, /proc and /sys are gVisor's (virtual); Landlock and the seccomp availability probe do not exist inside",
		}, []string{
			"host cgroup of the whole sandbox (Sentry, gofer, every process): memory (OOM kills the sandbox), pids, CPU quota",
			"no network: runsc --network=none (gVisor's own loopback only); runsc never changes the host's network",
			"sessions with egress: runsc --network=host inside a network namespace airlock made (lo and airlock's egress gate only), started without CAP_NET_ADMIN, CAP_NET_BIND_SERVICE, CAP_NET_RAW and CAP_DAC_READ_SEARCH, both checked after boot; their sockets are the host kernel's, in that namespace",
			"root: the read-only root template, host /usr read-only, airlock-owned tmpfs /workspace and /tmp sized by the limits",
			"uid 1000, no capabilities, no_new_privs, RLIMIT_NOFILE; wall-clock and CPU-time limits from outside",
		}
}

// Isolation is the config value this package implements.
const Isolation = config.GVisor
