// Package instance owns a sandbox with a language's session runtime
// started in it and connected: building one (cold, or forked from the
// template interpreter), the runtime's control connection in both
// protocols (JSON frames, bash's NUL-terminated blocks), its output pipes,
// and the operations a session performs on it (configure, execute, run a
// program, interrupt, adapt limits, watch for its end, close). Pools keep
// instances warm; sessions use them; neither reaches into the jail for
// anything an instance offers.
//
// It must never hand one instance to two owners, never trust what the
// runtime sends beyond its data (frames are capped and checked, frames
// nobody asked for are dropped), and never let a client see host internals
// in its errors: they go to the server's log.
package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
	"airlock/internal/cleanup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/watch"
	"airlock/internal/workspace"
	"airlock/internal/zygote"
)

// Instance is a sandbox with a session runtime started in it, waiting for
// its first configure. It is handed to exactly one session. Its runtime
// (the embedded Interp) is the sandbox's first; StartInterp starts
// others beside it, in the same sandbox.
type Instance struct {
	sb sandbox
	// isolation is the kernel the sandbox runs on.
	isolation config.Isolation
	*Interp
	release func()
	started time.Time
	// retired: the first runtime was ended for good (RetireFirst).
	retired atomic.Bool
	// restored: how long its restore's stages took (Restore).
	restored RestoreTimes
}

// Source provides instances.
type Source interface {
	// Get returns a new instance of rt with exactly limits l; with net,
	// one whose sandbox can reach a network (Kernel.NetworkAtStart).
	Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (*Instance, error)
}

type oneShotKey struct{}

// ForOneShot marks ctx as a one-shot's (a run, a program): a Source that
// keeps sandboxes for session creations serves it without taking those.
func ForOneShot(ctx context.Context) context.Context {
	return context.WithValue(ctx, oneShotKey{}, true)
}

// IsOneShot reports whether ctx was marked by ForOneShot.
func IsOneShot(ctx context.Context) bool {
	v, _ := ctx.Value(oneShotKey{}).(bool)
	return v
}

type leanKey struct{}

// ForLean marks ctx as a one-shot's whose code needs none of the Python
// template's preloaded modules (runtimes.Language.Lean): a Source that
// keeps sandboxes forked from a template that preloads nothing may serve
// it one of those, or any other.
func ForLean(ctx context.Context) context.Context {
	return context.WithValue(ctx, leanKey{}, true)
}

// IsLean reports whether ctx was marked by ForLean.
func IsLean(ctx context.Context) bool {
	v, _ := ctx.Value(leanKey{}).(bool)
	return v
}

type freshKey struct{}

// ForFresh marks ctx as a request whose sandbox must be built for it: the
// ready ones it was handed died before it could use them (a runtime's
// death is noticed a moment after it happens, so a pool's check when it
// hands one out can miss it, and ready sandboxes often die together). A
// Source that keeps sandboxes ready builds one instead of taking one.
func ForFresh(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshKey{}, true)
}

// IsFresh reports whether ctx was marked by ForFresh.
func IsFresh(ctx context.Context) bool {
	v, _ := ctx.Value(freshKey{}).(bool)
	return v
}

type leanProgramKey struct{}

// ForLeanProgram marks ctx as a program run's whose code
// runtimes.Language.LeanProgram accepts: a Cold source starts the runtime
// it builds for it with the language's LeanProgramCommand. Same sandbox,
// same layers; only the interpreter's start differs.
func ForLeanProgram(ctx context.Context) context.Context {
	return context.WithValue(ctx, leanProgramKey{}, true)
}

// IsLeanProgram reports whether ctx was marked by ForLeanProgram.
func IsLeanProgram(ctx context.Context) bool {
	v, _ := ctx.Value(leanProgramKey{}).(bool)
	return v
}

// Program is a program file a runtime runs in its place, as `airlock run`
// would: it gets exactly Env, an empty stdin and /workspace as its
// directory, and its exit status is the execution's. The runtime ends with
// it.
type Program struct {
	Argv []string
	Env  map[string]string
	// Fresh starts a new interpreter (the client set variables only a new
	// one reads).
	Fresh bool
}

