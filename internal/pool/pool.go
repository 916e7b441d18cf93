// Package pool owns the warm pools: per language, a number of sandboxes
// built ahead of time with their runtime started (Python ones forked from
// the template interpreter, with the heavy libraries already imported, or,
// for one-shots whose code needs none of them, from a lean one),
// refilled in the background (the language being drained first), grown
// toward the demand within a memory budget and shrunk back when it has
// passed, adapted to the limits of the session that takes one, and the
// template interpreter's restarts.
//
// It must never hand out a sandbox twice, never hand out one whose jail or
// runtime died while it waited, and never let anything that happened in one
// sandbox affect another: every instance is built fresh and used once.
package pool

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
	"airlock/internal/zygote"
)

// Pool is an instance.Source backed by warm instances.
//
// Locks, in the order they may be taken: rmu, then builds' (it asks
// queues how urgent they are), then a queue's mu, then zmu (a build reads
// templateRuns under its queue's lock), then a template's own (Close
// ends it under zmu).
type Pool struct {
	cfg    config.Config
	kernel instance.Kernel
	host   *jail.Host // the native kernel's host: the template's; nil for gVisor
	slots  *instance.Slots
	log    *slog.Logger
	builds *buildSlots // bounds concurrent builds, the most urgent first
	// inflight are the refills' builds under way.
	inflight sync.WaitGroup

	// rmu serialises resize; order lists every queue for it.
	rmu    sync.Mutex
	order  []*queue
	budget int64         // bytes the ready sandboxes may hold together
	hold   time.Duration // a grown pool shrinks this long after its demand
	now    func() time.Time

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closing sync.WaitGroup // instances discarded by Get, being torn down

	queues map[string]*queue
	// netQueues keep sandboxes booted with a network, for kernels whose
	// network is fixed at boot (pool.network_size).
	netQueues map[string]*queue
	// leanQueues keep sandboxes forked from the lean template, for
	// one-shots whose code needs none of the preloads (pool.lean_size).
	leanQueues map[string]*queue

	// full is the template interpreter (nil without one); lean the lean
	// one beside it (nil without one).
	full, lean *templateKeeper
	// zmu guards the template keepers' templates and counts.
	zmu sync.Mutex

	// imgs: the images gVisor sandboxes are restored from
	// (gvisor.pool_image; image.go).
	imgs images
}

// templateWait bounds how long a build waits for the template's first
// start (about a second on a quiet host): a template that takes longer,
// or hangs, must not keep Python sandboxes from being built. Those built
// cold meanwhile are replaced once it is up. (A variable for tests.)
var templateWait = 20 * time.Second

// startTemplate starts the template interpreter (a variable for tests).
var startTemplate = zygote.Start

// clock is the pools' demand clock (a variable for tests).
var clock = time.Now

// defaultEstimate is the memory a native ready sandbox of a language is
// taken to hold until the pool has measured its own (bytes); a gVisor one
// (its Sentry, gofer and own copy of the runtime) is taken to hold
// gVisorEstimate (a Python one with the preloads measured 95 MB, each
// address space counted once).
var defaultEstimate = map[string]int64{"python": 8 << 20, "javascript": 24 << 20, "bash": 2 << 20}

const gVisorEstimate = 100 << 20

// templateKeeper keeps a template interpreter running (not to be confused
// with gVisor's keeper, the relay a checkpointable sandbox runs).
type templateKeeper struct {
	cfg config.Config // what it is started with (its preloads)
	// zyg, fails and runs (starts that succeeded) are guarded by the
	// pool's zmu.
	zyg         *zygote.Zygote
	fails, runs int
	// tried is closed once its first start has succeeded or failed:
	// builds of the languages it starts wait for it rather than start
	// cold (see awaitTemplate).
	tried chan struct{}
}

