package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/cleanup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/privdir"
	"airlock/internal/rootfs"
	"airlock/internal/workspace"
)

// Options configure a Host.
type Options struct {
	Runsc    string // the runsc binary (see Find)
	Platform string // "systrap" or "ptrace"
	// StateDir is airlock's state directory; sandboxes live in its
	// "gvisor" subdirectory (root only).
	StateDir     string
	CacheDir     string
	CgroupParent string
	// RootFiles are extra read-only files in every sandbox's root (the
	// in-sandbox runtimes), as for the native jail.
	RootFiles map[string]string
	// Keeper, when set, is a binary that calls MainIfKeeper first (the
	// server's own): the init of every sandbox that asks (Spec.Keeper) is
	// then that binary's keeper and every program its child, so that they can be
	// checkpointed and restored with their programs (see keeper_linux.go).
	// Without it, programs are started with `runsc exec` and a restore
	// would kill them: Checkpoint is refused. Only sandboxes whose Spec
	// asks for it (Spec.Keeper) run it.
	Keeper string
	// KeeperDir holds the keeper's copies (see keepercopy_linux.go): a
	// checkpoint restores only with the copy it was taken with, so they
	// must last as long as the checkpoints do; "" is the state
	// directory's gvisor-keeper.
	KeeperDir string
}

// KeeperDir is where a server with configuration c keeps its keeper's
// copies: beside the paused sessions (persistence.dir, which outlives the
// server and its upgrades, where the state directory may not), else in
// the state directory.
func KeeperDir(c config.Config) string {
	if c.Persistence.Enabled {
		return filepath.Join(c.PersistenceDir(), ".gvisor-keepers")
	}
	return filepath.Join(c.StateDir, "gvisor-keeper")
}

// OptionsFrom derives Options from the configuration; runsc is the
// binary Find returned.
func OptionsFrom(c config.Config, runsc string) Options {
	o := Options{Runsc: runsc, Platform: c.GVisor.Platform, StateDir: c.StateDir, CacheDir: c.CacheDir, CgroupParent: c.CgroupParent, KeeperDir: KeeperDir(c)}
	if on, _ := c.GVisorCheckpoint(); on || c.GVisor.PoolImage {
		// This binary: its main runs MainIfKeeper first.
		o.Keeper, _ = os.Executable()
	}
	return o
}

// Host starts gVisor sandboxes.
type Host struct {
	opts    Options
	cg      *cgroup.Host
	dir     string // <state>/gvisor
	root    rootfs.Spec
	tmpCopy map[string]string
	version string
	seq     atomic.Uint64
	// keeper is the host's copy of Options.Keeper ("": none), named by
	// keeperDigest, in keeperDir.
	keeper, keeperDigest, keeperDir string
	// bound counts the live sandboxes bound to each keeper copy (by
	// digest), under boundMu: a sweep never removes one (a restored
	// sandbox's pause records its copy again).
	boundMu sync.Mutex
	bound   map[string]int
	// sealed: the images Seal marked, by directory, under sealMu.
	sealMu sync.Mutex
	sealed map[string]*imageSeal
}

