package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/cleanup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/exeseal"
	"airlock/internal/jailinit"
	"airlock/internal/landlock"
	"airlock/internal/rootfs"
	"airlock/internal/seccomp"
	"airlock/internal/workspace"
)

// Host builds sandboxes. Everything that can be done once (sealing the
// executable, finding the cgroup hierarchies, compiling the seccomp
// filter, probing Landlock) is done by NewHost.
type Host struct {
	opts     Options
	exe      *exeseal.Exe
	cg       *cgroup.Host
	seccomp  []byte // nil when the layer is off
	abi      int    // 0 when the layer is off
	capLast  int    // the highest capability the kernel knows
	filters  int    // seccomp filters the server has (and its inits inherit); -1 unknown
	staging  string
	tmpCopy  map[string]string
	baseRoot rootfs.Spec
	cli      cliLease // pod mode's CLI slot (slots_linux.go)
	spawner  *spawner // nil: inits are cloned by this process

	// rootsMu guards roots: templates' roots by image directory.
	rootsMu sync.Mutex
	roots   map[string]*Root
}

// NewHost prepares the host. It fails with errdefs.ErrUnavailable when a
// configured protection cannot be applied here: airlock refuses to run
// code with weaker isolation than configured.
func NewHost(o Options) (_ *Host, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: airlock must run as root to build jails (it maps every sandbox to an unprivileged host uid)", errdefs.ErrUnavailable)
	}
	warmStartProcess()
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	h := &Host{opts: o}
	if o.Spawner {
		h.spawner = &spawner{h: h}
	}
	var problems []error
	if h.cg, err = cgroup.Open(o.CgroupParent); err != nil {
		problems = append(problems, err)
	}
	if o.Seccomp {
		if err := seccomp.Available(); err != nil {
			problems = append(problems, err)
		} else if prog, err := seccomp.Build(seccomp.DefaultPolicy()); err != nil {
			problems = append(problems, err)
		} else {
			h.seccomp = prog.Bytes()
		}
	}
	if o.Landlock {
		if abi, err := landlock.ABI(); err != nil {
			problems = append(problems, fmt.Errorf("%v (set protections.landlock to \"off\" to run without it)", err))
		} else {
			h.abi = abi
		}
	}
	if h.capLast, err = jailinit.CapLastCap(); err != nil {
		problems = append(problems, err)
	}
	h.filters = seccompFilters()
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("%w: %v; run `airlock doctor` for details", errdefs.ErrUnavailable, err)
	}
	h.staging = filepath.Join(o.StateDir, "root")
	for _, d := range []string{o.StateDir, h.staging} {
		if err := ensureDir(d, 0o755); err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}
	if h.exe, err = SealInit(o.StateDir); err != nil {
		return nil, fmt.Errorf("%w: cannot seal the init executable: %v; run `airlock doctor` for details", errdefs.ErrUnavailable, err)
	}
	undo.Add(h.exe.Close)
	h.tmpCopy = map[string]string{}
	h.baseRoot = rootfs.DefaultSpec(h.staging, Hostname)
	h.baseRoot.Files = o.RootFiles
	if o.EmbeddedFiles != nil {
		if id := exeseal.BuildID(); id != "" {
			h.baseRoot.LoadFiles, h.baseRoot.FilesKey = o.EmbeddedFiles, "build "+id
		} else {
			h.baseRoot.Files = o.rootFiles()
		}
	}
	h.baseRoot.Prepare, h.baseRoot.PrepareKey = o.PrepareRoot, o.PrepareKey
	// The static part of the root is written once per host and bound
	// read-only into every sandbox.
	tmpl, err := rootfs.PrepareTemplate(o.StateDir, h.baseRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	h.baseRoot.Template = tmpl
	h.baseRoot.Etc, h.baseRoot.EtcCopy, h.baseRoot.Files = nil, nil, nil
	h.baseRoot.LoadFiles, h.baseRoot.FilesKey = nil, ""
	h.baseRoot.Prepare, h.baseRoot.PrepareKey = nil, ""
	return h, nil
}

// warmStartProcess has package os make, off the caller's path, the check it
// makes once before its first process start: whether pidfds work, for
// which it clones a child and waits for it to exit. Left to the first
// init's start, that round trip through the scheduler (a millisecond on
// an idle host, tens under load) would be on a cold run's path, and the
// child would be born in the sandbox's cgroup, where the thread that
// clones the init stands.
func warmStartProcess() {
	go func() {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Release()
		}
	}()
}

