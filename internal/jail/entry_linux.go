package jail

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/landlock"
	"airlock/internal/seccomp"
)

// entryParams are what the entry depends on.
type entryParams struct {
	capLast  int      // the highest capability the kernel knows
	seccomp  []byte   // the filter; nil when the layer is off
	landlock bool     // the sandbox has a Landlock ruleset
	uid, gid int      // the sandbox user
	rlimits  []rlimit // the program's rlimits
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
	var steps []Step
	for _, r := range p.rlimits {
		steps = append(steps, Step{Phase: PhaseProcess, Op: OpRlimit, Resource: r.Resource, Cur: r.Cur, Max: r.Max})
	}
	caps := make([]int, 0, p.capLast+1)
	for c := 0; c <= p.capLast; c++ {
		caps = append(caps, c)
	}
	steps = append(steps,
		Step{Phase: PhaseThread, Op: OpCapBoundingDrop, Caps: caps},
		Step{Phase: PhaseThread, Op: OpCapAmbientClear},
		Step{Phase: PhaseThread, Op: OpCapInheritableClear},
		Step{Phase: PhaseThread, Op: OpNoNewPrivs},
	)
	if p.landlock {
		steps = append(steps, Step{Phase: PhaseThread, Op: OpLandlock})
	}
	if len(p.seccomp) > 0 {
		steps = append(steps, Step{Phase: PhaseThread, Op: OpSeccomp, Filter: p.seccomp})
	}
	steps = append(steps,
		Step{Phase: PhaseChild, Op: OpSetsid},
		Step{Phase: PhaseChild, Op: OpSetgroups},
		Step{Phase: PhaseChild, Op: OpSetGID, ID: p.gid},
		Step{Phase: PhaseChild, Op: OpSetUID, ID: p.uid},
		Step{Phase: PhaseChild, Op: OpCapClear},
		Step{Phase: PhaseChild, Op: OpChdir, Path: "/workspace"},
		// What an exec by the same user does: the program's /proc files
		// are its own, as for every program the init starts (other
		// processes of the sandbox user could reach them anyway).
		Step{Phase: PhaseChild, Op: OpDumpable},
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
		Expect: Expect{Status: status, ProcOwner: p.uid},
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
		e.Expect.Probes = append(e.Expect.Probes, Probe{
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
	last, err := CapLastCap()
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
	v, ok := statusFields(b)["Seccomp_filters"]
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

func statusFields(b []byte) map[string]string {
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	return got
}

var phaseOrder = map[Phase]int{PhaseProcess: 0, PhaseThread: 1, PhaseChild: 2}

// validate refuses a plan whose phases are out of order or that names a
// step the init cannot make.
func (e *Entry) validate() error {
	last := 0
	for i, s := range e.Steps {
		n, ok := phaseOrder[s.Phase]
		if !ok {
			return fmt.Errorf("entry step %d (%s): unknown phase %q", i, s.Op, s.Phase)
		}
		if n < last {
			return fmt.Errorf("entry step %d (%s): phase %s after a later phase", i, s.Op, s.Phase)
		}
		last = n
	}
	_, err := e.forkAttr()
	return err
}

// apply makes the steps of phase on the calling thread (process steps on
// the process). ruleset is the Landlock ruleset, or -1.
func (e *Entry) apply(phase Phase, ruleset int) error {
	for _, s := range e.Steps {
		if s.Phase != phase {
			continue
		}
		if err := applyStep(s, ruleset); err != nil {
			return fmt.Errorf("entry step %s: %w", s.Op, err)
		}
	}
	return nil
}

func applyStep(s Step, ruleset int) error {
	switch s.Op {
	case OpRlimit:
		return unix.Setrlimit(s.Resource, &unix.Rlimit{Cur: s.Cur, Max: s.Max})
	case OpCapBoundingDrop:
		for _, c := range s.Caps {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("capability %d: %w", c, err)
			}
		}
		return nil
	case OpCapAmbientClear:
		return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	case OpCapInheritableClear:
		// Effective and permitted stay: the child's identity change needs
		// CAP_SETUID and CAP_SETGID, and clears them.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Inheritable, data[1].Inheritable = 0, 0
		return unix.Capset(&hdr, &data[0])
	case OpNoNewPrivs:
		return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	case OpLandlock:
		if ruleset < 0 {
			return errors.New("no Landlock ruleset")
		}
		return landlock.RestrictThread(ruleset)
	case OpSeccomp:
		if len(s.Filter) == 0 || len(s.Filter)%8 != 0 {
			return fmt.Errorf("a filter of %d bytes", len(s.Filter))
		}
		return seccomp.InstallThread(programFromBytes(s.Filter))
	}
	return fmt.Errorf("not a %s step here", s.Phase)
}

// childSequence is the order in which syscall.ForkExec's child makes the
// steps the init maps onto it (forkAndExecInChild: setsid, then setgroups,
// setgid, setuid, then chdir). cap_clear has no call of its own there:
// the init is root of the sandbox's user namespace, so the kernel clears
// the permitted and effective sets when setuid leaves that uid (the
// template's child, host root outside the namespace's map, makes the
// capset itself); the status check shows it either way.
// dumpable is the exec itself: the kernel makes a process dumpable again
// when it executes a program with unchanged credentials.
var childSequence = []Op{OpSetsid, OpSetgroups, OpSetGID, OpSetUID, OpCapClear, OpChdir, OpDumpable}

// childAttr is what the init's fork makes of the child steps.
type childAttr struct {
	setsid bool
	cred   *syscall.Credential
	dir    string
}

// forkAttr maps the child steps onto syscall.ForkExec, refusing any it
// would not make in the plan's order.
func (e *Entry) forkAttr() (childAttr, error) {
	var a childAttr
	next := 0
	var uid, gid int
	var groups, setGID, setUID, capClear bool
	for _, s := range e.Steps {
		if s.Phase != PhaseChild {
			continue
		}
		i := next
		for i < len(childSequence) && childSequence[i] != s.Op {
			i++
		}
		if i == len(childSequence) {
			return a, fmt.Errorf("entry step %s: the init cannot make it in the child at this point", s.Op)
		}
		next = i + 1
		switch s.Op {
		case OpSetsid:
			a.setsid = true
		case OpSetgroups:
			groups = true
		case OpSetGID:
			gid, setGID = s.ID, true
		case OpSetUID:
			uid, setUID = s.ID, true
		case OpCapClear:
			capClear = true
		case OpChdir:
			a.dir = s.Path
		}
	}
	if groups || setGID || setUID {
		if !(groups && setGID && setUID) {
			return a, errors.New("entry: the init changes groups, gid and uid together or not at all")
		}
		a.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	if capClear && (!setUID || uid == 0) {
		return a, errors.New("entry: the init clears capabilities only by leaving root")
	}
	return a, nil
}

// probe runs the plan's probes on the calling thread.
func (e *Entry) probe() error {
	for _, p := range e.Expect.Probes {
		if p.Op != "mknodat" {
			return fmt.Errorf("entry: unknown probe %q", p.Op)
		}
		var r [8]byte
		rand.Read(r[:])
		path := strings.TrimSuffix(p.Dir, "/") + "/" + p.Prefix + hex.EncodeToString(r[:])
		err := unix.Mknodat(unix.AT_FDCWD, path, p.Mode, int(p.Dev))
		if err == nil {
			unix.Unlink(path)
		}
		if errno, _ := err.(unix.Errno); int(errno) != p.Errno {
			return fmt.Errorf("refusing to run: %s is not enforced (mknodat %s: %v, want %v)", p.Layer, path, errnoText(err), unix.Errno(p.Errno))
		}
	}
	return nil
}

func errnoText(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// verify compares what /proc says about pid with the expectation.
func (e *Entry) verify(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if err := e.check(b); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if int(st.Uid) != e.Expect.ProcOwner {
		return fmt.Errorf("refusing to run: the program's /proc entries belong to %d, want %d", st.Uid, e.Expect.ProcOwner)
	}
	return nil
}

// check compares a /proc/<pid>/status with the expected one.
func (e *Entry) check(status []byte) error {
	got := statusFields(status)
	for _, k := range slices.Sorted(maps.Keys(e.Expect.Status)) {
		v := e.Expect.Status[k]
		if g, ok := got[k]; !ok || g != v {
			return fmt.Errorf("refusing to run: the program's %s is %q, want %q", k, g, v)
		}
	}
	return nil
}