type queue struct {
	rt runtimes.Runtime
	// template: a template is configured and starts rt's runtimes (tk).
	template bool
	tk       *templateKeeper
	net      bool // its sandboxes are booted with a network
	// size is the configured size; max the most it grows to.
	size, max int
	// oneshots is how many of the ready ones one-shots may take
	// (pool.oneshot_size; the rest are for session creations), -1 for
	// all of them.
	oneshots int
	profile  config.Limits
	// mu guards ready, pending, base, target, cut, measured and dem.
	mu      sync.Mutex
	ready   []*instance.Instance
	pending int
	// base is the size it keeps whatever the demand: size, or fewer when
	// the pools' sizes exceed the memory budget; target the number it
	// keeps now: base, or more under demand; cut how many fewer the
	// budget lets it keep than its demand asks.
	base, target, cut int
	// measured: its estimate was taken since its last build.
	measured bool
	dem      demand
	kick     chan struct{}

	hits, misses, built, discarded atomic.Uint64
	// cold counts instances handed out whose runtime the template could
	// have started but did not (it was not up, or could not fork).
	cold       atomic.Uint64
	buildNanos atomic.Int64
	// refillNanos adds up, per built instance, the time from when the
	// refill decided to build it (a build slot waited for included).
	refillNanos atomic.Int64
	// waiting counts the requests building a sandbox themselves now,
	// none being ready.
	waiting atomic.Int64
	// est is the memory a ready one holds, measured (0: not yet); guess
	// stands for it until it is.
	est   atomic.Int64
	guess int64
	// lastTake is when one was last taken (unix nanoseconds, real time).
	lastTake atomic.Int64
}

// quietGap is how long after the last take a refill beyond the pool's
// size waits: building competes for the CPU with the burst being served.
const quietGap = 100 * time.Millisecond

// New starts the pools of sandboxes of kernel k (and, for native ones, the
// Python template, if configured). It returns at once; pools fill in the
// background.
func New(cfg config.Config, k instance.Kernel, slots *instance.Slots, log *slog.Logger) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg: cfg, kernel: k, slots: slots, log: log,
		budget: int64(cfg.Pool.MemoryBudget), hold: time.Duration(cfg.Pool.ShrinkAfter), now: clock,
		ctx: ctx, cancel: cancel,
		queues: map[string]*queue{}, netQueues: map[string]*queue{}, leanQueues: map[string]*queue{},
		imgs: images{by: map[string]*poolImage{}},
	}
	switch {
	case p.budget == 0:
		p.budget = AutoBudget(0)
	case p.budget < 0:
		p.budget = math.MaxInt64 // none: a template's pools
	}
	p.builds = newBuildSlots(cfg.Pool.Parallel)
	// The template forks runtimes into native sandboxes only: gVisor's
	// Python runtimes import the preloaded modules themselves.
	if native, ok := k.(instance.Native); ok {
		p.host = native.Host
	}
	if cfg.Pool.Zygote && p.host != nil {
		p.full = &templateKeeper{cfg: cfg, tried: make(chan struct{})}
		if cfg.Pool.LeanSize > 0 && len(cfg.Pool.Preload) > 0 {
			lc := cfg
			lc.Pool.Preload, lc.Pool.WarmRuntimes = nil, false
			p.lean = &templateKeeper{cfg: lc, tried: make(chan struct{})}
		}
	}
	for _, lang := range runtimes.Names() {
		rt, err := runtimes.Lookup(cfg, lang)
		if err != nil {
			panic(err) // the table's own names
		}
		size := cfg.Pool.Size[lang]
		// A language without a pool does not grow one.
		q := newQueue(rt, size, max(size, cfg.Pool.MaxSize[lang]*min(size, 1)), cfg.Defaults)
		if n, ok := cfg.Pool.OneShotSize[lang]; ok {
			q.oneshots = n
		}
		if q.template = rt.Template && p.full != nil; q.template {
			q.tk = p.full
		}
		if q.guess = defaultEstimate[lang]; q.guess == 0 || p.host == nil {
			q.guess = gVisorEstimate
		}
		p.queues[lang] = q
		p.order = append(p.order, q)
		// Only where sessions can have a network at all.
		if n := cfg.Pool.NetworkSize[lang]; n > 0 && k.NetworkAtStart() && cfg.Network.Enabled {
			q := newQueue(rt, n, n, cfg.Defaults)
			q.net, q.tk = true, p.full
			q.guess = gVisorEstimate // only gVisor fixes a network at boot
			p.netQueues[lang] = q
			p.order = append(p.order, q)
		}
		if rt.Template && p.lean != nil && size > 0 {
			n := min(cfg.Pool.LeanSize, size)
			q := newQueue(rt, n, n, cfg.Defaults)
			q.template, q.tk, q.guess = true, p.lean, defaultEstimate[lang]
			p.leanQueues[lang] = q
			p.order = append(p.order, q)
		}
	}
	if len(p.leanQueues) == 0 {
		p.lean = nil // no pool of its language: no lean template either
	}
	// The sizes within the budget, before the first build (with the
	// estimates until the first are measured).
	p.resize()
	// Once order is complete: the build slots read it.
	for _, q := range p.order {
		if q.size > 0 {
			p.wg.Add(1)
			go p.refill(q)
		}
	}
	for _, k := range []*templateKeeper{p.full, p.lean} {
		if k != nil {
			p.wg.Add(1)
			go p.keepZygote(k)
		}
	}
	return p
}

