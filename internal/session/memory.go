package session

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/pauseimage"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// Keeping memory across a pause (gvisor.checkpoint): once a pause has
// written a session's files, a session whose sandbox can be checkpointed
// (gVisor with the keeper, no network, no template) is checkpointed
// into the image too; a resume restores that checkpoint into a fresh
// sandbox and attaches to its interpreters, which run on with their
// variables and processes. Whatever fails on the way falls back to the
// files, and says so: the pause's memory_error, the resume's
// restored_reason.

// memoryInstance is an Instance that can keep its memory across a pause
// (an *instance.Instance on gVisor with a keeper).
type memoryInstance interface {
	Keeps() bool
	Checkpoint(ctx context.Context, dir string, max int64) (instance.Checkpoint, error)
	Snapshot(ctx context.Context, dir string, max int64) (instance.Checkpoint, error)
	AttachInterp(rt runtimes.Runtime, pid int) (Beside, error)
}

func (r realInstance) AttachInterp(rt runtimes.Runtime, pid int) (Beside, error) {
	it, err := r.Instance.AttachInterp(rt, pid)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// memorySource is a Source that can build an instance from a checkpoint.
type memorySource interface {
	KeepsMemory() bool
	Restore(ctx context.Context, rt runtimes.Runtime, l config.Limits, mem instance.Memory, fill func(*workspace.Dir) error) (Instance, error)
}

// KeepsMemory implements memorySource.
func (s instances) KeepsMemory() bool {
	k, ok := s.src.(interface{ KeepsMemory() bool })
	return ok && k.KeepsMemory()
}

// Restore implements memorySource.
func (s instances) Restore(ctx context.Context, rt runtimes.Runtime, l config.Limits, mem instance.Memory, fill func(*workspace.Dir) error) (Instance, error) {
	r, ok := s.src.(interface {
		Restore(context.Context, runtimes.Runtime, config.Limits, instance.Memory, func(*workspace.Dir) error) (*instance.Instance, error)
	})
	if !ok {
		return nil, fmt.Errorf("%w: this server's sandboxes cannot be restored with their memory", errdefs.ErrUnsupported)
	}
	in, err := r.Restore(ctx, rt, l, mem, fill)
	if err != nil {
		return nil, err
	}
	return realInstance{in}, nil
}

// pausedMemory is what a memory image keeps of the session's processes:
// the pids of its interpreters in the sandbox.
type pausedMemory struct {
	Pid      int            `json:"pid"`
	Contexts map[string]int `json:"contexts,omitempty"`
}

// keepsMemory reports whether a pause of the session keeps its memory.
func (s *Session) keepsMemory() bool {
	mi, ok := s.inst.(memoryInstance)
	return ok && s.template == "" && mi.Keeps()
}

// NoMemoryError refuses a request for a session's memory (a pause's or
// a timeout's, restores "memory") where its pause keeps the files only.
type NoMemoryError struct {
	// Why is the reason, for the client.
	Why string
}

func (e *NoMemoryError) Error() string {
	return "a pause of this session keeps its files, not its memory (the interpreter restarts on resume): " + e.Why
}
func (e *NoMemoryError) Unwrap() error { return errdefs.ErrInvalidArgument }

// MemoryRefusal says why a pause of the session cannot keep its memory
// (a *NoMemoryError), or nil when it can.
func (s *Session) MemoryRefusal() error {
	if s.keepsMemory() {
		return nil
	}
	why := "this server cannot keep its memory"
	_, hasNet := s.inst.NetNS()
	switch on, off := s.m.cfg.GVisorCheckpoint(); {
	case !s.m.cfg.Persistence.Enabled:
		why = "this server cannot pause sessions (persistence.enabled is off)"
	case s.inst.Isolation() != config.GVisor:
		why = fmt.Sprintf("it runs natively (isolation %q): memory is kept under gVisor only", s.inst.Isolation())
	case s.template != "":
		why = "it was made from a template"
	case hasNet:
		why = "it has a network (an egress policy, tools or secrets), whose connections cannot be kept"
	case !on:
		why = "this server's gVisor pauses keep files only: " + off
	}
	return &NoMemoryError{Why: why}
}

// checkRestores checks what a client asks a pause to keep (restores:
// "", "files" or "memory"), for what (the field, in the error).
func checkRestores(what, v string) error {
	switch v {
	case "", apitype.RestoreFiles, apitype.RestoreMemory:
		return nil
	}
	return fmt.Errorf("%w: %s %q must be \"files\" or \"memory\" (or unset: what the session's restores says)", errdefs.ErrInvalidArgument, what, v)
}

// restores is what a pause of the session would keep: the memory only
// where its checkpoint, as large as the sandbox is now (memoryReserve
// of mem, the sandbox's cgroup read, merr its error), fits in what is
// left of its tenant's quotas.max_paused_bytes (a pause then keeps the
// files, saying why); usage, if set, is that quota's use read once for
// a listing (nil: read now).
func (s *Session) restores(usage func() *pausedUsage, mem int64, merr error) string {
	if !s.m.cfg.Persistence.Enabled {
		return ""
	}
	if !s.keepsMemory() {
		return apitype.RestoreFiles
	}
	if room := s.m.pausedRoom(s.owner.Tenant, s.id, usage); room == math.MaxInt64 || room >= s.memoryReserve(mem, merr) {
		return apitype.RestoreMemory
	}
	return apitype.RestoreFiles
}

// memoryCeiling is the most a checkpoint of a sandbox with limits l may
// take on disk: its memory, gVisor's own, and the keeper's.
func memoryCeiling(l config.Limits) int64 { return int64(l.Memory) + 96<<20 }

// memoryReserve is what a checkpoint of the session's sandbox may keep
// on disk, reserved against the quota before it is taken (the disk is
// reserved for memoryCeiling, which runsc may write before the size is
// checked):
// what the sandbox's cgroup holds now (its processes' memory and
// gVisor's own; a checkpoint saves the pages in use, compressed), with
// a margin for what its processes may still allocate until runsc
// checkpoint stops its kernel (the session's executions and commands
// are already stopped by the pause; a background process may run on),
// at most memoryCeiling. A checkpoint larger than that fails its size
// check, and the pause keeps the files, saying why. used is what the
// cgroup holds (s.inst.Memory, err its error: then the ceiling).
func (s *Session) memoryReserve(used int64, err error) int64 {
	ceiling := memoryCeiling(s.limits)
	if err != nil || used <= 0 {
		return ceiling
	}
	return min(ceiling, used+used/2+64<<20)
}

// writeMemory checkpoints the session's sandbox into the image id its
// pause wrote (whose files take filesBytes on disk), and returns what the
// memory takes on disk; an error says why the pause keeps the files
// only. Once it is called, the sandbox is the pause's to end, whatever
// happens: the caller ends the session. With fork, the sandbox runs on
// (a snapshot) and the image is a fork's.
func (s *Session) writeMemory(ctx context.Context, id string, filesBytes int64, fork bool) (int64, error) {
	m := s.m
	mi := s.inst.(memoryInstance)
	mem := pausedMemory{Pid: s.def.it.(interface{ Pid() int }).Pid()}
	s.mu.Lock()
	for _, cid := range s.ctxOrder {
		c := s.ctxs[cid]
		if c == nil || c == s.def || !c.end.Zero() {
			continue
		}
		p, ok := c.it.(interface{ Pid() int })
		if !ok {
			s.mu.Unlock()
			return 0, fmt.Errorf("the code context %s cannot be kept", cid)
		}
		if mem.Contexts == nil {
			mem.Contexts = map[string]int{}
		}
		mem.Contexts[cid] = p.Pid()
	}
	s.mu.Unlock()
	raw, err := json.Marshal(mem)
	if err != nil {
		return 0, err
	}
	max := min(s.memoryReserve(s.inst.Memory()), int64(m.cfg.Persistence.MaxImageBytes)-filesBytes)
	if max <= 0 {
		return 0, fmt.Errorf("%w: the files take all of persistence.max_image_bytes", errdefs.ErrTooLarge)
	}
	// With the files just written: the session is not listed as paused
	// yet, so they are not counted otherwise.
	// The quota counts what the image may keep (max, checked after the
	// checkpoint); the disk, what runsc may write before that check: a
	// checkpoint as large as the sandbox may make (memoryCeiling). At a
	// shutdown every session pauses at once.
	release, err := m.reserveImage(s.owner.Tenant, id, filesBytes+max, filesBytes+memoryCeiling(s.limits))
	if err != nil {
		return 0, err
	}
	defer release()
	dir, done, err := pauseimage.MemoryTemp(m.persistDir(), id)
	if err != nil {
		return 0, err
	}
	defer done()
	take := mi.Snapshot
	if !fork {
		// The sandbox ends with its checkpoint: that is the pause's end
		// of it, not a death to report.
		s.checkpointing.Store(true)
		take = mi.Checkpoint
	}
	begun := time.Now()
	ck, err := take(ctx, dir, max)
	if err != nil {
		return 0, err
	}
	n, err := pauseimage.AddMemory(m.persistDir(), id, dir, pauseimage.Memory{Bytes: ck.Bytes, SHA256: ck.SHA256, Keeper: ck.Keeper, Session: raw})
	if err != nil {
		return 0, err
	}
	m.log.Info("session memory kept", "session", s.id, "bytes", ck.Bytes, "ms", time.Since(begun).Milliseconds(), "fork", fork)
	return n, nil
}

// memoryRestore is a resume's memory image: the resumed session's
// sandbox is restored from it when it can be.
type memoryRestore struct {
	dir  string
	mem  pauseimage.Memory
	pids pausedMemory
	// image restores the files (into the restored sandbox, before it
	// runs).
	image *pauseimage.Image
	max   int64
	// restored: the sandbox was restored from it; why: why not.
	restored bool
	why      error
	// times: how long the restore's stages took; contexts: attaching
	// its code contexts.
	times    instance.RestoreTimes
	contexts time.Duration
}

// logAttrs are mr's stage times, for the resume's log line.
func (mr *memoryRestore) logAttrs() []any {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t := mr.times
	return []any{"verify_ms", ms(t.Verify), "prepare_ms", ms(t.Prepare), "fill_ms", ms(t.Fill),
		"runsc_ms", ms(t.Runsc), "attach_ms", ms(t.Attach), "contexts_ms", ms(mr.contexts)}
}

// resumeMemory is the context key of a resume's *memoryRestore.
type resumeMemory struct{}

// restoreInstance builds the instance of a session resumed from mr on
// src: restored with its memory, or nil (mr.why says why).
func restoreInstance(ctx context.Context, src Source, rt runtimes.Runtime, l config.Limits, mr *memoryRestore) Instance {
	ms, ok := src.(memorySource)
	if !ok || !ms.KeepsMemory() {
		mr.why = fmt.Errorf("%w: this server does not keep memory (gvisor.checkpoint is off)", errdefs.ErrUnsupported)
		return nil
	}
	fill := func(ws *workspace.Dir) error { return mr.image.Restore(ctx, ws, mr.max) }
	inst, err := ms.Restore(ctx, rt, l, instance.Memory{Dir: mr.dir, Checkpoint: instance.Checkpoint{Bytes: mr.mem.Bytes, SHA256: mr.mem.SHA256, Keeper: mr.mem.Keeper}, Pid: mr.pids.Pid}, fill)
	if err != nil {
		mr.why = err
		return nil
	}
	mr.restored = true
	if t, ok := inst.(interface{ RestoreTimes() instance.RestoreTimes }); ok {
		mr.times = t.RestoreTimes()
	}
	return inst
}

// attachContexts attaches the code contexts of a session restored with
// its memory to their interpreters, which kept their state.
func (s *Session) attachContexts(meta pausedMeta, mr *memoryRestore) error {
	mi, ok := s.inst.(memoryInstance)
	if !ok {
		return gvisorOnly()
	}
	begun := time.Now()
	defer func() { mr.contexts = time.Since(begun) }()
	s.mu.Lock()
	s.ctxNext = meta.CtxNext
	s.mu.Unlock()
	for _, pc := range meta.Contexts {
		rt, err := s.m.lookup(pc.Language)
		if err != nil {
			return err
		}
		pid, ok := mr.pids.Contexts[pc.ID]
		if !ok {
			return fmt.Errorf("%w: the memory image has no interpreter for code context %s", errdefs.ErrImageCorrupt, pc.ID)
		}
		it, err := mi.AttachInterp(rt, pid)
		if err != nil {
			return fmt.Errorf("attaching code context %s: %w", pc.ID, err)
		}
		c := &codeContext{id: pc.ID, lang: rt, cwd: pc.Cwd, created: time.Now(), it: it, beside: it, userEnv: pc.Env}
		if err := it.Attach(contextOutput{s, c}); err != nil {
			it.Kill()
			it.Close()
			return err
		}
		if c.env, err = s.contextEnv(rt, pc.ID, pc.Env); err != nil {
			it.Kill()
			it.Close()
			return err
		}
		s.mu.Lock()
		s.ctxs[pc.ID] = c
		s.ctxOrder = append(s.ctxOrder, pc.ID)
		s.mu.Unlock()
		go s.watchContext(c)
	}
	return nil
}

// reseed reseeds the random generators of every interpreter of a fork
// restored with its memory: its memory is its source's (and its
// siblings'), and without this each would draw what the others draw.
// A resumed session keeps its own: a pause changes nothing in it.
// What the runtimes confirmed is the fork's reseeded (a runtime older
// than the reseed ignores it: logged, and said in the fork's
// description, not_reseeded).
func (s *Session) reseed(ctx context.Context) error {
	s.mu.Lock()
	its := make(map[string]Interp, len(s.ctxs))
	for id, c := range s.ctxs {
		its[id] = c.it
	}
	s.mu.Unlock()
	var not []string
	for id, it := range its {
		ok, err := it.Reseed(ctx)
		if err != nil {
			return fmt.Errorf("reseeding code context %s: %w", id, err)
		}
		if !ok {
			not = append(not, id)
		}
	}
	slices.Sort(not)
	all := len(not) == 0
	s.mu.Lock()
	s.reseeded, s.notReseeded = &all, not
	s.mu.Unlock()
	if !all {
		s.m.log.Warn("a fork's runtimes did not confirm they reseeded their random generators: they draw what their source draws", "session", s.id, "contexts", not)
	}
	return nil
}

func gvisorOnly() error {
	return fmt.Errorf("%w: only a gVisor session's memory can be kept", errdefs.ErrUnsupported)
}
