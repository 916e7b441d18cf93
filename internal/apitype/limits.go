package apitype

// Limits bound one sandbox. A zero field means "use the default". Every
// field a client asks for is checked against the server's maximum (see
// config.Resolve); nothing a client sends can exceed it.
type Limits struct {
	// Timeout is the wall-clock limit of one run or one execution.
	Timeout Duration `json:"timeout,omitempty"`
	// CPUTime is the CPU time (all processes, all cores) one run or one
	// execution may use, enforced from outside through the cgroup.
	CPUTime Duration `json:"cpu_time,omitempty"`
	// Memory is the memory of the whole sandbox, including its tmpfs
	// files; there is no swap.
	Memory Size `json:"memory,omitempty"`
	// Pids is the number of processes and threads the sandbox may have.
	Pids Count `json:"pids,omitempty"`
	// Disk is the size of /workspace and, separately, of /tmp. Both are
	// memory-backed and also count towards Memory.
	Disk Size `json:"disk,omitempty"`
	// Inodes is the number of files /workspace and /tmp may each hold.
	Inodes Count `json:"inodes,omitempty"`
	// MaxOutput caps captured stdout and, separately, stderr.
	MaxOutput Size `json:"max_output,omitempty"`
	// CPUs is the CPU bandwidth quota in cores (0.5 = half a core).
	CPUs float64 `json:"cpus,omitempty"`
	// NoFile is RLIMIT_NOFILE.
	NoFile Count `json:"nofile,omitempty"`
}

// Merge returns l with every zero field taken from def.
func (l Limits) Merge(def Limits) Limits {
	if l.Timeout == 0 {
		l.Timeout = def.Timeout
	}
	if l.CPUTime == 0 {
		l.CPUTime = def.CPUTime
	}
	if l.Memory == 0 {
		l.Memory = def.Memory
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.Disk == 0 {
		l.Disk = def.Disk
	}
	if l.Inodes == 0 {
		l.Inodes = def.Inodes
	}
	if l.MaxOutput == 0 {
		l.MaxOutput = def.MaxOutput
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.NoFile == 0 {
		l.NoFile = def.NoFile
	}
	return l
}

// Isolation names a kernel sandboxes can run on.
type Isolation string

const (
	// Native: the host kernel, behind namespaces, cgroups, seccomp and
	// Landlock.
	Native Isolation = "native"
	// GVisor: gVisor's runsc in front of the host kernel; airlock still
	// applies the host-side layers (cgroups, no network, the root).
	GVisor Isolation = "gvisor"
)

// Valid reports whether i names a known isolation.
func (i Isolation) Valid() bool { return i == Native || i == GVisor }