func newQueue(rt runtimes.Runtime, size, most int, profile config.Limits) *queue {
	return &queue{rt: rt, size: size, max: most, oneshots: -1, base: size, target: size, profile: profile, kick: make(chan struct{}, 1)}
}

// Get implements instance.Source: a warm instance adapted to l if one is
// ready, else one built now.
func (p *Pool) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (*instance.Instance, error) {
	q, ok := p.queues[rt.Lang]
	if !ok {
		return nil, fmt.Errorf("%w: unknown language %q", errdefs.ErrInvalidArgument, rt.Lang)
	}
	if net = net && p.kernel.NetworkAtStart(); net {
		// This kernel's sandboxes cannot be given a network after boot:
		// one booted with a network, from its own pool if there is one.
		if q = p.netQueues[rt.Lang]; q == nil {
			return p.newInstance(ctx, p.full, rt, l, true, false)
		}
	}
	if !rt.Adapts(q.profile, l) {
		// The pool's runtimes took its limits at start (a flag, a heap
		// size) and cannot serve these: leave them to sessions they can.
		q.misses.Add(1)
		return q.handOut(p.newInstance(ctx, q.tk, rt, l, net, false))
	}
	if lq := p.leanQueues[rt.Lang]; lq != nil && !net && instance.IsLean(ctx) {
		// Code that needs none of the preloads: a lean one, ready or
		// built now, never a full one (whose refill would cost a full
		// template's fork again).
		return p.takeOrBuild(ctx, lq, rt, l, net, 0)
	}
	keep := 0
	if instance.IsOneShot(ctx) {
		keep = q.reserved()
	}
	return p.takeOrBuild(ctx, q, rt, l, net, keep)
}

// takeOrBuild takes a ready instance of q adapted to l, more than keep
// being ready, or builds one now: always for a request marked
// instance.ForFresh (those it was handed died, and so may the others
// ready beside them, their deaths not noticed yet).
func (p *Pool) takeOrBuild(ctx context.Context, q *queue, rt runtimes.Runtime, l config.Limits, net bool, keep int) (*instance.Instance, error) {
	q.noteTake(p.now())
	if !instance.IsFresh(ctx) {
		if inst := p.take(q, rt, l, keep); inst != nil {
			return q.handOut(inst, nil)
		}
	}
	q.misses.Add(1)
	q.signal()
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	return q.handOut(p.newInstance(ctx, q.tk, rt, l, net, false))
}

// take takes a ready instance from q, more than keep being ready,
// adapted to l; nil when none is (or one could not be adapted: the
// caller builds one).
func (p *Pool) take(q *queue, rt runtimes.Runtime, l config.Limits, keep int) *instance.Instance {
	for {
		inst := q.take(keep)
		if inst == nil {
			return nil
		}
		q.signal()
		if !inst.Healthy() {
			q.discarded.Add(1)
			p.closing.Go(func() { inst.Close() })
			continue
		}
		// Built in the background: the session gets the normal CPU
		// weight, or another sandbox.
		if err := inst.Foreground(); err != nil {
			p.log.Warn("cannot give a pooled sandbox its CPU weight; taking another", "err", err)
			q.discarded.Add(1)
			p.closing.Go(func() { inst.Close() })
			continue
		}
		if from := inst.Limits(); l != from {
			if !rt.Adapts(from, l) {
				// Its runtime took the pool's limits at start (a flag, a
				// heap size): build one with the session's own.
				q.discarded.Add(1)
				p.closing.Go(func() { inst.Close() })
				return nil
			}
			if err := inst.Adapt(l); err != nil {
				p.log.Warn("cannot adapt a pooled sandbox; building one", "err", err)
				q.discarded.Add(1)
				p.closing.Go(func() { inst.Close() })
				return nil
			}
		}
		q.hits.Add(1)
		return inst
	}
}

// reserved is how many ready ones a one-shot leaves for session
// creations: what its base holds beyond pool.oneshot_size.
func (q *queue) reserved() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.oneshots < 0 {
		return 0
	}
	return max(q.base-q.oneshots, 0)
}

