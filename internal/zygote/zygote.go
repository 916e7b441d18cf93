// Package zygote owns the Python template interpreter: starting it (as a
// jail template process that has imported numpy, pandas and matplotlib
// once, or nothing: the lean template beside it), asking it to fork a runtime into a freshly built sandbox, and
// restarting it if it dies.
//
// It must never send the template anything but descriptors, numbers and
// the jail's entry plan (data: which steps to make, never code): the
// template runs as host root (with few capabilities) and must never
// execute anything derived from a request. It must never decide how a
// child enters its sandbox: jail.Sandbox.Entry does.
package zygote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
)

// Capabilities the template keeps: entering a sandbox's user namespace
// and the rest of its namespaces through a pidfd of its non-dumpable init
// (SYS_ADMIN, SYS_CHROOT, SYS_PTRACE), and, as root of that namespace,
// becoming the sandbox user and dropping everything (SETUID, SETGID,
// SETPCAP).
var keepCaps = []int{unix.CAP_SYS_ADMIN, unix.CAP_SYS_CHROOT, unix.CAP_SYS_PTRACE, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP}

// Zygote is a running template interpreter.
type Zygote struct {
	t   *jail.Template
	log *slog.Logger
	// Read buffers, used by one reader at a time (Start, then loop).
	buf, oob []byte
	// closing is set by Close: the template's end is expected then, and
	// not worth a warning.
	closing atomic.Bool

	mu      sync.Mutex
	next    int
	pending map[int]chan result
	exits   map[int]chan syscall.WaitStatus // host pid -> how it ended
	// pidfds hold every runtime not yet reported ended (or, once the
	// template has died, not yet reaped); abandoned, those whose fork
	// nobody took (its caller gave up), killed at once. When the template
	// dies its runtimes become orphans, the server's children (it is a
	// child subreaper), those it never told of too (adoptOrphans): each
	// is reaped through its pidfd (never by pid: a pid may be reused) as
	// it ends (see reapOrphan).
	pidfds    map[int]*os.File
	abandoned map[int]bool
	// reaped: of each orphan, closed once reapOrphan has reaped it.
	reaped map[int]chan struct{}
	// onAbandon, if set (tests), hears of each runtime abandoned.
	onAbandon func(pid int)
	dead      chan struct{}
	Errors    map[string]string // preload failures
	Started   time.Duration     // how long the preload took
}

type result struct {
	pid   int
	pidfd *os.File
	exit  chan syscall.WaitStatus
	err   error
}

type message struct {
	Type     string            `json:"type"`
	ID       int               `json:"id,omitempty"`
	Pid      int               `json:"pid,omitempty"`
	Error    string            `json:"error,omitempty"`
	Errors   map[string]string `json:"errors,omitempty"`
	NProcs   int               `json:"nprocs,omitempty"`
	Landlock bool              `json:"landlock,omitempty"`
	Entry    *jail.Entry       `json:"entry,omitempty"`
	Status   int               `json:"status,omitempty"`
}

type configMsg struct {
	Type    string   `json:"type"`
	Preload []string `json:"preload"`
	NrSetns int      `json:"nr_setns"`
	// Warm: each child runs the template's warm-up before its hello
	// (pool.warm_runtimes).
	Warm bool `json:"warm,omitempty"`
	// DieAfterFork (tests only): the template kills itself after its
	// first fork, before it replies.
	DieAfterFork bool `json:"die_after_fork,omitempty"`
}

// dieAfterFork, set by tests, starts templates that die between a fork
// and its reply.
var dieAfterFork bool