// NewHost checks runsc and prepares the root template. cg is the cgroup
// host sandboxes' cgroups are made with (shared with the native jail).
func NewHost(ctx context.Context, o Options, cg *cgroup.Host) (*Host, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: gVisor sandboxes are started by root (runsc needs to build namespaces and mounts)", errdefs.ErrUnavailable)
	}
	if o.Platform == "" {
		o.Platform = "systrap"
	}
	v, err := Version(ctx, o.Runsc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	h := &Host{opts: o, cg: cg, dir: filepath.Join(o.StateDir, "gvisor"), version: v}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	// 0700: the sandboxes' workspaces are owned by uid 1000, which may be
	// a real user on the host; nobody but root may reach them.
	if err := privdir.Ensure(h.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	h.root = rootfs.DefaultSpec(filepath.Join(o.StateDir, "root"), "sandbox")
	h.root.Files = o.RootFiles
	if h.root.Template, err = rootfs.PrepareTemplate(o.StateDir, h.root); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	h.keeperDir = o.KeeperDir
	if h.keeperDir == "" {
		h.keeperDir = filepath.Join(o.StateDir, "gvisor-keeper")
	}
	if o.Keeper != "" {
		if h.keeper, h.keeperDigest, err = copyKeeper(h.keeperDir, o.Keeper); err != nil {
			return nil, fmt.Errorf("%w: the gVisor keeper's copy in %s: %v", errdefs.ErrUnavailable, h.keeperDir, err)
		}
	}
	h.tmpCopy = map[string]string{}
	mpl := filepath.Join(o.CacheDir, "matplotlib")
	if st, err := os.Stat(mpl); err == nil && st.IsDir() {
		h.tmpCopy["matplotlib"] = mpl
	}
	return h, nil
}

// Dir is the directory the host's sandboxes live in (root only; Sweep
// empties it).
func (h *Host) Dir() string { return h.dir }

// RunscVersion is which runsc the host runs (Version).
func (h *Host) RunscVersion() string { return h.version }

// Runsc is the binary in use.
func (h *Host) Runsc() string { return h.opts.Runsc }

// Describe says how sandboxes are started, for logs and doctor.
func (h *Host) Describe() string {
	return fmt.Sprintf("%s (%s), platform %s, --network=none (host, in a namespace of airlock's own, for sessions with egress)", h.opts.Runsc, h.version, h.opts.Platform)
}

// Spec describes one sandbox.
type Spec struct {
	// Name names the sandbox's cgroup and state; unique among live ones.
	Name   string
	Limits config.Limits
	// ReadyTimeout bounds the boot; 30s when zero.
	ReadyTimeout time.Duration
	// Root is the sandbox's root (jail.Host.ImageRoot, whose static part
	// is this kernel's too); nil is the host's.
	Root *jail.Root
	// NetNS, when set, is a network namespace of airlock's own (see
	// egress.NewNamespace) the sandbox joins with runsc's host network
	// (--network=host): its sockets are the host kernel's, in that
	// namespace only, where airlock's egress gate listens. Without it
	// the sandbox has gVisor's own loopback and nothing else
	// (--network=none). Start takes the handle: the sandbox closes it.
	NetNS *os.File
	// Keeper asks for the host's keeper as the sandbox's init, so that
	// it can be checkpointed with its programs (see Options.Keeper);
	// without it, or on a host without one, programs are started with
	// `runsc exec` (no relay) and Checkpoint is refused. Only a sandbox
	// that may be checkpointed should ask: the relay costs each program.
	// A restore always runs the keeper its checkpoint was taken with.
	Keeper bool
	// Background makes the sandbox's cgroup with the lowest CPU weight
	// (cgroup.SetBackground) before runsc starts, so that its boot or
	// restore (the runsc commands, the Sentry's load, the gofer) takes
	// only the CPU that others leave: a pool's refill, not a restore a
	// request waits for. Whoever hands it to a session gives it the
	// normal weight.
	Background bool
}

// Sandbox is a running gVisor sandbox: `runsc run` of a container whose
// init only waits, and the programs started in it with `runsc exec`.
type Sandbox struct {
	h      *Host
	spec   Spec
	id     string // the runsc container id
	dir    string // everything of this sandbox on the host
	cg     *cgroup.Cgroup
	ws     *workspace.Dir
	run    *exec.Cmd
	runErr *jail.CappedBuffer
	dead   chan struct{} // closed when `runsc run` has exited
	life   *os.File      // the init exits when this closes
	netns  *os.File      // Spec.NetNS
	// keeper is the keeper copy bound as its init ("": none), named by
	// keeperDigest.
	keeper, keeperDigest string

	mu     sync.Mutex
	execs  sync.WaitGroup
	seq    int
	closed bool
	// execErr is what the last `runsc exec` that failed said, for the log.
	execErr string

	closeOnce sync.Once
	closeErr  error

	// restored: how long its restore's stages took.
	restored RestoreTimes
}

// Start boots a sandbox and waits until its init runs.
func (h *Host) Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	return h.start(ctx, spec, nil)
}

