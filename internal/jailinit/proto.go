package jailinit

import "airlock/internal/rootfs"

// The host and a sandbox's init talk over a SOCK_SEQPACKET socketpair: one
// JSON Message per packet, descriptors alongside as SCM_RIGHTS. The init
// is airlock's own code, but the host still treats what it says as data:
// it only ever learns pids, exit statuses and the descriptors handed over
// before any sandboxed code ran.

const (
	MsgSetup    = "setup"    // host -> init: build the jail
	MsgReady    = "ready"    // init -> host: built; fds: workspace, devpts ptmx, landlock ruleset
	MsgSpawn    = "spawn"    // host -> init: start a program; fds: its stdio and extras
	MsgSpawned  = "spawned"  // init -> host: the program's pid (inside)
	MsgExit     = "exit"     // init -> host: a spawned program ended
	MsgSignal   = "signal"   // host -> init: signal a process (group) inside
	MsgSignaled = "signaled" // init -> host: the signal is sent (kill(2) returned), or refused (Error)
	MsgAdapt    = "adapt"    // host -> init: resize the scratch trees, set a program's rlimits
	MsgAdapted  = "adapted"  // init -> host: done
	MsgError    = "error"    // init -> host: a request failed
	MsgCopy     = "copy"     // host -> init: copy a pipe into a file; fds: the file, the pipe's read end
	MsgCopied   = "copied"   // init -> host: a copy ended (how many bytes, which error)

	// A server's spawner (see Spawner) speaks the same wire.
	MsgClone  = "clone"  // host -> spawner: start an init; fds: see CloneMsg
	MsgCloned = "cloned" // spawner -> host: its pid; fds: its pidfd
)

// Message is one packet of the control protocol; Op says which of its
// fields are set.
type Message struct {
	Op     string     `json:"op"`
	Setup  *SetupMsg  `json:"setup,omitempty"`
	Spawn  *SpawnMsg  `json:"spawn,omitempty"`
	Pid    int        `json:"pid,omitempty"`
	Status int        `json:"status,omitempty"` // raw wait status
	Error  string     `json:"error,omitempty"`
	Usage  *ExitUsage `json:"usage,omitempty"`
	Signal int        `json:"signal,omitempty"`
	Group  bool       `json:"group,omitempty"`
	Adapt  *AdaptMsg  `json:"adapt,omitempty"`
	Copy   *CopyMsg   `json:"copy,omitempty"`
	Clone  *CloneMsg  `json:"clone,omitempty"`
}

// CopyMsg names a copy (several may run at once) and, in the reply, says
// how it ended.
type CopyMsg struct {
	ID    uint64 `json:"id"`
	N     int64  `json:"n,omitempty"`     // bytes written to the file
	Errno int    `json:"errno,omitempty"` // the error of a failed read or write, if it had one
}

// AdaptMsg gives a pre-started sandbox the limits of its session.
type AdaptMsg struct {
	Disk    int64    `json:"disk"`
	Inodes  int64    `json:"inodes"`
	Rlimits []Rlimit `json:"rlimits"`
}

// SetupMsg is what the init builds: the root, the Landlock ruleset, and
// how its programs enter the sandbox.
type SetupMsg struct {
	Root rootfs.Spec `json:"root"`
	// Landlock is the ABI to build a ruleset for; 0 means off.
	Landlock int `json:"landlock,omitempty"`
	// Entry is how every program the init spawns enters the sandbox
	// (see jail's planEntry); nil for a template.
	Entry *Entry `json:"entry,omitempty"`
	// Rlimits are the template's own.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Template, when set, makes the init a template process instead of a
	// sandbox's PID 1: see jail's Host.StartTemplate.
	Template *TemplateMsg `json:"template,omitempty"`
}

// TemplateMsg makes the init exec a template program in the built root.
type TemplateMsg struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// KeepCaps are the capabilities left in the bounding set.
	KeepCaps []int `json:"keep_caps"`
}

// Rlimit is one resource limit.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// SpawnMsg starts a program.
type SpawnMsg struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// NFiles is the number of descriptors sent with the message; they
	// become the program's fds 0..NFiles-1.
	NFiles int `json:"nfiles"`
	// Terminal: fd 0 becomes the controlling terminal.
	Terminal bool `json:"terminal,omitempty"`
}

// ExitUsage is what an ended program used.
type ExitUsage struct {
	UserNs int64 `json:"user_ns"`
	SysNs  int64 `json:"sys_ns"`
	MaxRSS int64 `json:"max_rss"`
}

// MaxMessage caps a control message; the socket buffers are sized for it.
const MaxMessage = 64 << 10