// SealInit seals the executable every sandbox's init runs, as a host
// with stateDir does (the embedded init, if any, is kept there), for the
// host and for reports (airlock doctor).
func SealInit(stateDir string) (*exeseal.Exe, error) {
	if err := ensureDir(stateDir, 0o755); err != nil {
		return nil, err
	}
	return exeseal.OpenIn(stateDir)
}

// rootFiles are all of o's root files, RootFiles over EmbeddedFiles.
func (o Options) rootFiles() map[string]string {
	return rootfs.Spec{Files: o.RootFiles, LoadFiles: o.EmbeddedFiles}.AllFiles()
}

// Root is a sandbox root other than the host's: a template's (see
// rootfs.ForImage), its static part written once.
type Root struct {
	spec  rootfs.Spec
	label string
}

// Label names the root in cgroup names (a template's name and version).
func (r *Root) Label() string { return r.label }

// Image is the template root's host directory.
func (r *Root) Image() string { return r.spec.Image }

// Spec is the root's layout, for another kernel's bundle (gVisor).
func (r *Root) Spec() rootfs.Spec { return r.spec }

// ImageRoot returns the root of sandboxes made from the template root at
// image (a version directory of the template store, never changed once
// made), labelled label (letters, digits, '.', '_', '-'): its static part
// is prepared once and shared.
func (h *Host) ImageRoot(image, label string) (*Root, error) {
	h.rootsMu.Lock()
	defer h.rootsMu.Unlock()
	if r := h.roots[image]; r != nil {
		return r, nil
	}
	spec, err := PrepareImageRoot(h.opts.StateDir, h.staging, h.opts.rootFiles(), image)
	if err != nil {
		return nil, err
	}
	if h.roots == nil {
		h.roots = map[string]*Root{}
	}
	r := &Root{spec: spec, label: label}
	h.roots[image] = r
	return r, nil
}

