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
	floor, max, want int
	est              int64 // bytes one ready sandbox holds
}

// fit returns each queue's target: its want between its floor and its
// maximum, the growth beyond the floors scaled down alike when their
// memory together would exceed budget bytes. Floors are configured sizes,
// kept whatever the budget.
func fit(budget int64, qs []sizing) []int {
	out := make([]int, len(qs))
	var base, grow int64
	for i, q := range qs {
		out[i] = min(max(q.want, q.floor), max(q.max, q.floor))
		base += int64(q.floor) * q.est
		grow += int64(out[i]-q.floor) * q.est
	}
	if base+grow <= budget || grow == 0 {
		return out
	}
	avail := max(budget-base, 0)
	for i, q := range qs {
		g := int64(out[i] - q.floor)
		out[i] = q.floor + int(g*avail/grow)
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
