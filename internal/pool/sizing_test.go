package pool

import (
	"context"
	"slices"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/instance"
	"airlock/internal/runtimes"
)

// The demand a queue's takes make, on a clock the test moves: it grows at
// once, holds for hold, and falls back when the takes have passed.
func TestDemandWant(t *testing.T) {
	const hold = time.Minute
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at    time.Duration // since t0
		takes int
		want  int
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"none", []step{{0, 0, 0}, {time.Hour, 0, 0}}},
		{"one take asks for two", []step{{0, 1, 2}}},
		{"a burst of 50 asks for 63", []step{{0, 50, 63}}},
		{"takes add up within the window", []step{{0, 10, 13}, {5 * time.Second, 10, 25}, {9 * time.Second, 0, 25}}},
		{"held after the window", []step{{0, 40, 50}, {30 * time.Second, 0, 50}, {59 * time.Second, 0, 50}}},
		{"falls after hold", []step{{0, 40, 50}, {30 * time.Second, 0, 50}, {61 * time.Second, 0, 0}}},
		{"a smaller demand after hold", []step{{0, 40, 50}, {61 * time.Second, 4, 5}}},
		{"a larger demand raises it at once", []step{{0, 4, 5}, {time.Second, 40, 55}}},
		{"steady demand keeps it", []step{{0, 8, 10}, {30 * time.Second, 8, 10}, {61 * time.Second, 8, 10}, {121 * time.Second, 8, 10}}},
		{"the window slides", []step{{0, 8, 10}, {10 * time.Second, 0, 10}, {70 * time.Second, 0, 0}}},
		{"a long gap clears every second", []step{{0, 8, 10}, {time.Hour, 1, 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d demand
			for i, s := range c.steps {
				now := t0.Add(s.at)
				if s.takes > 0 {
					d.add(now, s.takes)
				}
				if got := d.want(now, hold); got != s.want {
					t.Fatalf("step %d (%v, %d takes): want %d, got %d", i, s.at, s.takes, s.want, got)
				}
			}
		})
	}
}

// The bases and targets of several queues: sizes kept while the budget
// holds them, scaled down alike (at least one each) when it does not;
// wants within [base, max], their growth scaled to what the bases leave.
func TestFit(t *testing.T) {
	const mb = 1 << 20
	type want struct{ base, target, cut int }
	for _, c := range []struct {
		name   string
		budget int64
		qs     []sizing
		want   []want
	}{
		{"no demand keeps the sizes", 100 * mb, []sizing{{8, 128, 0, 5 * mb}, {2, 16, 0, 2 * mb}}, []want{{8, 8, 0}, {2, 2, 0}}},
		{"demand within max and budget", 1000 * mb, []sizing{{8, 128, 63, 5 * mb}, {2, 16, 0, 2 * mb}}, []want{{8, 63, 0}, {2, 2, 0}}},
		{"capped by max", 1000 * mb, []sizing{{8, 128, 500, 5 * mb}}, []want{{8, 128, 0}}},
		{"max below size keeps the size", 1000 * mb, []sizing{{8, 4, 50, 5 * mb}}, []want{{8, 8, 0}}},
		{"no growth without a max", 1000 * mb, []sizing{{8, 8, 50, 5 * mb}}, []want{{8, 8, 0}}},
		{"budget scales growth alike", 8*5*mb + 2*2*mb + 100*mb, []sizing{{8, 128, 48, 5 * mb}, {2, 32, 2 + 25, 2 * mb}},
			[]want{{8, 8 + 16, 24}, {2, 2 + 10, 15}}},
		{"budget just holding the sizes: no growth", 8*5*mb + 2*2*mb, []sizing{{8, 128, 100, 5 * mb}, {2, 16, 10, 2 * mb}},
			[]want{{8, 8, 92}, {2, 2, 8}}},
		{"budget below the sizes scales them alike", 32 * mb, []sizing{{64, 128, 0, 4 * mb}, {2, 16, 0, 16 * mb}},
			// One of each (20 MB), and of the other 268 MB asked, 12.
			[]want{{3, 3, 61}, {1, 1, 1}}},
		{"the default sizes under a 2 GiB limit", 64 * mb, []sizing{{64, 128, 0, 52 * mb / 10}, {2, 16, 0, 277 * mb / 10}, {2, 16, 0, 21 * mb / 10}},
			// As measured on a 24 GiB host: 392 MB asked, 61 held.
			[]want{{6, 6, 58}, {1, 1, 1}, {1, 1, 1}}},
		{"each keeps at least one", 4 * mb, []sizing{{64, 128, 0, 4 * mb}, {2, 16, 0, 16 * mb}, {2, 16, 0, 1 * mb}},
			[]want{{1, 1, 63}, {1, 1, 1}, {1, 1, 1}}},
		{"sizes of one beyond the budget", 1 * mb, []sizing{{1, 1, 0, 4 * mb}, {1, 4, 3, 16 * mb}}, []want{{1, 1, 0}, {1, 1, 2}}},
		{"demand does not grow a cut pool", 32 * mb, []sizing{{64, 128, 80, 4 * mb}}, []want{{8, 8, 72}}},
		{"the default sizes on 24 GiB", 768 * mb, []sizing{{64, 128, 0, 5 * mb}, {2, 16, 0, 24 * mb}, {2, 16, 0, 2 * mb}},
			[]want{{64, 64, 0}, {2, 2, 0}, {2, 2, 0}}},
		{"and a drained burst's growth", 768 * mb, []sizing{{64, 128, 125, 5 * mb}, {2, 16, 0, 24 * mb}, {2, 16, 0, 2 * mb}},
			[]want{{64, 125, 0}, {2, 2, 0}, {2, 2, 0}}},
		{"zero size stays zero", 1000 * mb, []sizing{{0, 0, 50, 5 * mb}}, []want{{0, 0, 0}}},
		{"zero size stays zero under a cut", 1 * mb, []sizing{{0, 0, 50, 5 * mb}, {8, 8, 0, 1 * mb}}, []want{{0, 0, 0}, {1, 1, 7}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := fit(c.budget, c.qs)
			for i := range got {
				if g := (want{got[i].base, got[i].target, got[i].cut}); g != c.want[i] {
					t.Fatalf("queue %d: base, target, cut %v, want %v (all: %v)", i, g, c.want[i], got)
				}
			}
		})
	}
}

