package jailinit

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"airlock/internal/landlock"
	"airlock/internal/loopback"
	"airlock/internal/rootfs"
)

// Main is the sandbox init: PID 1 of the sandbox, re-executed from the
// sealed airlock binary by the host (jail's Host.Start). It never returns.
func Main() {
	// Nobody inside may ptrace, read the memory of, or open /proc/1/exe of
	// the init, whatever uid they have.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	itrace("main")
	closeInherited(3)
	ctl, err := newConn(3, 64<<10)
	if err != nil {
		fatal(err)
	}
	itrace("conn")
	m, files, err := ctl.recv()
	itrace("received")
	if err != nil || m.Op != MsgSetup || m.Setup == nil {
		fatal(fmt.Errorf("no setup message: %v", err))
	}
	// A template's trees come as detached mounts the host made (the only
	// descriptors the setup carries), attached when the root is built.
	if m.Setup.Root.Image != "" && len(files) == len(m.Setup.Root.ImageBinds) {
		m.Setup.Root.ImageTrees, files = files, nil
	}
	closeFiles(files)
	if m.Setup.Template != nil {
		if err := execTemplate(ctl, m.Setup); err != nil {
			ctl.send(Message{Op: MsgError, Error: err.Error()})
			os.Exit(1)
		}
	}
	st, err := setup(m.Setup)
	if err != nil {
		ctl.send(Message{Op: MsgError, Error: err.Error()})
		os.Exit(1)
	}
	fds := []int{st.workspace, st.ptmx}
	if st.ruleset >= 0 {
		fds = append(fds, st.ruleset)
	}
	if err := ctl.send(Message{Op: MsgReady}, fds...); err != nil {
		os.Exit(1)
	}
	unix.Close(st.workspace)
	unix.Close(st.ptmx)
	// No collection here (there used to be a debug.FreeOSMemory): an idle
	// init held 0.27 MB more with it than without (the collection's own
	// metadata and worker outweigh the setup's garbage), and it cost every
	// sandbox's start about 2 ms of CPU.
	serve(ctl, st)
}

