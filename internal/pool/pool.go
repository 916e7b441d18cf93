// Package pool owns the warm pools: per language, a number of sandboxes
// built ahead of time with their runtime started (Python ones forked from
// the template interpreter, with the heavy libraries already imported),
// refilled in the background, adapted to the limits of the session that
// takes one, and the template interpreter's restarts.
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
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/zygote"
)

// Pool is an instance.Source backed by warm instances.
//
// Locks, in the order they may be taken: a queue's mu, then zmu (a build
// reads templateRuns under its queue's lock), then the template's own
// (Close ends it under zmu).
type Pool struct {
	cfg    config.Config
	kernel instance.Kernel
	host   *jail.Host // the native kernel's host: the template's; nil for gVisor
	slots  *instance.Slots
	log    *slog.Logger
	build  chan struct{} // bounds concurrent builds

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closing sync.WaitGroup // instances discarded by Get, being torn down

	queues map[string]*queue
	// netQueues keep sandboxes booted with a network, for kernels whose
	// network is fixed at boot (pool.network_size).
	netQueues map[string]*queue

	// zmu guards the template and its counts (zyg, zygFails, zygRuns).
	zmu      sync.Mutex
	zyg      *zygote.Zygote
	zygFails int
	zygRuns  int // starts that succeeded
	// zygTried is closed once the template's first start has succeeded or
	// failed (nil without a template): builds of the languages it starts
	// wait for it rather than start cold (see awaitTemplate).
	zygTried chan struct{}
}

// templateWait bounds how long a build waits for the template's first
// start (about a second on a quiet host): a template that takes longer,
// or hangs, must not keep Python sandboxes from being built. Those built
// cold meanwhile are replaced once it is up. (A variable for tests.)
var templateWait = 20 * time.Second

// startTemplate starts the template interpreter (a variable for tests).
var startTemplate = zygote.Start

type queue struct {
	rt runtimes.Runtime
	// template: the template is configured and starts rt's runtimes.
	template bool
	net      bool // its sandboxes are booted with a network
	size     int
	profile  config.Limits
	// mu guards ready and pending.
	mu      sync.Mutex
	ready   []*instance.Instance
	pending int
	kick    chan struct{}

	hits, misses, built, discarded atomic.Uint64
	// cold counts instances handed out whose runtime the template could
	// have started but did not (it was not up, or could not fork).
	cold       atomic.Uint64
	buildNanos atomic.Int64
}

// New starts the pools of sandboxes of kernel k (and, for native ones, the
// Python template, if configured). It returns at once; pools fill in the
// background.
func New(cfg config.Config, k instance.Kernel, slots *instance.Slots, log *slog.Logger) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg: cfg, kernel: k, slots: slots, log: log,
		build: make(chan struct{}, cfg.Pool.Parallel),
		ctx:   ctx, cancel: cancel,
		queues: map[string]*queue{}, netQueues: map[string]*queue{},
	}
	// The template forks runtimes into native sandboxes only: gVisor's
	// Python runtimes import the preloaded modules themselves.
	if native, ok := k.(instance.Native); ok {
		p.host = native.Host
	}
	if cfg.Pool.Zygote && p.host != nil {
		p.zygTried = make(chan struct{})
	}
	for _, lang := range runtimes.Names() {
		rt, err := runtimes.Lookup(cfg, lang)
		if err != nil {
			panic(err) // the table's own names
		}
		q := &queue{rt: rt, template: rt.Template && p.zygTried != nil, size: cfg.Pool.Size[lang], profile: cfg.Defaults, kick: make(chan struct{}, 1)}
		p.queues[lang] = q
		if q.size > 0 {
			p.wg.Add(1)
			go p.refill(q)
		}
		// Only where sessions can have a network at all.
		if n := cfg.Pool.NetworkSize[lang]; n > 0 && k.NetworkAtStart() && cfg.Network.Enabled {
			q := &queue{rt: rt, net: true, size: n, profile: cfg.Defaults, kick: make(chan struct{}, 1)}
			p.netQueues[lang] = q
			p.wg.Add(1)
			go p.refill(q)
		}
	}
	if p.zygTried != nil {
		p.wg.Add(1)
		go p.keepZygote()
	}
	return p
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
			return p.newInstance(ctx, rt, l, true)
		}
	}
	if !rt.Adapts(q.profile, l) {
		// The pool's runtimes took its limits at start (a flag, a heap
		// size) and cannot serve these: leave them to sessions they can.
		q.misses.Add(1)
		return q.handOut(p.newInstance(ctx, rt, l, net))
	}
	for {
		inst := q.take()
		if inst == nil {
			break
		}
		q.signal()
		if !inst.Healthy() {
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
				break
			}
			if err := inst.Adapt(l); err != nil {
				p.log.Warn("cannot adapt a pooled sandbox; building one", "err", err)
				q.discarded.Add(1)
				p.closing.Go(func() { inst.Close() })
				break
			}
		}
		q.hits.Add(1)
		return q.handOut(inst, nil)
	}
	q.misses.Add(1)
	q.signal()
	return q.handOut(p.newInstance(ctx, rt, l, net))
}

// handOut hands out inst, counting it in q's cold figure when the
// template could have started its runtime but did not.
func (q *queue) handOut(inst *instance.Instance, err error) (*instance.Instance, error) {
	if err == nil && q.template && !inst.Forked() {
		q.cold.Add(1)
	}
	return inst, err
}