// pool.memory_budget's automatic value: a thirty-second of the host's
// memory or of a lower cgroup limit, within its bounds.
func TestBudgetOf(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		name         string
		total, limit int64
		want         int64
	}{
		{"a 24 GiB host", 24 * gib, 0, 768 * mib},
		{"a 2 GiB cgroup on it", 24 * gib, 2 * gib, 64 * mib},
		{"a limit above the host's memory", 8 * gib, 64 * gib, 256 * mib},
		{"a small host", 512 * mib, 0, 32 * mib},
		{"a large host", 1024 * gib, 0, 4 * gib},
		{"no MemTotal: the limit", 0, 4 * gib, 128 * mib},
		{"nothing known", 0, 0, 32 * mib},
	} {
		if got := budgetOf(c.total, c.limit); got != c.want {
			t.Errorf("%s: %d MiB, want %d MiB", c.name, got/mib, c.want/mib)
		}
	}
}

// A freed build slot goes to the queue requests wait on, then to the
// emptiest, whatever order they asked in.
func TestBuildSlotsUrgentFirst(t *testing.T) {
	b := newBuildSlots(1)
	ctx := context.Background()
	if err := b.acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	full := &queue{target: 10, ready: nil, pending: 9}
	empty := &queue{target: 10}
	drained := &queue{target: 10}
	drained.waiting.Store(3)
	order := make(chan *queue, 3)
	for _, q := range []*queue{full, empty, drained} {
		queued := len(b.wait)
		go func() {
			if b.acquire(ctx, q) == nil {
				order <- q
				b.release()
			}
		}()
		for waiting(b) == queued {
			time.Sleep(time.Millisecond) // until it waits: the order it asked in is the test's
		}
	}
	b.release()
	for i, want := range []*queue{drained, empty, full} {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to the wrong queue (urgency %.2f, want %.2f)", i, got.urgency(), want.urgency())
		}
	}
	// A waiter whose context ends leaves no slot taken.
	cctx, cancel := context.WithCancel(ctx)
	if err := b.acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- b.acquire(cctx, empty) }()
	for waiting(b) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("acquire with an ended context succeeded")
	}
	b.release()
	if b.used != 0 || len(b.wait) != 0 {
		t.Fatalf("slots left: %d used, %d waiting; want 0 and 0", b.used, len(b.wait))
	}
}

func waiting(b *buildSlots) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.wait)
}

// Requests building their own do not raise the bound: the refill's
// extra builds would share the CPU with those the requests wait for.
func TestBuildSlotsHoldWhileRequestsBuild(t *testing.T) {
	b := newBuildSlots(1)
	ctx := context.Background()
	if err := b.acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	q := &queue{target: 4}
	q.waiting.Store(3) // three requests building their own
	got := make(chan struct{}, 1)
	go func() {
		if b.acquire(ctx, q) == nil {
			got <- struct{}{}
		}
	}()
	for waiting(b) < 1 {
		select {
		case <-got:
			t.Fatal("a refill got a second slot of 1 while requests built their own")
		default:
		}
		time.Sleep(time.Millisecond)
	}
	b.release()
	<-got
	b.release()
	if b.used != 0 || len(b.wait) != 0 {
		t.Fatalf("slots left: %d used, %d waiting; want 0 and 0", b.used, len(b.wait))
	}
}

// A ready sandbox taken while its PSS is read (a session's, whose code
// may run meanwhile) gives no figure: what a client's code holds never
// sizes the pools; the next build is measured instead. One still ready
// when read is counted.
// checked against a mutant: the figure kept whether or not the sandbox
// was still ready (the estimate took the session's 1 GiB).
func TestMeasureOnlyReady(t *testing.T) {
	q := newQueue(runtimes.Runtime{}, 1, 1, config.Limits{})
	inst := &instance.Instance{}
	q.ready = []*instance.Instance{inst}
	take := true
	defer func(f func(*instance.Instance) (int64, error)) { readPSS = f }(readPSS)
	readPSS = func(in *instance.Instance) (int64, error) {
		if take {
			q.mu.Lock()
			q.ready = slices.DeleteFunc(q.ready, func(r *instance.Instance) bool { return r == in })
			q.mu.Unlock()
			return 1 << 30, nil
		}
		return 4 << 20, nil
	}
	q.measure()
	if got := q.est.Load(); got != 0 || q.measured {
		t.Fatalf("a sandbox taken while measured: estimate %d, measured %v; want none, measured again later", got, q.measured)
	}
	take = false
	q.ready = []*instance.Instance{inst}
	q.measure()
	if got := q.est.Load(); got != 4<<20 {
		t.Errorf("a sandbox still ready: estimate %d, want %d", got, 4<<20)
	}
}