// closeInherited closes every descriptor above last (the control socket,
// or the spawner's last) that is not close-on-exec: none of them is ours
// (everything Go opens is close-on-exec), so they can only be host
// descriptors that leaked in through the host's own parent, and must not
// reach sandboxed code.
func closeInherited(last int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fatal(fmt.Errorf("list inherited descriptors: %w", err))
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= last {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// execTemplate builds the sandbox-shaped root and replaces this process
// with the template program, keeping only the capabilities it needs. The
// control socket becomes the program's fd 3.
func execTemplate(ctl *conn, cfg *SetupMsg) error {
	t := cfg.Template
	if len(t.Argv) == 0 {
		return fmt.Errorf("template: empty command")
	}
	last, err := CapLastCap() // before the root without /proc
	if err != nil {
		return err
	}
	if err := rootfs.Build(cfg.Root); err != nil {
		return err
	}
	if err := loopback.Up(); err != nil {
		return err
	}
	if err := unix.Chdir("/workspace"); err != nil {
		return err
	}
	keep := map[int]bool{}
	for _, c := range t.KeepCaps {
		keep[c] = true
	}
	for c := 0; c <= last; c++ {
		if keep[c] {
			continue
		}
		// The bounding set is per thread; exec makes this thread (the
		// main thread, see the package's init function) the only one,
		// and root's capabilities after exec are the bounding set.
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("template: drop capability %d: %w", c, err)
		}
	}
	for _, r := range cfg.Rlimits {
		lim := syscall.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := syscall.Setrlimit(r.Resource, &lim); err != nil {
			return fmt.Errorf("template: setrlimit %d: %w", r.Resource, err)
		}
	}
	// Nothing but the exec runs after this. Fd makes the socket blocking
	// again, as the template reads it.
	if fd := int(ctl.f.Fd()); fd == 3 {
		if _, err := unix.FcntlInt(3, unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("template: control socket: %w", err)
		}
	} else if err := unix.Dup3(fd, 3, 0); err != nil {
		return fmt.Errorf("template: control socket: %w", err)
	}
	if err := syscall.Exec(t.Argv[0], t.Argv, t.Env); err != nil {
		return fmt.Errorf("template: exec %s: %w", t.Argv[0], err)
	}
	return nil
}

type initState struct {
	cfg       *SetupMsg
	workspace int // O_PATH fd of /workspace, sent to the host
	ptmx      int // O_PATH fd of the sandbox's /dev/pts/ptmx, sent too
	ruleset   int // Landlock ruleset fd, or -1
	cgroupNS  int // the sandbox's cgroup namespace
	spawner   chan spawnReq
}

// itrace reports the init's own CPU time at a step, with AIRLOCK_TRACE.
func itrace(what string) {
	if tracing {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Fprintf(os.Stderr, "init %s cpu=%.2fms\n", what, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e6)
	}
}

func setup(cfg *SetupMsg) (*initState, error) {
	itrace("setup start")
	defer itrace("setup end")
	if cfg.Entry == nil {
		return nil, fmt.Errorf("setup without an entry plan")
	}
	if err := cfg.Entry.Validate(); err != nil {
		return nil, err
	}
	// The host's supplementary groups would otherwise follow us in. A
	// sandbox's init has none already: they were dropped before exec
	// (Host.Start's Credential), in the one thread every thread of this
	// image descends from. Only when some are left is the drop made here,
	// on every thread (syscall.Setgroups stops the world to do that: a
	// cost on every sandbox's start otherwise).
	if groups, err := unix.Getgroups(); err != nil || len(groups) > 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return nil, fmt.Errorf("drop supplementary groups: %w", err)
		}
	}
	if err := rootfs.Build(cfg.Root); err != nil {
		return nil, err
	}
	itrace("rootfs built")
	if err := rootfs.Hostname(cfg.Root.Hostname); err != nil {
		return nil, err
	}
	if err := loopback.Up(); err != nil {
		return nil, err
	}
	// We were born in our cgroup: a cgroup namespace rooted there hides the
	// host's cgroup layout. Two threads need it: the main thread, whose
	// namespaces are the process's (what the Python template's children
	// join through a pidfd of the init), and the spawner thread, which
	// joins it from cgroupNS (see spawner). The main thread makes it (this
	// runs on it, see the package's init function) with a thread-directed
	// unshare, which works in every build: syscall.AllThreadsSyscall is
	// not available when cgo is on.
	if unix.Gettid() != unix.Getpid() {
		return nil, fmt.Errorf("the init's setup runs on thread %d, not its main thread", unix.Gettid())
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return nil, fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	cgns, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the cgroup namespace: %w", err)
	}
	// The main goroutine may run anywhere from here.
	runtime.UnlockOSThread()
	st := &initState{cfg: cfg, ruleset: -1, cgroupNS: cgns}
	if cfg.Landlock > 0 {
		fd, err := landlock.Create(landlock.SandboxRules(), cfg.Landlock)
		if err != nil {
			return nil, err
		}
		st.ruleset = fd
	}
	ws, err := unix.Open("/workspace", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open /workspace: %w", err)
	}
	st.workspace = ws
	// The host opens the terminals of the sandbox's terminal commands
	// here (see Sandbox.OpenPTY), so they count against this instance's
	// max and are named in the sandbox's /dev/pts.
	ptmx, err := unix.Open("/dev/pts/ptmx", unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/pts/ptmx: %w", err)
	}
	st.ptmx = ptmx
	if err := unix.Chdir("/workspace"); err != nil {
		return nil, err
	}
	// Replace the host's /dev/null on 0 and 1 with the sandbox's own.
	if null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		unix.Dup3(null, 0, 0)
		unix.Dup3(null, 1, 0)
		unix.Close(null)
	}
	// The entry's process steps: the init's programs inherit them.
	if err := cfg.Entry.apply(PhaseProcess, -1); err != nil {
		return nil, err
	}
	return st, nil
}