// Start launches the template and waits until it has imported preload.
// root is the root its sandboxes have (nil: the host's); the template is
// laid out on it too, so that it imports the template's libraries.
func Start(ctx context.Context, h *jail.Host, cfg config.Config, log *slog.Logger, root *jail.Root) (*Zygote, error) {
	tmpl := runtimes.Templates(cfg)
	if len(tmpl) != 1 {
		return nil, fmt.Errorf("%w: want one language with a template, not %d", errdefs.ErrUnsupported, len(tmpl))
	}
	rt := tmpl[0]
	env := append(jail.BaseEnv(), rt.SessionEnv(cfg.Defaults)...)
	name := "zygote-" + rt.Lang
	if len(cfg.Pool.Preload) == 0 {
		// The lean template beside a full one (pool.lean_size).
		name += "-lean"
	}
	if root != nil {
		// One per template root: cgroup names are unique among live ones.
		name += "-" + root.Label()
	}
	t, err := h.StartTemplate(ctx, jail.TemplateSpec{
		Name:     name,
		Root:     root,
		Memory:   2 << 30,
		Pids:     4096,
		Argv:     rt.TemplateCommand(),
		Env:      env,
		KeepCaps: keepCaps,
	})
	if err != nil {
		return nil, err
	}
	z := &Zygote{t: t, log: log, pending: map[int]chan result{}, exits: map[int]chan syscall.WaitStatus{}, pidfds: map[int]*os.File{}, abandoned: map[int]bool{}, reaped: map[int]chan struct{}{}, dead: make(chan struct{})}
	preload := cfg.Pool.Preload
	if preload == nil {
		preload = []string{} // a list, never null
	}
	cm := configMsg{Type: "config", Preload: preload, NrSetns: unix.SYS_SETNS, Warm: cfg.Pool.WarmRuntimes, DieAfterFork: dieAfterFork}
	b, _ := json.Marshal(cm)
	start := time.Now()
	if _, _, err := t.Conn.WriteMsgUnix(b, nil, nil); err != nil {
		t.Close()
		return nil, fmt.Errorf("%w: python template: %v", errdefs.ErrUnavailable, err)
	}
	deadline := time.Now().Add(120 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	t.Conn.SetReadDeadline(deadline)
	m, _, err := z.read()
	t.Conn.SetReadDeadline(time.Time{})
	if err != nil || m.Type != "ready" {
		diag := t.Diag()
		t.Close()
		if err == nil {
			err = fmt.Errorf("unexpected %q %s", m.Type, m.Error)
		}
		return nil, fmt.Errorf("%w: python template did not start: %v %s", errdefs.ErrUnavailable, err, diag)
	}
	z.Errors = m.Errors
	z.Started = time.Since(start)
	go z.loop()
	return z, nil
}

func (z *Zygote) read() (message, []*os.File, error) {
	if z.buf == nil {
		z.buf, z.oob = make([]byte, 64<<10), make([]byte, unix.CmsgSpace(8*4))
	}
	buf, oob := z.buf, z.oob
	n, oobn, flags, _, err := z.t.Conn.ReadMsgUnix(buf, oob)
	var files []*os.File
	if oobn > 0 {
		if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cms {
				if fds, err := unix.ParseUnixRights(&cm); err == nil {
					for _, fd := range fds {
						// Non-blocking before it is wrapped, so that the
						// Go poller can wait on it.
						unix.SetNonblock(fd, true)
						files = append(files, os.NewFile(uintptr(fd), "pidfd"))
					}
				}
			}
		}
	}
	if err != nil || n == 0 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		for _, f := range files {
			f.Close()
		}
		if err == nil {
			err = errors.New("template closed its socket")
		}
		return message{}, nil, err
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		for _, f := range files {
			f.Close()
		}
		return message{}, nil, err
	}
	return m, files, nil
}

