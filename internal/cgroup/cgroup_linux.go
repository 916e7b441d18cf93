package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 hierarchies a sandbox cgroup is created in.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// Host is the set of hierarchies and the parent cgroup sandboxes live under.
type Host struct {
	v2      bool
	v2Dir   string            // parent directory on the unified hierarchy
	v1Dirs  map[string]string // controller -> parent directory
	v1Mnts  map[string]string // controller -> its hierarchy's mount point
	v1Roots map[string]string // controller -> the cgroup mounted there
	memsw   bool              // v1 swap accounting present
	// made: the directories Open created (the parent, and any above it),
	// outermost first; Close removes them once they are empty.
	made []string

	notifyOnce sync.Once
	notify     *notifier
	notifyErr  error
}

// Open finds the hierarchies, creates the parent cgroup and, on v2,
// enables the memory, pids and cpu controllers for its children.
func Open(parent string) (*Host, error) {
	if parent == "" || filepath.IsAbs(parent) || strings.Contains(parent, "..") {
		return nil, fmt.Errorf("cgroup: bad parent %q", parent)
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return openV2(parent)
	}
	return openV1(parent)
}

func openV2(parent string) (*Host, error) {
	const root = "/sys/fs/cgroup"
	return openV2At(root, selfV2Dir(root), parent, []string{"memory", "pids", "cpu"})
}

// LeafName is the cgroup airlock moves itself into when the cgroup it runs
// in is the one it must delegate from (see openV2At).
const LeafName = "airlock-server"

// openV2At creates parent under the v2 hierarchy at root and enables want
// from root down to it. self is the cgroup this process is in ("" if not
// under root).
//
// In a pod, root is the container's own cgroup (a cgroup namespace), and
// airlock, its main process, is in it. cgroup v2's no-internal-process
// rule refuses to enable controllers for the children of a cgroup that
// has processes of its own (EBUSY), so airlock first moves itself, and
// whatever else runs in that cgroup, into a leaf, root/airlock-server,
// then enables them. On a host, root is the hierarchy's real root, to
// which the rule does not apply, and nothing moves.
func openV2At(root, self, parent string, want []string) (*Host, error) {
	dir := filepath.Join(root, parent)
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	for _, c := range want {
		if !hasWord(string(avail), c) {
			return nil, fmt.Errorf("cgroup v2: controller %q is not available at %s", c, root)
		}
	}
	h := &Host{v2: true, v2Dir: dir}
	enable := func(cur string) error {
		err := enableControllers(cur, want)
		if err != nil && errors.Is(err, unix.EBUSY) && self != "" && cur == self {
			leaf, merr := moveToLeaf(cur)
			if merr != nil {
				return fmt.Errorf("%w (moving this process into a leaf cgroup first failed: %v)", err, merr)
			}
			self = leaf
			err = enableControllers(cur, want)
		}
		return err
	}
	if err := enable(root); err != nil {
		return nil, err
	}
	cur := root
	for _, part := range strings.Split(parent, "/") {
		cur = filepath.Join(cur, part)
		if err := h.mkdir(cur); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := enable(cur); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// selfV2Dir is the directory of this process's v2 cgroup under root, ""
// when /proc/self/cgroup names none.
func selfV2Dir(root string) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") && !strings.Contains(p, "..") {
			return filepath.Join(root, p)
		}
	}
	return ""
}

// moveToLeaf moves this process, then every other process of dir, into
// dir/LeafName, and returns the leaf.
func moveToLeaf(dir string) (string, error) {
	leaf := filepath.Join(dir, LeafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := cgroups.WriteFile(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		return "", err
	}
	procs, err := cgroups.ReadFile(dir, "cgroup.procs")
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(procs) {
		// One that exited meanwhile is gone from dir anyway.
		if err := cgroups.WriteFile(leaf, "cgroup.procs", f); err != nil && !errors.Is(err, unix.ESRCH) {
			return "", fmt.Errorf("move process %s: %w", f, err)
		}
	}
	return leaf, nil
}

// mkdir creates dir if it is missing, remembering that it did.
func (h *Host) mkdir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		h.made = append(h.made, dir)
		return nil
	}
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	return err
}