// serve answers the host and reaps children until the host goes away.
// Losing the host (EOF) ends the init, and with it the whole sandbox.
func serve(ctl *conn, st *initState) {
	type incoming struct {
		m     Message
		files []*os.File
		err   error
	}
	msgs := make(chan incoming)
	go func() {
		for {
			m, files, err := ctl.recv()
			msgs <- incoming{m, files, err}
			if err != nil {
				return
			}
		}
	}()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD)
	watched := map[int]bool{}
	for {
		select {
		case in := <-msgs:
			if in.err != nil {
				os.Exit(0)
			}
			switch in.m.Op {
			case MsgSpawn:
				pid, err := spawn(st, in.m.Spawn, in.files)
				closeFiles(in.files)
				if err != nil {
					ctl.send(Message{Op: MsgError, Error: err.Error()})
					continue
				}
				watched[pid] = true
				ctl.send(Message{Op: MsgSpawned, Pid: pid})
			case MsgSignal:
				closeFiles(in.files)
				// Answered once kill(2) has returned: the signal is then
				// pending in its targets, and the host may rely on it
				// arriving before anything it sends them next.
				target := in.m.Pid
				if target <= 1 {
					// Never ourselves, never everyone.
					ctl.send(Message{Op: MsgSignaled, Error: "refusing to signal pid " + strconv.Itoa(target)})
					continue
				}
				if in.m.Group {
					target = -target
				}
				syscall.Kill(target, syscall.Signal(in.m.Signal)) // a target gone (ESRCH) is no error
				ctl.send(Message{Op: MsgSignaled})
			case MsgCopy:
				// The copy owns the descriptors from here; it answers
				// with MsgCopied when the host closes the pipe.
				go copyIn(ctl, in.m.Copy, in.files)
			case MsgAdapt:
				closeFiles(in.files)
				if err := adapt(in.m.Pid, in.m.Adapt); err != nil {
					ctl.send(Message{Op: MsgError, Error: err.Error()})
				} else {
					ctl.send(Message{Op: MsgAdapted})
				}
			default:
				closeFiles(in.files)
				ctl.send(Message{Op: MsgError, Error: "unknown request " + strconv.Quote(in.m.Op)})
			}
		case <-sigs:
		}
		// Reap every child that ended: spawned programs are reported,
		// orphans the kernel re-parented to us are just collected.
		for {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
			if err != nil || pid <= 0 {
				break
			}
			exit := Message{Op: MsgExit, Pid: pid, Status: int(ws), Usage: &ExitUsage{
				UserNs: ru.Utime.Nano(), SysNs: ru.Stime.Nano(), MaxRSS: ru.Maxrss << 10}}
			if watched[pid] {
				delete(watched, pid)
				ctl.send(exit)
			}
		}
	}
}

// adapt gives a pre-started sandbox the limits of the session it is
// handed to: new sizes for the scratch tmpfs mounts (they are empty, so
// shrinking works) and rlimits for the runtime process.
func adapt(pid int, a *AdaptMsg) error {
	if a == nil || a.Disk <= 0 || a.Inodes <= 0 {
		return fmt.Errorf("adapt: bad request")
	}
	if err := rootfs.ResizeScratch(a.Disk, a.Inodes); err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	if pid > 1 {
		for _, r := range a.Rlimits {
			lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
			if err := unix.Prlimit(pid, r.Resource, &lim, nil); err != nil {
				return fmt.Errorf("adapt: rlimit %d of %d: %w", r.Resource, pid, err)
			}
		}
	}
	return nil
}

type spawnReq struct {
	m     *SpawnMsg
	files []*os.File
	reply chan spawnRes
}

type spawnRes struct {
	pid int
	err error
}

