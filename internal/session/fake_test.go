package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/instance"
	"airlock/internal/runtimes"
	"airlock/internal/watch/watchtest"
	"airlock/internal/workspace"
)

// The fakes here stand in for a sandbox and its runtime, so that the
// session's own logic (lifecycle, executions, commands, interrupts,
// timeouts, limits and the errors they become) is tested without a jail.
//
// A fake runtime runs "code" of a small script language, steps separated
// by ";":
//
//	out X      print X on stdout        err X    print X on stderr
//	display    a display message        raise N  raise error N (status error)
//	sleep      wait for an interrupt (then KeyboardInterrupt) or the end
//	hang       ignore interrupts: wait for the sandbox's end
//	cpu        use a day of CPU time    oom      the OOM killer ends all
//	pids       the process limit is hit, then hang
//	exit N     the runtime exits with status N (a program: its exit)
//	abort      the memory peaks at the limit and the process aborts
//	           (SIGABRT), as V8 does at the end of its heap
//	install M P  ask the server to install P with manager M (a cell's
//	           %pip install), wait for its answer, print its error
//	write P C  write C into the workspace file P
//	mark       tell the test (the instance's marks) it got there
//
// and then says done. A command line is run by the same steps, "exit N"
// being its status; "cat" copies its stdin to its stdout.

// Test limits: distinct durations, so that a fake clock's timers are
// told apart by theirs.
const (
	testTimeout = 7 * time.Second
	testGrace   = 11 * time.Second
	testCPUTime = 13 * time.Second
)

func testConfig() config.Config {
	cfg := config.Default()
	cfg.Defaults.Timeout = config.Duration(testTimeout)
	cfg.Defaults.CPUTime = config.Duration(testCPUTime)
	cfg.Defaults.CPUs = 1
	cfg.Defaults.MaxOutput = 1 << 10
	cfg.Server.InterruptGrace = config.Duration(testGrace)
	cfg.Server.MaxSessions = 4
	cfg.Server.MaxSessionCommands = 2
	cfg.Server.QueueTimeout = config.Duration(time.Millisecond)
	return cfg
}

// fakeSource builds fake instances and remembers them, to check that
// each was closed.
type fakeSource struct {
	t     testing.TB
	mu    sync.Mutex
	all   []*fakeInstance
	fail  error // Get's error, if set
	setup func(*fakeInstance)
}

func (s *fakeSource) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (Instance, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	f := newFakeInstance(s.t, rt, l)
	f.oneShot = instance.IsOneShot(ctx)
	f.lean = instance.IsLean(ctx)
	f.fresh = instance.IsFresh(ctx)
	f.leanProgram = instance.IsLeanProgram(ctx)
	if s.setup != nil {
		s.setup(f)
	}
	s.mu.Lock()
	s.all = append(s.all, f)
	s.mu.Unlock()
	return f, nil
}

func (s *fakeSource) last() *fakeInstance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all[len(s.all)-1]
}

// newTestManager returns a manager on fake instances with cfg (the test
// configuration when nil) and a fake clock. At the test's end it is
// closed, and every instance it took must have been closed too.
func newTestManager(t testing.TB, cfg *config.Config) (*Manager, *fakeSource, *watchtest.Clock) {
	t.Helper()
	c := testConfig()
	if cfg != nil {
		c = *cfg
	}
	src := &fakeSource{t: t}
	m := newManager(c, src, slog.New(slog.NewTextHandler(io.Discard, nil)))
	clock := watchtest.NewClock()
	m.clock = clock
	t.Cleanup(func() {
		m.Close()
		src.mu.Lock()
		defer src.mu.Unlock()
		for i, f := range src.all {
			if !f.closed.Load() {
				t.Errorf("instance %d was never closed", i)
			}
			f.bmu.Lock()
			for _, m := range f.misuses {
				t.Errorf("instance %d: %s", i, m)
			}
			f.bmu.Unlock()
		}
	})
	return m, src, clock
}

