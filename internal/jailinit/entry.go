package jailinit

// The sandbox entry: the one ordered sequence that turns a process into a
// sandboxed one, and what the kernel must say about that process at the
// end. It is computed once, in Go, by the host (jail's planEntry); both ways a runtime starts
// execute it and verify against it (as runc's two inits share
// finalizeNamespace):
//
//   - spawned by the sandbox's init (Main): the process steps on the
//     init, the thread steps on the OS thread programs are forked from,
//     the child steps in the forked child (syscall.ForkExec's own
//     sequence, see childAttr); the init then reads the program's
//     /proc/<pid>/status and runs the probes on the forking thread, whose
//     restrictions every program inherits;
//   - forked by the Python template (internal/zygote): the plan travels as
//     data in the fork request and the template's child executes every
//     step in order, then reads its own /proc/self/status and runs the
//     probes. It has no policy of its own: it only knows how to make each
//     kind of step.
//
// A step that fails, a status that differs or a probe that is not refused
// as expected refuses the start; nothing degrades silently. A change to
// the sequence (a new layer, a new runtime kind) is a change to jail's planEntry.

// Phase says where a step is made; a plan lists its steps phase by phase,
// in this order.
type Phase string

const (
	// PhaseProcess steps set process-wide state the program inherits.
	PhaseProcess Phase = "process"
	// PhaseThread steps restrict the thread that forks the program (the
	// whole entering process when that is single-threaded).
	PhaseThread Phase = "thread"
	// PhaseChild steps are made in the program's own process before it
	// runs anything; the identity change among them clears the permitted
	// and effective capabilities kept so far.
	PhaseChild Phase = "child"
)

// Op is the kind of a step. Each is one system call (or a read and a
// write of the same state, for the inheritable set).
type Op string

const (
	OpRlimit              Op = "rlimit"                 // setrlimit(Resource, Cur, Max)
	OpCapBoundingDrop     Op = "cap_bounding_drop"      // prctl(PR_CAPBSET_DROP) for each of Caps
	OpCapAmbientClear     Op = "cap_ambient_clear"      // prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
	OpCapInheritableClear Op = "cap_inheritable_clear"  // capget, then capset with no inheritable capability
	OpNoNewPrivs          Op = "no_new_privs"           // prctl(PR_SET_NO_NEW_PRIVS, 1)
	OpLandlock            Op = "landlock_restrict_self" // with the sandbox's ruleset (a descriptor the executor holds)
	OpSeccomp             Op = "seccomp_filter"         // seccomp(SECCOMP_SET_MODE_FILTER, 0, Filter)
	OpSetsid              Op = "setsid"                 // a session of its own: no terminal, no host process group
	OpSetgroups           Op = "setgroups"              // no supplementary group
	OpSetGID              Op = "set_gid"                // real, effective, saved and filesystem gid to ID
	OpSetUID              Op = "set_uid"                // real, effective, saved and filesystem uid to ID
	OpCapClear            Op = "cap_clear"              // capset with no capability at all
	OpChdir               Op = "chdir"                  // to Path
	OpDumpable            Op = "dumpable"               // prctl(PR_SET_DUMPABLE, 1), as an exec by the same user makes it
)

// Step is one step of the entry.
type Step struct {
	Phase    Phase  `json:"phase"`
	Op       Op     `json:"op"`
	Resource int    `json:"resource,omitempty"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
	Caps     []int  `json:"caps,omitempty"`
	ID       int    `json:"id"`
	Path     string `json:"path,omitempty"`
	Filter   []byte `json:"filter,omitempty"` // raw sock_filter array, 8 bytes per instruction
}

// Probe is an operation that the other layers would let the entered
// process make and that one layer must refuse with Errno: proof that the
// layer is enforced, for layers /proc/<pid>/status says nothing about.
type Probe struct {
	Layer string `json:"layer"`
	// Op is "mknodat": create Dir/<Prefix><random> with Mode and Dev.
	Op     string `json:"op"`
	Dir    string `json:"dir"`
	Prefix string `json:"prefix"`
	Mode   uint32 `json:"mode"`
	Dev    uint64 `json:"dev"`
	Errno  int    `json:"errno"`
}

// Expect is what the kernel must say about the entered process.
type Expect struct {
	// Status are fields of /proc/<pid>/status that must read exactly so
	// (surrounding white space trimmed).
	Status map[string]string `json:"status"`
	// ProcOwner is the uid /proc/<pid> must belong to: the process's own
	// when it is dumpable, root's when not (a uid change without an exec
	// leaves it not dumpable, and its /proc files then root's).
	ProcOwner int     `json:"proc_owner"`
	Probes    []Probe `json:"probes,omitempty"`
}

// Entry is the plan: its steps in order, and the expected end.
type Entry struct {
	Steps  []Step `json:"steps"`
	Expect Expect `json:"expect"`
	// Syscalls are the numbers of the raw system calls steps and probes
	// need, for an executor with no table of its own (the template).
	Syscalls map[string]int `json:"syscalls"`
}
