package jail

import (
	"airlock/internal/rootfs"
)

// The host and a sandbox's init talk over a SOCK_SEQPACKET socketpair: one
// JSON message per packet, descriptors alongside as SCM_RIGHTS. The init
// is airlock's own code, but the host still treats what it says as data:
// it only ever learns pids, exit statuses and the descriptors handed over
// before any sandboxed code ran.

const (
	opSetup   = "setup"   // host -> init: build the jail
	opReady   = "ready"   // init -> host: built; fds: workspace, devpts ptmx, landlock ruleset
	opSpawn   = "spawn"   // host -> init: start a program; fds: its stdio and extras
	opSpawned = "spawned" // init -> host: the program's pid (inside)
	opExit    = "exit"    // init -> host: a spawned program ended
	opSignal  = "signal"  // host -> init: signal a process (group) inside
	opAdapt   = "adapt"   // host -> init: resize the scratch trees, set a program's rlimits
	opAdapted = "adapted" // init -> host: done
	opError   = "error"   // init -> host: a request failed
	opCopy    = "copy"    // host -> init: copy a pipe into a file; fds: the file, the pipe's read end
	opCopied  = "copied"  // init -> host: a copy ended (how many bytes, which error)
)

type message struct {
	Op     string     `json:"op"`
	Setup  *setupMsg  `json:"setup,omitempty"`
	Spawn  *spawnMsg  `json:"spawn,omitempty"`
	Pid    int        `json:"pid,omitempty"`
	Status int        `json:"status,omitempty"` // raw wait status
	Error  string     `json:"error,omitempty"`
	Usage  *exitUsage `json:"usage,omitempty"`
	Signal int        `json:"signal,omitempty"`
	Group  bool       `json:"group,omitempty"`
	Adapt  *adaptMsg  `json:"adapt,omitempty"`
	Copy   *copyMsg   `json:"copy,omitempty"`
}

// copyMsg names a copy (several may run at once) and, in the reply, says
// how it ended.
type copyMsg struct {
	ID    uint64 `json:"id"`
	N     int64  `json:"n,omitempty"`     // bytes written to the file
	Errno int    `json:"errno,omitempty"` // the error of a failed read or write, if it had one
}

type adaptMsg struct {
	Disk    int64    `json:"disk"`
	Inodes  int64    `json:"inodes"`
	Rlimits []rlimit `json:"rlimits"`
}

type setupMsg struct {
	Root rootfs.Spec `json:"root"`
	// Landlock is the ABI to build a ruleset for; 0 means off.
	Landlock int `json:"landlock,omitempty"`
	// Entry is how every program the init spawns enters the sandbox
	// (see planEntry); nil for a template.
	Entry *Entry `json:"entry,omitempty"`
	// Rlimits are the template's own.
	Rlimits []rlimit `json:"rlimits,omitempty"`
	// Template, when set, makes the init a template process instead of a
	// sandbox's PID 1: see Host.StartTemplate.
	Template *templateMsg `json:"template,omitempty"`
}

type templateMsg struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// KeepCaps are the capabilities left in the bounding set.
	KeepCaps []int `json:"keep_caps"`
}

type rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

type spawnMsg struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// NFiles is the number of descriptors sent with the message; they
	// become the program's fds 0..NFiles-1.
	NFiles int `json:"nfiles"`
	// Terminal: fd 0 becomes the controlling terminal.
	Terminal bool `json:"terminal,omitempty"`
}

type exitUsage struct {
	UserNs int64 `json:"user_ns"`
	SysNs  int64 `json:"sys_ns"`
	MaxRSS int64 `json:"max_rss"`
}

// maxMessage caps a control message; the socket buffers are sized for it.
const maxMessage = 64 << 10