func spawn(st *initState, m *SpawnMsg, files []*os.File) (int, error) {
	if m == nil || len(m.Argv) == 0 || m.NFiles != len(files) {
		return 0, fmt.Errorf("bad spawn request")
	}
	// The restricted thread is made on first use: a sandbox whose program
	// joins from the Python template never needs it.
	if st.spawner == nil {
		st.spawner = make(chan spawnReq)
		ready := make(chan error)
		go spawner(st, ready)
		if err := <-ready; err != nil {
			st.spawner = nil
			return 0, err
		}
	}
	reply := make(chan spawnRes)
	st.spawner <- spawnReq{m: m, files: files, reply: reply}
	r := <-reply
	return r.pid, r.err
}

// spawner owns one OS thread that carries the thread steps of the sandbox
// entry (see planEntry): an empty capability bounding set, no ambient or
// inheritable capabilities, no_new_privs, the Landlock domain and the
// seccomp filter. Programs are forked from this thread, so they inherit
// all of it, and the init's other threads stay free to manage the sandbox.
// The entry's probes run here, once, before the first program: what they
// find is what every program inherits. The goroutine never unlocks its
// thread, so the Go runtime never reuses it for anything else.
func spawner(st *initState, ready chan<- error) {
	runtime.LockOSThread()
	// Go made this thread from one created before the main thread
	// entered the sandbox's cgroup namespace.
	if err := unix.Setns(st.cgroupNS, unix.CLONE_NEWCGROUP); err != nil {
		ready <- fmt.Errorf("join the cgroup namespace: %w", err)
		return
	}
	e := st.cfg.Entry
	if err := e.apply(PhaseThread, st.ruleset); err != nil {
		ready <- err
		return
	}
	if err := e.probe(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for req := range st.spawner {
		pid, err := forkExec(st.cfg, req.m, req.files)
		req.reply <- spawnRes{pid, err}
	}
}

// installFilter sets no_new_privs and installs raw, a compiled seccomp
// filter (package seccomp's Program.Bytes: struct sock_filter entries),
// on the calling OS thread only: its caller is locked to the thread that
// forks the sandboxed process. The init installs it itself so that it
// does not link the filter's compiler (its tables are initialised in
// every process that links them: see the package comment).
func installFilter(raw []byte) error {
	if len(raw) == 0 || len(raw)%8 != 0 || len(raw)/8 > 0xffff {
		return fmt.Errorf("seccomp: a filter of %d bytes", len(raw))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw)/8)
	for i := range filter {
		w := raw[8*i:]
		filter[i] = unix.SockFilter{Code: *(*uint16)(unsafe.Pointer(&w[0])), Jt: w[2], Jf: w[3], K: *(*uint32)(unsafe.Pointer(&w[4]))}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	return nil
}

// CapLastCap is the highest capability number this kernel knows.
func CapLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// forkExec runs on the restricted thread: the child makes the entry's
// child steps (see Entry.forkAttr), and the program is checked against
// the entry's expected status before anything is said to the host.
func forkExec(cfg *SetupMsg, m *SpawnMsg, files []*os.File) (int, error) {
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	a, err := cfg.Entry.forkAttr()
	if err != nil {
		return 0, err
	}
	dir := a.dir
	if m.Dir != "" {
		dir = m.Dir
	}
	if m.Terminal && (!a.setsid || len(fds) == 0) {
		return 0, fmt.Errorf("a terminal needs a session of its own and fd 0")
	}
	pid, err := syscall.ForkExec(m.Argv[0], m.Argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   m.Env,
		Files: fds,
		// Ctty is the child's fd 0.
		Sys: &syscall.SysProcAttr{Setsid: a.setsid, Setctty: m.Terminal, Ctty: 0, Credential: a.cred},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", m.Argv[0], err)
	}
	if err := cfg.Entry.verify(pid); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return 0, err
	}
	return pid, nil
}