// fakeInstance is a sandbox with a runtime, in memory; the runtimes
// started beside the first (besides) are fakeInterps too.
type fakeInstance struct {
	limits config.Limits
	// oneShot: it was asked for by a one-shot (instance.ForOneShot);
	// lean: one whose code needs none of the preloads (instance.ForLean);
	// fresh: one built for its request, not taken ready
	// (instance.ForFresh); leanProgram: a program run whose code cannot
	// tell either whether its interpreter ran site
	// (instance.ForLeanProgram).
	oneShot, lean, fresh, leanProgram bool
	ws                                *workspace.Dir
	dir                               string // ws's host path
	start                             time.Time
	*fakeInterp

	events chan cgroup.Event
	dead   chan struct{}

	cpu      atomic.Int64
	memReads atomic.Int64 // Memory's calls
	peak     atomic.Int64
	oomKills atomic.Uint64
	// marks hears a "mark" step (a test waits for code to get there).
	marks  chan struct{}
	closed atomic.Bool
	killed atomic.Bool
	// closeHook, if set, is called as Close begins (a teardown held, as
	// a real sandbox's can take a while).
	closeHook atomic.Pointer[func()]
	retired   atomic.Bool // the first runtime was ended for good
	// yielding: it has the lowest CPU weight (Yield, until Foreground);
	// foregrounded hears each Foreground.
	yielding     atomic.Bool
	foregrounded chan struct{}

	// bmu guards besides and deadDone.
	bmu      sync.Mutex
	besides  []*fakeInterp
	deadDone bool
	// lastCmd is the last command started (under bmu).
	lastCmd *fakeProcess
	// misuses are what the fake's goroutines found wrong with the test
	// (under bmu): reported at its end, never to t from a goroutine that
	// may outlive it.
	misuses []string
}

// misused records a test's misuse of the fake.
func (f *fakeInstance) misused(format string, args ...any) {
	f.bmu.Lock()
	f.misuses = append(f.misuses, fmt.Sprintf(format, args...))
	f.bmu.Unlock()
}

// fakeInterp is a runtime of a fake sandbox.
type fakeInterp struct {
	sb      *fakeInstance
	rt      runtimes.Runtime
	out     instance.Output
	msgs    chan runtimes.Message
	ints    chan struct{} // the runtime's SIGINTs
	replies chan runtimes.Message
	// gone is closed when the runtime has ended: the sandbox's dead for
	// the first, its own for one beside it.
	gone   chan struct{}
	beside bool

	mu       sync.Mutex
	msgsDone bool
	end      apitype.End // what Lost and Monitor say once dead
	progExit *instance.Exit
	env      map[string]string
	cwd      string
	defaults []map[string]string
	reseeds  int
	execs    []string
	execEnv  map[string]string // the last execution's env
	// sendErr fails every Execute and Run; configErr every Configure
	// (a runtime that died before it was configured).
	sendErr, configErr error
	freed              atomic.Bool // a runtime beside the first was closed
}