// start boots a sandbox, or restores one from a checkpoint (rs).
func (h *Host) start(ctx context.Context, spec Spec, rs *restoreArgs) (_ *Sandbox, err error) {
	defer func() {
		if err != nil && spec.NetNS != nil {
			spec.NetNS.Close()
		}
	}()
	if rs != nil {
		// A restore that fails on a corrupt image fails for that reason,
		// whatever runsc made of it.
		defer func() {
			if verr := rs.verify(); err != nil && verr != nil {
				err = verr
			}
		}()
	}
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 30 * time.Second
	}
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00") || spec.Name[0] == '.' {
		return nil, fmt.Errorf("gvisor: bad name %q", spec.Name)
	}
	l := spec.Limits
	s := &Sandbox{h: h, spec: spec, id: "airlock-" + spec.Name, dir: filepath.Join(h.dir, spec.Name), dead: make(chan struct{}), netns: spec.NetNS}
	switch {
	case rs != nil:
		s.keeper, s.keeperDigest = rs.keeper, rs.keeperDigest
	case spec.Keeper && spec.NetNS == nil:
		s.keeper, s.keeperDigest = h.keeper, h.keeperDigest
	}
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	if s.keeper != "" {
		h.bind(s.keeperDigest, 1)
		undo.AddFunc(func() { h.bind(s.keeperDigest, -1) })
	}
	stage := time.Now()
	// A directory left by a sandbox of the same name (a crash) goes first.
	removeDir(s.dir)
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox could not be prepared", err)
	}
	undo.AddFunc(func() { removeDir(s.dir) })
	// airlock's cgroup, made before runsc runs: runsc then joins it and
	// leaves its limits (and its removal) to airlock.
	cg, err := h.cg.New(spec.Name, hostResources(l))
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the sandbox's cgroup could not be created", err)
	}
	s.cg = cg
	undo.AddFunc(func() { cg.Kill(); cg.Destroy(); removeRunscCgroups(h.opts.CgroupParent, spec.Name) })
	if spec.Background {
		if err := cg.SetBackground(true); err != nil {
			return nil, errdefs.Private(errdefs.ErrUnavailable, "the sandbox's cgroup could not be made", err)
		}
	}
	for _, d := range []string{"workspace", "tmp", "runsc"} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o700); err != nil {
			return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox could not be prepared", err)
		}
	}
	if err := s.mountScratch(l); err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox's scratch space could not be mounted", err)
	}
	wsfd, err := unix.Open(filepath.Join(s.dir, "workspace"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox's workspace could not be opened", err)
	}
	s.ws = workspace.New(wsfd, rootfs.UserID, rootfs.GroupID, hostCopy)
	undo.AddFunc(func() { s.ws.Close() })
	if err := s.writeBundle(); err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox's bundle could not be written", err)
	}
	if rs != nil {
		rs.times.Prepare = time.Since(stage)
		stage = time.Now()
		if rs.fill != nil {
			if err := rs.fill(s.ws); err != nil {
				return nil, err
			}
		}
		rs.times.Fill = time.Since(stage)
		stage = time.Now()
	}

	ready, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ready.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		readyW.Close()
		return nil, err
	}
	defer devnull.Close()
	// The init holds the read end of a pipe only the server writes to:
	// should the server die (kill -9), the init reads end of file and
	// exits, and runsc tears the sandbox down, as native inits do when
	// their control socket closes.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	s.life = lifeW
	undo.AddFunc(func() { lifeW.Close() })
	s.runErr = jail.NewCappedBuffer(16 << 10)
	bundle := filepath.Join(s.dir, "bundle")
	switch {
	case rs != nil:
		s.run = exec.Command(h.opts.Runsc, append(s.globalFlags(), "restore", "--image-path", rs.dir, "--bundle", bundle, s.id)...)
	case s.keeper != "":
		s.run = exec.Command(h.opts.Runsc, append(s.globalFlags(), "run", "--bundle", bundle, s.id)...)
	default:
		s.run = exec.Command(h.opts.Runsc, append(s.globalFlags(), "run", "--pass-fd=3:3", "--bundle", bundle, s.id)...)
	}
	s.run.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	s.run.Stdin, s.run.Stdout, s.run.Stderr = devnull, readyW, s.runErr
	s.run.ExtraFiles = []*os.File{lifeR}
	if s.keeper != "" {
		// The keeper holds the life pipe as its stdin: the one host
		// descriptor besides its output a restore gives it again.
		s.run.Stdin, s.run.ExtraFiles = lifeR, nil
	}
	if rs != nil {
		// A restored keeper says it runs when asked (see keeperMain).
		lifeW.Write([]byte("p"))
	}
	// Its own session: a terminal's signals to the server never reach it.
	s.run.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.netns != nil {
		err = startWithout(s.run, netCaps)
	} else {
		err = s.run.Start()
	}
	readyW.Close()
	lifeR.Close()
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "runsc could not be started", err)
	}
	go func() {
		s.run.Wait()
		close(s.dead)
	}()
	undo.AddFunc(func() { s.stop() })

	// The init writes one line once the container runs.
	deadline := time.Now().Add(spec.ReadyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ready.SetReadDeadline(deadline)
	line := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(ready).ReadString('\n')
		line <- err
	}()
	var verified <-chan error
	if rs != nil {
		verified = rs.verified
	}
	for booted := false; !booted; {
		select {
		case err = <-line:
			booted = true
		case <-ctx.Done():
			err = ctx.Err()
			ready.SetReadDeadline(time.Now())
			<-line
			booted = true
		case verr := <-verified:
			// A corrupt image is not waited on (runsc may never finish
			// with it); a sound one is the boot's to finish.
			rs.verr, rs.checked, verified = verr, true, nil
			if verr != nil {
				return nil, verr
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox did not boot", fmt.Errorf("%v: %s", err, s.diag()))
	}
	if err := s.checkNetwork(); err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox's network is not what airlock gave it", err)
	}
	if rs != nil {
		rs.times.Runsc = time.Since(stage)
		// The restored sandbox is used only once its image has matched.
		if err := rs.verify(); err != nil {
			return nil, err
		}
		s.restored = rs.times
	}
	undo.Release()
	return s, nil
}

