package session

import (
	"context"
	"os"
	"syscall"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/instance"
	"airlock/internal/runtimes"
	"airlock/internal/watch"
	"airlock/internal/workspace"
)

// Interp is what a session needs of a language runtime in its sandbox
// (an *instance.Interp): its output, attached once, then fenced and
// drained around each execution, and its control connection.
type Interp interface {
	Attach(instance.Output) error
	Barrier()
	Drain()
	WaitOutput()

	Configure(ctx context.Context, env map[string]string, cwd string) error
	SetDefaults(ctx context.Context, env map[string]string) error
	// Reseed reseeds its random generators from the kernel, and
	// reports whether the runtime confirmed it.
	Reseed(ctx context.Context) (bool, error)
	Execute(id, code string, env map[string]string, sendBy time.Time) error
	Run(id string, p instance.Program, sendBy time.Time) error
	Reply(m runtimes.Message) error
	Messages() <-chan runtimes.Message
	Lost() (apitype.End, error)
	ProgramExit() (instance.Exit, bool)
	// Interrupt interrupts execution id (it may not have started yet).
	Interrupt(id string)
}

// Beside is a runtime started beside the sandbox's first, for another
// code context: it can end, and be ended, alone.
type Beside interface {
	Interp
	// Done is closed when it has exited (or its sandbox has died);
	// Ended then says how.
	Done() <-chan struct{}
	Ended() apitype.End
	// Kill ends its process group and waits for it; Close frees its
	// connection and pipes once it is done.
	Kill()
	Close()
}

// Instance is what a session needs of its sandbox and the runtime in it:
// an *instance.Instance (see package instance for what each method
// does). It is the seam between the session's logic (lifecycle,
// executions, commands, interrupts, limits) and the jail: session's own
// tests give it a fake.
type Instance interface {
	Name() string
	Isolation() config.Isolation
	Started() time.Time
	Workspace() *workspace.Dir
	// CPU, Events and PollPids: what a watch reads.
	watch.Sandbox
	Stats() (cgroup.Stats, error)
	// Usage is Stats' CPU time and memory peak alone.
	Usage() (cpu time.Duration, peak int64, err error)
	Memory() (int64, error)
	NetNS() (int, bool)
	// OutOfMemory is the one answer to whether a process of the
	// sandbox ran out of memory.
	OutOfMemory(instance.ProcessEnd) (bool, error)

	// The sandbox's first runtime (the session's default context's).
	Interp

	// StartInterp starts rt's runtime beside the first, for another
	// code context.
	StartInterp(ctx context.Context, rt runtimes.Runtime) (Beside, error)
	// StartCommand starts argv beside the runtime, under a terminal of
	// that size if term is set.
	StartCommand(argv, env []string, dir string, term *instance.Terminal) (Process, error)

	// RetireFirst ends the first runtime for good, the sandbox living
	// on (the default context restarted in a runtime beside it).
	RetireFirst()

	// The sandbox's end.
	Monitor(stop <-chan struct{}) apitype.End
	Dead() <-chan struct{}
	Kill()
	Close() error
	// Yield gives the sandbox the lowest CPU weight (its teardown
	// taking only spare CPU), Foreground the normal one back.
	Yield() error
	Foreground() error
}

// Process is a command started in a session's sandbox beside its
// runtime: an *instance.Command.
type Process interface {
	Pid() int
	Stdio() (stdin, stdout, stderr *os.File)
	Done() <-chan struct{}
	Exit() (instance.Exit, bool)
	Signal(sig syscall.Signal) error
	// Resize sets the size of its terminal.
	Resize(term instance.Terminal) error
}

// Source provides a session's instances.
type Source interface {
	Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (Instance, error)
}

// instances is the Source of an instance.Source (a pool, or cold builds).
type instances struct{ src instance.Source }

func (s instances) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (Instance, error) {
	in, err := s.src.Get(ctx, rt, l, net)
	if err != nil {
		return nil, err
	}
	return realInstance{in}, nil
}

// realInstance is an *instance.Instance as a session's Instance.
type realInstance struct{ *instance.Instance }

func (r realInstance) StartCommand(argv, env []string, dir string, term *instance.Terminal) (Process, error) {
	c, err := r.Instance.StartCommand(argv, env, dir, term)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (r realInstance) StartInterp(ctx context.Context, rt runtimes.Runtime) (Beside, error) {
	it, err := r.Instance.StartInterp(ctx, rt)
	if err != nil {
		return nil, err
	}
	return it, nil
}

var _ Instance = realInstance{}