// Language is the instance's runtime.
func (in *Interp) Language() runtimes.Runtime { return in.rt }

// Limits are the sandbox's current limits.
func (in *Instance) Limits() config.Limits { return in.sb.Limits() }

// Isolation is the kernel the instance's sandbox runs on.
func (in *Instance) Isolation() config.Isolation { return in.isolation }

// Name names the sandbox (its cgroup).
func (in *Instance) Name() string { return in.sb.Name() }

// Forked reports whether the runtime was forked from the template
// interpreter (with its libraries already imported) rather than started
// cold.
func (in *Interp) Forked() bool { return in.forked }

// Started is when the instance was ready.
func (in *Instance) Started() time.Time { return in.started }

// Workspace is the host's handle on the sandbox's /workspace.
func (in *Instance) Workspace() *workspace.Dir { return in.sb.Workspace() }

// CPU is the sandbox's total CPU time.
func (in *Instance) CPU() (time.Duration, error) { return in.sb.CPU() }

// Stats are the sandbox's cgroup counters.
func (in *Instance) Stats() (cgroup.Stats, error) { return in.sb.Stats() }

// Usage is the sandbox's CPU time and memory peak, what an execution
// reports: half the reads of Stats.
func (in *Instance) Usage() (cpu time.Duration, peak int64, err error) { return in.sb.Usage() }

// Memory is the sandbox's memory in use now that reclaim cannot take
// back (cgroup.Memory), for the session's description.
func (in *Instance) Memory() (int64, error) {
	cg, err := cgroupOf(in.sb)
	if err != nil {
		return 0, err
	}
	used, _, err := cg.Memory()
	return used, err
}

// PSS is the proportional set size of the sandbox's processes (their
// private memory, and their share of what they share with the template
// and its other forks), what a warm pool counts against its memory
// budget; the cgroup's Memory where none can be read (gVisor's Sentry).
func (in *Instance) PSS() (int64, error) {
	cg, err := cgroupOf(in.sb)
	if err != nil {
		return 0, err
	}
	if n, err := cg.PSS(); err == nil && n > 0 {
		return n, nil
	}
	used, _, err := cg.Memory()
	return used, err
}

// cgroupOf is sb's cgroup, for what the sandbox interface does not pass on.
func cgroupOf(sb sandbox) (*cgroup.Cgroup, error) {
	cg, ok := sb.(interface{ Cgroup() *cgroup.Cgroup })
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return cg.Cgroup(), nil
}

// Foreground gives a sandbox built in the background (New) the normal CPU
// weight back, for the session that takes it. It writes the weight alone:
// the limits Adapt sets, before or after, stay.
func (in *Instance) Foreground() error { return setBackground(in.sb, false) }

// Yield gives the sandbox the background CPU weight again: what is left
// of it, its end included (the runtime's exit unmapping its memory, the
// init's), takes only the CPU the others leave. For a sandbox about to be
// torn down that nobody waits for; Foreground gives the normal weight
// back.
func (in *Instance) Yield() error { return setBackground(in.sb, true) }

// Background reports whether the sandbox has the background CPU weight.
func (in *Instance) Background() (bool, error) {
	cg, err := cgroupOf(in.sb)
	if err != nil {
		return false, err
	}
	return cg.Background()
}

func setBackground(sb sandbox, on bool) error {
	cg, err := cgroupOf(sb)
	if err != nil {
		return fmt.Errorf("instance: set the CPU weight: %w", err)
	}
	return cg.SetBackground(on)
}

// Events delivers the sandbox's OOM and process-limit events.
func (in *Instance) Events() <-chan cgroup.Event { return in.sb.Events() }

// PollPids makes up for cgroup v1's missing pids events: it reads the
// counter once and says when to again (0: never).
func (in *Instance) PollPids() time.Duration { return in.sb.PollPids() }

// Dead is closed when the sandbox is gone.
func (in *Instance) Dead() <-chan struct{} { return in.sb.Dead() }

// Kill ends every process of the sandbox; Close must still be called.
func (in *Instance) Kill() { in.sb.Kill() }

