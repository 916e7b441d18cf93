package jail

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/jailinit"
)

// entryParams are what the entry depends on.
type entryParams struct {
	capLast  int               // the highest capability the kernel knows
	seccomp  []byte            // the filter; nil when the layer is off
	landlock bool              // the sandbox has a Landlock ruleset
	uid, gid int               // the sandbox user
	rlimits  []jailinit.Rlimit // the program's rlimits
	// baseFilters is how many seccomp filters the entering process has
	// before the entry (inherited from the server); -1 when the kernel
	// does not say.
	baseFilters int
}

// planEntry is the sandbox entry: the one place that says which steps make
// a process a sandboxed one, in which order, and how to tell they all
// took. The order is runc's: what needs privilege first (rlimits, the
// bounding set, which needs CAP_SETPCAP), then no_new_privs, which
// Landlock and an unprivileged seccomp filter require, then Landlock and
// seccomp last among the thread's restrictions so that no step after them
// needs a call the filter refuses; the identity change comes in the child
// and the capabilities kept for it are cleared last.
func planEntry(p entryParams) Entry {
	var steps []jailinit.Step
	for _, r := range p.rlimits {
		steps = append(steps, jailinit.Step{Phase: jailinit.PhaseProcess, Op: jailinit.OpRlimit, Resource: r.Resource, Cur: r.Cur, Max: r.Max})
	}
	caps := make([]int, 0, p.capLast+1)
	for c := 0; c <= p.capLast; c++ {
		caps = append(caps, c)
	}
	steps = append(steps,
		jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpCapBoundingDrop, Caps: caps},
		jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpCapAmbientClear},
		jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpCapInheritableClear},
		jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpNoNewPrivs},
	)
	if p.landlock {
		steps = append(steps, jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpLandlock})
	}
	if len(p.seccomp) > 0 {
		steps = append(steps, jailinit.Step{Phase: jailinit.PhaseThread, Op: jailinit.OpSeccomp, Filter: p.seccomp})
	}
	steps = append(steps,
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpSetsid},
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpSetgroups},
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpSetGID, ID: p.gid},
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpSetUID, ID: p.uid},
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpCapClear},
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpChdir, Path: "/workspace"},
		// What an exec by the same user does: the program's /proc files
		// are its own, as for every program the init starts (other
		// processes of the sandbox user could reach them anyway).
		jailinit.Step{Phase: jailinit.PhaseChild, Op: jailinit.OpDumpable},
	)

	const none = "0000000000000000"
	four := func(id int) string { s := strconv.Itoa(id); return s + "\t" + s + "\t" + s + "\t" + s }
	status := map[string]string{
		"CapInh": none, "CapPrm": none, "CapEff": none, "CapBnd": none, "CapAmb": none,
		"NoNewPrivs": "1",
		"Uid":        four(p.uid), "Gid": four(p.gid), "Groups": "",
	}
	filters := p.baseFilters
	if len(p.seccomp) > 0 {
		filters++
	}
	if filters > 0 {
		status["Seccomp"] = "2"
	} else if p.baseFilters == 0 {
		status["Seccomp"] = "0"
	}
	if p.baseFilters >= 0 {
		status["Seccomp_filters"] = strconv.Itoa(filters)
	}
	e := Entry{
		Steps:  steps,
		Expect: jailinit.Expect{Status: status, ProcOwner: p.uid},
		Syscalls: map[string]int{
			"capget": unix.SYS_CAPGET, "capset": unix.SYS_CAPSET, "seccomp": unix.SYS_SECCOMP,
			"landlock_restrict_self": unix.SYS_LANDLOCK_RESTRICT_SELF, "mknodat": unix.SYS_MKNODAT,
		},
	}
	if p.landlock {
		// A character device in /tmp: the directory's permissions let the
		// sandbox user create in it and seccomp lets mknodat through; the
		// missing CAP_MKNOD would answer EPERM, but only after Landlock,
		// which refuses device nodes everywhere, has answered EACCES.
		e.Expect.Probes = append(e.Expect.Probes, jailinit.Probe{
			Layer: "landlock", Op: "mknodat", Dir: "/tmp", Prefix: ".airlock-entry-probe-",
			Mode: unix.S_IFCHR | 0o600, Dev: unix.Mkdev(1, 3), Errno: int(unix.EACCES),
		})
	}
	return e
}

// ProcessEntry is the entry of a program with limits l that a runtime
// other than this jail starts (gVisor's runsc, whose sentry is the
// boundary): the same plan, without the two layers only the host kernel
// applies here (Landlock and the seccomp filter; runsc confines its own
// processes with its own). Whoever executes it must make every step it
// lists or refuse (see gvisor's processSpec).
func ProcessEntry(l config.Limits) (Entry, error) {
	last, err := jailinit.CapLastCap()
	if err != nil {
		return Entry{}, err
	}
	return planEntry(entryParams{capLast: last, uid: SandboxUID, gid: SandboxGID, rlimits: rlimitsFor(l), baseFilters: -1}), nil
}

// RlimitName is the name of an rlimit resource in OCI specs
// ("RLIMIT_NOFILE"), "" when unknown.
func RlimitName(resource int) string {
	return map[int]string{
		unix.RLIMIT_NOFILE: "RLIMIT_NOFILE", unix.RLIMIT_CORE: "RLIMIT_CORE", unix.RLIMIT_STACK: "RLIMIT_STACK",
		unix.RLIMIT_MEMLOCK: "RLIMIT_MEMLOCK", unix.RLIMIT_MSGQUEUE: "RLIMIT_MSGQUEUE", unix.RLIMIT_FSIZE: "RLIMIT_FSIZE",
		unix.RLIMIT_NPROC: "RLIMIT_NPROC", unix.RLIMIT_AS: "RLIMIT_AS", unix.RLIMIT_CPU: "RLIMIT_CPU",
		unix.RLIMIT_DATA: "RLIMIT_DATA",
	}[resource]
}

// seccompFilters reads how many seccomp filters this process has; -1 when
// the kernel does not say.
func seccompFilters() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	v, ok := jailinit.StatusFields(b)["Seccomp_filters"]
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}
