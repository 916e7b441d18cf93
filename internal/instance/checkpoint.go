package instance

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"airlock/internal/cleanup"
	"airlock/internal/config"
	"airlock/internal/gvisor"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// Keeping memory: a gVisor sandbox whose init is the keeper (see
// package gvisor) can be checkpointed with its runtimes and restored into
// a fresh sandbox, where they are attached to again by pid.

// Keeps reports whether a pause of the instance can keep its memory: a
// gVisor sandbox with a keeper (see GVisor.start) and without a network
// (its sockets would be the host's).
func (in *Instance) Keeps() bool {
	g, ok := in.sb.(*gvisorSandbox)
	return ok && g.Sandbox.Keeps()
}

// KeepsMemory reports whether kernel k's sandboxes without a network
// or template can be checkpointed with their memory.
func KeepsMemory(k Kernel) bool {
	g, ok := k.(GVisor)
	return ok && g.Host.Keeps()
}

// Checkpoint writes the instance's memory and processes to dir (see
// gvisor.Sandbox.Checkpoint), at most max bytes; the sandbox ends with
// it, and the instance must then be closed. Its workspace stays readable
// until then.
func (in *Instance) Checkpoint(ctx context.Context, dir string, max int64) (gvisor.Checkpoint, error) {
	g, ok := in.sb.(*gvisorSandbox)
	if !ok || !in.Keeps() {
		return gvisor.Checkpoint{}, gvisor.ErrNoCheckpoint
	}
	return g.Checkpoint(ctx, dir, max)
}

// Snapshot is Checkpoint, but the instance runs on (a fork's image).
func (in *Instance) Snapshot(ctx context.Context, dir string, max int64) (gvisor.Checkpoint, error) {
	g, ok := in.sb.(*gvisorSandbox)
	if !ok || !in.Keeps() {
		return gvisor.Checkpoint{}, gvisor.ErrNoCheckpoint
	}
	return g.Snapshot(ctx, dir, max)
}

// SealMemory marks mem's image, written by a checkpoint of an instance
// of kernel k that never ran a client's code and is closed, as one only
// root on the host can change: once a check has summed it again, when
// its files' change times have settled, its restores skip summing it
// while their identity stays as it was then (see gvisor.Host.Seal).
// ForgetMemory undoes it.
func SealMemory(ctx context.Context, k Kernel, mem Memory) error {
	g, ok := k.(GVisor)
	if !ok {
		return gvisor.ErrNoCheckpoint
	}
	return g.Host.Seal(ctx, mem.Dir, mem.Checkpoint)
}

// ForgetMemory unseals the image in dir (see SealMemory).
func ForgetMemory(k Kernel, dir string) {
	if g, ok := k.(GVisor); ok {
		g.Host.Forget(dir)
	}
}

// Checkpoint is what a checkpoint wrote (its size and digest).
type Checkpoint = gvisor.Checkpoint

// KeeperError is why a restore refused the keeper copy its checkpoint
// names (see gvisor.KeeperError).
type KeeperError = gvisor.KeeperError

// Memory is a checkpoint to restore an instance from.
type Memory struct {
	Dir        string
	Checkpoint gvisor.Checkpoint
	// Pid is the first runtime's pid in the sandbox.
	Pid int
}

// Restore builds an instance of rt with limits l from the checkpoint mem
// on kernel k (a gVisor one with a keeper), fill having put its files
// back first, and attaches to its first runtime. Closing it frees its
// slot. With background (a pool's refill), the restore takes only the
// CPU others leave, as New's builds do: Foreground gives it the normal
// weight back.
func Restore(ctx context.Context, k Kernel, slots *Slots, rt runtimes.Runtime, l config.Limits, mem Memory, fill func(*workspace.Dir) error, background bool) (_ *Instance, err error) {
	g, ok := k.(GVisor)
	if !ok || !g.Host.Keeps() {
		return nil, gvisor.ErrNoCheckpoint
	}
	slot, err := slots.Get()
	if err != nil {
		return nil, err
	}
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	undo.AddFunc(func() { slots.Put(slot) })
	unhold := k.Root().hold()
	undo.AddFunc(unhold)
	spec := gvisor.Spec{Name: GVisorPrefix + strconv.FormatUint(uint64(slot), 10), Limits: l, Root: k.Root().Jail(), Background: background}
	gsb, err := g.Host.Restore(ctx, spec, mem.Dir, mem.Checkpoint, fill)
	if err != nil {
		return nil, err
	}
	sb := &gvisorSandbox{Sandbox: gsb, exits: make(chan jail.Exit, 16)}
	undo.Add(sb.Close)
	attach := time.Now()
	it, err := connectRuntime(sb, rt, func(stdio [4]*os.File) (int, error) {
		exit, err := sb.Attach(mem.Pid, stdio[:])
		if err != nil {
			return 0, err
		}
		sb.report(exit)
		return mem.Pid, nil
	}, true)
	if err != nil {
		return nil, err
	}
	undo.Release()
	in := &Instance{sb: sb, isolation: k.Isolation(), Interp: it, started: it.started, release: func() { slots.Put(slot); unhold() }}
	in.restored = RestoreTimes{RestoreTimes: gsb.RestoreTimes(), Attach: time.Since(attach)}
	return in, nil
}

// RestoreTimes is how long each stage of an instance's restore took.
type RestoreTimes struct {
	gvisor.RestoreTimes
	// Attach: the first runtime attached to again (a relay started in
	// the sandbox, the runtime's hello).
	Attach time.Duration
}

// RestoreTimes is how long the stages of the restore that made the
// instance took (zero for one that was not restored).
func (in *Instance) RestoreTimes() RestoreTimes { return in.restored }

// AttachInterp attaches to the runtime rt of pid that runs beside the
// first in a restored instance (one StartInterp started before the
// checkpoint); the caller configures nothing (it kept its state),
// attaches its output and closes it.
func (in *Instance) AttachInterp(rt runtimes.Runtime, pid int) (*Interp, error) {
	g, ok := in.sb.(*gvisorSandbox)
	if !ok {
		return nil, gvisor.ErrNoCheckpoint
	}
	var exit <-chan jail.Exit
	it, err := connectRuntime(in.sb, rt, func(stdio [4]*os.File) (int, error) {
		ch, err := g.Attach(pid, stdio[:])
		exit = exitsOf(ch)
		return pid, err
	}, true)
	if err != nil {
		return nil, err
	}
	it.watchExit(exit)
	return it, nil
}

// IsNoCheckpoint reports whether err says a sandbox cannot keep its
// memory (rather than that keeping it failed).
func IsNoCheckpoint(err error) bool { return errors.Is(err, gvisor.ErrNoCheckpoint) }