// NetNS is a handle on the sandbox's network namespace that the egress
// layer enters: a native sandbox's init pidfd, or the namespace a gVisor
// sandbox was started in; false when the sandbox has no network but
// gVisor's own loopback (started without one).
func (in *Instance) NetNS() (int, bool) {
	switch sb := in.sb.(type) {
	case interface{ PidFD() int }:
		return sb.PidFD(), true
	case interface{ NetNS() (*os.File, bool) }:
		if f, ok := sb.NetNS(); ok {
			return int(f.Fd()), true
		}
	}
	return -1, false
}

// Interrupt interrupts execution id: the runtime's interrupt message, then
// SIGINT to its process group (Python raises KeyboardInterrupt; the state
// is kept). The message, ordered after the execution on the socket, is
// what makes an interrupt that comes before the runtime has started the
// code (it ignores SIGINT while idle) land on it all the same
// (docs/runtime-protocol.md); SIGINT stops code that runs. Both go from a
// goroutine: a runtime that stopped reading its socket (its buffer full)
// must not hold the caller, whose grace period then ends the session, and
// with it the write.
//
// Both go under sendMu, and only while id is the runtime's execution: an
// interrupt asked for before its execution is sent goes right after it
// (not before it, where the runtime would drop it and the code then run
// to its timeout), and one for an execution that has ended goes nowhere
// (its SIGINT would stop the next).
func (in *Interp) Interrupt(id string) {
	go func() {
		in.sendMu.Lock()
		defer in.sendMu.Unlock()
		switch {
		case in.conn.current(id):
			in.interruptLocked(id)
		case id != in.sent:
			in.early = id // not sent yet
		}
	}()
}

func (in *Interp) interruptLocked(id string) {
	in.conn.interrupt(id) // failed: the runtime is gone or stuck; SIGINT regardless
	// Only while the execution is under way (Signal returns once the
	// signal is sent): one sent after its done would land in what the
	// runtime runs next (bash: the block restoring its env, or the next).
	if !in.conn.whileCurrent(id, func() { in.sb.Signal(in.pid, syscall.SIGINT, true) }) {
		return
	}
	if in.rt.Language != nil && in.rt.RepeatsSIGINT {
		go in.repeatSIGINT(id)
	}
}

// sigintRepeat is how often an interrupt's SIGINT is repeated for a
// runtime that can lose one (runtimes.Language.RepeatsSIGINT): long
// enough for a program that takes a SIGINT to clean up before it ends
// (a repeat would interrupt that too), short against the grace period
// (interrupt_grace, 2 s by default), after which the session ends.
var sigintRepeat = 500 * time.Millisecond

// repeatSIGINT sends SIGINT to the runtime's process group again every
// sigintRepeat while execution id is under way: a single one can be lost
// (bash: see RepeatsSIGINT). It ends with the execution (its done read,
// or the runtime gone), never signalling what is sent after it; the
// watch's grace bounds how long an execution that ignores it lasts.
func (in *Interp) repeatSIGINT(id string) {
	t := time.NewTicker(sigintRepeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-in.sb.Dead():
			return
		}
		if !in.conn.whileCurrent(id, func() { in.sb.Signal(in.pid, syscall.SIGINT, true) }) {
			return
		}
	}
}

// sentLocked notes that execution id has been sent, and sends the
// interrupt asked for it meanwhile.
func (in *Interp) sentLocked(id string) {
	in.sent = id
	if in.early == id {
		in.early = ""
		in.interruptLocked(id)
	}
}

// RetireFirst ends the sandbox's first runtime for good, with every
// process of its process group, and frees its connection and pipes; the
// sandbox lives on (Monitor no longer reports that runtime's end), its
// session's default context running in a runtime started beside it.
func (in *Instance) RetireFirst() {
	if in.retired.Swap(true) {
		return
	}
	in.sb.Signal(in.pid, syscall.SIGKILL, true)
	in.conn.close()
	in.closeIO()
}

