package instance

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
)

// Interp is a language's session runtime started in a sandbox and
// connected: an instance's first (its sandbox was built for it), or one
// StartInterp started beside it later, in the same sandbox (the same
// namespaces, cgroup, limits, user and /workspace) with its own process
// group, control socket and output pipes.
type Interp struct {
	sb sandbox
	rt runtimes.Runtime
	// pid is the runtime's pid inside the sandbox.
	pid     int
	conn    conn
	stdout  *os.File // read ends of the runtime's output pipes, until Attach
	stderr  *os.File
	out     *pipeReader
	errp    *pipeReader
	started time.Time
	// forked: the template interpreter started it.
	forked bool
	// gone is closed when a runtime the init does not report on Exits
	// (one from the template, one started beside the first) has exited,
	// or its sandbox has died; exit then says how, once exitKnown is
	// closed. Both nil for a first runtime the init reports on Exits.
	gone       chan struct{}
	exitKnown  chan struct{}
	exitStatus syscall.WaitStatus
	// exitOnce asks runtimeExit's question once; exitSeen and
	// exitSeenOK are its answer.
	exitOnce   sync.Once
	exitSeen   jail.Exit
	exitSeenOK bool
	// sendMu orders what goes to the runtime: an execution's request,
	// and an interrupt's message and SIGINT (see Interrupt). sent is the
	// last execution sent; early, one an interrupt was asked for before
	// it was sent.
	sendMu sync.Mutex
	sent   string
	early  string
}

// StartInterp starts rt's session runtime in the instance's sandbox,
// beside the runtimes already there, and waits until it is ready (its
// hello). It is started cold, as the language's own interpreter; the
// caller configures it, attaches its output and closes it.
func (in *Instance) StartInterp(ctx context.Context, rt runtimes.Runtime) (*Interp, error) {
	l := in.sb.Limits()
	var exit <-chan jail.Exit
	it, err := startRuntime(in.sb, rt, func(stdio [4]*os.File) (int, error) {
		pid, ch, err := in.sb.SpawnWait(jail.Process{
			Argv:  rt.SessionCommand(),
			Env:   RuntimeEnv(rt, l),
			Dir:   "/workspace",
			Files: stdio[:],
		})
		exit = ch
		return pid, err
	})
	if err != nil {
		return nil, err
	}
	it.watchExit(exit)
	return it, nil
}

// watchExit makes a runtime started beside the first Done when exit
// says how it ended, or its sandbox dies.
func (in *Interp) watchExit(exit <-chan jail.Exit) {
	in.gone, in.exitKnown = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(in.gone)
		select {
		case e := <-exit:
			in.exitStatus = e.Status
			close(in.exitKnown)
		case <-in.sb.Dead():
		}
	}()
}

// Pid is the runtime's pid inside the sandbox.
func (in *Interp) Pid() int { return in.pid }

// Done is closed when a runtime started beside the first has exited, or
// its sandbox has died.
func (in *Interp) Done() <-chan struct{} { return in.gone }

// Ended explains a runtime started beside the first that is Done: how it
// ended, in the words a session's end uses (out of memory, killed by a
// signal, exited with a status).
func (in *Interp) Ended() apitype.End {
	e, _ := in.waitExit()
	return in.death(e)
}

// Kill ends a runtime started beside the first, with every process of
// its process group, and waits for it (at most a few seconds: a sandbox
// that does not answer is its owner's to end).
func (in *Interp) Kill() {
	in.sb.Signal(in.pid, syscall.SIGKILL, true)
	select {
	case <-in.gone:
	case <-time.After(5 * time.Second):
	}
}

// Close frees a runtime started beside the first once it is Done (or
// its sandbox is closed): its control socket and output pipes.
func (in *Interp) Close() {
	in.conn.close()
	in.closeIO()
}

// closeIO closes the runtime's output pipes and their readers.
func (in *Interp) closeIO() {
	for _, p := range []*pipeReader{in.out, in.errp} {
		if p != nil {
			p.close()
		}
	}
	for _, f := range []*os.File{in.stdout, in.stderr} {
		if f != nil {
			f.Close()
		}
	}
}
