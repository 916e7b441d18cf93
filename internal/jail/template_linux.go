package jail

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/cleanup"
	"airlock/internal/errdefs"
	"airlock/internal/jailinit"
)

// TemplateSpec describes a template process: trusted code (the Python
// template interpreter) that runs as host root with a few capabilities, in
// private mount, network, ipc and uts namespaces whose root filesystem is
// laid out exactly like a sandbox's, so that everything it loads and
// caches has the paths a sandbox will see. It never runs sandboxed code;
// its children join sandboxes and drop everything before they do.
type TemplateSpec struct {
	Name     string // its cgroup's name
	Memory   int64
	Pids     int64
	Argv     []string
	Env      []string
	KeepCaps []int
	// Root is the root its sandboxes will have (nil: the host's): the
	// template's is laid out the same.
	Root *Root
}

// Template is a running template process. Conn is its fd 3 (SOCK_SEQPACKET).
type Template struct {
	initProc
	cg        *cgroup.Cgroup
	Conn      *net.UnixConn
	closeOnce sync.Once
	closeErr  error
}

// StartTemplate starts a template process.
func (h *Host) StartTemplate(ctx context.Context, spec TemplateSpec) (_ *Template, err error) {
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	cg, err := h.cg.New(spec.Name, cgroup.Resources{Memory: spec.Memory, Pids: spec.Pids, CPUs: float64(runtime.NumCPU())})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	undo.Add(func() error { cg.Kill(); return cg.Destroy() })
	t := &Template{cg: cg}
	attr := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Setsid:     true,
	}
	hostEnd, err := h.startInit(&t.initProc, []string{"GOMAXPROCS=1"}, attr, cg)
	if err != nil {
		return nil, fmt.Errorf("%w: start template: %v", errdefs.ErrUnavailable, err)
	}
	undo.AddFunc(func() { t.proc.Kill(); t.proc.Wait() })
	ctl, err := newConn(hostEnd, 64<<10)
	if err != nil {
		return nil, err
	}
	root := h.rootOf(spec.Root)
	root.Disk, root.Inodes, root.Shm = 64<<20, 4096, 1<<20
	// The template runs as root without CAP_DAC_OVERRIDE: its scratch
	// copies must be its own to be writable.
	root.UID, root.GID = 0, 0
	if spec.Root == nil {
		root.TmpCopy = h.tmpCopy
	}
	root.NoProc = true
	setup := &jailinit.SetupMsg{
		Root:     root,
		Template: &jailinit.TemplateMsg{Argv: spec.Argv, Env: spec.Env, KeepCaps: spec.KeepCaps},
		Rlimits: []jailinit.Rlimit{
			{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
			{Resource: unix.RLIMIT_NOFILE, Cur: 4096, Max: 4096},
		},
	}
	if err := sendSetup(ctl, setup); err != nil {
		ctl.close()
		return nil, fmt.Errorf("%w: template setup: %v", errdefs.ErrUnavailable, err)
	}
	t.Conn = ctl.c
	return t, nil
}

// Pid is the template's host pid.
func (t *Template) Pid() int { return t.proc.Pid }

// Diag returns what the template printed on stderr, for error messages.
func (t *Template) Diag() string {
	select {
	case <-t.errDone:
	case <-time.After(100 * time.Millisecond):
	}
	return string(t.initErr.Bytes())
}

// Close kills the template and removes its cgroup; it may be called more
// than once, from any goroutine.
func (t *Template) Close() error {
	t.closeOnce.Do(func() {
		t.proc.Kill()
		t.proc.Wait()
		t.Conn.Close()
		t.cg.Kill()
		t.closeErr = t.cg.Destroy()
	})
	return t.closeErr
}