// PrepareImageRoot prepares the static part of a root made from the
// template root at image, in stateDir, and returns its spec (sizes still
// to fill in). Both kernels use it (their static parts are the same).
func PrepareImageRoot(stateDir, staging string, files map[string]string, image string) (rootfs.Spec, error) {
	base := rootfs.DefaultSpec(staging, Hostname)
	base.Files = files
	spec, err := rootfs.ForImage(base, image)
	if err != nil {
		return spec, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if spec.Template, err = rootfs.PrepareTemplate(stateDir, spec); err != nil {
		return spec, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	spec.Etc, spec.Files = nil, nil
	return spec, nil
}

// sendSetup sends the setup message, with a descriptor of the template's
// root when the sandbox has one (the init cannot open the store's path).
func sendSetup(c *conn, setup *jailinit.SetupMsg) error {
	if setup.Root.Image == "" {
		return c.send(jailinit.Message{Op: jailinit.MsgSetup, Setup: setup})
	}
	trees, err := rootfs.OpenImageTrees(setup.Root)
	if err != nil {
		return err
	}
	fds := make([]int, len(trees))
	for i, f := range trees {
		fds[i] = int(f.Fd())
		defer f.Close()
	}
	return c.send(jailinit.Message{Op: jailinit.MsgSetup, Setup: setup}, fds...)
}

// rootOf is the root spec of a sandbox given r (nil: the host's).
func (h *Host) rootOf(r *Root) rootfs.Spec {
	if r == nil {
		return h.baseRoot
	}
	return r.spec
}

// ShareTmp has every sandbox built from now on start with a copy of the
// host directory dir as /tmp/<name>, owned by the sandbox user (a cache
// computed once per host, such as the matplotlib font list). Call it
// before sandboxes are built concurrently.
func (h *Host) ShareTmp(name, dir string) {
	m := make(map[string]string, len(h.tmpCopy)+1)
	for k, v := range h.tmpCopy {
		m[k] = v
	}
	m[name] = dir
	h.tmpCopy = m
}

// SweepTemplates removes root templates of other airlock versions or host
// configurations from the state directory (see rootfs.SweepTemplates).
func (h *Host) SweepTemplates() error {
	return rootfs.SweepTemplates(h.opts.StateDir, h.baseRoot.Template)
}

// ensureDir makes dir a root-owned directory, refusing a symlink.
func ensureDir(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || sys.Uid != 0 {
		return fmt.Errorf("%s must be a directory owned by root", dir)
	}
	return os.Chmod(dir, mode)
}

// Close releases what NewHost acquired, and removes the cgroup parent if
// nothing uses it; every sandbox must be closed first (their OOM and pids
// events stop with it).
func (h *Host) Close() error {
	h.releaseCLISlot()
	if h.spawner != nil {
		h.spawner.close()
	}
	var errs []error
	if h.cg != nil {
		errs = append(errs, h.cg.Close())
	}
	if h.exe != nil {
		errs = append(errs, h.exe.Close())
	}
	return errors.Join(errs...)
}

// SeccompProgram is the raw seccomp filter every sandbox gets (nil when
// the layer is off).
func (h *Host) SeccompProgram() []byte { return h.seccomp }

// Cgroups is the cgroup host, for sweeping and reporting.
func (h *Host) Cgroups() *cgroup.Host { return h.cg }

// Protections describes the layers every sandbox gets, for reports.
func (h *Host) Protections() map[string]string {
	p := map[string]string{
		"exe":    string(h.exe.Method),
		"init":   h.exe.From,
		"cgroup": h.cg.Describe(),
	}
	if h.exe.Why != "" {
		p["init_fallback"] = h.exe.Why
	}
	if h.seccomp != nil {
		p["seccomp"] = "on"
	} else {
		p["seccomp"] = "off"
	}
	if h.abi > 0 {
		p["landlock"] = fmt.Sprintf("ABI %d", h.abi)
	} else {
		p["landlock"] = "off"
	}
	return p
}

// IDs returns the host uid/gid of the sandbox's root and user for slot.
func (h *Host) IDs(slot uint32) (root, user int) {
	base := int(h.opts.IDBase) + 2*int(slot)
	return base, base + 1
}

// initProc is a started init: the sealed airlock binary re-executed as
// InitArg0, its control socket on fd 3, its stderr kept for errors.
type initProc struct {
	proc    *os.Process
	initErr *CappedBuffer // the first 16 KiB of its stderr
	errDone chan struct{} // closed when its stderr reaches end of file
}

// startInit starts an init into p with env and attr, born in cg (cgroup
// v2: cloned into it; v1: cloned by a thread in it), and returns the
// host's end of its control socket. Nothing of the host but that socket
// and the stderr pipe reaches it: every other descriptor is close-on-exec.
func (h *Host) startInit(p *initProc, env []string, attr *syscall.SysProcAttr, cg *cgroup.Cgroup) (*os.File, error) {
	hostEnd, initEnd, err := socketpair()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		hostEnd.Close()
		initEnd.Close()
		return nil, err
	}
	if h.spawner != nil && attr.Cloneflags&unix.CLONE_NEWUSER != 0 {
		p.proc, err = h.spawner.clone(env, attr, cg, initEnd, errW)
	} else {
		if fd, ok := cg.IntoFD(); ok {
			attr.UseCgroupFD, attr.CgroupFD = true, fd
		}
		cmd := &exec.Cmd{
			Path: h.exe.Path(), Args: []string{jailinit.InitArg0}, Env: env,
			ExtraFiles: []*os.File{initEnd}, Stderr: errW, SysProcAttr: attr,
		}
		err = cg.StartIn(cmd.Start)
		p.proc = cmd.Process
	}
	initEnd.Close()
	errW.Close()
	if err == nil {
		// It runs nothing before its setup: refuse it if it is not there.
		var in bool
		if in, err = cg.Holds(p.proc.Pid); err == nil && !in {
			err = fmt.Errorf("the init (pid %d) was not born in its cgroup", p.proc.Pid)
		}
	}
	if err != nil && p.proc != nil {
		// Started, then refused: not in its cgroup, or (v1) the thread
		// that cloned it could not leave the cgroup.
		p.proc.Kill()
		p.proc.Wait()
		if attr.PidFD != nil && *attr.PidFD >= 0 {
			unix.Close(*attr.PidFD)
			*attr.PidFD = -1
		}
	}
	if err != nil {
		hostEnd.Close()
		errR.Close()
		return nil, err
	}
	p.initErr, p.errDone = NewCappedBuffer(16<<10), make(chan struct{})
	go func() {
		io.Copy(p.initErr, errR)
		errR.Close()
		close(p.errDone)
	}()
	return hostEnd, nil
}

// Sandbox is a running jail: an init process waiting for programs.
//
// Locks, in the order they may be taken: reqMu, then waitMu (SpawnWait
// holds both); the reader of the control socket takes waitMu alone.
type Sandbox struct {
	h    *Host
	spec Spec
	cg   *cgroup.Cgroup
	initProc
	pidfd   int
	ctl     *conn
	ws      *workspace.Dir
	ruleset *os.File
	// ptmx is an O_PATH handle on the sandbox's devpts instance's ptmx
	// (see OpenPTY).
	ptmx     *os.File
	hostUser int
	started  time.Time

	// reqMu makes one request to the init at a time, from its send to
	// its reply on replies (spawn, adapt). (spec.Limits changes only by
	// Adapt, before the sandbox is handed out.)
	reqMu   sync.Mutex
	replies chan jailinit.Message
	// sigMu makes one Signal at a time, from its send to its reply on
	// signaled.
	sigMu    sync.Mutex
	signaled chan jailinit.Message
	copies   copies // files the init is writing (see writeFile)
	exits    chan Exit
	// waiters get the exits of the programs SpawnWait started, instead
	// of exits; watchNext is the waiter of the spawn under way. waitMu
	// guards both.
	waitMu    sync.Mutex
	waiters   map[int]chan Exit
	watchNext chan Exit
	dead      chan struct{} // closed when the control socket ends

	closeOnce sync.Once
	closeErr  error
}

// Start builds a sandbox and waits until its init is ready.
func (h *Host) Start(ctx context.Context, spec Spec) (_ *Sandbox, err error) {
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 10 * time.Second
	}
	l := spec.Limits
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	s := &Sandbox{h: h, spec: spec, pidfd: -1, replies: make(chan jailinit.Message, 1), signaled: make(chan jailinit.Message, 1), exits: make(chan Exit, 16), waiters: map[int]chan Exit{},
		dead: make(chan struct{}), started: time.Now()}

	trace("start")
	cg, err := h.cg.New(spec.Name, cgroup.Resources{Memory: int64(l.Memory), Pids: int64(l.Pids), CPUs: l.CPUs})
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the sandbox's cgroup could not be created", err)
	}
	s.cg = cg
	undo.Add(func() error { cg.Kill(); return cg.Destroy() })

	trace("cgroup created")
	rootID, userID := h.IDs(spec.Slot)
	s.hostUser = userID
	attr := initAttr(rootID, userID, &s.pidfd)
	hostEnd, err := h.startInit(&s.initProc, append([]string{"GOMAXPROCS=1", "GOGC=200"}, traceEnv()...), attr, cg)
	trace("init started")
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "cannot start the sandbox init (are user namespaces enabled? see `airlock doctor`)", err)
	}
	undo.AddFunc(func() {
		s.kill()
		s.proc.Wait()
		if s.pidfd >= 0 {
			unix.Close(s.pidfd)
		}
	})
	if s.ctl, err = newConn(hostEnd, 4<<10); err != nil {
		return nil, err
	}
	undo.Add(s.ctl.close)
	root := h.rootOf(spec.Root)
	root.Disk = int64(l.Disk)
	root.Inodes = int64(l.Inodes)
	root.Shm = min(int64(l.Disk), 64<<20)
	root.Ptys = h.opts.Ptys
	if spec.Root == nil {
		root.TmpCopy = h.tmpCopy // the host's caches are not a template's
	}
	entry := h.entry(l)
	setup := &jailinit.SetupMsg{
		Root:     root,
		Landlock: h.abi,
		Entry:    &entry,
	}
	if err := sendSetup(s.ctl, setup); err != nil {
		return nil, s.startErr("send setup", err)
	}
	deadline := time.Now().Add(spec.ReadyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.ctl.setDeadline(deadline)
	trace("setup sent")
	m, files, err := s.ctl.recv()
	trace("ready")
	s.ctl.setDeadline(time.Time{})
	if err != nil {
		return nil, s.startErr("wait for the init", err)
	}
	if m.Op != jailinit.MsgReady || len(files) < 2 {
		for _, f := range files {
			f.Close()
		}
		if m.Op == jailinit.MsgError {
			return nil, errdefs.Private(errdefs.ErrUnavailable, "the sandbox could not be built", errors.New(m.Error))
		}
		return nil, s.startErr("wait for the init", fmt.Errorf("unexpected %q", m.Op))
	}
	// F_DUPFD_CLOEXEC, not dup and then FD_CLOEXEC: a sandbox init started
	// in between by another goroutine must not inherit it.
	wsfd, err := unix.FcntlInt(files[0].Fd(), unix.F_DUPFD_CLOEXEC, 0)
	files[0].Close()
	if err != nil {
		for _, f := range files[1:] {
			f.Close()
		}
		return nil, err
	}
	s.ws = workspace.New(wsfd, userID, userID, s.writeFile)
	s.ptmx = files[1]
	if err := checkPtmx(s.ptmx); err != nil {
		for _, f := range files[2:] {
			f.Close()
		}
		return nil, s.startErr("check the sandbox's ptmx", err)
	}
	if len(files) > 2 {
		s.ruleset = files[2]
		for _, f := range files[3:] {
			f.Close()
		}
	}
	go s.readLoop()
	undo.Release()
	return s, nil
}

