package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/gvisor"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/jail/jailtest"
	"airlock/internal/runtimes"
	"airlock/internal/zygote"
)

// The test binary is what the jail host re-executes as each sandbox's
// init, and the keeper of gVisor sandboxes.
func TestMain(m *testing.M) {
	gvisor.MainIfKeeper()
	jail.RunTests(m)
}

// testPool starts a pool of one python sandbox, with the template, whose
// template starts through start.
func testPool(t *testing.T, start func(context.Context, *jail.Host, config.Config, *slog.Logger, *jail.Root) (*zygote.Zygote, error)) *Pool {
	t.Helper()
	h, cfg := jailtest.Host(t, "pool", func(c *config.Config) {
		c.Pool.Preload = []string{"json"} // quick to start
		c.Pool.Size = map[string]int{"python": 1}
		c.Pool.MaxSize = nil // it keeps its size
		c.Pool.Zygote = true
	})
	startTemplate = start
	t.Cleanup(func() { startTemplate = zygote.Start })
	p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close) // before the host's
	return p
}

// get takes a python sandbox from p, as a session with the default limits
// does, and closes it at the end of the test.
func get(t *testing.T, p *Pool) *instance.Instance {
	t.Helper()
	rt, err := runtimes.Lookup(p.cfg, "python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := p.Get(ctx, rt, p.cfg.Defaults, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close() })
	return inst
}

// setTemplateWait sets templateWait for a test; call it before testPool,
// so that it is restored after the pool has stopped.
func setTemplateWait(t *testing.T, d time.Duration) {
	old := templateWait
	templateWait = d
	t.Cleanup(func() { templateWait = old })
}

func pythonStats(p *Pool) apitype.PoolStats { return p.Stats()["python"].(apitype.PoolStats) }

// waitFor polls cond (the pool tells no events) for up to 60 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// readyForked reports whether p's python pool is full of sandboxes the
// template forked.
func readyForked(p *Pool) bool {
	q := p.queues["python"]
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, inst := range q.ready {
		if !inst.Forked() {
			return false
		}
	}
	return len(q.ready) == q.target
}

// A template whose first start fails does not hold Python sandboxes up
// (however long they would wait for a slow one): they start cold, and are
// counted so.
func TestTemplateFailsSandboxesStartCold(t *testing.T) {
	setTemplateWait(t, time.Hour)
	p := testPool(t, func(context.Context, *jail.Host, config.Config, *slog.Logger, *jail.Root) (*zygote.Zygote, error) {
		return nil, errors.New("no template here")
	})
	if inst := get(t, p); inst.Forked() {
		t.Error("a sandbox forked by a template that never started")
	}
	waitFor(t, "a full pool", func() bool { return pythonStats(p).Ready == 1 })
	if s := pythonStats(p); s.Cold != 1 || s.Hits+s.Misses != 1 {
		t.Errorf("python pool %+v: want one sandbox handed out, cold", s)
	}
	if ts := p.Stats()[apitype.TemplateKey].(apitype.TemplateStats); ts.Running || ts.Failures < 1 {
		t.Errorf("template %+v: want down, failed", ts)
	}
}

// A template slower than templateWait: sandboxes start cold after that
// wait, and once it is up the pooled cold ones are replaced by forked
// ones.
func TestSlowTemplateColdOnesReplaced(t *testing.T) {
	setTemplateWait(t, 50*time.Millisecond)
	release := make(chan struct{})
	p := testPool(t, func(ctx context.Context, h *jail.Host, cfg config.Config, log *slog.Logger, root *jail.Root) (*zygote.Zygote, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return zygote.Start(ctx, h, cfg, log, root)
	})
	if inst := get(t, p); inst.Forked() {
		t.Error("a sandbox forked by a template that was not up")
	}
	waitFor(t, "a full pool", func() bool { return pythonStats(p).Ready == 1 })
	if readyForked(p) {
		t.Fatal("the pool holds a forked sandbox before the template is up")
	}
	close(release)
	waitFor(t, "the pool's cold sandbox replaced by a forked one", func() bool { return readyForked(p) })
	if inst := get(t, p); !inst.Forked() {
		t.Error("a pooled sandbox after the template came up is not forked")
	}
	if s := pythonStats(p); s.Cold != 1 || s.Hits != 1 || s.Discarded < 1 {
		t.Errorf("python pool %+v: want the first sandbox cold, a hit forked, the cold pooled one discarded", s)
	}
}

// fakeClock is a demand clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// A pool drained by a burst grows toward that demand, refills to it, and
// shrinks back to its size once the demand has passed (on a demand clock
// the test moves; the refills are real).
func TestPoolGrowsAndShrinks(t *testing.T) {
	fc := &fakeClock{}
	fc.ns.Store(time.Unix(1_000_000, 0).UnixNano())
	clock = fc.now
	t.Cleanup(func() { clock = time.Now }) // after the pool's Close
	h, cfg := jailtest.Host(t, "pool", func(c *config.Config) {
		c.Pool.Size = map[string]int{"python": 1}
		c.Pool.MaxSize = map[string]int{"python": 4}
		c.Pool.Zygote = false
	})
	p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	waitFor(t, "a full pool", func() bool { return pythonStats(p).Ready == 1 })
	if s := pythonStats(p); s.Target != 1 || s.Min != 1 || s.Max != 4 {
		t.Fatalf("python pool %+v: want target 1, min 1, max 4", s)
	}
	// A burst of three (the first warm; the others as the refill goes).
	for range 3 {
		get(t, p)
	}
	waitFor(t, "the pool grown to 4 and refilled", func() bool { s := pythonStats(p); return s.Target == 4 && s.Ready == 4 })
	s := pythonStats(p)
	if s.Hits+s.Misses != 3 || s.Hits < 1 || s.Waiting != 0 || s.AvgRefillMs <= 0 || s.MemoryBytes <= 0 {
		t.Errorf("python pool after the burst %+v: want 3 taken, the first warm, none waiting, a refill latency, a memory estimate", s)
	}
	// The demand passes: after shrink_after, back to its size.
	fc.advance(time.Duration(cfg.Pool.ShrinkAfter) + demandWindow*time.Second)
	p.queues["python"].signal()
	waitFor(t, "the pool shrunk back to 1", func() bool { s := pythonStats(p); return s.Target == 1 && s.Ready == 1 })
	if s := pythonStats(p); s.Discarded < 3 {
		t.Errorf("python pool after shrinking %+v: want the 3 beyond its size discarded", s)
	}
	// Another burst grows it again.
	for range 2 {
		get(t, p)
	}
	waitFor(t, "the pool regrown", func() bool { s := pythonStats(p); return s.Target == 3 && s.Ready == 3 })
}

// A sandbox closed with its session ends its runtime with the rest of
// it: the runtime never sees its socket close first, so it does not run
// the atexit handlers and flushes of an ending interpreter (work no one
// sees, which every one-shot paid for on its way to the teardown).
func TestCloseKillsRuntimeFirst(t *testing.T) {
	p := testPool(t, zygote.Start)
	waitFor(t, "a pool of forked sandboxes", func() bool { return readyForked(p) })
	inst := get(t, p)
	if !inst.Forked() {
		t.Fatal("want a sandbox the template forked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.Configure(ctx, map[string]string{"PATH": "/usr/bin:/bin"}, "/workspace"); err != nil {
		t.Fatal(err)
	}
	if err := inst.Attach(instance.OutputFunc(func([]byte, bool) {})); err != nil {
		t.Fatal(err)
	}
	inst.Barrier()
	if err := inst.Execute("e1", "import atexit, os\natexit.register(os._exit, 42)", nil, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for m := range inst.Messages() {
		if m.Type == runtimes.TypeDone {
			break
		}
	}
	inst.Close()
	e, ok := inst.ProgramExit()
	if !ok {
		t.Fatal("the template did not say how the runtime ended")
	}
	if e.Signal != syscall.SIGKILL {
		t.Errorf("the runtime ended with %+v, want killed (42: it ran its atexit handlers)", e)
	}
}

// The refill builds its sandboxes in the background (the lowest CPU
// weight, so that requests' own builds come first); the one taken gets
// the normal weight before the session's code runs.
func TestRefillBuildsInBackground(t *testing.T) {
	p := testPool(t, zygote.Start)
	waitFor(t, "a forked sandbox ready", func() bool { return readyForked(p) })
	q := p.queues["python"]
	q.mu.Lock()
	ready := q.ready[0]
	q.mu.Unlock()
	if bg, err := ready.Background(); err != nil || !bg {
		t.Fatalf("a ready sandbox: Background() = %v, %v; want true", bg, err)
	}
	inst := get(t, p)
	if inst != ready {
		t.Fatal("took another sandbox than the ready one")
	}
	if bg, err := inst.Background(); err != nil || bg {
		t.Fatalf("a taken sandbox: Background() = %v, %v; want false", bg, err)
	}
}

// A request marked instance.ForFresh (the ready sandboxes it was handed
// had died, and those beside them may have too, their deaths not noticed
// yet) gets one built for it, forked from the template; the ready ones
// stay.
func TestFreshRequestBuildsOne(t *testing.T) {
	p := testPool(t, zygote.Start)
	waitFor(t, "a forked sandbox ready", func() bool { return readyForked(p) })
	q := p.queues["python"]
	q.mu.Lock()
	ready := q.ready[0]
	q.mu.Unlock()
	rt, err := runtimes.Lookup(p.cfg, "python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(instance.ForFresh(context.Background()), 30*time.Second)
	defer cancel()
	inst, err := p.Get(ctx, rt, p.cfg.Defaults, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close() })
	if inst == ready || !inst.Forked() {
		t.Fatalf("a fresh request took the ready sandbox (%v), or one started cold (forked: %v)", inst == ready, inst.Forked())
	}
	q.mu.Lock()
	still := slices.Contains(q.ready, ready)
	q.mu.Unlock()
	if !still {
		t.Error("a fresh request took the ready sandbox out of the pool")
	}
	if s := pythonStats(p); s.Hits != 0 || s.Misses != 1 {
		t.Errorf("python pool %+v: want one miss, no hit", s)
	}
}

// One-shots leave the ready sandboxes kept for session creations
// (pool.size beyond pool.oneshot_size): a one-shot finding only those
// builds its own, a session takes one; with none kept, a one-shot takes
// it.
func TestOneShotsLeaveSessionsTheirs(t *testing.T) {
	for _, c := range []struct {
		name    string
		oneshot int // pool.oneshot_size.python; the size is 1
		takes   bool
	}{
		{"kept for sessions", 0, false},
		{"open to one-shots", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, cfg := jailtest.Host(t, "pool", func(cf *config.Config) {
				cf.Pool.Size = map[string]int{"python": 1}
				cf.Pool.OneShotSize = map[string]int{"python": c.oneshot}
				cf.Pool.MaxSize = nil // it keeps its size
				cf.Pool.Zygote = false
			})
			p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
			t.Cleanup(p.Close)
			waitFor(t, "a full pool", func() bool { return pythonStats(p).Ready == 1 })
			q := p.queues["python"]
			q.mu.Lock()
			ready := q.ready[0]
			q.mu.Unlock()
			rt, err := runtimes.Lookup(cfg, "python")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(instance.ForOneShot(context.Background()), 30*time.Second)
			defer cancel()
			shot, err := p.Get(ctx, rt, cfg.Defaults, false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { shot.Close() })
			if took := shot == ready; took != c.takes {
				t.Fatalf("the one-shot took the ready sandbox: %v, want %v", took, c.takes)
			}
			if c.takes {
				return
			}
			if s := pythonStats(p); s.Hits != 0 || s.Misses != 1 {
				t.Errorf("python pool %+v: want the one-shot counted a miss", s)
			}
			if inst := get(t, p); inst != ready {
				t.Error("a session did not get the sandbox kept for it")
			}
		})
	}
}

// The memory budget holds the pools' sizes: a pool measures what its
// ready sandboxes hold (their PSS), keeps fewer than its size when the
// budget cannot hold them all (each language at least one) and says so,
// and fills back to its size when the budget grows again.
func TestBudgetCutsTheSizes(t *testing.T) {
	h, cfg := jailtest.Host(t, "pool", func(c *config.Config) {
		c.Pool.Size = map[string]int{"python": 4, "bash": 1}
		c.Pool.OneShotSize = map[string]int{"python": 1}
		c.Pool.MaxSize = nil // they keep their sizes
		c.Pool.Zygote = false
		c.Pool.MemoryBudget = 1 << 40
	})
	p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	py, sh := p.queues["python"], p.queues["bash"]
	measured := func(q *queue) bool { return q.est.Load() > 0 }
	waitFor(t, "both pools full and measured", func() bool {
		return pythonStats(p).Ready == 4 && measured(py) && measured(sh)
	})
	est := py.est.Load()
	// A forked or cold Python runtime and its jail's init: a few MB to a
	// few tens, never the guess by chance.
	if est < 1<<20 || est > 256<<20 || est == py.guess {
		t.Fatalf("python's ready sandboxes measured at %d bytes each", est)
	}
	if s := pythonStats(p); s.HeldBytes != 4*est || s.MemoryBudget != 1<<40 || s.BudgetCut != 0 || py.reserved() != 3 {
		t.Fatalf("python pool %+v (reserved %d): want 4 held at %d, the budget, nothing cut, 3 kept for sessions", s, py.reserved(), est)
	}
	setBudget := func(b int64) {
		p.rmu.Lock()
		p.budget = b
		p.rmu.Unlock()
		py.signal()
		sh.signal()
	}
	// Room for about two and a half Python sandboxes and the Bash one: the
	// sizes (4 + 1) are scaled alike, to 2 and 1 (at least one).
	setBudget(est*5/2 + sh.est.Load())
	waitFor(t, "python cut to 2", func() bool { s := pythonStats(p); return s.Target == 2 && s.Ready == 2 })
	if s := pythonStats(p); s.Min != 2 || s.Size != 4 || s.BudgetCut != 2 || s.Discarded < 2 || py.reserved() != 1 {
		t.Errorf("python pool under the budget %+v (reserved %d): want min 2 of size 4, 2 cut, 2 discarded, 1 kept for sessions", s, py.reserved())
	}
	if s := p.Stats()["bash"].(apitype.PoolStats); s.Target != 1 || s.Ready != 1 {
		t.Errorf("bash pool under the budget %+v: want its one kept", s)
	}
	setBudget(1 << 40)
	waitFor(t, "python back to 4", func() bool { s := pythonStats(p); return s.Target == 4 && s.Ready == 4 && s.BudgetCut == 0 })
}

// A one-shot whose code needs none of the preloads (instance.ForLean)
// takes a sandbox forked from the lean template, which preloads nothing;
// any other takes the full template's; with no lean one ready, a lean
// one-shot builds a lean one, leaving the full ones be.
func TestLeanOneShots(t *testing.T) {
	h, cfg := jailtest.Host(t, "pool", func(c *config.Config) {
		c.Pool.Preload = []string{"json"} // quick to start
		c.Pool.Size = map[string]int{"python": 2}
		c.Pool.OneShotSize = map[string]int{"python": 2}
		c.Pool.MaxSize = nil // it keeps its size
		c.Pool.LeanSize = 1
		c.Pool.Zygote = true
	})
	var preloads []string
	var mu sync.Mutex
	startTemplate = func(ctx context.Context, h *jail.Host, cfg config.Config, log *slog.Logger, root *jail.Root) (*zygote.Zygote, error) {
		mu.Lock()
		preloads = append(preloads, strings.Join(cfg.Pool.Preload, ","))
		mu.Unlock()
		return zygote.Start(ctx, h, cfg, log, root)
	}
	t.Cleanup(func() { startTemplate = zygote.Start })
	p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	lean := func() apitype.PoolStats { return p.Stats()["python"+apitype.LeanPoolSuffix].(apitype.PoolStats) }
	waitFor(t, "full pools", func() bool { return pythonStats(p).Ready == 2 && lean().Ready == 1 })
	mu.Lock()
	slices.Sort(preloads)
	if got := strings.Join(preloads, " | "); got != " | json" {
		t.Errorf("templates started with preloads %q, want none and json", got)
	}
	mu.Unlock()
	ts := p.Stats()[apitype.TemplateKey].(apitype.TemplateStats)
	if !ts.Running || ts.Lean == nil || !ts.Lean.Running {
		t.Errorf("template stats %+v (lean %+v): want both running", ts, ts.Lean)
	}
	ready := func(q *queue) *instance.Instance {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.ready[0]
	}
	rt, err := runtimes.Lookup(cfg, "python")
	if err != nil {
		t.Fatal(err)
	}
	shot := func(ctx context.Context) *instance.Instance {
		ctx, cancel := context.WithTimeout(instance.ForOneShot(ctx), 30*time.Second)
		defer cancel()
		inst, err := p.Get(ctx, rt, cfg.Defaults, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close() })
		return inst
	}
	want := ready(p.leanQueues["python"])
	if got := shot(instance.ForLean(context.Background())); got != want || !got.Forked() {
		t.Fatalf("a lean one-shot did not take the lean sandbox (forked: %v)", got.Forked())
	}
	want = ready(p.queues["python"])
	if got := shot(context.Background()); got != want {
		t.Fatal("a one-shot did not take a full sandbox")
	}
	if s := lean(); s.Hits != 1 {
		t.Errorf("lean pool %+v: want one hit", s)
	}
	// None lean ready (its refill done, then its size made 0): a full one.
	lq := p.leanQueues["python"]
	waitFor(t, "the lean pool refilled", func() bool { s := lean(); return s.Ready == 1 && s.Building == 0 })
	p.rmu.Lock()
	lq.mu.Lock()
	lq.size, lq.max, lq.base, lq.target = 0, 0, 0, 0
	held := lq.ready
	lq.ready = nil
	lq.mu.Unlock()
	p.rmu.Unlock()
	t.Cleanup(func() {
		for _, inst := range held {
			inst.Close()
		}
	})
	full := ready(p.queues["python"])
	if got := shot(instance.ForLean(context.Background())); got == full || !got.Forked() {
		t.Fatalf("a lean one-shot with no lean sandbox ready took a full one (%v) or started one cold (forked: %v)", got == full, got.Forked())
	}
	if s := lean(); s.Misses != 1 {
		t.Errorf("lean pool %+v: want one miss", s)
	}
}

// With the lean template down, the lean pool's sandboxes are forked from
// the full template, never started cold (which would cost far more than
// the lean template saves).
func TestLeanTemplateDownForksFull(t *testing.T) {
	h, cfg := jailtest.Host(t, "pool", func(c *config.Config) {
		c.Pool.Preload = []string{"json"} // quick to start
		c.Pool.Size = map[string]int{"python": 1}
		c.Pool.MaxSize = nil // it keeps its size
		c.Pool.LeanSize = 1
		c.Pool.Zygote = true
	})
	startTemplate = func(ctx context.Context, h *jail.Host, cfg config.Config, log *slog.Logger, root *jail.Root) (*zygote.Zygote, error) {
		if len(cfg.Pool.Preload) == 0 {
			return nil, errors.New("the lean template does not start")
		}
		return zygote.Start(ctx, h, cfg, log, root)
	}
	t.Cleanup(func() { startTemplate = zygote.Start })
	p := New(cfg, instance.Native{Host: h}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	lean := func() apitype.PoolStats { return p.Stats()["python"+apitype.LeanPoolSuffix].(apitype.PoolStats) }
	waitFor(t, "a full lean pool", func() bool { return lean().Ready == 1 })
	lq := p.leanQueues["python"]
	lq.mu.Lock()
	forked := lq.ready[0].Forked()
	lq.mu.Unlock()
	if !forked {
		t.Error("the lean pool's sandbox was started cold")
	}
	if ts := p.Stats()[apitype.TemplateKey].(apitype.TemplateStats); ts.Lean == nil || ts.Lean.Running || ts.Lean.Failures == 0 {
		t.Errorf("lean template stats %+v: want it down, failing", ts.Lean)
	}
}