// noteTake counts a take in the queue's demand.
func (q *queue) noteTake(now time.Time) {
	q.lastTake.Store(time.Now().UnixNano())
	q.mu.Lock()
	q.dem.add(now, 1)
	q.mu.Unlock()
}

// urgency orders the queues waiting for a build slot: requests waiting
// on one first, then the emptiest.
func (q *queue) urgency() float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.target == 0 {
		return 0
	}
	return float64(q.waiting.Load()) + 1 - float64(len(q.ready)+q.pending)/float64(q.target)
}

// estimate is the memory a ready one holds: measured, or a guess until
// it is.
func (q *queue) estimate() int64 {
	if e := q.est.Load(); e > 0 {
		return e
	}
	return q.guess
}

// measure folds the PSS of q's newest ready sandbox into q's estimate (a
// moving average), once after each build, when q has reached its target:
// a forked runtime's PSS includes its share of the template's pages,
// which falls as the forks sharing them are built, so one measured as
// soon as it is built would count more than it holds once its pool is
// full.
func (q *queue) measure() {
	q.mu.Lock()
	var inst *instance.Instance
	if !q.measured && q.pending == 0 && len(q.ready) > 0 && len(q.ready) >= q.target {
		inst = q.ready[len(q.ready)-1]
		q.measured = true
	}
	q.mu.Unlock()
	if inst == nil {
		return
	}
	m, err := readPSS(inst)
	// Taken meanwhile (by a session, whose code may have run while it
	// was read): no figure, the next build's instead. Only a sandbox
	// still ready when read counts: what a client's code holds must not
	// size the pools.
	q.mu.Lock()
	still := slices.Contains(q.ready, inst)
	if !still {
		q.measured = false
	}
	q.mu.Unlock()
	if !still || err != nil || m <= 0 {
		return
	}
	if old := q.est.Load(); old > 0 {
		m = (old*3 + m) / 4
	}
	q.est.Store(m)
}

// readPSS reads what a ready sandbox holds (a test's seam).
var readPSS = (*instance.Instance).PSS

// resize sets every queue's target from its demand, within the budget,
// and wakes those whose target changed.
func (p *Pool) resize() {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	now := p.now()
	in := make([]sizing, len(p.order))
	for i, q := range p.order {
		q.mu.Lock()
		in[i] = sizing{size: q.size, max: q.max, est: q.estimate()}
		if q.max > q.size {
			in[i].want = q.dem.want(now, p.hold)
		}
		q.mu.Unlock()
	}
	for i, f := range fit(p.budget, in) {
		q := p.order[i]
		q.mu.Lock()
		changed := q.target != f.target
		q.base, q.target, q.cut = f.base, f.target, f.cut
		q.mu.Unlock()
		if changed {
			q.signal()
		}
	}
}

// AutoBudget is pool.memory_budget's automatic value: a thirty-second of
// the memory the server's sandboxes may use, the host's (MemTotal) or
// limit bytes when that is lower and not 0 (a cgroup's:
// cgroup.Host.MemoryLimit), between 32 MiB and 4 GiB.
func AutoBudget(limit int64) int64 {
	return budgetOf(memTotal(), limit)
}

// budgetOf is AutoBudget's arithmetic.
func budgetOf(total, limit int64) int64 {
	if limit > 0 && (total <= 0 || limit < total) {
		total = limit
	}
	if total <= 0 {
		total = 1 << 30
	}
	return min(max(total/32, 32<<20), 4<<30)
}

// memTotal is the host's memory in bytes (0 when unknown).
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
		if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			return kb << 10
		}
	}
	return 0
}

// handOut hands out inst, counting it in q's cold figure when the
// template could have started its runtime but did not.
func (q *queue) handOut(inst *instance.Instance, err error) (*instance.Instance, error) {
	if err == nil && q.template && !inst.Forked() {
		q.cold.Add(1)
	}
	return inst, err
}

// take takes the oldest ready instance, if more than keep are ready.
func (q *queue) take(keep int) *instance.Instance {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ready) <= keep {
		return nil
	}
	// Oldest first: an instance never waits longer than it must.
	inst := q.ready[0]
	q.ready = q.ready[1:]
	return inst
}