// Close tears the instance down (it was never handed out, or its session
// ended); it waits until everything in the sandbox is gone. Runtimes
// started beside the first (StartInterp) are their owner's to close.
func (in *Instance) Close() error {
	// The sandbox first: a runtime that saw its socket close would end as
	// it does on end of file (atexit handlers, streams flushed), work no
	// one sees and every one-shot paid for on the way to its teardown.
	err := in.sb.Close()
	in.conn.close()
	if !in.retired.Load() {
		in.closeIO()
	}
	if in.release != nil {
		in.release()
	}
	return err
}

// Healthy reports whether the instance's jail and runtime are still alive;
// a pooled instance that died while it waited must not be handed out.
func (in *Instance) Healthy() bool {
	select {
	case <-in.gone:
		return false
	case <-in.sb.Dead():
		return false
	case <-in.sb.Exits():
		return false
	case <-in.conn.events():
		// Closed: the runtime broke off (what an idle runtime sends
		// unasked is dropped before it gets here).
		return false
	default:
		return true
	}
}

// Adapt gives the instance the limits of the session that takes it.
func (in *Instance) Adapt(l config.Limits) error { return in.sb.Adapt(l, in.pid) }

// Attach starts reading the runtime's stdout and stderr for the rest of
// its life: every chunk goes to out, in order per stream.
func (in *Interp) Attach(out Output) (err error) {
	if in.out, err = newPipeReader(in.stdout, out, false); err != nil {
		return err
	}
	in.stdout = nil
	if in.errp, err = newPipeReader(in.stderr, out, true); err != nil {
		return err
	}
	in.stderr = nil
	return nil
}

// Barrier returns once no output is being taken: what the caller changed
// before (Output.Keeps's answer) applies to every later chunk.
func (in *Interp) Barrier() {
	in.out.barrier()
	in.errp.barrier()
}

// Drain delivers what is in the output pipes now: everything the runtime
// wrote before its latest message (it flushes before it sends).
func (in *Interp) Drain() {
	in.out.drain()
	in.errp.drain()
}

// WaitOutput waits until the output pipes reach end of file, which they do
// once the sandbox is dead (or the runtime and all it started are gone).
func (in *Interp) WaitOutput() {
	<-in.out.done
	<-in.errp.done
}

// Configure replaces the runtime's environment and moves it to the
// directory cwd (absolute, in the sandbox); the round trip also shows the
// runtime alive.
func (in *Interp) Configure(ctx context.Context, env map[string]string, cwd string) error {
	return in.ask(ctx, func() error { return in.conn.configure(env, cwd) })
}

// SetDefaults sets the variables of env the runtime's environment does
// not have (the rest is kept); between executions only.
func (in *Interp) SetDefaults(ctx context.Context, env map[string]string) error {
	return in.ask(ctx, func() error { return in.conn.setDefaults(env) })
}

// Reseed reseeds the runtime's random generators from the kernel (those
// it knows of: Python's random and numpy's global generator, bash's
// $RANDOM), for a runtime restored into a fork, whose memory is its
// source's; between executions only. It reports whether the runtime
// confirmed it (one older than the reseed ignores the request).
func (in *Interp) Reseed(ctx context.Context) (bool, error) {
	var ok bool
	err := in.ask(ctx, func() (err error) {
		ok, err = in.conn.reseed()
		return err
	})
	return ok, err
}

