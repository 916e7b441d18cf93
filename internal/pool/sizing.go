package pool

import (
	"context"
	"sync"
	"time"
)

// demandWindow is how far back, in seconds, a queue's takes count as its
// demand: long enough to hold a burst and the refill that follows it.
const demandWindow = 10

// demand counts a queue's takes per second over the last demandWindow
// seconds and remembers the largest size they asked for, for hold: a pool
// grows at once and shrinks only after that long without the demand.
type demand struct {
	secs   [demandWindow]int
	at     int64 // the unix second of secs' newest slot
	peak   int
	peakAt time.Time
}

// roll moves the window to now's second, clearing the seconds it passes.
func (d *demand) roll(now time.Time) {
	s := now.Unix()
	if s <= d.at {
		return
	}
	for i := d.at + 1; i <= s && i <= d.at+demandWindow; i++ {
		d.secs[i%demandWindow] = 0
	}
	d.at = s
}

// add counts n takes at now.
func (d *demand) add(now time.Time, n int) {
	d.roll(now)
	d.secs[d.at%demandWindow] += n
}

// recent is the number of takes within the window ending at now.
func (d *demand) recent(now time.Time) int {
	d.roll(now)
	n := 0
	for _, v := range d.secs {
		n += v
	}
	return n
}

// want is the number of ready sandboxes the demand asks for at now: the
// takes of the window, and a quarter more for the next burst to be a
// little larger, at their largest within hold.
func (d *demand) want(now time.Time, hold time.Duration) int {
	w := d.recent(now)
	w += (w + 3) / 4
	if w >= d.peak || now.Sub(d.peakAt) >= hold {
		d.peak, d.peakAt = w, now
	}
	return d.peak
}

// sizing is what fit needs of one queue.
type sizing struct {
	size, max, want int   // size: pool.size
	est             int64 // bytes one ready sandbox holds
}

// fitted is what fit gives one queue.
type fitted struct {
	// base is the size it keeps whatever the demand: its size, or fewer
	// when the sizes together exceed the budget.
	base int
	// target is the number it keeps now: base, or more under demand.
	target int
	// cut is how many fewer it keeps than its demand and max_size ask,
	// for the budget: the pools' pressure on it.
	cut int
}

// fit returns each queue's base and target within budget bytes. The
// sizes come first: when they alone exceed the budget, each queue with a
// size keeps one, and the rest of each size is scaled down alike to fit
// what those leave. The growth toward each want (within [base, max]) is
// then scaled down alike to fit what the bases leave.
func fit(budget int64, qs []sizing) []fitted {
	out := make([]fitted, len(qs))
	var ones, rest int64 // the memory of one of each, and of the rest of the sizes
	for _, q := range qs {
		ones += int64(min(q.size, 1)) * q.est
		rest += int64(max(q.size-1, 0)) * q.est
	}
	room := max(budget-ones, 0)
	var base, grow int64
	for i, q := range qs {
		b := q.size
		if ones+rest > budget {
			b = min(q.size, 1)
			if rest > 0 {
				b += int(int64(max(q.size-1, 0)) * room / rest)
			}
		}
		t := min(max(q.want, q.size), max(q.max, q.size))
		out[i] = fitted{base: b, target: t}
		base += int64(b) * q.est
		grow += int64(t-b) * q.est
	}
	if base+grow <= budget || grow == 0 {
		return out
	}
	avail := max(budget-base, 0)
	for i := range out {
		f := &out[i]
		t := f.base + int(int64(f.target-f.base)*avail/grow)
		f.cut = f.target - t
		f.target = t
	}
	return out
}

// buildSlots bound the builds in flight across a pool's queues and, when
// several wait for one, grant it to the most urgent queue: the one that
// requests are waiting on, then the emptiest. A FIFO would let a full
// language's refill delay the drained one's.
//
// The bound stays the same while requests build sandboxes of their own:
// raised by their number (c9acf7c), the refill's builds shared the CPU
// as equals with those requests were waiting for, and on 2 cores a
// burst's one-shots went from p50 416 to 633-860 ms, for creations that
// may never come.
type buildSlots struct {
	mu   sync.Mutex // before any queue's
	n    int
	used int
	wait []*slotWait
}

type slotWait struct {
	q       *queue
	granted chan struct{}
}

func newBuildSlots(n int) *buildSlots {
	return &buildSlots{n: n}
}

// freeLocked reports whether a slot is free.
func (b *buildSlots) freeLocked() bool { return b.used < b.n }

// acquire waits for a build slot for q, or for ctx to end.
func (b *buildSlots) acquire(ctx context.Context, q *queue) error {
	b.mu.Lock()
	if b.freeLocked() {
		b.used++
		b.mu.Unlock()
		return nil
	}
	w := &slotWait{q: q, granted: make(chan struct{})}
	b.wait = append(b.wait, w)
	b.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		for i, o := range b.wait {
			if o == w {
				b.wait = append(b.wait[:i], b.wait[i+1:]...)
				b.mu.Unlock()
				return ctx.Err()
			}
		}
		b.mu.Unlock()
		// Granted meanwhile: pass it on.
		b.release()
		return ctx.Err()
	}
}

// release frees a slot: to the most urgent waiter, if any.
func (b *buildSlots) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used--
	b.grantLocked()
}

// grantLocked grants free slots to the most urgent waiters.
func (b *buildSlots) grantLocked() {
	for len(b.wait) > 0 && b.freeLocked() {
		best, bestU := 0, b.wait[0].q.urgency()
		for i := 1; i < len(b.wait); i++ {
			if u := b.wait[i].q.urgency(); u > bestU {
				best, bestU = i, u
			}
		}
		w := b.wait[best]
		b.wait = append(b.wait[:best], b.wait[best+1:]...)
		b.used++
		close(w.granted)
	}
}
