package session

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cleanup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/zygote"
)

// Instance is a sandbox with a session runtime started in it, waiting for
// its first configure. It is handed to exactly one session.
type Instance struct {
	Sandbox *jail.Sandbox
	// RuntimePid is the runtime's pid inside the sandbox.
	RuntimePid int
	conn       conn
	stdout     *os.File // read ends of the runtime's output pipes
	stderr     *os.File
	release    func()
	Started    time.Time
	// gone is closed when a runtime the init did not start (one from the
	// template) has exited, and exit then says how; both nil for runtimes
	// the init reports itself.
	gone       chan struct{}
	exitKnown  chan struct{} // closed once exitStatus is set
	exitStatus syscall.WaitStatus
}

// runtimeExit returns how a template runtime ended, if the template says
// so soon; any number of goroutines may ask.
func (in *Instance) runtimeExit() (jail.Exit, bool) {
	if in.exitKnown == nil {
		return jail.Exit{}, false
	}
	select {
	case <-in.exitKnown:
		return jail.Exit{Pid: in.RuntimePid, Status: in.exitStatus}, true
	case <-time.After(200 * time.Millisecond):
		return jail.Exit{}, false
	}
}

// Close tears the instance down (it was never handed out, or its session
// ended).
func (in *Instance) Close() error {
	in.conn.close()
	err := in.Sandbox.Close()
	if in.stdout != nil {
		in.stdout.Close()
	}
	if in.stderr != nil {
		in.stderr.Close()
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
	case <-in.Sandbox.Dead():
		return false
	case <-in.Sandbox.Exits():
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
func (in *Instance) Adapt(l config.Limits) error { return in.Sandbox.Adapt(l, in.RuntimePid) }

// Source provides instances.
type Source interface {
	// Get returns a new instance for lang with exactly limits l.
	Get(ctx context.Context, lang string, l config.Limits) (*Instance, error)
}

// Slots hands out the id slots of server sandboxes. A slot is reused only
// after its sandbox is gone, so no two live sandboxes share host ids.
type Slots struct {
	mu   sync.Mutex
	free []uint32
	next uint32
}

// Max number of server sandboxes alive at once.
const maxSlots = 1 << 20

// Get returns a free slot.
func (s *Slots) Get() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot, nil
	}
	if s.next >= maxSlots {
		return 0, fmt.Errorf("%w: no free sandbox id slots", errdefs.ErrLimit)
	}
	s.next++
	return jail.ServerSlotBase + s.next - 1, nil
}

// Put returns a slot.
func (s *Slots) Put(slot uint32) {
	s.mu.Lock()
	s.free = append(s.free, slot)
	s.mu.Unlock()
}

// ColdSource builds every instance from scratch: a new jail, then the
// runtime executed in it.
type ColdSource struct {
	Host   *jail.Host
	Config config.Config
	Slots  *Slots
}

// Get implements Source.
func (c *ColdSource) Get(ctx context.Context, lang string, l config.Limits) (*Instance, error) {
	return NewInstance(ctx, c.Host, c.Config, c.Slots, lang, l, nil)
}

// NewInstance builds a sandbox for lang with limits l and starts the
// language's session runtime in it: forked from the template z when z is
// not nil, executed in the sandbox otherwise. Closing the instance frees
// its id slot.
func NewInstance(ctx context.Context, h *jail.Host, cfg config.Config, slots *Slots, lang string, l config.Limits, z *zygote.Zygote) (_ *Instance, err error) {
	rt, err := runtimes.Lookup(cfg, lang)
	if err != nil {
		return nil, err
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
	sb, err := h.Start(ctx, jail.Spec{Name: "s-" + strconv.FormatUint(uint64(slot), 10), Slot: slot, Limits: l})
	if err != nil {
		return nil, err
	}
	undo.Add(sb.Close)
	var inst *Instance
	if z != nil {
		inst, err = StartRuntimeZygote(ctx, sb, z, rt, l)
	} else {
		inst, err = StartRuntime(sb, rt, l)
	}
	if err != nil {
		return nil, err
	}
	undo.Release()
	inst.release = func() { slots.Put(slot) }
	return inst, nil
}

// StartRuntime executes lang's session runtime in sb and waits until it
// is ready.
func StartRuntime(sb *jail.Sandbox, rt runtimes.Runtime, l config.Limits) (*Instance, error) {
	return startRuntime(sb, rt, l, func(stdio [4]*os.File) (int, error) {
		return sb.Spawn(jail.Process{
			Argv:  rt.SessionCommand(),
			Env:   append(jail.BaseEnv(), rt.SessionEnv(l)...),
			Dir:   "/workspace",
			Files: stdio[:],
		})
	})
}

// StartRuntimeZygote starts the Python session runtime in sb by having the
// template interpreter z fork it in, with numpy, pandas and matplotlib
// already imported.
func StartRuntimeZygote(ctx context.Context, sb *jail.Sandbox, z *zygote.Zygote, rt runtimes.Runtime, l config.Limits) (*Instance, error) {
	var fk *zygote.Forked
	inst, err := startRuntime(sb, rt, l, func(stdio [4]*os.File) (int, error) {
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
		return n > 0
	})
}

// startRuntime starts the runtime with start, which gets its fds 0-3 and
// returns its pid inside the sandbox (0 if the runtime will tell).
func startRuntime(sb *jail.Sandbox, rt runtimes.Runtime, l config.Limits, start func([4]*os.File) (int, error)) (_ *Instance, err error) {
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
		return nil, err
	}
	var cn conn
	if rt.Framed() {
		// The hello must come quickly; a runtime that cannot start (a
		// missing interpreter, say) would otherwise hang the request.
		ours.SetReadDeadline(time.Now().Add(30 * time.Second))
		fc, err := newFramedConn(ours, runtimes.MaxFrame)
		ours.SetReadDeadline(time.Time{})
		if err != nil {
			return nil, fmt.Errorf("%w: %s session runtime: %v", errdefs.ErrUnavailable, rt.Lang, err)
		}
		if pid == 0 {
			if pid = fc.hello.Pid; pid <= 1 {
				fc.close()
				return nil, fmt.Errorf("%w: %s session runtime: bad pid %d in hello", errdefs.ErrUnavailable, rt.Lang, pid)
			}
		}
		cn = fc
	} else {
		cn = newBashConn(ours)
	}
	undo.Release()
	return &Instance{Sandbox: sb, RuntimePid: pid, conn: cn, stdout: outR, stderr: errR, Started: time.Now()}, nil
}