func (z *Zygote) loop() {
	defer func() {
		// Once the template is gone for good, its runtimes are ours (a
		// child subreaper), those it forked but never told us of too.
		z.t.Close()
		unknown := adoptOrphans()
		z.mu.Lock()
		for _, o := range unknown {
			if _, ok := z.pidfds[o.pid]; ok {
				o.f.Close() // known: reaped below
			} else {
				z.pidfds[o.pid] = o.f
			}
		}
		close(z.dead)
		for id, ch := range z.pending {
			ch <- result{err: fmt.Errorf("%w: the python template died", errdefs.ErrUnavailable)}
			delete(z.pending, id)
		}
		// How the runtimes still running end will never be told: their
		// watchers stop waiting.
		for pid, ch := range z.exits {
			close(ch)
			delete(z.exits, pid)
		}
		for pid, f := range z.pidfds {
			done := make(chan struct{})
			z.reaped[pid] = done
			go z.reapOrphan(pid, f, done)
		}
		z.mu.Unlock()
	}()
	for {
		m, files, err := z.read()
		if err != nil {
			if !z.closing.Load() {
				z.log.Warn("python template ended", "err", err, "stderr", z.t.Diag())
			}
			return
		}
		if m.Type == "exited" {
			for _, f := range files {
				f.Close()
			}
			z.mu.Lock()
			if ch, ok := z.exits[m.Pid]; ok {
				ch <- syscall.WaitStatus(m.Status)
				delete(z.exits, m.Pid)
			}
			if f, ok := z.pidfds[m.Pid]; ok {
				f.Close()
				delete(z.pidfds, m.Pid)
				delete(z.abandoned, m.Pid)
			}
			z.mu.Unlock()
			continue
		}
		z.mu.Lock()
		ch := z.pending[m.ID]
		delete(z.pending, m.ID)
		z.mu.Unlock()
		r := result{pid: m.Pid}
		switch {
		case m.Type == "forked" && len(files) == 1 && ch == nil:
			// A runtime whose caller gave up before it was forked: it
			// is nobody's, and ends now.
			z.mu.Lock()
			z.pidfds[m.Pid] = files[0]
			z.abandonLocked(m.Pid)
			z.mu.Unlock()
			files = nil
		case ch == nil:
		case m.Type == "forked" && len(files) == 1:
			r.pidfd = files[0]
			files = nil
			// Registered before the reply is handed over, so that an exit
			// reported right after cannot be missed.
			r.exit = make(chan syscall.WaitStatus, 1)
			own, _ := unix.FcntlInt(r.pidfd.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			z.mu.Lock()
			z.exits[m.Pid] = r.exit
			if own >= 0 {
				z.pidfds[m.Pid] = os.NewFile(uintptr(own), "runtime-pidfd")
			}
			z.mu.Unlock()
		case m.Type == "fork_error":
			r.err = fmt.Errorf("%w: python template: %s", errdefs.ErrUnavailable, m.Error)
		default:
			r.err = fmt.Errorf("%w: python template: unexpected %q", errdefs.ErrUnavailable, m.Type)
		}
		for _, f := range files {
			f.Close()
		}
		if ch != nil {
			ch <- r
		} else if r.pidfd != nil {
			r.pidfd.Close()
		}
	}
}

// Dead is closed when the template is gone.
func (z *Zygote) Dead() <-chan struct{} { return z.dead }

// Forked is a runtime the template started.
type Forked struct {
	Pid   int      // host pid
	Pidfd *os.File // pollable; readable once the runtime has exited
	// Exit delivers how the runtime ended, as the template reaps it (not
	// if the template died first: then only Pidfd tells).
	Exit <-chan syscall.WaitStatus
}

// Fork starts the Python session runtime in sb: the template forks a
// child into sb's cgroup and namespaces, which makes sb's entry
// (jail.Sandbox.Entry: every layer, verified) before it runs anything.
// stdio are the runtime's fds 0-3.
func (z *Zygote) Fork(ctx context.Context, sb *jail.Sandbox, l config.Limits, stdio [4]*os.File) (*Forked, error) {
	procs, err := sb.Cgroup().ProcsFiles()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range procs {
			f.Close()
		}
	}()
	fds := []int{sb.PidFD()}
	for _, f := range procs {
		fds = append(fds, int(f.Fd()))
	}
	landlock := sb.Ruleset() != nil
	if landlock {
		fds = append(fds, int(sb.Ruleset().Fd()))
	}
	for _, f := range stdio {
		fds = append(fds, int(f.Fd()))
	}
	ch := make(chan result, 1)
	z.mu.Lock()
	select {
	case <-z.dead:
		z.mu.Unlock()
		return nil, fmt.Errorf("%w: the python template is not running", errdefs.ErrUnavailable)
	default:
	}
	z.next++
	id := z.next
	z.pending[id] = ch
	z.mu.Unlock()
	// The child enters the sandbox exactly as the init's programs do: the
	// plan is the jail's, the template only executes it.
	entry := sb.Entry(l)
	m := message{Type: "fork", ID: id, NProcs: len(procs), Landlock: landlock, Entry: &entry}
	b, _ := json.Marshal(m)
	// Concurrent forks share the deadline; each only moves it later.
	z.t.Conn.SetWriteDeadline(time.Now().Add(forkTimeout))
	if _, _, err := z.t.Conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
		z.forget(id, ch)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			z.wedged()
		}
		return nil, fmt.Errorf("%w: python template: %v", errdefs.ErrUnavailable, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return &Forked{Pid: r.pid, Pidfd: r.pidfd, Exit: r.exit}, nil
	case <-ctx.Done():
		z.forget(id, ch)
		return nil, ctx.Err()
	case <-time.After(forkTimeout):
		z.forget(id, ch)
		z.wedged()
		return nil, fmt.Errorf("%w: python template did not answer", errdefs.ErrUnavailable)
	}
}

// forkTimeout bounds a fork request; a template that takes longer is
// stuck, and is replaced.
const forkTimeout = 30 * time.Second

// forget withdraws a fork request nobody waits for any more. A reply the
// reader already took is on its way into ch: its pidfd is closed when it
// arrives.
func (z *Zygote) forget(id int, ch chan result) {
	z.mu.Lock()
	_, waiting := z.pending[id]
	delete(z.pending, id)
	z.mu.Unlock()
	if waiting {
		return
	}
	go func() {
		select {
		case r := <-ch:
			if r.pidfd != nil {
				r.pidfd.Close()
				z.mu.Lock()
				z.abandonLocked(r.pid)
				z.mu.Unlock()
			}
		case <-z.dead:
		}
	}()
}