// ask runs one request to the runtime and its reply, for at most 30 s.
func (in *Interp) ask(ctx context.Context, req func() error) error {
	done := make(chan error, 1)
	go func() { done <- req() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("no answer")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Execute sends code to run as execution id, with env's variables set
// for it alone (nil: none); what it produces arrives on Messages. A
// runtime that does not read the request by sendBy (the code stopped it:
// SIGSTOP, a thread holding the GIL) fails it.
func (in *Interp) Execute(id, code string, env map[string]string, sendBy time.Time) error {
	in.sendMu.Lock()
	defer in.sendMu.Unlock()
	in.conn.sendBy(sendBy)
	defer in.conn.sendBy(time.Time{})
	if err := in.conn.execute(id, code, env); err != nil {
		return err
	}
	in.sentLocked(id)
	return nil
}

// Run starts p in place of the runtime as execution id.
func (in *Interp) Run(id string, p Program, sendBy time.Time) error {
	in.sendMu.Lock()
	defer in.sendMu.Unlock()
	in.conn.sendBy(sendBy)
	defer in.conn.sendBy(time.Time{})
	if err := in.conn.run(id, p); err != nil {
		return err
	}
	in.sentLocked(id)
	return nil
}

// SendFailure says how a failed Execute or Run ends the session.
func SendFailure(err error) apitype.End {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return apitype.Ended(apitype.EndNotReading)
	}
	return apitype.Ended(apitype.EndProtocol)
}

// Messages delivers the display, result, error and done messages of the
// current execution. It is closed when the runtime goes away or
// misbehaves; Lost then says why.
// Reply answers a request the runtime made during an execution.
func (in *Interp) Reply(m runtimes.Message) error { return in.conn.reply(m) }

func (in *Interp) Messages() <-chan runtimes.Message { return in.conn.events() }

// Lost explains Messages closing: the runtime broke the protocol (err,
// for the log) or went away.
func (in *Interp) Lost() (apitype.End, error) {
	if err := in.conn.err(); err != nil {
		return apitype.Ended(apitype.EndProtocol), err
	}
	e, _ := in.runtimeExit() // unknown: the zero Exit
	return in.death(e), nil
}

// ProgramExit is how a program that ended the runtime ended, once
// Messages closed; false if no one says so soon.
func (in *Interp) ProgramExit() (Exit, bool) {
	e, ok := in.runtimeExit()
	if g, isG := in.sb.(*gvisorSandbox); isG && g.lost.Load() {
		// The whole gVisor sandbox died under the program (an OOM kill
		// takes the Sentry): that is the sandbox's end, not the
		// program's exit status.
		return Exit{}, false
	}
	if !ok {
		return Exit{}, false
	}
	return exitOf(e), true
}

// Monitor waits, while no execution watches, for the sandbox to end on its
// own (an OOM kill, the process limit, the runtime exiting, the jail
// dying) and says why; it returns the zero End when stop is closed first.
func (in *Instance) Monitor(stop <-chan struct{}) apitype.End {
	gone := in.gone
	for {
		select {
		case ev := <-in.sb.Events():
			if end := watch.EndOf(ev); !end.Zero() {
				return end
			}
		case e := <-in.sb.Exits():
			if e.Pid == in.pid && !in.retired.Load() {
				return in.death(e)
			}
		case <-gone:
			if in.retired.Load() {
				gone = nil // closed for good: not again
				continue
			}
			e, _ := in.waitExit()
			return in.death(e)
		case <-in.sb.Dead():
			return in.death(jail.Exit{})
		case <-stop:
			return apitype.End{}
		}
	}
}

// death explains why the runtime or the jail went away.
func (in *Interp) death(e jail.Exit) apitype.End {
	st, err := in.sb.Stats()
	if err == nil && OutOfMemory(st, in.rt, in.sb.Limits(), ProcessEnd{Status: e.Status, Known: e.Pid != 0}) {
		return apitype.Ended(apitype.EndOOM)
	}
	if _, isG := in.sb.(*gvisorSandbox); err == nil && st.PidsMax > 0 && isG {
		// gVisor's Sentry needs host threads for the sandbox's threads:
		// at the pids limit it may die with them.
		return apitype.Ended(apitype.EndPids)
	}
	end := apitype.Ended(apitype.EndInterpreterExited)
	switch {
	case e.Pid == 0:
	case e.Status.Signaled():
		end.Reason = fmt.Sprintf("the interpreter was killed by signal %d (%s)", e.Status.Signal(), e.Status.Signal())
	case e.Status.Exited():
		end.Reason = fmt.Sprintf("the interpreter exited with status %d", e.Status.ExitStatus())
	}
	return end
}

// exitReport bounds the wait for how a runtime ended once its control
// socket closed. The exit usually comes first or at once, but under
// gVisor it is runsc exec's, which answers only after the Sentry has torn
// the process down, and on a loaded host that took over 200 ms (a
// program's status lost: reported killed). Only a runtime that closes
// its socket and lives on waits it out (its session then ends).
const exitReport = 5 * time.Second

// runtimeExit is how the runtime ended, once its control socket closed;
// false if no one says so soon, or the sandbox died first. It is asked
// once: later callers get the first answer.
func (in *Interp) runtimeExit() (jail.Exit, bool) {
	in.exitOnce.Do(func() { in.exitSeen, in.exitSeenOK = in.awaitExit() })
	return in.exitSeen, in.exitSeenOK
}

func (in *Interp) awaitExit() (jail.Exit, bool) {
	if in.gone != nil {
		// Not the init's to report on Exits, which carries the first
		// runtime's exit only.
		select {
		case <-in.gone:
			return in.waitExit()
		case <-time.After(exitReport):
			return jail.Exit{}, false
		}
	}
	timeout := time.After(exitReport)
	select {
	case e := <-in.sb.Exits():
		return e, true
	case <-in.sb.Dead():
		// No exit comes from a dead sandbox but one already on its way.
		select {
		case e := <-in.sb.Exits():
			return e, true
		case <-time.After(200 * time.Millisecond):
			return jail.Exit{}, false
		}
	case <-timeout:
		return jail.Exit{}, false
	}
}

// waitExit returns how a runtime with a gone channel (the template's, or
// one started beside the first) ended, if that is known soon; any number
// of goroutines may ask.
func (in *Interp) waitExit() (jail.Exit, bool) {
	if in.exitKnown == nil {
		return jail.Exit{}, false
	}
	select {
	case <-in.exitKnown:
		return jail.Exit{Pid: in.pid, Status: in.exitStatus}, true
	case <-time.After(200 * time.Millisecond):
		return jail.Exit{}, false
	}
}

// Slots hands out the id slots of server sandboxes. A slot is reused only
// after its sandbox is gone, so no two live sandboxes share host ids. The
// zero value hands out a host's (jail.LayoutOf(0)); NewSlots those of a
// layout.
type Slots struct {
	mu          sync.Mutex
	free        []uint32
	next        uint32
	first, size uint32 // 0 size: a host's layout
}

// NewSlots hands out the server slots of layout l.
func NewSlots(l jail.Layout) *Slots { return &Slots{first: l.ServerFirst, size: l.ServerCount} }

// OneSlot hands out slot alone (a command's: jail.Host.CLISlot).
func OneSlot(slot uint32) *Slots { return &Slots{first: slot, size: 1} }

// Get returns a free slot.
func (s *Slots) Get() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot, nil
	}
	if s.size == 0 {
		l := jail.LayoutOf(0)
		s.first, s.size = l.ServerFirst, l.ServerCount
	}
	if s.next >= s.size {
		return 0, fmt.Errorf("%w: no free sandbox id slots", errdefs.ErrLimit)
	}
	s.next++
	return s.first + s.next - 1, nil
}

