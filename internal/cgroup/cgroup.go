// Package cgroup owns the control groups that bound every sandbox: finding
// the hierarchies (v2, or v1/hybrid with memory, pids, cpu and cpuacct on
// v1), creating one cgroup per sandbox under a configured parent, setting
// memory (no swap), pids and CPU limits, reading usage, reporting OOM kills
// and pids-limit hits as events, and removing what is left, including the
// leftovers of a previous process that was killed.
//
// Creating, limiting and removing go through github.com/opencontainers/cgroups;
// events and the few counters read per execution are read directly.
//
// It must never write outside the configured parent, and never trust a
// path from a sandbox: every path here is built from the configuration.
// The one exception is cgroup v2 in a pod: airlock moves itself (and the
// other processes of its own cgroup) into a leaf, airlock-server, before
// it can enable controllers for the parent (the no-internal-process rule).
package cgroup

import "time"

// Resources are the limits of one sandbox's cgroup.
type Resources struct {
	Memory int64   // bytes; swap is always off
	Pids   int64   // processes and threads
	CPUs   float64 // CFS bandwidth in cores
}

// Stats are the counters read at the end of a run or an execution.
type Stats struct {
	CPU        time.Duration // user+system time of every process, ever
	MemoryPeak int64         // high-water mark of memory use, bytes
	OOMKills   uint64        // processes killed by the OOM killer
	PidsMax    uint64        // forks refused because of the pids limit
}

// Event is something the kernel reported about a cgroup.
type Event int

const (
	// EventOOM: the OOM killer killed a process in the cgroup.
	EventOOM Event = iota + 1
	// EventPidsMax: a fork failed because the pids limit was reached.
	EventPidsMax
)

func (e Event) String() string {
	switch e {
	case EventOOM:
		return "oom"
	case EventPidsMax:
		return "pids"
	}
	return "unknown"
}
