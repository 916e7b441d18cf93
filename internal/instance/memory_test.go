package instance

import (
	"syscall"
	"testing"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/runtimes"
)

// The one answer to whether a process ran out of memory, for each kind
// of process a sandbox has: its runtime or a program (the sandbox is
// theirs alone), and a command beside the runtime (it is not).
func TestOutOfMemory(t *testing.T) {
	cfg := config.Default()
	py, _ := runtimes.Lookup(cfg, "python")
	js, _ := runtimes.Lookup(cfg, "javascript")
	l := cfg.Defaults // 512 MiB: V8's heap is 384 MiB
	const mib = 1 << 20
	kill, abort, exit0 := syscall.WaitStatus(syscall.SIGKILL), syscall.WaitStatus(syscall.SIGABRT), syscall.WaitStatus(0)
	for _, c := range []struct {
		name string
		rt   runtimes.Runtime
		st   cgroup.Stats
		p    ProcessEnd
		want bool
	}{
		{"a runtime killed with an OOM kill counted", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{Status: kill, Known: true}, true},
		{"a runtime gone with its sandbox, an OOM kill counted", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{}, true},
		{"a program that exited as an OOM kill was counted: its sandbox is its own", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{Status: exit0, Known: true}, true},
		{"no OOM kill", py, cgroup.Stats{}, ProcessEnd{Status: kill, Known: true}, false},
		{"a command killed after an OOM kill since it started", py, cgroup.Stats{OOMKills: 2}, ProcessEnd{Status: kill, Known: true, OOMBase: 1, Shared: true}, true},
		{"a command killed, the OOM kill before it started", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{Status: kill, Known: true, OOMBase: 1, Shared: true}, false},
		{"a command that exited by itself as another process was OOM-killed", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{Status: exit0, Known: true, Shared: true}, false},
		{"a command gone with its sandbox after an OOM kill", py, cgroup.Stats{OOMKills: 1}, ProcessEnd{Shared: true}, true},
		{"V8 aborts at the end of its heap", js, cgroup.Stats{MemoryPeak: 300 * mib}, ProcessEnd{Status: abort, Known: true}, true},
		{"V8 aborts at the end of its heap, a command", js, cgroup.Stats{MemoryPeak: 300 * mib}, ProcessEnd{Status: abort, Known: true, Shared: true}, true},
		{"an abort far from the heap's end", js, cgroup.Stats{MemoryPeak: 100 * mib}, ProcessEnd{Status: abort, Known: true}, false},
		{"Python has no heap of its own", py, cgroup.Stats{MemoryPeak: 500 * mib}, ProcessEnd{Status: abort, Known: true}, false},
	} {
		if got := OutOfMemory(c.st, c.rt, l, c.p); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