func (q *queue) signal() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// refill keeps q at its target: builds what it lacks, the most urgent
// queue's first, and closes what a shrunk target leaves over.
func (p *Pool) refill(q *queue) {
	defer p.wg.Done()
	if q.template && !p.awaitTemplate(p.ctx, q.tk) {
		return
	}
	if p.usesImage(q) {
		if p.builds.acquire(p.ctx, q) != nil {
			return
		}
		p.makeImage(p.ctx, q)
		p.builds.release()
	}
	for {
		p.resize()
		q.mu.Lock()
		short := q.target > len(q.ready)+q.pending
		var excess []*instance.Instance
		if n := len(q.ready) - q.target; n > 0 {
			// The oldest go: an instance never waits longer than it must.
			excess = append(excess, q.ready[:n]...)
			clear(q.ready[:n])
			q.ready = q.ready[n:]
		}
		grown := q.target > q.base
		q.mu.Unlock()
		q.discarded.Add(uint64(len(excess)))
		for _, inst := range excess {
			p.closing.Go(func() { inst.Close() })
		}
		if short {
			// One build at a time, the target looked at again once a slot
			// is had: during a burst it moves with every take.
			decided := time.Now()
			if !p.awaitQuiet(q) || p.builds.acquire(p.ctx, q) != nil {
				return
			}
			p.resize()
			q.mu.Lock()
			short = q.target > len(q.ready)+q.pending
			if short {
				q.pending++
			}
			q.mu.Unlock()
			if !short {
				p.builds.release()
				continue
			}
			p.inflight.Add(1)
			go p.build(q, decided)
			continue
		}
		q.measure()
		// A grown pool looks again each second: it shrinks once its
		// demand has passed.
		var again <-chan time.Time
		if grown {
			again = time.After(time.Second)
		}
		select {
		case <-q.kick:
		case <-again:
		case <-p.ctx.Done():
			return
		}
	}
}

// build builds one sandbox for q's refill, with a build slot held, and
// makes it ready.
func (p *Pool) build(q *queue, decided time.Time) {
	defer p.inflight.Done()
	defer p.builds.release()
	start := time.Now()
	runs := p.templateRuns(q.tk)
	inst, err := p.newInstance(p.ctx, q.tk, q.rt, q.profile, q.net, true)
	q.mu.Lock()
	q.pending--
	q.measured = false
	// One started cold while the template came up is replaced
	// (as recycleCold replaces those already ready).
	stale := err == nil && q.template && !inst.Forked() && p.templateRuns(q.tk) != runs
	if err == nil && p.ctx.Err() == nil && !stale {
		q.ready = append(q.ready, inst)
		inst = nil
	}
	q.mu.Unlock()
	if stale {
		q.discarded.Add(1)
	}
	if inst != nil {
		inst.Close()
	}
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Warn("pool: building a sandbox failed", "language", q.rt.Lang, "err", err)
			// Do not spin on a persistent failure.
			select {
			case <-time.After(time.Second):
			case <-p.ctx.Done():
			}
		}
	} else {
		q.built.Add(1)
		q.buildNanos.Add(int64(time.Since(start)))
		q.refillNanos.Add(int64(time.Since(decided)))
	}
	q.signal()
}

// awaitQuiet holds a refill of q back while a burst is being served and
// q still has its size ready: it goes on quietGap after the last take, or
// at once when q falls below its size or a request waits. It is false
// when the pool closes.
func (p *Pool) awaitQuiet(q *queue) bool {
	for {
		q.mu.Lock()
		enough := len(q.ready) >= q.base
		q.mu.Unlock()
		wait := quietGap - time.Since(time.Unix(0, q.lastTake.Load()))
		if !enough || wait <= 0 || q.waiting.Load() > 0 {
			return true
		}
		t := time.NewTimer(min(wait, 10*time.Millisecond))
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return false
		}
	}
}