// initAttr is how a sandbox's init is cloned: its namespaces, root of
// its own user namespace mapped to rootID (and the sandbox user to
// userID), no supplementary group, its pidfd to pidfd.
func initAttr(rootID, userID int, pidfd *int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{
			{ContainerID: 0, HostID: rootID, Size: 1},
			{ContainerID: SandboxUID, HostID: userID, Size: 1},
		},
		GidMappings: []syscall.SysProcIDMap{
			{ContainerID: 0, HostID: rootID, Size: 1},
			{ContainerID: SandboxGID, HostID: userID, Size: 1},
		},
		// Become root of the new user namespace before exec, so that the
		// init keeps its capabilities there (and only there); the empty
		// group list drops the host's supplementary groups, which would
		// otherwise follow it in.
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
		GidMappingsEnableSetgroups: true,
		Setsid:                     true,
		// No Pdeathsig: it fires when the creating OS thread exits, which
		// Go does whenever a locked goroutine ends. The init notices its
		// host going away by the control socket closing instead.
		PidFD: pidfd,
	}
}

func (s *Sandbox) startErr(what string, err error) error {
	s.kill()
	s.proc.Wait()
	<-s.errDone
	// What the init printed and the host's own errors are for the log:
	// they name host paths.
	msg := bytes.TrimSpace(s.initErr.Bytes())
	if len(msg) > 0 {
		return errdefs.Private(errdefs.ErrUnavailable, "sandbox init failed", fmt.Errorf("%s: %v: %s", what, err, msg))
	}
	return errdefs.Private(errdefs.ErrUnavailable, "sandbox init failed", fmt.Errorf("%s: %v", what, err))
}

