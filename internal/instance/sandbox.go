package instance

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/gvisor"
	"airlock/internal/image"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// sandbox is what an instance needs of the sandbox its runtime runs in,
// whichever kernel serves it: *jail.Sandbox (native) and gvisorSandbox.
type sandbox interface {
	Limits() config.Limits
	Name() string
	Workspace() *workspace.Dir
	CPU() (time.Duration, error)
	Stats() (cgroup.Stats, error)
	Usage() (cpu time.Duration, peak int64, err error)
	Events() <-chan cgroup.Event
	PollPids() time.Duration
	Dead() <-chan struct{}
	// Exits delivers the exits of the programs Spawn started.
	Exits() <-chan jail.Exit
	Kill()
	Signal(pid int, sig syscall.Signal, group bool) error
	Adapt(l config.Limits, pid int) error
	Spawn(p jail.Process) (int, error)
	SpawnWait(p jail.Process) (int, <-chan jail.Exit, error)
	// OpenPTY opens a pseudo-terminal of the sandbox's own: its master,
	// and its slave for a program (see jail.Sandbox.OpenPTY).
	OpenPTY(cols, rows uint16) (master, slave *os.File, err error)
	Close() error
}

// Kernel builds the sandboxes of one isolation; the choice between them
// is made here and nowhere below.
type Kernel interface {
	// Isolation is the kernel's name in the configuration.
	Isolation() config.Isolation
	// NetworkAtStart says whether a sandbox can reach a network only if
	// started with one (gVisor, whose network mode is fixed at boot);
	// native sandboxes always have a namespace of their own that a gate
	// can be put in at any time.
	NetworkAtStart() bool
	// start builds an empty sandbox for slot with limits l; with net, one
	// that can reach a network through an egress gate (see
	// NetworkAtStart); with background, one whose start may already take
	// only the CPU others leave (gVisor's boot; a native sandbox starts
	// in a few milliseconds, and build lowers its weight after).
	start(ctx context.Context, slot uint32, l config.Limits, net, background bool) (sandbox, error)
	// sessionCommand is rt's session runtime's argv in this kernel.
	sessionCommand(rt runtimes.Runtime) []string
	// WithRoot is the same kernel building its sandboxes on r (nil: the
	// host's root).
	WithRoot(r *Root) Kernel
	// Root is the template root its sandboxes get (nil: the host's).
	Root() *Root
}

// Root is one version of a template as sandboxes' root: prepared once per
// host, held (its lease) by every sandbox made from it for as long as the
// sandbox lives, so that an import of a newer version or a removal never
// pulls it from under a running session.
type Root struct {
	lease *image.Lease
	jail  *jail.Root
}

// NewRoot prepares the template version lease holds as a root for h's
// sandboxes (and gVisor's: the static part is the same). The caller
// keeps lease and releases it when no new sandbox will be made from it.
func NewRoot(h *jail.Host, lease *image.Lease) (*Root, error) {
	jr, err := h.ImageRoot(lease.Root, lease.Name+"-"+lease.Version)
	if err != nil {
		return nil, err
	}
	return &Root{lease: lease, jail: jr}, nil
}

// Template is the template's name and version.
func (r *Root) Template() image.Template { return r.lease.Template }

// Jail is the prepared root (nil for the host's).
func (r *Root) Jail() *jail.Root {
	if r == nil {
		return nil
	}
	return r.jail
}

// hold holds the root's version for one more sandbox.
func (r *Root) hold() func() {
	if r == nil {
		return func() {}
	}
	return r.lease.Clone().Release
}

// Native runs sandboxes on the host kernel, in airlock's own jail.
type Native struct {
	Host *jail.Host
	// R is the template root of its sandboxes (nil: the host's).
	R *Root
	// Preload lists the modules a Python runtime imports before it says
	// hello, inside its sandbox: what a pool of a template that gets no
	// Python template interpreter (one not built from Debian's packages,
	// whose code must never run outside a sandbox) does instead.
	Preload []string
	// Run makes the sandboxes a command's own run ("r-<pid>", see
	// jail.RunName), built one at a time in the host's CLI slot (see
	// OneSlot), rather than a server's ("s-<slot>"). A server sweeps
	// its own at start; it leaves a running command's alone.
	Run bool
}