// Put returns a slot.
func (s *Slots) Put(slot uint32) {
	s.mu.Lock()
	s.free = append(s.free, slot)
	s.mu.Unlock()
}

// Cold builds every instance from scratch: a new sandbox, then the
// runtime executed in it.
type Cold struct {
	// Kernel builds the sandboxes; Native{Host} when nil.
	Kernel Kernel
	Host   *jail.Host
	Slots  *Slots
}

// Get implements Source. A sandbox built for this call gets the files of
// ctx's WithInputs while its runtime starts.
func (c *Cold) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (*Instance, error) {
	k := c.Kernel
	if k == nil {
		k = Native{Host: c.Host}
	}
	write, _ := ctx.Value(inputsKey{}).(func(*workspace.Dir) error)
	argv := k.sessionCommand(rt)
	if lean := rt.LeanProgramCommand(); lean != nil && IsLeanProgram(ctx) && slices.Equal(argv, rt.SessionCommand()) {
		argv = lean // not when the kernel preloads modules: they need site
	}
	return build(ctx, k, c.Slots, rt, l, net, nil, false, write, argv)
}

type inputsKey struct{}

// WithInputs asks a Cold source to have write put a request's files in the
// workspace of the sandbox it builds for the request while the sandbox's
// runtime starts (most of a cold start), rather than after: Get returns
// once both are done, and fails if write does. Only Cold does it, and
// only for the sandbox it returns: a pool's sandboxes (built ahead, or on
// a request's behalf but maybe handed to another) never see the
// request's files. The caller writes them itself into any other
// (write is told which workspace it wrote to).
func WithInputs(ctx context.Context, write func(*workspace.Dir) error) context.Context {
	return context.WithValue(ctx, inputsKey{}, write)
}