// initDiag returns what the init printed, for error messages.
func (s *Sandbox) initDiag() string {
	select {
	case <-s.errDone:
	case <-time.After(100 * time.Millisecond):
	}
	if b := bytes.TrimSpace(s.initErr.Bytes()); len(b) > 0 {
		return "the init said: " + string(b)
	}
	return "the init said nothing"
}

func (s *Sandbox) readLoop() {
	defer close(s.dead)
	for {
		m, files, err := s.ctl.recv()
		for _, f := range files {
			f.Close() // the init sends no descriptors after ready
		}
		if err != nil {
			return
		}
		switch m.Op {
		case jailinit.MsgSpawned, jailinit.MsgError, jailinit.MsgAdapted:
			if m.Op == jailinit.MsgSpawned {
				// Registered before the reply is handed over: the exit,
				// which follows on this socket, cannot be missed.
				s.waitMu.Lock()
				if s.watchNext != nil {
					s.waiters[m.Pid] = s.watchNext
					s.watchNext = nil
				}
				s.waitMu.Unlock()
			}
			select {
			case s.replies <- m:
			default:
			}
		case jailinit.MsgSignaled:
			select {
			case s.signaled <- m:
			default:
			}
		case jailinit.MsgCopied:
			s.copies.deliver(m)
		case jailinit.MsgExit:
			e := Exit{Pid: m.Pid, Status: syscall.WaitStatus(m.Status)}
			if m.Usage != nil {
				e.CPU = time.Duration(m.Usage.UserNs + m.Usage.SysNs)
			}
			s.waitMu.Lock()
			w, ok := s.waiters[m.Pid]
			delete(s.waiters, m.Pid)
			s.waitMu.Unlock()
			if ok {
				w <- e
				continue
			}
			select {
			case s.exits <- e:
			default:
			}
		}
	}
}