func (q *queue) take() *instance.Instance {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ready) == 0 {
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

// refill keeps q at its size.
func (p *Pool) refill(q *queue) {
	defer p.wg.Done()
	if q.template && !p.awaitTemplate(p.ctx) {
		return
	}
	for {
		q.mu.Lock()
		want := q.size - len(q.ready) - q.pending
		if want > 0 {
			q.pending += want
		}
		q.mu.Unlock()
		for i := 0; i < want; i++ {
			select {
			case p.build <- struct{}{}:
			case <-p.ctx.Done():
				return
			}
			go func() {
				defer func() { <-p.build }()
				start := time.Now()
				runs := p.templateRuns()
				inst, err := p.newInstance(p.ctx, q.rt, q.profile, q.net)
				q.mu.Lock()
				q.pending--
				// One started cold while the template came up is replaced
				// (as recycleCold replaces those already ready).
				stale := err == nil && q.template && !inst.Forked() && p.templateRuns() != runs
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
				}
				q.signal()
			}()
		}
		select {
		case <-q.kick:
		case <-p.ctx.Done():
			return
		}
	}
}

// newInstance builds one instance from scratch: through the template
// when it runs, else (or if the template fails) by executing the runtime.
func (p *Pool) newInstance(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (*instance.Instance, error) {
	if rt.Template && !p.awaitTemplate(ctx) {
		return nil, ctx.Err()
	}
	if z := p.zygote(); z != nil && rt.Template {
		inst, err := instance.New(ctx, p.kernel, p.slots, rt, l, net, z)
		if err == nil {
			return inst, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		p.log.Warn("python template could not start a runtime; starting it cold", "err", err)
	}
	return instance.New(ctx, p.kernel, p.slots, rt, l, net, nil)
}

// awaitTemplate waits until the template's first start has been tried
// (at most templateWait), so that the first Python sandboxes after the
// server starts are forked from it rather than started cold. It is false
// only when ctx ends first.
func (p *Pool) awaitTemplate(ctx context.Context) bool {
	if p.zygTried == nil {
		return true
	}
	select {
	case <-p.zygTried:
		return true
	default:
	}
	t := time.NewTimer(templateWait)
	defer t.Stop()
	select {
	case <-p.zygTried:
	case <-t.C:
		p.log.Warn("python template not up yet; starting python sandboxes cold meanwhile", "waited", templateWait)
	case <-ctx.Done():
		return false
	}
	return true
}

// templateRuns counts the template's successful starts.
func (p *Pool) templateRuns() int {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	return p.zygRuns
}

func (p *Pool) zygote() *zygote.Zygote {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	if p.zyg == nil {
		return nil
	}
	select {
	case <-p.zyg.Dead():
		return nil
	default:
		return p.zyg
	}
}

// keepZygote starts the Python template and restarts it when it dies,
// backing off when it keeps failing.
func (p *Pool) keepZygote() {
	defer p.wg.Done()
	var tried sync.Once
	defer tried.Do(func() { close(p.zygTried) })
	backoff := time.Second
	for p.ctx.Err() == nil {
		z, err := startTemplate(p.ctx, p.host, p.cfg, p.log, p.kernel.Root().Jail())
		if err != nil {
			p.zmu.Lock()
			p.zygFails++
			p.zmu.Unlock()
			// Builds waiting for it go on cold.
			tried.Do(func() { close(p.zygTried) })
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
		p.log.Info("python template ready", "pid", z.Pid(), "preload_ms", z.Started.Milliseconds())
		p.zmu.Lock()
		p.zyg = z
		p.zygRuns++
		p.zmu.Unlock()
		tried.Do(func() { close(p.zygTried) })
		// Instances built while the template was not up started cold;
		// replace them so that pooled sessions get the warm template.
		p.recycleCold()
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
		p.zyg = nil
		p.zmu.Unlock()
	}
}

// recycleCold discards the ready instances of the languages the template
// starts that were started without it (the pools refill). Those it forked
// stay: a runtime outlives the template that forked it.
func (p *Pool) recycleCold() {
	for _, q := range p.queues {
		if !q.template {
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
// apitype.PoolStats per language and, when it is configured, the
// template's apitype.TemplateStats.
func (p *Pool) Stats() map[string]any {
	out := map[string]any{}
	for lang, q := range p.allQueues() {
		q.mu.Lock()
		s := apitype.PoolStats{Ready: len(q.ready), Target: q.size, Building: q.pending}
		q.mu.Unlock()
		s.Hits, s.Misses, s.Built, s.Discarded = q.hits.Load(), q.misses.Load(), q.built.Load(), q.discarded.Load()
		s.Cold = q.cold.Load()
		if s.Built > 0 {
			s.AvgBuildMs = float64(q.buildNanos.Load()) / float64(s.Built) / 1e6
		}
		out[lang] = s
	}
	if p.cfg.Pool.Zygote && p.host != nil { // a template that is off is not reported as down
		p.zmu.Lock()
		z, fails, runs := p.zyg, p.zygFails, p.zygRuns
		p.zmu.Unlock()
		out[apitype.TemplateKey] = apitype.TemplateStats{Running: z != nil, Failures: fails, Restarts: max(runs-1, 0)}
	}
	return out
}

// allQueues names every queue: a language, or "<language>+network" for
// sandboxes booted with a network (pool.network_size).
func (p *Pool) allQueues() map[string]*queue {
	out := maps.Clone(p.queues)
	for lang, q := range p.netQueues {
		out[lang+apitype.NetworkPoolSuffix] = q
	}
	return out
}

// Close stops refilling and frees every pooled instance and the template.
func (p *Pool) Close() {
	p.cancel()
	p.wg.Wait()
	p.closing.Wait()
	// Builds in flight may still finish; wait for their slots.
	for i := 0; i < cap(p.build); i++ {
		p.build <- struct{}{}
	}
	for _, q := range p.queues {
		q.discard()
	}
	for _, q := range p.netQueues {
		q.discard()
	}
	p.zmu.Lock()
	if p.zyg != nil {
		p.zyg.Close()
		p.zyg = nil
	}
	p.zmu.Unlock()
}