// New builds a sandbox of kernel k with limits l and starts rt's session
// runtime in it: forked from the template z when z is not nil (native
// sandboxes only), executed in the sandbox otherwise. Closing the
// instance frees its id slot.
//
// A background one (a pool's refill builds it ahead of demand) gets the
// lowest CPU weight before its runtime starts: its warm-up takes only the
// CPU that the sandboxes requests wait for leave. Foreground gives it the
// normal weight back when it is taken.
func New(ctx context.Context, k Kernel, slots *Slots, rt runtimes.Runtime, l config.Limits, net bool, z *zygote.Zygote, background bool) (*Instance, error) {
	return build(ctx, k, slots, rt, l, net, z, background, nil, nil)
}

// build is New; write, when not nil, writes the request's files into the
// sandbox while its runtime starts (see WithInputs); argv, when not nil,
// is the runtime's command when it is not forked from z.
func build(ctx context.Context, k Kernel, slots *Slots, rt runtimes.Runtime, l config.Limits, net bool, z *zygote.Zygote, background bool, write func(*workspace.Dir) error, argv []string) (_ *Instance, err error) {
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
	sb, err := k.start(ctx, slot, l, net, background)
	if err != nil {
		return nil, err
	}
	undo.Add(sb.Close)
	if background {
		if err := setBackground(sb, true); err != nil {
			return nil, err
		}
	}
	var wrote chan error
	if write != nil {
		wrote = make(chan error, 1)
		ws := sb.Workspace()
		go func() { wrote <- write(ws) }()
	}
	var it *Interp
	if native, ok := sb.(*jail.Sandbox); ok && z != nil && rt.Template {
		it, err = startZygote(ctx, native, z, rt, l)
	} else {
		if argv == nil {
			argv = k.sessionCommand(rt)
		}
		it, err = start(sb, argv, rt, l)
	}
	if wrote != nil {
		// Waited for on every path: the write uses the sandbox that undo
		// closes.
		if werr := <-wrote; err == nil && werr != nil {
			it.Close() // the sandbox's close (undo) ends it
			err = werr
		}
	}
	if err != nil {
		return nil, err
	}
	undo.Release()
	return &Instance{sb: sb, isolation: k.Isolation(), Interp: it, started: it.started, release: func() { slots.Put(slot); unhold() }}, nil
}

// RuntimeEnv is the environment of rt's session runtime in a sandbox with
// limits l: the jail's base, then the language's.
func RuntimeEnv(rt runtimes.Runtime, l config.Limits) []string {
	return append(jail.BaseEnv(), rt.SessionEnv(l)...)
}

// ProgramEnv is the environment of a program file of rt run in a sandbox
// with limits l, as `airlock run` gives it: the jail's base, then the
// language's.
func ProgramEnv(rt runtimes.Runtime, l config.Limits) []string {
	return append(jail.BaseEnv(), rt.Env(l)...)
}

// start executes rt's session runtime (argv) in sb and waits until it is
// ready.
func start(sb sandbox, argv []string, rt runtimes.Runtime, l config.Limits) (*Interp, error) {
	return startRuntime(sb, rt, func(stdio [4]*os.File) (int, error) {
		return sb.Spawn(jail.Process{
			Argv:  argv,
			Env:   RuntimeEnv(rt, l),
			Dir:   "/workspace",
			Files: stdio[:],
		})
	})
}