// Spawn starts p in the sandbox and returns its pid inside the sandbox.
// The descriptors in p.Files are duplicated into the sandbox; the caller
// keeps (and should close) its own copies.
func (s *Sandbox) Spawn(p Process) (int, error) {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	return s.spawnLocked(p)
}

// spawnLocked is Spawn with reqMu held.
func (s *Sandbox) spawnLocked(p Process) (int, error) {
	if len(p.Argv) == 0 {
		return 0, fmt.Errorf("%w: empty command", errdefs.ErrInvalidArgument)
	}
	fds := make([]int, len(p.Files))
	for i, f := range p.Files {
		fds[i] = int(f.Fd())
	}
	if err := s.ctl.send(jailinit.Message{Op: jailinit.MsgSpawn, Spawn: &jailinit.SpawnMsg{Argv: p.Argv, Env: p.Env, Dir: p.Dir, NFiles: len(fds), Terminal: p.Terminal}}, fds...); err != nil {
		return 0, fmt.Errorf("jail: spawn: %w", err)
	}
	select {
	case m := <-s.replies:
		if m.Op == jailinit.MsgError {
			return 0, errdefs.Private(errdefs.ErrUnavailable, "the sandbox could not start the program", errors.New(m.Error))
		}
		if m.Op != jailinit.MsgSpawned {
			return 0, fmt.Errorf("jail: spawn: unexpected %q", m.Op)
		}
		trace("spawned")
		return m.Pid, nil
	case <-s.dead:
		return 0, errdefs.Private(errdefs.ErrGone, "the sandbox ended", errors.New(s.initDiag()))
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("jail: spawn: no answer from the sandbox init")
	}
}

// SpawnWait starts p like Spawn; how it ends is delivered on the returned
// channel only (not on Exits). The channel is never closed: a sandbox that
// dies first closes Dead instead.
func (s *Sandbox) SpawnWait(p Process) (int, <-chan Exit, error) {
	ch := make(chan Exit, 1)
	s.reqMu.Lock()
	s.waitMu.Lock()
	s.watchNext = ch
	s.waitMu.Unlock()
	pid, err := s.spawnLocked(p)
	s.waitMu.Lock()
	s.watchNext = nil
	s.waitMu.Unlock()
	s.reqMu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return pid, ch, nil
}

// Signal sends sig to the process pid inside the sandbox, or to its
// process group. The init refuses pid 1 and below. It returns once the
// init's kill(2) has: the signal is pending in its targets then, before
// anything the caller sends them next (as with gVisor's, whose runsc kill
// has returned). A target already gone is no error.
func (s *Sandbox) Signal(pid int, sig syscall.Signal, group bool) error {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	select {
	case <-s.signaled: // the late answer of one that timed out
	default:
	}
	if err := s.ctl.send(jailinit.Message{Op: jailinit.MsgSignal, Pid: pid, Signal: int(sig), Group: group}); err != nil {
		return fmt.Errorf("jail: signal: %w", err)
	}
	select {
	case m := <-s.signaled:
		if m.Error != "" {
			return fmt.Errorf("jail: signal: %s", m.Error)
		}
		return nil
	case <-s.dead:
		return fmt.Errorf("%w: the sandbox ended", errdefs.ErrGone)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("jail: signal: no answer from the sandbox init")
	}
}