// newInstance builds one instance from scratch: through the template of
// tk (nil: none) when it runs, else (or if the template fails) by
// executing the runtime.
//
// The refill's are built in the background (instance.New, or restored
// from a pool image): they take only the CPU that the sandboxes requests
// wait for leave.
func (p *Pool) newInstance(ctx context.Context, tk *templateKeeper, rt runtimes.Runtime, l config.Limits, net, background bool) (*instance.Instance, error) {
	if !net {
		inst, ok, err := p.restoreImage(ctx, rt, l, background)
		if ok && err == nil {
			return inst, nil
		}
		if ok {
			if ctx.Err() != nil {
				return nil, err
			}
			p.log.Warn("pool: a gVisor sandbox could not be restored from its image; booting it", "language", rt.Lang, "err", err)
		}
	}
	if rt.Template && !p.awaitTemplate(ctx, tk) {
		return nil, ctx.Err()
	}
	if tk != nil && tk == p.lean && p.zygote(tk) == nil {
		// Not up: the full template forks it (as good for lean code; a
		// cold start would cost far more than the lean template saves).
		if tk = p.full; !p.awaitTemplate(ctx, tk) {
			return nil, ctx.Err()
		}
	}
	if z := p.zygote(tk); z != nil && rt.Template {
		inst, err := instance.New(ctx, p.kernel, p.slots, rt, l, net, z, background)
		if err == nil {
			return inst, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		p.log.Warn("python template could not start a runtime; starting it cold", "err", err)
	}
	return instance.New(ctx, p.kernel, p.slots, rt, l, net, nil, background)
}

// awaitTemplate waits until tk's template's first start has been tried
// (at most templateWait), so that the first Python sandboxes after the
// server starts are forked from it rather than started cold. It is false
// only when ctx ends first.
func (p *Pool) awaitTemplate(ctx context.Context, tk *templateKeeper) bool {
	if tk == nil {
		return true
	}
	select {
	case <-tk.tried:
		return true
	default:
	}
	t := time.NewTimer(templateWait)
	defer t.Stop()
	select {
	case <-tk.tried:
	case <-t.C:
		p.log.Warn("python template not up yet; starting python sandboxes cold meanwhile", "waited", templateWait)
	case <-ctx.Done():
		return false
	}
	return true
}

// templateRuns counts tk's template's successful starts (0 for nil).
func (p *Pool) templateRuns(tk *templateKeeper) int {
	if tk == nil {
		return 0
	}
	p.zmu.Lock()
	defer p.zmu.Unlock()
	return tk.runs
}

// zygote is tk's template if it runs (nil for a nil tk).
func (p *Pool) zygote(tk *templateKeeper) *zygote.Zygote {
	if tk == nil {
		return nil
	}
	p.zmu.Lock()
	defer p.zmu.Unlock()
	if tk.zyg == nil {
		return nil
	}
	select {
	case <-tk.zyg.Dead():
		return nil
	default:
		return tk.zyg
	}
}

// keepZygote starts tk's Python template and restarts it when it dies,
// backing off when it keeps failing.
func (p *Pool) keepZygote(tk *templateKeeper) {
	defer p.wg.Done()
	var tried sync.Once
	defer tried.Do(func() { close(tk.tried) })
	backoff := time.Second
	for p.ctx.Err() == nil {
		z, err := startTemplate(p.ctx, p.host, tk.cfg, p.log, p.kernel.Root().Jail())
		if err != nil {
			p.zmu.Lock()
			tk.fails++
			p.zmu.Unlock()
			// Builds waiting for it go on cold.
			tried.Do(func() { close(tk.tried) })
			p.log.Warn("python template failed to start; python sandboxes start cold meanwhile", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		if len(z.Errors) > 0 {
			p.log.Warn("python template could not preload some modules", "errors", z.Errors)
		}
		p.log.Info("python template ready", "pid", z.Pid(), "preload_ms", z.Started.Milliseconds(), "lean", tk == p.lean)
		p.zmu.Lock()
		tk.zyg = z
		tk.runs++
		p.zmu.Unlock()
		tried.Do(func() { close(tk.tried) })
		// Instances built while the template was not up started cold;
		// replace them so that pooled sessions get the warm template.
		p.recycleCold(tk)
		select {
		case <-z.Dead():
			p.log.Warn("python template died; restarting")
		case <-p.ctx.Done():
			// Close ends the template after the pooled runtimes, its
			// children: were it to go first, they would be orphaned to the
			// host's init, and each sandbox's teardown would wait for that
			// init to reap them.
			return
		}
		z.Close()
		p.zmu.Lock()
		tk.zyg = nil
		p.zmu.Unlock()
	}
}

// recycleCold discards the ready instances of the queues tk's template
// starts that were started without it (the pools refill). Those it forked
// stay: a runtime outlives the template that forked it.
func (p *Pool) recycleCold(tk *templateKeeper) {
	for _, q := range p.order {
		if !q.template || q.tk != tk {
			continue
		}
		q.mu.Lock()
		var cold []*instance.Instance
		keep := q.ready[:0]
		for _, inst := range q.ready {
			if inst.Forked() {
				keep = append(keep, inst)
			} else {
				cold = append(cold, inst)
			}
		}
		clear(q.ready[len(keep):])
		q.ready = keep
		q.mu.Unlock()
		if len(cold) == 0 {
			continue
		}
		q.discarded.Add(uint64(len(cold)))
		q.signal()
		for _, inst := range cold {
			p.closing.Go(func() { inst.Close() })
		}
	}
}

// discard closes the ready instances.
func (q *queue) discard() {
	q.mu.Lock()
	old := q.ready
	q.ready = nil
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, inst := range old {
		wg.Go(func() { inst.Close() })
	}
	wg.Wait()
}

// Stats reports the pools' state, for /healthz and the benchmark: an
// apitype.PoolStats per queue (allQueues) and, when it is configured, the
// template's apitype.TemplateStats (with the lean one's).
func (p *Pool) Stats() map[string]any {
	out := map[string]any{}
	for lang, q := range p.allQueues() {
		q.mu.Lock()
		s := apitype.PoolStats{Ready: len(q.ready), Target: q.target, Size: q.size, Min: q.base, Max: q.max, Building: q.pending, BudgetCut: q.cut}
		q.mu.Unlock()
		s.Hits, s.Misses, s.Built, s.Discarded = q.hits.Load(), q.misses.Load(), q.built.Load(), q.discarded.Load()
		s.Cold = q.cold.Load()
		s.Waiting = int(q.waiting.Load())
		s.MemoryBytes = q.estimate()
		s.HeldBytes = int64(s.Ready) * s.MemoryBytes
		if p.budget < math.MaxInt64 {
			s.MemoryBudget = p.budget
		}
		if s.Built > 0 {
			s.AvgBuildMs = float64(q.buildNanos.Load()) / float64(s.Built) / 1e6
			s.AvgRefillMs = float64(q.refillNanos.Load()) / float64(s.Built) / 1e6
		}
		out[lang] = s
	}
	if p.cfg.Pool.Zygote && p.host != nil { // a template that is off is not reported as down
		p.zmu.Lock()
		ts := p.full.stats()
		if p.lean != nil {
			l := p.lean.stats()
			ts.Lean = &l
		}
		p.zmu.Unlock()
		out[apitype.TemplateKey] = ts
	}
	return out
}

// stats are tk's template's figures; zmu held.
func (tk *templateKeeper) stats() apitype.TemplateStats {
	return apitype.TemplateStats{Running: tk.zyg != nil, Failures: tk.fails, Restarts: max(tk.runs-1, 0)}
}

// allQueues names every queue: a language, "<language>+network" for
// sandboxes booted with a network (pool.network_size), or
// "<language>+lean" for those forked from the lean template
// (pool.lean_size).
func (p *Pool) allQueues() map[string]*queue {
	out := maps.Clone(p.queues)
	for lang, q := range p.netQueues {
		out[lang+apitype.NetworkPoolSuffix] = q
	}
	for lang, q := range p.leanQueues {
		out[lang+apitype.LeanPoolSuffix] = q
	}
	return out
}

// Close stops refilling and frees every pooled instance and the template.
func (p *Pool) Close() {
	p.cancel()
	p.wg.Wait()
	p.closing.Wait()
	// Builds in flight may still finish; wait for them.
	p.inflight.Wait()
	p.closeImages()
	for _, q := range p.queues {
		q.discard()
	}
	for _, q := range p.netQueues {
		q.discard()
	}
	for _, q := range p.leanQueues {
		q.discard()
	}
	p.zmu.Lock()
	for _, tk := range []*templateKeeper{p.full, p.lean} {
		if tk != nil && tk.zyg != nil {
			tk.zyg.Close()
			tk.zyg = nil
		}
	}
	p.zmu.Unlock()
}

// KeepsMemory reports whether the pool's sandboxes without a network can
// be paused with their memory (instance.KeepsMemory).
func (p *Pool) KeepsMemory() bool { return instance.KeepsMemory(p.kernel) }

// Restore builds an instance from a checkpoint on the pool's kernel
// (instance.Restore), outside the pool: a restored sandbox is its
// session's from the start.
func (p *Pool) Restore(ctx context.Context, rt runtimes.Runtime, l config.Limits, mem instance.Memory, fill func(*workspace.Dir) error) (*instance.Instance, error) {
	return instance.Restore(ctx, p.kernel, p.slots, rt, l, mem, fill, false)
}