// startZygote starts rt's session runtime in sb by having the template
// interpreter z fork it in, with its libraries already imported.
func startZygote(ctx context.Context, sb *jail.Sandbox, z *zygote.Zygote, rt runtimes.Runtime, l config.Limits) (*Interp, error) {
	var fk *zygote.Forked
	inst, err := startRuntime(sb, rt, func(stdio [4]*os.File) (int, error) {
		var err error
		fk, err = z.Fork(ctx, sb, l, stdio)
		return 0, err // the runtime's pid inside comes with its hello
	})
	if err != nil {
		if fk != nil {
			fk.Pidfd.Close()
		}
		return nil, err
	}
	// The runtime is the template's child, not the init's: its exit is
	// seen through its pidfd, and how it ended comes from the template.
	inst.forked = true
	inst.gone = make(chan struct{})
	inst.exitKnown = make(chan struct{})
	go watchPidfd(fk.Pidfd, inst.gone)
	go func() {
		if st, ok := <-fk.Exit; ok {
			inst.exitStatus = st
			close(inst.exitKnown)
		}
	}()
	return inst, nil
}

// watchPidfd closes gone when the process of pidfd exits (a pidfd polls
// readable then), and closes the pidfd. pidfd must be pollable (opened
// non-blocking), so that the wait costs no thread.
func watchPidfd(pidfd *os.File, gone chan struct{}) {
	defer close(gone)
	defer pidfd.Close()
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 0)
		if n > 0 {
			// Ours to reap only if its template died and it was handed to
			// the server (a child subreaper); the template's otherwise,
			// and this fails with ECHILD.
			unix.Waitid(unix.P_PIDFD, int(fd), nil, unix.WEXITED|unix.WNOHANG, nil)
		}
		return n > 0
	})
}

// startRuntime starts the runtime with start, which gets its fds 0-3 and
// returns its pid inside the sandbox (0 if the runtime will tell).
func startRuntime(sb sandbox, rt runtimes.Runtime, start func([4]*os.File) (int, error)) (_ *Interp, err error) {
	return connectRuntime(sb, rt, start, false)
}

// connectRuntime is startRuntime; attached: the runtime runs already (it
// was restored with its sandbox) and start attaches to it, which returns
// its pid; no hello comes.
func connectRuntime(sb sandbox, rt runtimes.Runtime, start func([4]*os.File) (int, error), attached bool) (_ *Interp, err error) {
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	pipe := func() (*os.File, *os.File) {
		if err != nil {
			return nil, nil
		}
		var r, w *os.File
		r, w, err = os.Pipe()
		if err == nil {
			undo.AddFunc(func() { r.Close(); w.Close() })
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// Our end is non-blocking so that the Go poller serves it (and read
	// deadlines work); theirs becomes blocking when Spawn passes it on.
	unix.SetNonblock(fds[0], true)
	ours, theirs := os.NewFile(uintptr(fds[0]), "runtime-ctl"), os.NewFile(uintptr(fds[1]), "runtime-ctl")
	undo.AddFunc(func() { ours.Close() })
	inW.Close() // the runtime's stdin is empty
	pid, err := start([4]*os.File{inR, outW, errW, theirs})
	inR.Close()
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		if ctx := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded); ctx {
			return nil, err
		}
		return nil, errdefs.Private(errdefs.ErrUnavailable, fmt.Sprintf("the %s runtime could not be started", rt.Lang), err)
	}
	var cn conn
	if rt.Framed {
		// The hello must come quickly; a runtime that cannot start (a
		// missing interpreter, say) would otherwise hang the request.
		ours.SetReadDeadline(time.Now().Add(30 * time.Second))
		fc, err := framed(ours, runtimes.MaxFrame, !attached)
		ours.SetReadDeadline(time.Time{})
		if err != nil {
			return nil, errdefs.Private(errdefs.ErrUnavailable, fmt.Sprintf("the %s runtime did not start", rt.Lang), err)
		}
		if pid == 0 {
			if pid = fc.hello.Pid; pid <= 1 {
				fc.close()
				return nil, errdefs.Private(errdefs.ErrUnavailable, fmt.Sprintf("the %s runtime did not start", rt.Lang), fmt.Errorf("bad pid %d in hello", pid))
			}
		}
		cn = fc
	} else {
		cn = newBashConn(ours)
	}
	undo.Release()
	return &Interp{sb: sb, rt: rt, pid: pid, conn: cn, stdout: outR, stderr: errR, started: time.Now()}, nil
}