// netCaps are what runsc gives the Sentry under host networking when it
// holds them itself (CAP_NET_ADMIN, CAP_NET_BIND_SERVICE, CAP_NET_RAW,
// for applications that need them): the guest's binds and socket options
// are then the Sentry's on the host, whatever the guest's own
// capabilities, so code running as uid 1000 could listen on 127.0.0.1:53
// or :443 before the egress gate does, or force 1 GiB socket buffers
// (SO_RCVBUFFORCE). A sandbox with a network namespace is started without
// them: its sockets get what a native sandbox's get. CAP_DAC_READ_SEARCH
// goes too: host networking leaves the Sentry and the gofer in the host's
// user namespace, where it would let an escaped one open any host file
// by handle (open_by_handle_at); runsc does not need it.
var netCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW, unix.CAP_DAC_READ_SEARCH}

// startWithout starts cmd with caps out of its bounding set, so that
// neither it nor anything it executes (runsc's boot, the Sentry, the
// gofer) can hold them. Capabilities belong to a thread: the drop happens
// on a locked thread that forks cmd and then ends with its goroutine
// (never unlocked, so never reused with fewer capabilities).
func startWithout(cmd *exec.Cmd, caps []uintptr) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, c := range caps {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
				errc <- fmt.Errorf("drop capability %d: %w", c, err)
				return
			}
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// netCapsOf reports which of netCaps pid may use or gain (its permitted
// and bounding sets).
func netCapsOf(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var mask, held uint64
	for _, c := range netCaps {
		mask |= 1 << c
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "CapPrm" || k == "CapBnd" {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("%s of %d: %w", k, pid, err)
			}
			held |= n & mask
		}
	}
	return held, nil
}

// checkNetwork makes sure, once the sandbox runs, that none of its
// processes shares the server's network namespace and, given one of
// airlock's (Spec.NetNS), that the Sentry is in it and no process holds
// netCaps: runsc was told so, and what it was told is believed only once
// seen.
func (s *Sandbox) checkNetwork() error {
	own, err := nsID("/proc/self/ns/net")
	if err != nil {
		return err
	}
	var want [2]uint64
	if s.netns != nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(s.netns.Fd()), &st); err != nil {
			return err
		}
		want = [2]uint64{st.Dev, st.Ino}
	}
	pids, err := s.cg.Pids()
	if err != nil {
		return err
	}
	seen := false
	for _, pid := range pids {
		id, err := nsID(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue // gone meanwhile
		}
		if id == own {
			return fmt.Errorf("process %d is in the server's network namespace", pid)
		}
		if s.netns != nil {
			if caps, err := netCapsOf(pid); err == nil && caps != 0 {
				return fmt.Errorf("process %d holds network capabilities (%#x) in the sandbox's namespace", pid, caps)
			}
		}
		seen = seen || id == want
	}
	if s.netns != nil && !seen {
		return errors.New("no process of the sandbox is in its network namespace")
	}
	return nil
}

func nsID(path string) ([2]uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return [2]uint64{}, err
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}

// globalFlags are runsc's flags before the command, for every command.
func (s *Sandbox) globalFlags() []string {
	return []string{
		"--root", filepath.Join(s.dir, "runsc"),
		"--network=" + s.network(),
		"--platform=" + s.h.opts.Platform,
		// runsc's own log: by default it goes to stdout, which for exec
		// is the program's.
		"--log=" + filepath.Join(s.dir, "runsc.log"),
	}
}

// network is runsc's --network: host (sockets are the host kernel's,
// inside airlock's namespace: see Spec.NetNS) or none.
func (s *Sandbox) network() string {
	if s.netns != nil {
		return "host"
	}
	return "none"
}

// NetNS is the sandbox's network namespace (Spec.NetNS); false when it
// has none but gVisor's own loopback.
func (s *Sandbox) NetNS() (*os.File, bool) { return s.netns, s.netns != nil }

// diag is what runsc said, for the log.
func (s *Sandbox) diag() string {
	var parts []string
	if s.runErr != nil {
		if b := bytes.TrimSpace(s.runErr.Bytes()); len(b) > 0 {
			parts = append(parts, "runsc: "+string(b))
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "runsc.log")); err == nil {
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		if b = bytes.TrimSpace(b); len(b) > 0 {
			parts = append(parts, "log: "+string(b))
		}
	}
	s.mu.Lock()
	if s.execErr != "" {
		parts = append(parts, "runsc exec: "+s.execErr)
	}
	s.mu.Unlock()
	if len(parts) == 0 {
		return "runsc said nothing"
	}
	return strings.Join(parts, "; ")
}

