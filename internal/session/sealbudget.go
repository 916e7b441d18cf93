package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/pauseimage"
)

// What a recovery point's seals cost, and who pays. Every seal is
// admitted (admitSeal) before it writes anything: the disk's room
// (imageHeadroom beside what is reserved), the tenant's
// quotas.max_paused_bytes (its points and resumed markers count, like
// its paused sessions), then its seal budget (persistence.
// seal_bytes_per_second: a token bucket per tenant, charged the bytes a
// seal copies and its point.json). A seal refused stays refused until
// the next operation asks again, and a deferred one (the budget) is
// tried again once the budget has refilled, when no execution runs:
// in both cases the point stays at the last sealed operation, whole,
// and the session's info says it is stale, and why (RecoveryPoint).
// Nothing is degraded silently: a metric (OnSeal) and a log line say
// each refusal.

// sealBudget is the bytes the seals of each tenant's recovery points may
// write: a bucket of burst bytes per tenant, refilled at rate bytes a
// second. A seal is let through while its tenant's bucket is not empty,
// whatever it costs (the bucket may go into debt: nothing more is let
// through until it has refilled past zero), so that a seal bigger than
// the burst is never refused for good: on average a tenant's seals
// write at most rate, at once at most burst and one seal. nil: no
// budget.
type sealBudget struct {
	rate, burst float64
	// mu guards by.
	mu sync.Mutex
	by map[string]*sealBucket
}

type sealBucket struct {
	tokens float64
	at     time.Time
}

func newSealBudget(rate, burst int64) *sealBudget {
	if rate <= 0 {
		return nil
	}
	return &sealBudget{rate: float64(rate), burst: float64(max(burst, rate)), by: map[string]*sealBucket{}}
}