// Adapt gives a pre-started sandbox new limits: the cgroup's memory, pids
// and CPU, the sizes of /workspace and /tmp, and the rlimits of the
// program pid (inside). The scratch trees must still be empty.
func (s *Sandbox) Adapt(l config.Limits, pid int) error {
	if err := s.cg.Set(cgroup.Resources{Memory: int64(l.Memory), Pids: int64(l.Pids), CPUs: l.CPUs}); err != nil {
		return err
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	msg := &jailinit.AdaptMsg{Disk: int64(l.Disk), Inodes: int64(l.Inodes), Rlimits: rlimitsFor(l)}
	if err := s.ctl.send(jailinit.Message{Op: jailinit.MsgAdapt, Pid: pid, Adapt: msg}); err != nil {
		return fmt.Errorf("jail: adapt: %w", err)
	}
	select {
	case m := <-s.replies:
		if m.Op != jailinit.MsgAdapted {
			return fmt.Errorf("jail: adapt: %s", m.Error)
		}
		s.spec.Limits = l
		return nil
	case <-s.dead:
		return fmt.Errorf("%w: the sandbox ended", errdefs.ErrGone)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("jail: adapt: no answer from the sandbox init")
	}
}

// Limits are the sandbox's current limits.
func (s *Sandbox) Limits() config.Limits { return s.spec.Limits }

// Exits delivers the exit of every program started with Spawn.
func (s *Sandbox) Exits() <-chan Exit { return s.exits }

// Dead is closed when the sandbox's init is gone.
func (s *Sandbox) Dead() <-chan struct{} { return s.dead }

// Events delivers the cgroup's OOM and pids-limit events.
func (s *Sandbox) Events() <-chan cgroup.Event { return s.cg.Events() }

// Stats reads the sandbox's cgroup counters.
func (s *Sandbox) Stats() (cgroup.Stats, error) { return s.cg.Stats() }

// Usage reads the CPU time and the memory peak alone (cgroup.Cgroup.Usage).
func (s *Sandbox) Usage() (time.Duration, int64, error) { return s.cg.Usage() }

// CPU reads the sandbox's total CPU time.
func (s *Sandbox) CPU() (time.Duration, error) { return s.cg.CPU() }

// Cgroup is the sandbox's cgroup.
func (s *Sandbox) Cgroup() *cgroup.Cgroup { return s.cg }

// Workspace is the host's handle on the sandbox's /workspace. It stays
// usable after the sandbox's processes are gone, until Close.
func (s *Sandbox) Workspace() *workspace.Dir { return s.ws }

// InitPid is the host pid of the sandbox's init.
func (s *Sandbox) InitPid() int { return s.proc.Pid }

// PidFD is a pidfd of the init.
func (s *Sandbox) PidFD() int { return s.pidfd }

// Ruleset is the sandbox's Landlock ruleset, nil when the layer is off.
func (s *Sandbox) Ruleset() *os.File { return s.ruleset }

// checkPtmx checks that f, which the init sent before any sandboxed code
// ran, is a devpts instance's ptmx: the device 5:2 on a devpts mount.
func checkPtmx(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 5 || unix.Minor(st.Rdev) != 2 || fs.Type != unix.DEVPTS_SUPER_MAGIC {
		return fmt.Errorf("not a devpts ptmx (mode %o, rdev %d:%d, fs %#x)", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), fs.Type)
	}
	return nil
}

// ErrNoPTY is OpenPTY's error when the sandbox holds as many terminals
// as its devpts instance allows.
var ErrNoPTY = errors.New("the sandbox's pseudo-terminals are all in use")

// OpenPTY opens a new pseudo-terminal in the sandbox's own devpts
// instance, reopening its ptmx: it counts against that instance's max
// (never the host's ptys), is named /dev/pts/N inside (so tty, ttyname
// and job control work), and its slave belongs to the sandbox user. The
// master stays on the host; the slave is opened from it (TIOCGPTPEER),
// with no path looked up inside.
func (s *Sandbox) OpenPTY(cols, rows uint16) (master, slave *os.File, err error) {
	m, sl, err := OpenPTY(fmt.Sprintf("/proc/self/fd/%d", s.ptmx.Fd()), cols, rows)
	if err != nil {
		return nil, nil, err
	}
	// Made by the host's root: the sandbox user's, as its own would be.
	if err := unix.Fchown(int(sl.Fd()), s.hostUser, s.hostUser); err != nil {
		m.Close()
		sl.Close()
		return nil, nil, fmt.Errorf("chown: %w", err)
	}
	return m, sl, nil
}