// The allowance airlock adds to a gVisor sandbox's host cgroup for gVisor
// itself: the Sentry and the gofer are in the cgroup with the code (an
// idle Sentry with a Python runtime is about 40 threads and 20-30 MiB of
// its own), and the limits a client asks for are for its code.
const (
	OverheadMemory = 48 << 20
	OverheadPids   = 64
)

// hostResources are the host cgroup limits of a sandbox with limits l.
func hostResources(l config.Limits) cgroup.Resources {
	return cgroup.Resources{Memory: HostMemory(l), Pids: int64(l.Pids) + OverheadPids, CPUs: l.CPUs}
}

// HostMemory is the host cgroup's memory limit of a sandbox with limits l.
func HostMemory(l config.Limits) int64 { return int64(l.Memory) + OverheadMemory }

// scratch mount flags, as in the native jail.
const scratchFlags = unix.MS_NOSUID | unix.MS_NODEV

func scratchData(l config.Limits) string {
	return fmt.Sprintf("size=%d,nr_inodes=%d", int64(l.Disk), int64(l.Inodes))
}

// mountScratch mounts the sandbox's /workspace and /tmp: tmpfs mounts of
// airlock's own on the host, sized by the limits, bound into the sandbox.
func (s *Sandbox) mountScratch(l config.Limits) error {
	ws, tmp := filepath.Join(s.dir, "workspace"), filepath.Join(s.dir, "tmp")
	if err := unix.Mount("tmpfs", ws, "tmpfs", scratchFlags, fmt.Sprintf("%s,mode=0755,uid=%d,gid=%d", scratchData(l), rootfs.UserID, rootfs.GroupID)); err != nil {
		return fmt.Errorf("mount workspace: %w", err)
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", scratchFlags, scratchData(l)+",mode=1777"); err != nil {
		return fmt.Errorf("mount tmp: %w", err)
	}
	if s.spec.Root != nil {
		return nil // the host's caches are not a template's
	}
	for name, src := range s.h.tmpCopy {
		if err := copyTree(src, filepath.Join(tmp, name), rootfs.UserID, rootfs.GroupID); err != nil {
			return err
		}
	}
	return nil
}

// Adapt gives a sandbox whose scratch trees are still empty new limits:
// the cgroup's and the tmpfs sizes. RLIMIT_NOFILE of a running program
// cannot change from outside gVisor: a different one is refused.
func (s *Sandbox) Adapt(l config.Limits) error {
	if l.NoFile != s.spec.Limits.NoFile {
		return fmt.Errorf("gvisor: adapt: RLIMIT_NOFILE %d of the running program cannot become %d", s.spec.Limits.NoFile, l.NoFile)
	}
	if err := s.cg.Set(hostResources(l)); err != nil {
		return err
	}
	for _, d := range []string{"workspace", "tmp"} {
		if err := unix.Mount("", filepath.Join(s.dir, d), "", unix.MS_REMOUNT|scratchFlags, scratchData(l)); err != nil {
			return fmt.Errorf("gvisor: adapt %s: %w", d, err)
		}
	}
	s.spec.Limits = l
	return nil
}

