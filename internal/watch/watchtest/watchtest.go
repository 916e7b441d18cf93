// Package watchtest owns the fake clock that tests of watches drive
// (package watch's, and session's on its fake sandbox).
//
// It must never be imported by anything but tests.
package watchtest

import (
	"sync"
	"time"
)

// Clock hands out timers (a watch.Clock) that the test fires by their
// duration.
type Clock struct {
	mu     sync.Mutex
	cond   *sync.Cond
	timers map[time.Duration][]chan time.Time
}

// NewClock returns a clock with no timers.
func NewClock() *Clock {
	c := &Clock{timers: map[time.Duration][]chan time.Time{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Timer implements watch.Clock.
func (c *Clock) Timer(d time.Duration) (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.timers[d] = append(c.timers[d], ch)
	c.cond.Broadcast()
	c.mu.Unlock()
	return ch, func() {}
}

// Await waits until a timer of duration d is made.
func (c *Clock) Await(d time.Duration) {
	c.mu.Lock()
	for len(c.timers[d]) == 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// Fire fires the oldest unfired timer of duration d, waiting for it to be
// made.
func (c *Clock) Fire(d time.Duration) {
	c.mu.Lock()
	for len(c.timers[d]) == 0 {
		c.cond.Wait()
	}
	ch := c.timers[d][0]
	c.timers[d] = c.timers[d][1:]
	c.mu.Unlock()
	ch <- time.Now()
}

// Unfired counts the timers made and not fired.
func (c *Clock) Unfired() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ts := range c.timers {
		n += len(ts)
	}
	return n
}