// take charges n bytes to tenant's bucket at now when it is not empty,
// else says how long until it is not.
func (b *sealBudget) take(tenant string, n int64, now time.Time) (wait time.Duration, ok bool) {
	if b == nil {
		return 0, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.by[tenant]
	if k == nil {
		k = &sealBucket{tokens: b.burst, at: now}
		b.by[tenant] = k
	}
	if el := now.Sub(k.at); el > 0 {
		k.tokens = min(b.burst, k.tokens+el.Seconds()*b.rate)
		k.at = now
	}
	if k.tokens <= 0 {
		return time.Duration(-k.tokens/b.rate*float64(time.Second)) + time.Millisecond, false
	}
	k.tokens -= float64(n)
	return 0, true
}

// sealDeferred is the error of a seal the tenant's budget defers, to be
// tried again after wait.
type sealDeferred struct {
	error
	wait time.Duration
}

func (e sealDeferred) Unwrap() error { return e.error }

// Seal outcomes (SealEvent.Outcome).
const (
	SealOK       = "sealed"
	SealDeferred = "deferred"
	SealQuota    = "quota"
	SealFailed   = "failed"
)

// SealOutcomes is SealEvent.Outcome's vocabulary.
func SealOutcomes() []string { return []string{SealOK, SealDeferred, SealQuota, SealFailed} }

// SealEvent is one seal of a live session's recovery point tried, for
// metrics: its outcome, and the bytes it wrote (its copies and
// point.json; 0 unless sealed).
type SealEvent struct {
	Outcome string
	Bytes   int64
}

// OnSeal sets f to hear of every seal tried; call it before the manager
// serves anything.
func (m *Manager) OnSeal(f func(SealEvent)) { m.onSeal = f }

func (m *Manager) observeSeal(outcome string, bytes int64) {
	if m.onSeal != nil {
		m.onSeal(SealEvent{Outcome: outcome, Bytes: bytes})
	}
}

// sealOutcome names a seal's error.
func sealOutcome(err error) string {
	var d sealDeferred
	switch {
	case err == nil, errors.Is(err, pauseimage.ErrUnapplied):
		return SealOK
	case errors.As(err, &d):
		return SealDeferred
	case errors.Is(err, errdefs.ErrQuota):
		return SealQuota
	}
	return SealFailed
}

// pausedUsedLocked is what counts against tenant's
// quotas.max_paused_bytes now (m.mu is held): its paused sessions'
// images, the memory images kept for the operator, the writes reserved
// under way, and its live sessions' recovery points and resumed markers
// but those of except (a session whose point, marker and seal under way
// the write asked for supersedes: its pause's image, its point's next
// seal; the seal's bytes still count for the disk). One pass over the
// sessions, with no map of them: a seal asks it each time.
func (m *Manager) pausedUsedLocked(tenant, except string) int64 {
	used := m.reserved[tenant] - m.sealing[except]
	m.eachPausedLocked(func(b pausedBytes) {
		if b.tenant == tenant && (b.live == "" || b.live != except) {
			used += b.bytes
		}
	})
	return used
}

// pausedBytes is one thing counted in its tenant's
// quotas.max_paused_bytes: a paused session's image (paused), a memory
// image kept for the operator, or a live session's recovery point and
// resumed marker (live: the session's id).
type pausedBytes struct {
	tenant string
	bytes  int64
	paused bool
	// kept: an image, memory image or recovery point kept for
	// inspection.
	kept bool
	live string
}

// eachPausedLocked calls f with each thing counted in tenants'
// quotas.max_paused_bytes but the writes reserved (m.mu is held). A
// session's point and marker count once by id (one directory each on
// the disk): a session resumed while its old self tears down (going,
// under the same id) counts as the listed one when that has a point or
// a marker, else as the old one.
func (m *Manager) eachPausedLocked(f func(pausedBytes)) {
	for _, p := range m.paused {
		f(pausedBytes{tenant: p.meta.Tenant, bytes: p.stats.DiskBytes, paused: true})
	}
	for _, k := range m.kept {
		f(pausedBytes{tenant: k.Tenant, bytes: k.Bytes, kept: !k.Pending})
	}
	// The ones going first: a listed one's first seal between its two
	// readings counts both (never neither).
	var seen map[string]bool
	for s := range m.going {
		b := s.liveBytes()
		if b <= 0 || seen[s.id] {
			continue
		}
		if l := m.sessions[s.id]; l != nil && l.liveBytes() > 0 {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[s.id] = true
		f(pausedBytes{tenant: s.owner.Tenant, bytes: b, live: s.id})
	}
	for id, s := range m.sessions {
		if b := s.liveBytes(); b > 0 {
			f(pausedBytes{tenant: s.owner.Tenant, bytes: b, live: id})
		}
	}
}

// liveBytes is what the session's recovery point and resumed marker
// take on the disk (ended ones whose point is not removed yet included).
func (s *Session) liveBytes() int64 {
	if s.live == nil {
		return 0
	}
	return s.live.bytes.Load() + s.live.marker.Load()
}

// pausedUsage is what counts against every tenant's
// quotas.max_paused_bytes, read once: what a listing asks of each of
// its sessions (pausedUsedLocked, for each, would read them all each
// time, under m.mu).
type pausedUsage struct {
	// tenant: everything, by tenant; live: a live session's point and
	// marker, by id (as eachPausedLocked counts them); sealing: the
	// seals under way, by session id.
	tenant  map[string]int64
	live    map[string]pausedBytes
	sealing map[string]int64
}

// pausedUsageLocked reads pausedUsage (m.mu is held).
func (m *Manager) pausedUsageLocked() *pausedUsage {
	u := &pausedUsage{tenant: maps.Clone(m.reserved), live: map[string]pausedBytes{}, sealing: maps.Clone(m.sealing)}
	if u.tenant == nil {
		u.tenant = map[string]int64{}
	}
	m.eachPausedLocked(func(b pausedBytes) {
		u.tenant[b.tenant] += b.bytes
		if b.live != "" {
			u.live[b.live] = b
		}
	})
	return u
}

// used is pausedUsedLocked(tenant, except) as it was when u was read.
func (u *pausedUsage) used(tenant, except string) int64 {
	used := u.tenant[tenant] - u.sealing[except]
	if b, ok := u.live[except]; ok && b.tenant == tenant {
		used -= b.bytes
	}
	return used
}

// admitSeal admits a seal of lp's point that costs c, or says why not:
// the tenant's quota (ErrQuota: refused until room is made), the disk
// (ErrUnavailable), its budget (sealDeferred). Admitted, the copy is
// reserved (counted for the tenant and the disk) until release.
func (m *Manager) admitSeal(lp *livePoint, c pauseimage.Cost) (release func(), err error) {
	tenant, id := lp.s.owner.Tenant, lp.s.id
	write := c.Copy + c.Point
	if err := m.liveRoom(write); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// The point once sealed replaces the last one, and the resumed
	// marker (which ends with it).
	if used, limit, over := m.overQuotaLocked(tenant, id, c.Held+c.Point); over {
		return nil, fmt.Errorf("%w: this session's recovery point would take %d bytes, and its tenant's paused sessions and recovery points %d in all, more than its quota of %d (quotas.max_paused_bytes): the point stays at its last sealed operation until paused sessions are deleted or the workspace shrinks",
			errdefs.ErrQuota, c.Held+c.Point, used, limit)
	}
	if wait, ok := m.budget.take(tenant, write, time.Now()); !ok {
		return nil, sealDeferred{fmt.Errorf("%w: the tenant's recovery points wrote more than persistence.seal_bytes_per_second allows: this one is deferred, and catches up once the budget has refilled (in about %s)",
			errdefs.ErrUnavailable, wait.Round(time.Millisecond)), wait}
	}
	return m.reserveLocked(tenant, id, write, write, true), nil
}

// sealed records a seal's outcome on lp: what the point
// takes now, or that it is stale from the operation at at, and why; a
// deferred one is tried again once the budget has refilled. news: a
// failure of another kind than the last (to log).
func (lp *livePoint) sealed(l *pauseimage.Live, at time.Time, err error, wrote int64) (news bool) {
	m := lp.s.m
	outcome := sealOutcome(err)
	m.observeSeal(outcome, wrote)
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if err == nil || errors.Is(err, pauseimage.ErrUnapplied) {
		// (Unapplied: sealed all the same, its files put in place by
		// the next seal; seal logs it.)
		lp.bytes.Store(l.Bytes())
		lp.behind, lp.behindAt, lp.behindLast, lp.behindKind = "", time.Time{}, time.Time{}, ""
		return false
	}
	if lp.behind == "" {
		lp.behindAt = at
	}
	if at.After(lp.behindLast) {
		lp.behindLast = at
	}
	news = lp.behindKind != outcome
	lp.behind, lp.behindKind = errdefs.Message(err), outcome
	var d sealDeferred
	if errors.As(err, &d) && lp.catchUp == nil && !lp.closed {
		lp.catchUp = time.AfterFunc(d.wait, lp.caughtUp)
	}
	return news
}

// caughtUp seals a point its budget deferred, once the budget has
// refilled: unless a seal runs or an execution does (its leave asks
// for one: it may fail before it runs, and ask for none), or the point
// is not behind any more, or the session ended. The seal it asks for
// is waited for by the next execution, like any, and keeps the last
// operation the point missed (behindLast).
func (lp *livePoint) caughtUp() {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.catchUp = nil
	lp.catchUpLocked()
}

// catchUpLocked is caughtUp with mu held.
func (lp *livePoint) catchUpLocked() {
	if lp.closed || lp.behind == "" || lp.execs > 0 || lp.idle != nil {
		return
	}
	lp.requestLocked(lp.behindLast, true)
}

// enter waits, as an execution begins, until the workspace needs no
// copy for a point (see wait), and counts the execution until leave: a
// deferred seal does not start while it runs.
func (lp *livePoint) enter(ctx context.Context) (leave func(), err error) {
	if lp == nil {
		return func() {}, nil
	}
	for {
		if err := lp.wait(ctx); err != nil {
			return nil, err
		}
		lp.mu.Lock()
		if lp.ready == nil {
			lp.execs++
			lp.mu.Unlock()
			return sync.OnceFunc(func() {
				lp.mu.Lock()
				defer lp.mu.Unlock()
				lp.execs--
				if lp.execs == 0 && lp.behindKind == SealDeferred && lp.catchUp == nil {
					// Its catch-up came while it ran (its timer is
					// spent).
					lp.catchUpLocked()
				}
			}), nil
		}
		lp.mu.Unlock()
	}
}

// info describes the point for the session's info (nil: none).
func (lp *livePoint) info() *apitype.RecoveryPoint {
	if lp == nil {
		return nil
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	rp := &apitype.RecoveryPoint{DiskBytes: lp.bytes.Load() + lp.marker.Load()}
	if lp.behind != "" {
		since := lp.behindAt.UTC()
		rp.Stale, rp.StaleSince, rp.StaleReason = true, &since, lp.behind
	}
	return rp
}