// Exec starts p in the sandbox with `runsc exec`. Its exit arrives on the
// returned channel (buffered, sent once). pid is its pid inside the
// sandbox.
func (s *Sandbox) Exec(p Process) (pid int, exit <-chan Exit, err error) {
	if len(p.Argv) == 0 || len(p.Files) < 3 {
		return 0, nil, fmt.Errorf("%w: empty command or missing stdio", errdefs.ErrInvalidArgument)
	}
	l := s.spec.Limits
	if p.NoFile != 0 {
		l.NoFile = config.Count(p.NoFile)
	}
	proc, err := processSpec(p.Argv, p.Env, p.Dir, l)
	if err != nil {
		return 0, nil, err
	}
	proc.Terminal = p.Terminal
	if s.keeper != "" && !p.Terminal {
		// The keeper's child, through a relay (see keeper_linux.go). A
		// terminal's program keeps runsc's own tty handling: it does not
		// outlive a checkpoint, which waits for commands to end anyway.
		return s.relay(keeperReq{Op: "spawn", Proc: &proc}, p.Files)
	}
	n, done, err := s.beginExec()
	if err != nil {
		return 0, nil, err
	}
	started := false
	defer func() {
		if !started {
			done()
		}
	}()
	procFile, err := s.writeProc(n, proc)
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(procFile)
	pidFile := filepath.Join(s.dir, fmt.Sprintf("exec-%d.pid", n))
	// runsc writes the pid inside into a pid file once the program runs,
	// in place when the file is not a regular one: a FIFO, read as soon
	// as it is written (no polling).
	if err := unix.Mkfifo(pidFile, 0o600); err != nil {
		return 0, nil, err
	}
	defer os.Remove(pidFile)
	pidR, err := os.OpenFile(pidFile, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, nil, err
	}
	defer pidR.Close()
	// Our own writer keeps the FIFO from reading as empty before runsc
	// opens it.
	pidW, err := os.OpenFile(pidFile, os.O_WRONLY, 0)
	if err != nil {
		return 0, nil, err
	}
	defer pidW.Close()
	// runsc exec's own reader, which it never reads: opening a FIFO to
	// write waits for a reader, and should the server die before runsc
	// writes the pid (kill -9 while a pool refill starts a runtime),
	// runsc would wait in open for good, outliving the server and the
	// sandbox, out of reach of the next server's sweep.
	runscR, err := os.OpenFile(pidFile, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, nil, err
	}
	defer runscR.Close()
	// Every descriptor of the program, its stdio included, is passed
	// with --pass-fd: runsc's own stdio stays runsc's, so that what it
	// says when it fails (the sandbox died under it) goes to the log,
	// not into the program's output.
	cmd, said := s.execCommand(procFile, p.Files, "--internal-pid-file", pidFile)
	cmd.ExtraFiles = append(slices.Clip(cmd.ExtraFiles), runscR) // not passed on
	if p.Terminal {
		// The program's stdio is a terminal (the Sentry imports the
		// host pty as its tty: window size, its own job control). runsc
		// holds it as its controlling terminal, so that what the
		// terminal signals (Ctrl-C, Ctrl-Z, a resize's SIGWINCH) reaches
		// runsc, which passes it on to the foreground process group
		// inside.
		cmd.Stdin = p.Files[0]
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, errdefs.Private(errdefs.ErrUnavailable, "runsc exec could not be started", err)
	}
	started = true
	exited := s.watchExec(cmd, said, done)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 32)
		n, _ := pidR.Read(buf)
		v, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
		got <- v
	}()
	ch := make(chan Exit, 1)
	select {
	case pid = <-got:
	case e := <-exited:
		// It ended before its pid was read: maybe it never ran.
		pidW.Close()
		pid = <-got
		if pid <= 0 {
			return 0, nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox could not start the program", fmt.Errorf("runsc exec: %v; %s", e.Status, s.diag()))
		}
		e.Pid = pid
		ch <- e
		return pid, ch, nil
	}
	if pid <= 0 {
		return 0, nil, fmt.Errorf("gvisor: runsc wrote no pid")
	}
	go func() {
		e := <-exited
		e.Pid = pid
		ch <- e
	}()
	return pid, ch, nil
}

// execCommand is `runsc exec` of the process in procFile with files as
// its descriptors 0, 1, 2...; said collects what runsc itself says.
func (s *Sandbox) execCommand(procFile string, files []*os.File, flags ...string) (cmd *exec.Cmd, said *jail.CappedBuffer) {
	args := append(append(s.globalFlags(), "exec", "--process", procFile), flags...)
	for i := range files {
		args = append(args, fmt.Sprintf("--pass-fd=%d:%d", 3+i, i))
	}
	cmd = exec.Command(s.h.opts.Runsc, append(args, s.id)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	said = jail.NewCappedBuffer(4 << 10)
	cmd.Stdout, cmd.Stderr = said, said // stdin: /dev/null
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, said
}

// writeProc writes exec n's process description for `runsc exec
// --process`, owner-only: in a file, not on runsc's command line, since
// the environment may hold secrets and command lines are public.
func (s *Sandbox) writeProc(n int, proc any) (string, error) {
	procFile := filepath.Join(s.dir, fmt.Sprintf("exec-%d.json", n))
	b, err := json.Marshal(proc)
	if err != nil {
		return "", err
	}
	return procFile, os.WriteFile(procFile, b, 0o600)
}

// beginExec counts one more `runsc exec` (Close waits for them), numbered
// n; done uncounts it.
func (s *Sandbox) beginExec() (n int, done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, fmt.Errorf("%w: the sandbox ended", errdefs.ErrGone)
	}
	s.seq++
	s.execs.Add(1)
	return s.seq, s.execs.Done, nil
}

// watchExec waits for a started `runsc exec` and sends its exit, then
// calls done.
func (s *Sandbox) watchExec(cmd *exec.Cmd, said *jail.CappedBuffer, done func()) <-chan Exit {
	exited := make(chan Exit, 1)
	go func() {
		defer done()
		cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		lost := code == 128 || code < 0
		if lost {
			s.mu.Lock()
			s.execErr = string(bytes.TrimSpace(said.Bytes()))
			s.mu.Unlock()
		}
		exited <- Exit{Status: statusOf(code), Lost: lost}
	}()
	return exited
}