// WithRoot implements Kernel.
func (k Native) WithRoot(r *Root) Kernel { k.R = r; return k }

// Root implements Kernel.
func (k Native) Root() *Root { return k.R }

// Isolation implements Kernel.
func (Native) Isolation() config.Isolation { return config.Native }

// NetworkAtStart implements Kernel.
func (Native) NetworkAtStart() bool { return false }

func (k Native) start(ctx context.Context, slot uint32, l config.Limits, _, _ bool) (sandbox, error) {
	name := "s-" + strconv.FormatUint(uint64(slot), 10)
	if k.Run {
		name = jail.RunName()
	}
	return k.Host.Start(ctx, jail.Spec{Name: name, Slot: slot, Limits: l, Root: k.R.Jail()})
}

func (k Native) sessionCommand(rt runtimes.Runtime) []string { return preloading(rt, k.Preload) }

// WithPreload is k whose Python runtimes import mods before they say
// hello (see Native.Preload and GVisor.Preload).
func WithPreload(k Kernel, mods []string) Kernel {
	switch v := k.(type) {
	case Native:
		v.Preload = mods
		return v
	case GVisor:
		v.Preload = mods
		return v
	}
	return k
}

// GVisor runs sandboxes on gVisor (runsc), started from the host side.
type GVisor struct {
	Host *gvisor.Host
	// Preload lists the modules a Python runtime imports before it says
	// hello, so that a pooled one serves its first execution warm (there
	// is no template to fork from across gVisor sandboxes).
	Preload []string
	// R is the template root of its sandboxes (nil: the host's).
	R *Root
	// Keep gives every sandbox without a network the keeper, a
	// template's too: a pool's image is a checkpoint of one (see
	// GVisor.start).
	Keep bool
}

// WithRoot implements Kernel.
func (k GVisor) WithRoot(r *Root) Kernel { k.R = r; return k }

// Root implements Kernel.
func (k GVisor) Root() *Root { return k.R }

// GVisorPrefix starts the names of gVisor sandboxes (their cgroups).
const GVisorPrefix = "g-"

// Isolation implements Kernel.
func (GVisor) Isolation() config.Isolation { return config.GVisor }

// NetworkAtStart implements Kernel: runsc's network mode is fixed when the
// sandbox boots.
func (GVisor) NetworkAtStart() bool { return true }

func (k GVisor) start(ctx context.Context, slot uint32, l config.Limits, net, background bool) (sandbox, error) {
	spec := gvisor.Spec{Name: GVisorPrefix + strconv.FormatUint(uint64(slot), 10), Limits: l, Root: k.R.Jail(), Keeper: k.keeper(net), Background: background}
	if net {
		ns, err := egress.NewNamespace()
		if err != nil {
			return nil, errdefs.Private(errdefs.ErrUnavailable, "the sandbox's network namespace could not be made", err)
		}
		spec.NetNS = ns
	}
	sb, err := k.Host.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &gvisorSandbox{Sandbox: sb, exits: make(chan jail.Exit, 16)}, nil
}

// keeper reports whether a sandbox of k, with a network or not, runs the
// keeper (its relay costs every program: about a millisecond a warm
// execution): only where a checkpoint may be taken, with no network (its
// sockets are the host's) and no template (a session made from one
// pauses with its files) unless for a pool's image (Keep).
func (k GVisor) keeper(net bool) bool { return !net && (k.R == nil || k.Keep) }

// preloadStub imports the modules named in its first argument (a failure
// only costs speed), then runs the runtime package given as its second
// argument as __main__, as `python3 -I -B <dir>` would.
const preloadStub = `import sys, importlib, runpy
for m in sys.argv[1].split(","):
    try:
        importlib.import_module(m)
    except Exception:
        pass
path = sys.argv[2]
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
`

func (k GVisor) sessionCommand(rt runtimes.Runtime) []string { return preloading(rt, k.Preload) }