func newFakeInstance(t testing.TB, rt runtimes.Runtime, l config.Limits) *fakeInstance {
	dir, err := os.MkdirTemp(t.TempDir(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.OpenOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeInstance{
		limits: l, ws: ws, dir: dir, start: time.Now(), marks: make(chan struct{}, 8),
		events: make(chan cgroup.Event, 4), dead: make(chan struct{}), foregrounded: make(chan struct{}, 1),
	}
	f.fakeInterp = newFakeInterp(f, rt, f.dead, false)
	return f
}

func newFakeInterp(f *fakeInstance, rt runtimes.Runtime, gone chan struct{}, beside bool) *fakeInterp {
	return &fakeInterp{sb: f, rt: rt, msgs: make(chan runtimes.Message, 64), ints: make(chan struct{}, 4),
		replies: make(chan runtimes.Message, 4), gone: gone, beside: beside}
}

func (f *fakeInstance) Name() string                { return "s-fake" }
func (f *fakeInstance) Isolation() config.Isolation { return config.Native }
func (f *fakeInstance) Started() time.Time          { return f.start }
func (f *fakeInstance) Workspace() *workspace.Dir   { return f.ws }
func (f *fakeInstance) CPU() (time.Duration, error) { return time.Duration(f.cpu.Load()), nil }
func (f *fakeInstance) Memory() (int64, error)      { f.memReads.Add(1); return 1 << 20, nil }
func (f *fakeInstance) Events() <-chan cgroup.Event { return f.events }
func (f *fakeInstance) PollPids() time.Duration     { return 0 }
func (f *fakeInstance) NetNS() (int, bool)          { return -1, false }
func (f *fakeInstance) Usage() (time.Duration, int64, error) {
	return time.Duration(f.cpu.Load()), f.peak.Load(), nil
}
func (f *fakeInstance) Stats() (cgroup.Stats, error) {
	return cgroup.Stats{CPU: time.Duration(f.cpu.Load()), OOMKills: f.oomKills.Load(), MemoryPeak: f.peak.Load()}, nil
}
func (it *fakeInterp) Attach(out instance.Output) error { it.out = out; return nil }
func (it *fakeInterp) Barrier()                         {}
func (it *fakeInterp) Drain()                           {}
func (it *fakeInterp) WaitOutput()                      {}
func (f *fakeInstance) Dead() <-chan struct{}           { return f.dead }
func (it *fakeInterp) Messages() <-chan runtimes.Message {
	return it.msgs
}

func (it *fakeInterp) Configure(ctx context.Context, env map[string]string, cwd string) error {
	it.mu.Lock()
	it.env, it.cwd = env, cwd
	err := it.configErr
	it.mu.Unlock()
	if err != nil {
		return err
	}
	if cwd == "/nope" { // a directory the sandbox user cannot enter
		return errors.New("cannot change directory")
	}
	return nil
}

func (it *fakeInterp) SetDefaults(ctx context.Context, env map[string]string) error {
	it.mu.Lock()
	it.defaults = append(it.defaults, env)
	it.mu.Unlock()
	return nil
}

func (it *fakeInterp) Reseed(ctx context.Context) (bool, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.reseeds++
	return true, nil
}

func (it *fakeInterp) Execute(id, code string, env map[string]string, sendBy time.Time) error {
	if it.sendErr != nil {
		return it.sendErr
	}
	it.mu.Lock()
	it.execs = append(it.execs, code)
	it.execEnv = env
	it.mu.Unlock()
	go it.run(id, code, false)
	return nil
}

func (it *fakeInterp) Run(id string, p instance.Program, sendBy time.Time) error {
	if it.sendErr != nil {
		return it.sendErr
	}
	// The program's "code" is its file's.
	file, _, err := it.sb.ws.Open(strings.TrimPrefix(p.Argv[1], "/workspace/"))
	if err != nil {
		return err
	}
	code, _ := io.ReadAll(file)
	file.Close()
	go it.run(id, string(code), true)
	return nil
}

func (it *fakeInterp) Reply(m runtimes.Message) error {
	it.replies <- m
	return nil
}

func (it *fakeInterp) Lost() (apitype.End, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.end.Zero() {
		return apitype.Ended(apitype.EndInterpreterExited), nil
	}
	return it.end, nil
}

func (it *fakeInterp) ProgramExit() (instance.Exit, bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.progExit == nil {
		return instance.Exit{}, false
	}
	return *it.progExit, true
}

// OutOfMemory is the real rule on the fake's counters.
func (f *fakeInstance) OutOfMemory(p instance.ProcessEnd) (bool, error) {
	st, _ := f.Stats()
	return instance.OutOfMemory(st, f.rt, f.limits, p), nil
}

// exited is an exit with status code; signalled one by sig.
func exited(code int) instance.Exit {
	return instance.Exit{Code: code, Status: syscall.WaitStatus(code << 8)}
}

func signalled(sig syscall.Signal) instance.Exit {
	return instance.Exit{Code: 128 + int(sig), Signal: sig, Status: syscall.WaitStatus(sig)}
}

func (it *fakeInterp) Interrupt(string) {
	select {
	case it.ints <- struct{}{}:
	default:
	}
}

func (f *fakeInstance) Monitor(stop <-chan struct{}) apitype.End {
	select {
	case <-f.dead:
		end, _ := f.Lost()
		return end
	case <-stop:
		return apitype.End{}
	}
}

func (f *fakeInstance) RetireFirst() { f.retired.Store(true) }

func (f *fakeInstance) Kill() {
	f.killed.Store(true)
	f.die(apitype.End{})
}

func (f *fakeInstance) Yield() error { f.yielding.Store(true); return nil }
func (f *fakeInstance) Foreground() error {
	f.yielding.Store(false)
	select {
	case f.foregrounded <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeInstance) Close() error {
	if h := f.closeHook.Load(); h != nil {
		(*h)()
	}
	f.closed.Store(true)
	f.die(apitype.End{})
	return f.ws.Close()
}

// StartInterp starts a fake runtime beside the first.
func (f *fakeInstance) StartInterp(ctx context.Context, rt runtimes.Runtime) (Beside, error) {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	if f.deadDone {
		return nil, errors.New("the sandbox is gone")
	}
	it := newFakeInterp(f, rt, make(chan struct{}), true)
	f.besides = append(f.besides, it)
	return it, nil
}

func (it *fakeInterp) Done() <-chan struct{} { return it.gone }
func (it *fakeInterp) Ended() apitype.End    { end, _ := it.Lost(); return end }
func (it *fakeInterp) Kill()                 { it.die(apitype.Ended(apitype.EndInterpreterExited)) }
func (it *fakeInterp) Close()                { it.freed.Store(true) }

// die ends the sandbox (for end, unless one was said before): every
// runtime's connection closes.
func (f *fakeInstance) die(end apitype.End) {
	f.fakeInterp.die(end)
	f.bmu.Lock()
	defer f.bmu.Unlock()
	if !f.deadDone {
		f.deadDone = true
		close(f.dead)
		for _, it := range f.besides {
			it.die(end)
		}
	}
}

// die ends the runtime (for end, unless one was said before): its
// connection closes.
func (it *fakeInterp) die(end apitype.End) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.end.Zero() && !end.Zero() {
		it.end = end
	}
	if !it.msgsDone {
		it.msgsDone = true
		close(it.msgs)
		if it.beside {
			close(it.gone)
		}
	}
}

// send is a message from the runtime (dropped once it is gone).
func (it *fakeInterp) send(m runtimes.Message) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.msgsDone {
		it.msgs <- m
	}
}

func (it *fakeInterp) write(s string, isErr bool) {
	if it.out.Keeps(isErr) {
		it.out.Write([]byte(s), isErr)
	} else {
		it.out.Dropped(len(s), isErr)
	}
}

// run is the fake runtime running code as execution id; a program ends
// the runtime when it ends.
func (it *fakeInterp) run(id, code string, prog bool) {
	f := it.sb
	status := 0
	fail := func(name string) {
		status = 1
		if !it.rt.Framed {
			return // bash's runtime says only its status
		}
		it.send(runtimes.Message{Type: "error", ID: id, Name: name, Value: "boom", Traceback: []string{name + ": boom"}})
	}
	for _, step := range strings.Split(code, ";") {
		verb, arg, _ := strings.Cut(strings.TrimSpace(step), " ")
		switch verb {
		case "out":
			it.write(arg, false)
		case "err":
			it.write(arg, true)
		case "display":
			it.send(runtimes.Message{Type: "display", ID: id, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"shown"`)}})
		case "raise":
			fail(arg)
		case "sleep":
			select {
			case <-it.ints:
				fail("KeyboardInterrupt")
			case <-it.gone:
				return
			}
		case "hang":
			<-it.gone
			return
		case "cpu":
			f.cpu.Add(int64(24 * time.Hour))
		case "write":
			p, c, _ := strings.Cut(arg, " ")
			if err := os.WriteFile(filepath.Join(f.dir, p), []byte(c), 0o644); err != nil {
				f.misused("fake runtime: write: %v", err)
			}
		case "mark":
			f.marks <- struct{}{}
		case "oom":
			f.oomKills.Add(1)
			f.events <- cgroup.EventOOM
			f.die(apitype.Ended(apitype.EndOOM))
			return
		case "pids":
			f.events <- cgroup.EventPidsMax
			<-f.dead
			return
		case "install":
			manager, pkg, _ := strings.Cut(arg, " ")
			it.send(runtimes.Message{Type: runtimes.TypeInstall, ID: id, Manager: manager, Packages: []string{pkg}})
			select {
			case r := <-it.replies:
				if r.Type != "installed" || r.ID != id {
					f.misused("fake runtime: the answer to an install: %+v", r)
				}
				it.write(r.Error, false)
			case <-it.gone:
				return
			}
		case "abort":
			f.peak.Store(int64(f.limits.Memory))
			if prog {
				x := signalled(syscall.SIGABRT)
				it.mu.Lock()
				it.progExit = &x
				it.mu.Unlock()
			}
			it.exit(apitype.End{Code: apitype.EndInterpreterExited})
			return
		case "exit":
			n, _ := strconv.Atoi(arg)
			if prog {
				x := exited(n)
				it.mu.Lock()
				it.progExit = &x
				it.mu.Unlock()
			}
			it.exit(apitype.End{Code: apitype.EndInterpreterExited, Reason: "the interpreter exited with status " + arg})
			return
		case "":
		default:
			f.misused("fake runtime: unknown step %q", step)
		}
	}
	if prog {
		x := exited(status)
		it.mu.Lock()
		it.progExit = &x
		it.mu.Unlock()
		it.exit(apitype.End{Code: apitype.EndInterpreterExited})
		return
	}
	st := "ok"
	if status != 0 {
		st = "error"
	}
	it.send(runtimes.Message{Type: "done", ID: id, Status: st, ExitCode: status})
}

// exit ends the runtime for end: the first's end is its sandbox's.
func (it *fakeInterp) exit(end apitype.End) {
	if it.beside {
		it.die(end)
		return
	}
	it.sb.die(end)
}

// StartCommand starts a fake process running argv's last word as the
// runtime's script.
func (f *fakeInstance) StartCommand(argv, env []string, dir string, term *instance.Terminal) (Process, error) {
	select {
	case <-f.dead:
		return nil, errors.New("the sandbox is gone")
	default:
	}
	p := &fakeProcess{f: f, sigs: make(chan syscall.Signal, 4), done: make(chan struct{}), argv: argv, env: env, dir: dir}
	var err error
	var inR, outW, errW *os.File
	if inR, p.stdin, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stdout, outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stderr, errW, err = os.Pipe(); err != nil {
		return nil, err
	}
	f.bmu.Lock()
	f.lastCmd = p
	f.bmu.Unlock()
	go p.run(argv[len(argv)-1], inR, outW, errW)
	return p, nil
}

// fakeProcess is a command of a fake sandbox.
type fakeProcess struct {
	f                     *fakeInstance
	argv, env             []string
	dir                   string
	stdin, stdout, stderr *os.File
	sigs                  chan syscall.Signal
	done                  chan struct{}
	exit                  instance.Exit
	exited                bool
}

func (p *fakeProcess) Pid() int                              { return 42 }
func (p *fakeProcess) Stdio() (*os.File, *os.File, *os.File) { return p.stdin, p.stdout, p.stderr }
func (p *fakeProcess) Done() <-chan struct{}                 { return p.done }
func (p *fakeProcess) Exit() (instance.Exit, bool)           { <-p.done; return p.exit, p.exited }
func (p *fakeProcess) Signal(sig syscall.Signal) error       { p.sigs <- sig; return nil }
func (p *fakeProcess) Resize(instance.Terminal) error        { return nil }

func (p *fakeProcess) run(line string, in, out, errOut *os.File) {
	defer close(p.done)
	defer in.Close()
	defer out.Close()
	defer errOut.Close()
	for _, step := range strings.Split(line, ";") {
		verb, arg, _ := strings.Cut(strings.TrimSpace(step), " ")
		switch verb {
		case "out":
			out.WriteString(arg)
		case "err":
			errOut.WriteString(arg)
		case "cat":
			copied := make(chan struct{})
			go func() { io.Copy(out, in); close(copied) }()
			select {
			case <-copied:
			case <-p.f.dead:
				return
			}
		case "sleep":
			select {
			case sig := <-p.sigs:
				p.exit, p.exited = signalled(sig), true
				return
			case <-p.f.dead:
				return
			}
		case "oom":
			p.f.oomKills.Add(1)
			p.f.events <- cgroup.EventOOM
			p.f.die(apitype.Ended(apitype.EndOOM))
			return
		case "pids":
			p.f.events <- cgroup.EventPidsMax
			<-p.f.dead
			return
		case "abort":
			p.f.peak.Store(int64(p.f.limits.Memory))
			p.exit, p.exited = signalled(syscall.SIGABRT), true
			return
		case "exit":
			n, _ := strconv.Atoi(arg)
			p.exit, p.exited = exited(n), true
			return
		case "":
		default:
			p.f.misused("fake command: unknown step %q", step)
		}
	}
	p.exit, p.exited = exited(0), true
}
