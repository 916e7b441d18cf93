package instance

import (
	"syscall"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/runtimes"
)

// ProcessEnd is how a process of a sandbox ended, for OutOfMemory.
type ProcessEnd struct {
	// Status is how it ended; Known is false when it died with its
	// sandbox and nothing says how.
	Status syscall.WaitStatus
	Known  bool
	// OOMBase is the sandbox's count of OOM kills when it started.
	OOMBase uint64
	// Shared: the sandbox runs others' processes beside it (a session's
	// command beside its runtime), so an OOM kill there is the process's
	// only if it was killed (SIGKILL) or died with the sandbox. Otherwise
	// the sandbox is the process's alone (its runtime, or a program run
	// in the runtime's place), and any OOM kill in it ended its work:
	// every process of a sandbox dies with one (memory.oom.group, or the
	// sandbox ended at the event).
	Shared bool
}

// OutOfMemory is the one answer to whether a process of the sandbox that
// ended (its runtime, a program run in its place, a command beside it)
// ran out of memory: the OOM killer acted in the sandbox since OOMBase
// (gVisor's Sentry's kills count too: see gvisorSandbox.Stats), or the
// interpreter gave up at the end of its own heap (runtimes'
// OutOfMemory: V8 aborts). Its error says the sandbox's counters are
// gone: nothing is known.
func (in *Instance) OutOfMemory(p ProcessEnd) (bool, error) {
	st, err := in.sb.Stats()
	if err != nil {
		return false, err
	}
	return OutOfMemory(st, in.rt, in.Limits(), p), nil
}

// OutOfMemory is the method's rule for a sandbox with limits l running
// rt's interpreter, whose counters are st.
func OutOfMemory(st cgroup.Stats, rt runtimes.Runtime, l config.Limits, p ProcessEnd) bool {
	killed := !p.Known || (p.Status.Signaled() && p.Status.Signal() == syscall.SIGKILL)
	if st.OOMKills > p.OOMBase && (!p.Shared || killed) {
		return true
	}
	return p.Known && rt.OutOfMemory(l, p.Status, st.MemoryPeak)
}