// preloading is rt's session command, importing preload first when rt is
// the language of the template interpreter.
func preloading(rt runtimes.Runtime, preload []string) []string {
	argv := rt.SessionCommand()
	if !rt.Template || len(preload) == 0 || len(argv) < 2 {
		return argv
	}
	// python3 -I -B <runtime dir> becomes python3 -I -B -c <stub> <modules> <runtime dir>.
	return append(append(argv[:len(argv)-1:len(argv)-1], "-c", preloadStub, strings.Join(preload, ",")), argv[len(argv)-1])
}

// gvisorSandbox adapts a gVisor sandbox to what an instance needs: the
// host-side cgroup for counters and events, `runsc exec` for programs.
type gvisorSandbox struct {
	*gvisor.Sandbox
	exits chan jail.Exit
	// lost: a program's runsc exec lost its sandbox (it died under it).
	lost atomic.Bool
}

func (s *gvisorSandbox) CPU() (time.Duration, error)          { return s.Cgroup().CPU() }
func (s *gvisorSandbox) Usage() (time.Duration, int64, error) { return s.Cgroup().Usage() }
func (s *gvisorSandbox) Events() <-chan cgroup.Event          { return s.Cgroup().Events() }
func (s *gvisorSandbox) PollPids() time.Duration              { return s.Cgroup().PollPids() }
func (s *gvisorSandbox) Exits() <-chan jail.Exit              { return s.exits }
func (s *gvisorSandbox) Adapt(l config.Limits, _ int) error   { return s.Sandbox.Adapt(l) }

// OpenPTY implements sandbox: a pty of the host's devpts, whose slave
// runsc hands the Sentry as the program's terminal (the Sentry's own
// devpts serves the terminals the sandbox's code opens). One per
// terminal command, so at most server.max_session_commands a session.
func (s *gvisorSandbox) OpenPTY(cols, rows uint16) (*os.File, *os.File, error) {
	return jail.OpenPTY("/dev/ptmx", cols, rows)
}

func (s *gvisorSandbox) exec(p jail.Process) (int, <-chan gvisor.Exit, error) {
	return s.Exec(gvisor.Process{Argv: p.Argv, Env: p.Env, Dir: p.Dir, Files: p.Files, Terminal: p.Terminal})
}

// Stats implements sandbox. gVisor handles memory pressure itself too: at
// the cgroup's limit the Sentry may SIGKILL the program that wants more
// (the host's OOM killer never runs) rather than die. A sandbox whose
// memory peaked at its limit counts one OOM kill, so that such a kill is
// reported as memory, as on native.
func (s *gvisorSandbox) Stats() (cgroup.Stats, error) {
	st, err := s.Cgroup().Stats()
	if err == nil && st.OOMKills == 0 && st.MemoryPeak >= gvisor.HostMemory(s.Limits())-8<<20 {
		st.OOMKills = 1
	}
	return st, err
}

// Spawn implements sandbox: the exit goes to Exits.
func (s *gvisorSandbox) Spawn(p jail.Process) (int, error) {
	pid, ch, err := s.exec(p)
	if err != nil {
		return 0, err
	}
	s.report(ch)
	return pid, nil
}

// report passes the exit ch delivers to Exits.
func (s *gvisorSandbox) report(ch <-chan gvisor.Exit) {
	go func() {
		e := <-ch
		if e.Lost {
			s.lost.Store(true)
		}
		select {
		case s.exits <- jail.Exit{Pid: e.Pid, Status: e.Status}:
		case <-s.Dead():
		}
	}()
}

// SpawnWait implements sandbox: the exit goes to the returned channel.
func (s *gvisorSandbox) SpawnWait(p jail.Process) (int, <-chan jail.Exit, error) {
	pid, ch, err := s.exec(p)
	if err != nil {
		return 0, nil, err
	}
	return pid, exitsOf(ch), nil
}

// exitsOf delivers the exit ch delivers as a jail.Exit (nil: never).
func exitsOf(ch <-chan gvisor.Exit) <-chan jail.Exit {
	out := make(chan jail.Exit, 1)
	if ch != nil {
		go func() {
			e := <-ch
			out <- jail.Exit{Pid: e.Pid, Status: e.Status}
		}()
	}
	return out
}

var _ sandbox = (*jail.Sandbox)(nil)
var _ sandbox = (*gvisorSandbox)(nil)