// Signal sends sig to the process pid inside the sandbox, or to its
// process group.
func (s *Sandbox) Signal(pid int, sig syscall.Signal, group bool) error {
	if pid <= 1 {
		return fmt.Errorf("gvisor: refusing to signal pid %d", pid)
	}
	which := "--pid"
	if group {
		which = "--pgid"
	}
	cmd := exec.Command(s.h.opts.Runsc, append(s.globalFlags(), "kill", fmt.Sprintf("%s=%d", which, pid), s.id, strconv.Itoa(int(sig)))...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gvisor: kill: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Limits are the sandbox's current limits.
func (s *Sandbox) Limits() config.Limits { return s.spec.Limits }

// Name is the sandbox's cgroup name.
func (s *Sandbox) Name() string { return s.spec.Name }

// ID is the sandbox's runsc container id.
func (s *Sandbox) ID() string { return s.id }

// Cgroup is the sandbox's cgroup.
func (s *Sandbox) Cgroup() *cgroup.Cgroup { return s.cg }

// Workspace is the host's handle on /workspace.
func (s *Sandbox) Workspace() *workspace.Dir { return s.ws }

// Dead is closed when the sandbox is gone (`runsc run` exited).
func (s *Sandbox) Dead() <-chan struct{} { return s.dead }

// Kill ends every process of the sandbox (the Sentry, the gofer and with
// them every program) and returns once the sandbox is dead (runsc has
// noticed), so that nobody sees it alive after its kill; the workspace
// stays readable until Close.
func (s *Sandbox) Kill() {
	s.cg.Kill()
	select {
	case <-s.dead:
	case <-time.After(10 * time.Second):
	}
}

// runscStuck bounds how long stop waits for `runsc run` to end once its
// sandbox is killed (a variable for tests).
var runscStuck = 10 * time.Second

// stop kills the sandbox and waits for `runsc run` to clean up after it.
func (s *Sandbox) stop() {
	s.cg.Kill()
	select {
	case <-s.dead:
	case <-time.After(runscStuck):
		// runsc itself is stuck; it is not in the cgroup. Its children
		// (the Sentry's and the gofer's processes, killed with the
		// cgroup, which it did not reap) become the server's when it
		// dies (a child subreaper): they are reaped through pidfds taken
		// while they were still runsc's, never by a pid.
		kids := childPidfds(s.run.Process.Pid)
		s.run.Process.Kill()
		<-s.dead
		for _, fd := range kids {
			go func() {
				// ECHILD at once if it went to another reaper instead.
				unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED, nil)
				unix.Close(fd)
			}()
		}
	}
}

// childPidfds returns pidfds of the children of process pid.
func childPidfds(pid int) []int {
	var fds []int
	for _, c := range jail.ChildrenOf(pid) {
		fd, err := unix.PidfdOpen(c, 0)
		if err != nil {
			continue // gone
		}
		if jail.ParentOf(c) != pid { // reaped, and the pid reused
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
	}
	return fds
}

// Close kills everything in the sandbox, waits until it is gone, and
// removes every trace of it: runsc's state, the mounts, the cgroups.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		var errs []error
		s.stop()
		// Every `runsc exec` ends once the sandbox is gone.
		s.execs.Wait()
		// What runsc's own cleanup may have missed.
		del := exec.Command(s.h.opts.Runsc, append(s.globalFlags(), "delete", "--force", s.id)...)
		del.Run()
		if err := s.cg.Kill(); err != nil {
			errs = append(errs, err)
		}
		if err := s.cg.Destroy(); err != nil {
			errs = append(errs, err)
		}
		removeRunscCgroups(s.h.opts.CgroupParent, s.spec.Name)
		s.life.Close()
		s.ws.Close()
		if s.netns != nil {
			s.netns.Close()
		}
		if err := removeDir(s.dir); err != nil {
			errs = append(errs, err)
		}
		if s.keeper != "" {
			s.h.bind(s.keeperDigest, -1)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// removeDir unmounts everything under dir (the scratch tmpfs mounts,
// runsc's null-netns), then removes it.
func removeDir(dir string) error {
	for _, m := range mountsUnder(dir) {
		// Mounts can be stacked: detach until none is left.
		for i := 0; i < 16 && unix.Unmount(m, unix.MNT_DETACH) == nil; i++ {
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("gvisor: remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescape(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest first.
	for i := 0; i < len(out); i++ {
		for j := i + 1; j < len(out); j++ {
			if len(out[j]) > len(out[i]) {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeRunscCgroups removes the cgroups runsc made for sandbox name in
// the v1 hierarchies airlock does not use itself (blkio, cpuset,
// devices...), should runsc not have removed them; their processes are
// gone with the sandbox's.
func removeRunscCgroups(parent, name string) {
	for _, root := range cgroupRoots() {
		unix.Rmdir(filepath.Join(root, parent, name))
	}
}

// cgroupRoots lists the mount points of the cgroup hierarchies.
func cgroupRoots() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(line)
		if !ok || len(f) < 5 {
			continue
		}
		if typ := strings.Fields(post); len(typ) > 0 && (typ[0] == "cgroup" || typ[0] == "cgroup2") {
			out = append(out, unescape(f[4]))
		}
	}
	return out
}

// Sweep removes what sandboxes of a killed server left: every sandbox
// directory (its mounts first) and runsc's cgroups named prefix* under
// the parent. airlock's own cgroups (and the processes in them: Sentry,
// gofer) are swept by the cgroup host; an orphaned `runsc run` exits when
// its Sentry is killed.
func (h *Host) Sweep(prefix string) error { return Sweep(h.opts.StateDir, h.opts.CgroupParent, prefix) }

// Sweep is Host.Sweep without a host: a server that does not use gVisor
// now still removes what one that did left behind. It needs no runsc.
func Sweep(stateDir, cgroupParent, prefix string) error {
	var errs []error
	dir := filepath.Join(stateDir, "gvisor")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if err := removeDir(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	for _, root := range cgroupRoots() {
		dir := filepath.Join(root, cgroupParent)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				killCgroup(filepath.Join(dir, e.Name()))
				unix.Rmdir(filepath.Join(dir, e.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// Close removes the parent cgroups runsc made in hierarchies airlock does
// not use, if nothing uses them. Every sandbox must be closed first.
func (h *Host) Close() error {
	for _, root := range cgroupRoots() {
		d := filepath.Join(root, h.opts.CgroupParent)
		// Only leaves runsc made: airlock's own parent goes with the
		// cgroup host, and a busy one stays (EBUSY, ENOTEMPTY).
		for d != root && strings.HasPrefix(d, root+"/") {
			if unix.Rmdir(d) != nil {
				break
			}
			d = filepath.Dir(d)
		}
	}
	return nil
}

// killCgroup kills the processes of a v1 or v2 cgroup directory.
func killCgroup(dir string) {
	for i := 0; i < 50; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// hostCopy writes a file of the workspace from the host (gVisor has no
// init of airlock's to write it from inside): the tmpfs's size still
// bounds it.
func hostCopy(dst *os.File, src io.Reader) (int64, error) { return io.Copy(dst, src) }

// copyTree copies the regular files of src into dst, owned by uid:gid.
func copyTree(src, dst string, uid, gid int) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Lchown(target, uid, gid)
		case d.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, in)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			return os.Lchown(target, uid, gid)
		}
		return nil
	})
}

// ProbeResult is what a probe program saw inside a gVisor sandbox.
type ProbeResult struct {
	Boot       time.Duration // until the sandbox's init ran
	Exec       time.Duration // one `runsc exec` of the probe
	Kernel     string        // uname -r inside (gVisor's, not the host's)
	UID        string
	Interfaces []string
}

// Probe boots the sandbox spec describes, runs a probe program in it and
// tears it down: the proof doctor and the server give that gVisor really
// works here, with the network mode sessions will use.
func (h *Host) Probe(ctx context.Context, spec Spec) (ProbeResult, error) {
	var r ProbeResult
	start := time.Now()
	sb, err := h.Start(ctx, spec)
	if err != nil {
		return r, err
	}
	defer sb.Close()
	r.Boot = time.Since(start)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return r, err
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return r, err
	}
	defer outR.Close()
	start = time.Now()
	_, exit, err := sb.Exec(Process{
		Argv:  []string{"/bin/sh", "-c", "uname -r; id -u; tail -n +3 /proc/net/dev | cut -d: -f1"},
		Env:   []string{"PATH=/usr/bin:/bin"},
		Files: []*os.File{devnull, outW, outW},
	})
	outW.Close()
	if err != nil {
		return r, err
	}
	out, _ := io.ReadAll(io.LimitReader(outR, 64<<10))
	e := <-exit
	r.Exec = time.Since(start)
	if !e.Status.Exited() || e.Status.ExitStatus() != 0 {
		return r, fmt.Errorf("the probe exited with %v: %s", e.Status, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) < 2 {
		return r, fmt.Errorf("the probe said %q", out)
	}
	r.Kernel, r.UID, r.Interfaces = lines[0], lines[1], lines[2:]
	return r, nil
}