// abandonLocked kills the runtime pid, forked for a caller that gave up
// on it (its sandbox is being discarded, nobody holds its stdio): the
// template reaps it, or, if the template has died, reapOrphan does (and
// Close waits for that). z.mu is held.
func (z *Zygote) abandonLocked(pid int) {
	f, ok := z.pidfds[pid]
	if !ok {
		return // reaped already
	}
	z.abandoned[pid] = true
	unix.PidfdSendSignal(int(f.Fd()), unix.SIGKILL, nil, 0)
	if z.onAbandon != nil {
		z.onAbandon(pid)
	}
}

// orphanTimeout bounds how long Close waits for the abandoned runtimes,
// killed, to end.
const orphanTimeout = 10 * time.Second

// reapOrphan reaps the runtime pid, an orphan of the dead template and
// the server's child now, through its pidfd f once it has ended (the
// wait is the poller's, no thread): an abandoned one, killed, at once;
// one in use when its session ends it (its instance's watch reaps it
// too: whichever waits second is told ECHILD). done is closed then.
func (z *Zygote) reapOrphan(pid int, f *os.File, done chan struct{}) {
	pidfdExited(f)
	z.mu.Lock()
	defer z.mu.Unlock()
	unix.Waitid(unix.P_PIDFD, int(f.Fd()), nil, unix.WEXITED|unix.WNOHANG, nil)
	delete(z.pidfds, pid)
	delete(z.abandoned, pid)
	delete(z.reaped, pid)
	f.Close()
	close(done)
}

// orphan is a runtime a dead template left, with a pidfd of it.
type orphan struct {
	pid int
	f   *os.File
}

// adoptOrphans returns, each with a pollable pidfd, the runtimes that
// dead templates left to this process (a child subreaper), whether or
// not their template told of them: a template that dies between a fork
// and its reply leaves a runtime nobody else knows, which its sandbox's
// teardown kills, and whose zombie, never reaped, would hold that
// sandbox's init in its exit (a pid namespace's init waits for every
// process of it to be reaped) and the teardown with it. A runtime is the
// only child of this process that lives in a pid namespace of its own
// without being its init: this process's other children are inits
// (pid 1 inside) or run in its own namespace, and a process inside a
// sandbox is reparented within it. Nothing is reaped here (no wait for
// any pid: other children have waiters of their own), and a runtime is
// not killed (one in use may outlive its template): each is reaped
// through its pidfd once it has ended (reapOrphan).
func adoptOrphans() []orphan {
	self := os.Getpid()
	var found []orphan
	for _, pid := range jail.ChildrenOf(self) {
		if !nestedNotInit(pid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			continue // gone
		}
		// Still ours: the pid was not reaped and reused in between (the
		// pidfd is of whoever has the pid now).
		if jail.ParentOf(pid) != self || !nestedNotInit(pid) {
			unix.Close(fd)
			continue
		}
		found = append(found, orphan{pid, os.NewFile(uintptr(fd), "orphan-pidfd")})
	}
	return found
}

// nestedNotInit says whether process pid lives in a pid namespace below
// this process's, without being its init. A zombie too.
func nestedNotInit(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "NSpid:" {
			return len(f) > 2 && f[len(f)-1] != "1"
		}
	}
	return false
}

// pidfdExited waits until the process of the pidfd f has ended (a pidfd
// polls readable then); f must be pollable (non-blocking), so that the
// wait costs no thread.
func pidfdExited(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0
	})
}

// wedged ends a template that stopped reading or answering, so that the
// pool starts another instead of every Python build waiting on this one.
func (z *Zygote) wedged() {
	z.log.Warn("python template stopped answering; ending it")
	z.t.Close()
}

// Pid is the template's host pid.
func (z *Zygote) Pid() int { return z.t.Pid() }

// Close stops the template. It returns once the runtimes nobody took
// (abandoned forks, killed) have been reaped, or orphanTimeout has
// passed; those in use are reaped as their sessions end them.
func (z *Zygote) Close() error {
	z.closing.Store(true)
	err := z.t.Close()
	// The template is gone (and its socket closed, so the reader ends),
	// and with it the parent of its runtimes: each is reaped by its
	// reapOrphan.
	<-z.dead
	z.mu.Lock()
	var waits []chan struct{}
	for pid, done := range z.reaped {
		if z.abandoned[pid] {
			waits = append(waits, done)
		}
	}
	z.mu.Unlock()
	bound := time.After(orphanTimeout)
	for _, done := range waits {
		select {
		case <-done:
		case <-bound:
			z.log.Warn("a killed python runtime the template forked has not ended; it is reaped when it does")
			return err
		}
	}
	return err
}