// OpenPTY opens a new pseudo-terminal of that size from the ptmx at
// path: its master, and its slave opened from the master (TIOCGPTPEER:
// no path is looked up); ErrNoPTY when its devpts instance is full.
func OpenPTY(path string, cols, rows uint16) (master, slave *os.File, err error) {
	m, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return nil, nil, ErrNoPTY
		}
		return nil, nil, err
	}
	fail := func(what string, err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	rc, err := m.SyscallConn()
	if err != nil {
		return fail("raw conn", err)
	}
	sfd := -1
	var cerr error
	err = rc.Control(func(fd uintptr) {
		if cerr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); cerr != nil {
			return
		}
		if cerr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); cerr != nil {
			return
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
		if errno != 0 {
			cerr = errno
			return
		}
		sfd = int(r)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fail("set up", err)
	}
	return m, os.NewFile(uintptr(sfd), "pts"), nil
}

// HostUser is the host uid (and gid) of the sandbox user.
func (s *Sandbox) HostUser() int { return s.hostUser }

// Name is the sandbox's cgroup name.
func (s *Sandbox) Name() string { return s.spec.Name }

// kill sends SIGKILL to the init; the kernel then kills every process in
// the sandbox's pid namespace.
func (s *Sandbox) kill() {
	if s.pidfd >= 0 {
		if unix.PidfdSendSignal(s.pidfd, unix.SIGKILL, nil, 0) == nil {
			return
		}
	}
	if s.proc != nil {
		s.proc.Kill()
	}
}

// Kill ends every process in the sandbox without releasing its resources;
// the workspace stays readable. Close must still be called.
func (s *Sandbox) Kill() {
	s.kill()
}

// Close kills everything in the sandbox, waits until it is gone, and
// removes its cgroup. It is safe to call more than once and from any
// goroutine, and never gives up half-way.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		trace("close")
		s.kill()
		s.proc.Wait() // reaps the init; the kernel has reaped the rest
		trace("init reaped")
		<-s.errDone
		if tracing {
			os.Stderr.Write(s.initErr.Bytes())
		}
		s.ctl.close()
		<-s.dead
		// A process that joined the cgroup without entering the pid
		// namespace (a template child mid-join) is killed here.
		if err := s.cg.Kill(); err != nil {
			errs = append(errs, err)
		}
		trace("cgroup killed")
		if err := s.cg.Destroy(); err != nil {
			errs = append(errs, err)
		}
		trace("cgroup destroyed")
		if s.ws != nil {
			s.ws.Close()
		}
		if s.ruleset != nil {
			s.ruleset.Close()
		}
		if s.ptmx != nil {
			s.ptmx.Close()
		}
		if s.pidfd >= 0 {
			unix.Close(s.pidfd)
			s.pidfd = -1
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// entry is the sandbox entry of a program with limits l in a sandbox of
// this host (see planEntry).
func (h *Host) entry(l config.Limits) Entry {
	return planEntry(entryParams{
		capLast: h.capLast, seccomp: h.seccomp, landlock: h.abi > 0,
		uid: SandboxUID, gid: SandboxGID, rlimits: rlimitsFor(l), baseFilters: h.filters,
	})
}

// Entry is the sandbox entry of a program with limits l started in s by
// something other than its init (the Python template's child): the steps
// it must make and the state it must verify, exactly those the init's own
// programs get.
func (s *Sandbox) Entry(l config.Limits) Entry { return s.h.entry(l) }

// rlimitsFor returns the rlimits of every sandboxed program. There is no
// RLIMIT_FSIZE: the tmpfs sizes bound what a sandbox can store, and a file
// size limit only broke sparse writes at large offsets (the host refuses
// to stream a sparse file larger than the workspace on its own).
func rlimitsFor(l config.Limits) []jailinit.Rlimit {
	return []jailinit.Rlimit{
		{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.NoFile), Max: uint64(l.NoFile)},
		{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
		{Resource: unix.RLIMIT_STACK, Cur: 8 << 20, Max: 8 << 20},
		{Resource: unix.RLIMIT_MEMLOCK, Cur: 64 << 10, Max: 64 << 10},
		{Resource: unix.RLIMIT_MSGQUEUE, Cur: 0, Max: 0},
	}
}

// CappedBuffer keeps the first max bytes written to it: what a sandboxed
// process says on a pipe the host reads, which must never grow the host
// beyond max.
type CappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

// NewCappedBuffer returns a buffer that keeps max bytes.
func NewCappedBuffer(max int) *CappedBuffer { return &CappedBuffer{max: max} }

func (c *CappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *CappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf.Bytes()...)
}