func enableControllers(dir string, want []string) error {
	have, err := cgroups.ReadFile(dir, "cgroup.subtree_control")
	if err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	var add []string
	for _, c := range want {
		if !hasWord(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := cgroups.WriteFile(dir, "cgroup.subtree_control", strings.Join(add, " ")); err != nil {
		return fmt.Errorf("cgroup v2: enable %v in %s (a cgroup with processes cannot delegate controllers; run airlock in its own cgroup or set cgroup_parent): %w", add, dir, err)
	}
	return nil
}

func openV1(parent string) (*Host, error) {
	mounts, err := cgroups.GetCgroupMounts(false)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	h := &Host{v1Dirs: map[string]string{}, v1Mnts: map[string]string{}, v1Roots: map[string]string{}}
	for _, c := range v1Controllers {
		for _, m := range mounts {
			for _, s := range m.Subsystems {
				if s == c {
					h.v1Dirs[c] = filepath.Join(m.Mountpoint, parent)
					h.v1Mnts[c] = m.Mountpoint
					h.v1Roots[c] = m.Root
				}
			}
		}
		if h.v1Dirs[c] == "" {
			return nil, fmt.Errorf("cgroup v1: controller %q is not mounted (and cgroup v2 is not the unified hierarchy)", c)
		}
	}
	for _, d := range uniq(h.v1Dirs) {
		cur := strings.TrimSuffix(d, parent)
		for _, part := range strings.Split(parent, "/") {
			cur = filepath.Join(cur, part)
			if err := h.mkdir(cur); err != nil {
				return nil, fmt.Errorf("cgroup v1: %w", err)
			}
		}
	}
	_, err = os.Stat(filepath.Join(h.v1Dirs["memory"], "memory.memsw.limit_in_bytes"))
	h.memsw = err == nil
	return h, nil
}

// Close releases the host-wide event watcher and removes the parent
// cgroup, and the directories above it that Open created, if nothing uses
// them any more. Cgroups made by h must be destroyed first.
//
// The parent is airlock's own, whoever created it: a parent left by a
// killed process goes with the next clean exit. A parent another airlock
// process still uses is not empty and stays; one that process's next
// sandbox finds gone is created again on the way (the cgroup managers
// create missing ancestors).
func (h *Host) Close() error {
	h.notifyOnce.Do(func() {}) // no watcher can start after this
	var err error
	if h.notify != nil {
		err = h.notify.close()
	}
	dirs := uniq(h.v1Dirs)
	if h.v2 {
		dirs = []string{h.v2Dir}
	}
	for i := len(h.made) - 1; i >= 0; i-- {
		if !slices.Contains(dirs, h.made[i]) {
			dirs = append(dirs, h.made[i])
		}
	}
	for _, d := range dirs {
		// EBUSY or ENOTEMPTY: in use by another sandbox or server.
		unix.Rmdir(d)
	}
	return err
}

// Version is 1 or 2.
func (h *Host) Version() int {
	if h.v2 {
		return 2
	}
	return 1
}

// Describe says where sandbox cgroups go, for doctor.
func (h *Host) Describe() string {
	if h.v2 {
		return "v2 at " + h.v2Dir + " (memory, pids, cpu)"
	}
	var parts []string
	for _, c := range v1Controllers {
		parts = append(parts, c+"="+h.v1Dirs[c])
	}
	return "v1 " + strings.Join(parts, " ")
}

// Cgroup is one sandbox's cgroup.
type Cgroup struct {
	h     *Host
	name  string
	mgr   cgroups.Manager
	dirfd int // v2: the directory, for CLONE_INTO_CGROUP

	events   chan Event
	stopOnce sync.Once
	stop     chan struct{}
	watchers []*os.File
	wds      []int32
	pidsSeen atomic.Uint64 // pids.events "max" as last seen by PollPids

	// counters are the files read on every execution (the CPU counter,
	// the memory peak, the OOM kills, pids.events), opened on first read
	// and read again at offset 0: opening one (openat2's checked walk)
	// costs several times the read, and Stats was a quarter of a warm
	// execution's CPU in the server. Four descriptors per live cgroup,
	// closed by Destroy.
	cmu      sync.Mutex
	counters map[string]*os.File
}

// counterBufs are what counters are read into: 4 KiB on the stack grew
// the stack of every fresh goroutine that read one, and one per cgroup
// would cost every idle session its size.
var counterBufs = sync.Pool{New: func() any { return new([4096]byte) }}

// New creates the cgroup name under the parent with limits r.
func (h *Host) New(name string, r Resources) (_ *Cgroup, err error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad name %q", name)
	}
	c := &Cgroup{h: h, name: name, dirfd: -1, events: make(chan Event, 4), stop: make(chan struct{})}
	cfg := &cgroups.Cgroup{Resources: &cgroups.Resources{}}
	if h.v2 {
		c.mgr, err = fs2.NewManager(cfg, filepath.Join(h.v2Dir, name))
	} else {
		paths := map[string]string{}
		for ctl, d := range h.v1Dirs {
			paths[ctl] = filepath.Join(d, name)
		}
		c.mgr, err = fs.NewManager(cfg, paths)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	// Another airlock process closing may remove the empty parent at any
	// moment; creating the cgroup again creates the parent with it.
	for try := 0; ; try++ {
		err = c.mgr.Apply(-1)
		if err == nil || !errors.Is(err, os.ErrNotExist) || try == 2 {
			break
		}
	}
	if err != nil {
		c.mgr.Destroy()
		return nil, fmt.Errorf("cgroup: create %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			c.Destroy()
		}
	}()
	if err := c.Set(r); err != nil {
		return nil, err
	}
	if h.v2 {
		// One OOM kill ends the whole sandbox, as on v1 airlock does by
		// hand.
		if err := cgroups.WriteFile(c.mgr.Path(""), "memory.oom.group", "1"); err != nil {
			return nil, fmt.Errorf("cgroup: memory.oom.group: %w", err)
		}
		fd, err := unix.Open(c.mgr.Path(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup: open %s: %w", name, err)
		}
		c.dirfd = fd
	}
	if err := c.watch(); err != nil {
		return nil, err
	}
	return c, nil
}

// Name is the cgroup's name under the parent.
func (c *Cgroup) Name() string { return c.name }

// Set changes the limits.
func (c *Cgroup) Set(r Resources) error {
	if r.Memory <= 0 || r.Pids <= 0 || r.CPUs <= 0 {
		return fmt.Errorf("cgroup: every limit must be positive: %+v", r)
	}
	const period = 100000
	quota := int64(r.CPUs * period)
	if quota < 1000 {
		quota = 1000 // the kernel's minimum is 1ms
	}
	pids := r.Pids
	res := &cgroups.Resources{
		Memory:    r.Memory,
		PidsLimit: &pids,
		CpuQuota:  quota,
		CpuPeriod: period,
	}
	if c.h.v2 || c.h.memsw {
		res.MemorySwap = r.Memory // memory+swap == memory: no swap
	}
	if !c.h.v2 {
		zero := uint64(0)
		res.MemorySwappiness = &zero
	}
	if err := c.mgr.Set(res); err != nil {
		return fmt.Errorf("cgroup: set limits on %s: %w", c.name, err)
	}
	return nil
}

// The CPU weights of a background cgroup and of a normal one: cgroup v2's
// cpu.weight (1-10000, default 100), v1's cpu.shares (2-262144, 1024).
const (
	weightV2Low, weightV2Normal = "1", "100"
	sharesV1Low, sharesV1Normal = "2", "1024"
)

// SetBackground gives the cgroup the lowest CPU weight (on) or the normal
// one (off): a background cgroup's processes get only the CPU that the
// others leave. Only the weight is written: the CPU quota, memory and
// pids limits that Set writes stay as they are.
func (c *Cgroup) SetBackground(on bool) error {
	file, val := "cpu.weight", weightV2Normal
	if c.h.v2 && on {
		val = weightV2Low
	} else if !c.h.v2 {
		file, val = "cpu.shares", sharesV1Normal
		if on {
			val = sharesV1Low
		}
	}
	if err := cgroups.WriteFile(c.dir("cpu"), file, val); err != nil {
		return fmt.Errorf("cgroup: %s on %s: %w", file, c.name, err)
	}
	return nil
}

// Background reports whether the cgroup has the background CPU weight.
func (c *Cgroup) Background() (bool, error) {
	file, low := "cpu.weight", weightV2Low
	if !c.h.v2 {
		file, low = "cpu.shares", sharesV1Low
	}
	v, err := readInt(c.dir("cpu"), file)
	if err != nil {
		return false, err
	}
	return strconv.FormatInt(v, 10) == low, nil
}

// IntoFD returns the directory fd to clone a process straight into the
// cgroup (v2 only).
func (c *Cgroup) IntoFD() (int, bool) { return c.dirfd, c.dirfd >= 0 }

// StartIn calls start, which must clone a process on the calling thread
// (exec.Cmd.Start), so that the process is born in the cgroup: on v2 the
// caller passes IntoFD to clone3 instead, and StartIn is not needed.
//
// On v1, moving a process into a cgroup from outside takes the kernel's
// threadgroup lock, whose write side waits for an RCU grace period (about
// 10 ms) unless the hierarchy is mounted with favordynmods. A thread that
// moves only itself (writing "0" to a tasks file) does not take it. So
// start runs on a thread of its own that moves itself into the cgroup,
// clones the process there, and moves itself back into the cgroups it
// came from; if it cannot, the thread ends with its goroutine instead of
// running anything else of this process in the cgroup.
func (c *Cgroup) StartIn(start func() error) error {
	if c.h.v2 {
		return start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := c.h.threadDirs()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		if err := moveThread(uniq(c.mgr.GetPaths())); err != nil {
			done <- fmt.Errorf("cgroup: enter %s: %w", c.name, err) // the thread ends
			return
		}
		err = start()
		if berr := moveThread(back); berr != nil {
			done <- errors.Join(err, fmt.Errorf("cgroup: leave %s: %w", c.name, berr)) // the thread ends
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// HomeFiles opens, for writing, the tasks files of the calling thread's
// own cgroups (v1; none on v2): a process started from this thread
// returns a thread of its own there by writing "0" after it cloned a
// process elsewhere (see StartIn).
func (h *Host) HomeFiles() ([]*os.File, error) {
	if h.v2 {
		return nil, nil
	}
	dirs, err := h.threadDirs()
	if err != nil {
		return nil, err
	}
	return openForWrite(dirs, "tasks")
}

// threadDirs are the directories of the calling thread's own cgroups in
// the hierarchies sandboxes use (v1).
func (h *Host) threadDirs() ([]string, error) {
	own, err := cgroups.ParseCgroupFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return v1ThreadDirs(own, h.v1Mnts, h.v1Roots)
}

// v1ThreadDirs are the directories of the cgroups own names (as
// /proc/thread-self/cgroup does) under the mounts of the hierarchies. A
// mount may show a subtree only (a container's, without a cgroup
// namespace of its own): its root, as mountinfo gives it, is cut from
// the path.
func v1ThreadDirs(own, mnts, roots map[string]string) ([]string, error) {
	dirs := map[string]string{}
	for ctl, mnt := range mnts {
		p, ok := own[ctl]
		if root := roots[ctl]; ok && root != "" && root != "/" {
			rel, cut := strings.CutPrefix(p, root)
			ok = cut && (rel == "" || rel[0] == '/')
			p = "/" + strings.TrimPrefix(rel, "/")
		}
		if !ok || !strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
			return nil, fmt.Errorf("cgroup: this thread's %s cgroup is %q, outside the hierarchy's mount %s", ctl, own[ctl], mnt)
		}
		dirs[ctl] = filepath.Join(mnt, p)
	}
	return uniq(dirs), nil
}

// moveThread moves the calling thread, alone, into dirs.
func moveThread(dirs []string) error {
	for _, d := range dirs {
		if err := cgroups.WriteFile(d, "tasks", "0"); err != nil {
			return err
		}
	}
	return nil
}

// Holds reports whether pid is in the cgroup in every hierarchy.
func (c *Cgroup) Holds(pid int) (bool, error) {
	dirs := []string{c.dir("")}
	if !c.h.v2 {
		dirs = uniq(c.mgr.GetPaths())
	}
	for _, d := range dirs {
		pids, err := cgroups.GetPids(d)
		if err != nil {
			return false, fmt.Errorf("cgroup: %w", err)
		}
		if !slices.Contains(pids, pid) {
			return false, nil
		}
	}
	return true, nil
}

// Add moves pid into the cgroup in every hierarchy.
func (c *Cgroup) Add(pid int) error {
	if err := c.mgr.AddPid("", pid); err != nil {
		return fmt.Errorf("cgroup: add %d to %s: %w", pid, c.name, err)
	}
	return nil
}

// Pids lists the processes in the cgroup.
func (c *Cgroup) Pids() ([]int, error) { return cgroups.GetPids(c.dir("pids")) }

// ProcsFiles opens, for writing, the file of every hierarchy through
// which a single-threaded process that receives them moves itself in by
// writing "0": cgroup.procs on v2; on v1 tasks, which moves the writing
// thread alone, without the wait for an RCU grace period a move of a
// whole process makes (see StartIn).
func (c *Cgroup) ProcsFiles() ([]*os.File, error) {
	name := "cgroup.procs"
	if !c.h.v2 {
		name = "tasks"
	}
	return openForWrite(uniq(c.mgr.GetPaths()), name)
}

// openForWrite opens the file name of each of dirs for writing.
func openForWrite(dirs []string, name string) ([]*os.File, error) {
	var out []*os.File
	for _, d := range dirs {
		f, err := cgroups.OpenFile(d, name, os.O_WRONLY)
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		out = append(out, f)
	}
	return out, nil
}

func (c *Cgroup) dir(ctl string) string {
	if c.h.v2 {
		return c.mgr.Path("")
	}
	return c.mgr.Path(ctl)
}

// Stats reads the counters.
func (c *Cgroup) Stats() (Stats, error) {
	var s Stats
	var err error
	s.CPU, s.MemoryPeak, err = c.Usage()
	if err != nil {
		return Stats{}, err
	}
	if c.h.v2 {
		s.OOMKills, err = c.keyed(c.dir(""), "memory.events", "oom_kill")
	} else {
		s.OOMKills, err = c.keyed(c.dir("memory"), "memory.oom_control", "oom_kill")
	}
	if err == nil {
		s.PidsMax, err = c.keyed(c.dir("pids"), "pids.events", "max")
	}
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: stats of %s: %w", c.name, err)
	}
	return s, nil
}

// Memory reads the memory limit and the part of the usage reclaim cannot
// take back (usage less inactive file cache; tmpfs pages count, there
// being no swap). A writer that must not drive the cgroup into its OOM
// killer checks it before it charges more. An unlimited cgroup has a
// limit of -1 (v2) or a huge number (v1).
func (c *Cgroup) Memory() (used, limit int64, err error) {
	dir, lim, cur, inactive := c.dir("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
	if c.h.v2 {
		lim, cur, inactive = "memory.max", "memory.current", "inactive_file"
	}
	if limit, err = readInt(dir, lim); err == nil {
		used, err = readInt(dir, cur)
	}
	var cache uint64
	if err == nil {
		cache, err = keyed(dir, "memory.stat", inactive)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("cgroup: memory of %s: %w", c.name, err)
	}
	return max(used-int64(cache), 0), limit, nil
}

// Usage reads the CPU time and the memory peak, what an execution's
// result reports: half the reads of Stats.
func (c *Cgroup) Usage() (cpu time.Duration, peak int64, err error) {
	if c.h.v2 {
		var us uint64
		us, err = c.keyed(c.dir(""), "cpu.stat", "usage_usec")
		cpu = time.Duration(us) * time.Microsecond
		if err == nil {
			peak, err = c.readInt(c.dir(""), "memory.peak")
		}
	} else {
		var ns int64
		ns, err = c.readInt(c.dir("cpuacct"), "cpuacct.usage")
		cpu = time.Duration(ns)
		if err == nil {
			peak, err = c.readInt(c.dir("memory"), "memory.max_usage_in_bytes")
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("cgroup: usage of %s: %w", c.name, err)
	}
	return cpu, peak, nil
}

// CPU reads only the CPU time, the one counter read on a timer.
func (c *Cgroup) CPU() (time.Duration, error) {
	if c.h.v2 {
		us, err := c.keyed(c.dir(""), "cpu.stat", "usage_usec")
		return time.Duration(us) * time.Microsecond, err
	}
	ns, err := c.readInt(c.dir("cpuacct"), "cpuacct.usage")
	return time.Duration(ns), err
}

// Events delivers OOM kills and pids-limit hits as they happen. The
// channel is never closed; stop reading after Destroy.
func (c *Cgroup) Events() <-chan Event { return c.events }

// watch arms kernel notifications: the notifier on pids.events and
// memory.events (v2), an eventfd on memory.oom_control (v1; PollPids
// reads v1's pids.events).
func (c *Cgroup) watch() error {
	type target struct {
		dir, file, key string
		ev             Event
	}
	// v1 never signals a change of pids.events (PollPids covers it):
	// watching it there would only keep a descriptor per cgroup open.
	var targets []target
	if c.h.v2 {
		targets = []target{
			{c.dir("pids"), "pids.events", "max", EventPidsMax},
			{c.dir(""), "memory.events", "oom_kill", EventOOM},
		}
	}
	var n *notifier
	if len(targets) > 0 { // v1 needs no notifier at all
		var err error
		if n, err = c.h.notifier(); err != nil {
			return err
		}
	}
	for _, t := range targets {
		last, _ := keyed(t.dir, t.file, t.key)
		var mu sync.Mutex
		f, err := cgroups.OpenFile(t.dir, t.file, os.O_RDONLY)
		if err != nil {
			return fmt.Errorf("cgroup: watch: %w", err)
		}
		wd, err := n.add(f, func() {
			v, err := keyed(t.dir, t.file, t.key)
			mu.Lock()
			up := err == nil && v > last
			if up {
				last = v
			}
			mu.Unlock()
			if up {
				c.emit(t.ev)
			}
		})
		if err != nil {
			return err
		}
		c.wds = append(c.wds, wd)
	}
	if !c.h.v2 {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return fmt.Errorf("cgroup: eventfd: %w", err)
		}
		oom, err := cgroups.OpenFile(c.dir("memory"), "memory.oom_control", os.O_RDONLY)
		if err != nil {
			unix.Close(efd)
			return fmt.Errorf("cgroup: %w", err)
		}
		err = cgroups.WriteFile(c.dir("memory"), "cgroup.event_control", fmt.Sprintf("%d %d", efd, oom.Fd()))
		oom.Close()
		if err != nil {
			unix.Close(efd)
			return fmt.Errorf("cgroup: register OOM eventfd: %w", err)
		}
		f := os.NewFile(uintptr(efd), "eventfd")
		c.watchers = append(c.watchers, f)
		dir := c.dir("memory")
		last, _ := keyed(dir, "memory.oom_control", "oom_kill")
		go func() {
			buf := make([]byte, 8)
			for {
				// The eventfd also fires when the cgroup goes away; the
				// counter is then unchanged or unreadable.
				if _, err := f.Read(buf); err != nil {
					return
				}
				// The eventfd fires as the cgroup comes under OOM, before
				// the OOM killer has picked and counted its victim: one
				// read of the counter would usually see it unchanged and
				// lose the event. Give the counter a moment to catch up.
				for i := 0; i < 100; i++ {
					n, err := keyed(dir, "memory.oom_control", "oom_kill")
					if err != nil {
						return
					}
					if n > last {
						last = n
						c.emit(EventOOM)
						break
					}
					select {
					case <-c.stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		}()
	}
	return nil
}

// PidsPollInterval is how often a v1 pids.events is read while code runs.
const PidsPollInterval = 50 * time.Millisecond

// PollPids covers a gap of cgroup v1: the kernel does not notify changes
// of a v1 pids.events, so while code runs its caller reads the counter
// every again (PidsPollInterval) instead, from a timer of its own loop
// rather than a goroutine per execution. It reads it once, emits
// EventPidsMax if it rose, and says when to read it again: 0 on v2,
// where the notifier works, or once the cgroup is gone.
func (c *Cgroup) PollPids() (again time.Duration) {
	if c.h.v2 {
		return 0
	}
	// Against the last value any poller saw (0 for a new cgroup), so
	// that a limit hit before this poller started is not missed.
	n, err := c.keyed(c.dir("pids"), "pids.events", "max")
	if err != nil {
		return 0
	}
	if last := c.pidsSeen.Load(); n > last && c.pidsSeen.CompareAndSwap(last, n) {
		c.emit(EventPidsMax)
	}
	return PidsPollInterval
}

func (c *Cgroup) emit(ev Event) {
	select {
	case c.events <- ev:
	case <-c.stop:
	default:
	}
}

// notifier is one epoll instance shared by every cgroup of the host, in
// which each watched cgroup file is open: the kernel signals a change of
// one with EPOLLPRI, as it signals inotify. Not inotify: closing an
// inotify instance that has had watches waits for an SRCU grace period
// (1 to 20 ms, the longer the busier the host), which every process that
// builds a sandbox and exits (airlock run --cold, doctor) paid on its way
// out, its exit included; closing an epoll instance or a file in one waits
// for nothing. Its loop waits in epoll_wait on a thread of its own (not
// in Go's poller, whose own poll of the instance would consume the change
// of a file whose poll does, such as a mount table).
type notifier struct {
	fd   int // the epoll instance
	wake int // an eventfd in it: written, the loop ends
	done chan struct{}

	closeOnce sync.Once
	mu        sync.Mutex
	watches   map[int32]watched // by the watched file's descriptor
}

type watched struct {
	f  *os.File
	fn func()
}

func (h *Host) notifier() (*notifier, error) {
	h.notifyOnce.Do(func() {
		n, err := newNotifier()
		if err != nil {
			h.notifyErr = fmt.Errorf("cgroup: epoll: %w", err)
			return
		}
		h.notify = n
		go n.loop()
	})
	return h.notify, h.notifyErr
}

func newNotifier() (*notifier, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err == nil {
		err = unix.EpollCtl(fd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)})
		if err != nil {
			unix.Close(wake)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &notifier{fd: fd, wake: wake, done: make(chan struct{}), watches: map[int32]watched{}}, nil
}

// add calls fn whenever the kernel signals a change of f (a cgroup
// file, opened for reading), perhaps once more soon after it is added
// (fn must find out itself whether anything changed). The notifier owns f
// from then on, even on error; the returned id is for remove.
func (n *notifier) add(f *os.File, fn func()) (int32, error) {
	fd := int32(f.Fd())
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		// Closed: its number may be another file's by now.
		f.Close()
		return -1, fmt.Errorf("cgroup: watch %s: %w", f.Name(), errNotifierClosed)
	}
	// Edge-triggered: an event per notification, without reading the
	// file through this descriptor (fn reads it afresh).
	if err := unix.EpollCtl(n.fd, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLPRI | unix.EPOLLET, Fd: fd}); err != nil {
		f.Close()
		return -1, fmt.Errorf("cgroup: watch %s: %w", f.Name(), err)
	}
	n.watches[fd] = watched{f: f, fn: fn}
	return fd, nil
}

func (n *notifier) remove(id int32) {
	n.mu.Lock()
	w, ok := n.watches[id]
	delete(n.watches, id)
	n.mu.Unlock()
	if ok {
		w.f.Close() // its last descriptor: it leaves the epoll instance
	}
}

// close ends the loop, then closes the epoll instance and what is still
// watched.
func (n *notifier) close() (err error) {
	n.closeOnce.Do(func() { err = n.closeNow() })
	return err
}

func (n *notifier) closeNow() error {
	one := [8]byte{1} // adds to the eventfd's counter: any count wakes the loop
	unix.Write(n.wake, one[:])
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, w := range n.watches {
		w.f.Close()
		delete(n.watches, id)
	}
	unix.Close(n.wake)
	err := unix.Close(n.fd)
	n.fd, n.wake = -1, -1 // add refuses from now on
	return err
}

// errNotifierClosed is add's error once the notifier is closed (Host.Close).
var errNotifierClosed = errors.New("the notifier is closed")

func (n *notifier) loop() {
	defer close(n.done)
	evs := make([]unix.EpollEvent, 64)
	for {
		got, err := unix.EpollWait(n.fd, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:got] {
			if ev.Fd == int32(n.wake) {
				return
			}
			// An event of a descriptor removed meanwhile may find
			// another watch under its number: a call fn tolerates.
			n.mu.Lock()
			w, ok := n.watches[ev.Fd]
			n.mu.Unlock()
			if ok {
				w.fn()
			}
		}
	}
}

// Kill sends SIGKILL to every process in the cgroup.
func (c *Cgroup) Kill() error {
	if c.h.v2 {
		if err := cgroups.WriteFile(c.dir(""), "cgroup.kill", "1"); err == nil {
			return nil
		}
	}
	for i := 0; i < 100; i++ {
		pids, err := cgroups.GetPids(c.dir("pids"))
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, p := range pids {
			// This process is listed while a thread of it is in the
			// cgroup (StartIn's, ending): never kill it.
			if p != os.Getpid() {
				unix.Kill(p, unix.SIGKILL)
			}
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("cgroup: %s still has processes", c.name)
}

// Destroy stops the watchers and removes the cgroup. The cgroup must be
// empty; Kill it and reap its processes first.
func (c *Cgroup) Destroy() error {
	c.stopOnce.Do(func() {
		close(c.stop)
		if c.h.notify != nil {
			for _, wd := range c.wds {
				c.h.notify.remove(wd)
			}
		}
		for _, f := range c.watchers {
			f.Close()
		}
		if c.dirfd >= 0 {
			unix.Close(c.dirfd)
		}
		c.cmu.Lock()
		for _, f := range c.counters {
			f.Close()
		}
		c.counters = nil
		c.cmu.Unlock()
	})
	if err := c.mgr.Destroy(); err != nil {
		return fmt.Errorf("cgroup: remove %s: %w", c.name, err)
	}
	return nil
}

// Sweep kills and removes the cgroups under the parent whose name starts
// with prefix and for which stale returns true: what a killed airlock
// process left behind.
func (h *Host) Sweep(prefix string, stale func(name string) bool) error {
	dirs := []string{h.v2Dir}
	if !h.v2 {
		dirs = uniq(h.v1Dirs)
	}
	names := map[string]bool{}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			return fmt.Errorf("cgroup: sweep %s: %w", d, err)
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && stale(e.Name()) {
				names[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range names {
		c := &Cgroup{h: h, name: name, dirfd: -1, stop: make(chan struct{})}
		cfg := &cgroups.Cgroup{Resources: &cgroups.Resources{}}
		var err error
		if h.v2 {
			c.mgr, err = fs2.NewManager(cfg, filepath.Join(h.v2Dir, name))
		} else {
			paths := map[string]string{}
			for ctl, d := range h.v1Dirs {
				paths[ctl] = filepath.Join(d, name)
			}
			c.mgr, err = fs.NewManager(cfg, paths)
		}
		if err == nil {
			c.Kill()
			err = c.Destroy()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func uniq(m map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range m {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// errDestroyed: a counter read after Destroy.
var errDestroyed = errors.New("cgroup destroyed")

// read reads one of c's counter files through a descriptor kept open: a
// kernfs file reads afresh from offset 0, and once the cgroup is removed
// the read fails (ENODEV), as opening it would.
func (c *Cgroup) read(dir, file string) (string, error) {
	key := dir + "/" + file
	// Held through the read: Destroy must not close f, and its number be
	// reused, while it is read.
	c.cmu.Lock()
	defer c.cmu.Unlock()
	select {
	case <-c.stop:
		return "", fmt.Errorf("%s: %w", key, errDestroyed)
	default:
	}
	f := c.counters[key]
	if f == nil {
		var err error
		if f, err = cgroups.OpenFile(dir, file, os.O_RDONLY); err != nil {
			return "", err
		}
		if c.counters == nil {
			c.counters = map[string]*os.File{}
		}
		c.counters[key] = f
	}
	buf := counterBufs.Get().(*[4096]byte)
	defer counterBufs.Put(buf)
	n, err := unix.Pread(int(f.Fd()), buf[:], 0)
	if err != nil {
		return "", &os.PathError{Op: "read", Path: key, Err: err}
	}
	return string(buf[:n]), nil
}

func (c *Cgroup) readInt(dir, file string) (int64, error) {
	s, err := c.read(dir, file)
	if err != nil {
		return 0, err
	}
	return parseInt(s)
}

func (c *Cgroup) keyed(dir, file, key string) (uint64, error) {
	s, err := c.read(dir, file)
	if err != nil {
		return 0, err
	}
	return parseKeyed(s, key)
}

func readInt(dir, file string) (int64, error) {
	s, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return 0, err
	}
	return parseInt(s)
}

func parseInt(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// keyed reads "key value" from a flat-keyed cgroup file.
func keyed(dir, file, key string) (uint64, error) {
	s, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return 0, err
	}
	return parseKeyed(s, key)
}

func parseKeyed(s, key string) (uint64, error) {
	for s != "" {
		var line string
		line, s, _ = strings.Cut(s, "\n")
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// MemoryLimit is the lowest memory limit set on the sandboxes' parent, on
// this process's own cgroup, or on any cgroup above either (a pod's or a
// systemd unit's MemoryMax), in bytes; 0 when none is set. What pools
// size themselves from (pool.memory_budget).
func (h *Host) MemoryLimit() int64 {
	var dirs []string
	if h.v2 {
		const root = "/sys/fs/cgroup"
		dirs = append(ancestors(h.v2Dir, root), ancestors(selfV2Dir(root), root)...)
		return lowestLimit(dirs, "memory.max")
	}
	mnt := h.v1Mnts["memory"]
	dirs = ancestors(h.v1Dirs["memory"], mnt)
	if own, err := cgroups.GetOwnCgroup("memory"); err == nil {
		// Relative to the cgroup mounted at mnt (in a cgroup
		// namespace, "/" stands for it).
		rel, err := filepath.Rel(h.v1Roots["memory"], own)
		if err == nil && !strings.HasPrefix(rel, "..") {
			dirs = append(dirs, ancestors(filepath.Join(mnt, rel), mnt)...)
		}
	}
	return lowestLimit(dirs, "memory.limit_in_bytes")
}

// ancestors lists dir and every directory above it up to root, root
// included; none when dir is not under root.
func ancestors(dir, root string) []string {
	if dir == "" || root == "" || (dir != root && !strings.HasPrefix(dir, root+"/")) {
		return nil
	}
	var out []string
	for d := dir; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == root || d == "/" {
			return out
		}
	}
}

// noLimit is what cgroup v1 reports for an unset limit (the largest
// multiple of the page size): anything at or above it is none.
const noLimit = 1 << 62

// lowestLimit is the lowest limit file holds in dirs, 0 when none has
// one (a missing or unreadable file, "max", or v1's unlimited value).
func lowestLimit(dirs []string, file string) int64 {
	var low int64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			continue
		}
		n, err := parseInt(string(b))
		if err != nil || n <= 0 || n >= noLimit {
			continue
		}
		if low == 0 || n < low {
			low = n
		}
	}
	return low
}

// PSS is the proportional set size of the cgroup's processes, in bytes:
// their private pages, and their share of the pages they share (with the
// Python template and its other forks). 0 with no process readable.
//
// Each address space counts once. Processes that share one (gVisor's
// systrap stubs come in pairs, a vfork's child until it execs) each
// report all of its pages: summed, they counted twice, and a gVisor
// sandbox read about 140 MB where it holds about 95.
func (c *Cgroup) PSS() (int64, error) {
	pids, err := c.Pids()
	if err != nil {
		return 0, fmt.Errorf("cgroup: processes of %s: %w", c.name, err)
	}
	return pssOnce(pids, readPss, SameAddressSpace), nil
}

// pssOnce sums the PSS of pids (read: false for one that exited, which
// holds nothing), a process whose address space is one already counted
// (same) left out.
func pssOnce(pids []int, read func(pid int) (int64, bool), same func(a, b int) bool) int64 {
	var total int64
	counted := make([]int, 0, len(pids))
	for _, pid := range pids {
		n, ok := read(pid)
		if !ok || slices.ContainsFunc(counted, func(c int) bool { return same(pid, c) }) {
			continue
		}
		counted = append(counted, pid)
		total += n
	}
	return total
}

// readPss is a process's PSS in bytes, false when it cannot be read.
func readPss(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, false
	}
	return parsePss(string(b)), true
}

// kcmpVM is kcmp(2)'s KCMP_VM: do two processes share an address space.
const kcmpVM = 1

// SameAddressSpace reports whether processes a and b share an address
// space (kcmp(2)); false when that cannot be told (one exited, no kcmp
// in this kernel): a PSS sum counts both then, as it counted every
// process before.
func SameAddressSpace(a, b int) bool {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpVM, 0, 0, 0)
	return errno == 0 && r == 0
}

// parsePss is the Pss line of a smaps_rollup file, in bytes.
func parsePss(s string) int64 {
	for s != "" {
		var line string
		line, s, _ = strings.Cut(s, "\n")
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
