// Package quota owns tenants' quotas at run time: it admits a tenant's
// new sessions (live sessions at most max_sessions) and executions (at
// most max_concurrent_executions in flight, at most executions_per_minute
// started in any 60 seconds, and none once the day's cpu_seconds_per_day
// are used), counting what sessions do as a session.Observer. A refusal is
// errdefs.ErrQuota with the quota's name and when to retry (HTTP 429 with
// Retry-After).
//
// An admission's place (a session's, an execution's) is given back by the
// release func it returns, which its caller calls once the thing ends on
// every path; observer events are not paired with admissions (an
// execution refused or failing before it starts sends none).
//
// Counts are in memory: sessions end with the server, and the rate and
// CPU windows start afresh at a restart. It must never block a request
// beyond its own short lock, and never apply to callers without a tenant
// (the operator).
package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/session"
)

// Source gives a tenant's own quotas (the store's tenants table).
type Source func(ctx context.Context, tenant string) (config.Quotas, error)

// Tracker admits and counts.
type Tracker struct {
	def    config.Quotas
	source Source
	now    func() time.Time
	// ttl: how long a tenant's quotas are cached (a change by `airlock
	// keys` applies within it).
	ttl time.Duration

	mu      sync.Mutex
	tenants map[string]*usage
}

type usage struct {
	q       config.Quotas
	qAt     time.Time
	live    int         // sessions admitted and not ended
	running int         // executions admitted and not released
	starts  []time.Time // executions started in the last minute
	cpuDay  int64       // days since the epoch (UTC) of cpu
	cpu     time.Duration
	refused map[string]uint64
}

// New returns a tracker with def as every tenant's quotas, overridden
// field by field by source's (which may be nil).
func New(def config.Quotas, source Source) *Tracker {
	return &Tracker{def: def, source: source, now: time.Now, ttl: 2 * time.Second, tenants: map[string]*usage{}}
}

// usageLocked is the tenant's usage with its quotas fresh.
func (t *Tracker) usageLocked(tenant string) *usage {
	u := t.tenants[tenant]
	if u == nil {
		u = &usage{refused: map[string]uint64{}}
		t.tenants[tenant] = u
	}
	now := t.now()
	if u.qAt.IsZero() || now.Sub(u.qAt) > t.ttl {
		q := t.def
		if t.source != nil {
			if own, err := t.source(context.Background(), tenant); err == nil {
				q = own.Over(t.def)
			}
		}
		u.q, u.qAt = q, now
	}
	return u
}

// Of is the quotas of the caller's tenant.
func (t *Tracker) Of(who identity.Identity) config.Quotas {
	if who.Tenant == "" {
		return config.Quotas{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usageLocked(who.Tenant).q
}

func refuse(u *usage, quota string, after time.Duration, format string, args ...any) error {
	u.refused[quota]++
	return &errdefs.RetryError{After: after, Err: fmt.Errorf("%w: quota %s: %s", errdefs.ErrQuota, quota, fmt.Sprintf(format, args...))}
}

// AdmitSession counts a new session of the caller's tenant.
func (t *Tracker) AdmitSession(who identity.Identity) (func(), error) {
	if who.Tenant == "" {
		return func() {}, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.usageLocked(who.Tenant)
	if max := u.q.MaxSessions; max > 0 && u.live >= max {
		return nil, refuse(u, "max_sessions", 5*time.Second, "tenant %s has %d live sessions, its maximum; end one (DELETE /v1/sessions/{id}) and retry", who.Tenant, u.live)
	}
	u.live++
	var once sync.Once
	return func() { once.Do(func() { t.sessionGone(who.Tenant) }) }, nil
}

func (t *Tracker) sessionGone(tenant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.tenants[tenant]; u != nil && u.live > 0 {
		u.live--
	}
}

func day(now time.Time) int64 { return now.UTC().Unix() / 86400 }

// noop is the release of what was never counted.
func noop() {}

// AdmitExecution counts an execution of the caller's tenant. release
// gives its place among the tenant's max_concurrent_executions back; it
// must be called when the execution ends (later calls do nothing).
func (t *Tracker) AdmitExecution(who identity.Identity) (release func(), err error) {
	if who.Tenant == "" {
		return noop, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.usageLocked(who.Tenant)
	now := t.now()
	if max := u.q.CPUSecondsPerDay; max > 0 {
		if u.cpuDay != day(now) {
			u.cpuDay, u.cpu = day(now), 0
		}
		if u.cpu >= time.Duration(max)*time.Second {
			midnight := time.Unix((day(now)+1)*86400, 0)
			return nil, refuse(u, "cpu_seconds_per_day", midnight.Sub(now), "tenant %s used %.1f of its %d CPU-seconds today (UTC)", who.Tenant, u.cpu.Seconds(), max)
		}
	}
	// Checked before the rate's window takes this start: a refusal here
	// uses none of it.
	if max := u.q.MaxConcurrentExecutions; max > 0 && u.running >= max {
		return nil, refuse(u, "max_concurrent_executions", time.Second, "tenant %s has %d executions running, its maximum; retry when one ends", who.Tenant, u.running)
	}
	if max := u.q.ExecutionsPerMinute; max > 0 {
		cut := now.Add(-time.Minute)
		i := 0
		for i < len(u.starts) && !u.starts[i].After(cut) {
			i++
		}
		u.starts = u.starts[i:]
		if len(u.starts) >= max {
			return nil, refuse(u, "executions_per_minute", u.starts[0].Add(time.Minute).Sub(now), "tenant %s started %d executions in the last minute, its maximum", who.Tenant, len(u.starts))
		}
		u.starts = append(u.starts, now)
	}
	// Counted whatever the quota (it may be set while this runs); the
	// usage is never dropped from the map, so u stays the one released.
	u.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if u.running > 0 {
				u.running--
			}
		})
	}, nil
}

// Running is how many executions of the tenant are admitted and not
// released (tests, metrics).
func (t *Tracker) Running(tenant string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.tenants[tenant]; u != nil {
		return u.running
	}
	return 0
}

// Refused counts refusals by tenant and quota (for metrics).
func (t *Tracker) Refused() map[string]map[string]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]map[string]uint64{}
	for name, u := range t.tenants {
		if len(u.refused) > 0 {
			m := map[string]uint64{}
			for k, v := range u.refused {
				m[k] = v
			}
			out[name] = m
		}
	}
	return out
}

// The session.Observer: sessions end, executions use CPU.

var _ session.Observer = (*Tracker)(nil)

func (t *Tracker) SessionCreated(session.SessionEvent) {}

// SessionEnded gives the session's place back.
func (t *Tracker) SessionEnded(e session.SessionEvent) {
	if e.Tenant != "" {
		t.sessionGone(e.Tenant)
	}
}

func (t *Tracker) ExecutionStarted(session.ExecutionEvent) {}

// ExecutionFinished counts the execution's CPU time against the day's.
func (t *Tracker) ExecutionFinished(e session.ExecutionEvent) {
	if e.Tenant == "" || e.CPU <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.usageLocked(e.Tenant)
	if d := day(t.now()); u.cpuDay != d {
		u.cpuDay, u.cpu = d, 0
	}
	u.cpu += e.CPU
}

func (t *Tracker) FileTransferred(session.FileEvent) {}

func (t *Tracker) NetworkChanged(session.NetworkEvent) {}

// SeedCPU sets each tenant's CPU time used today (UTC), as the audit log
// recorded it before a restart: the day's quota survives the restart.
func (t *Tracker) SeedCPU(used map[string]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := day(t.now())
	for tenant, cpu := range used {
		u := t.usageLocked(tenant)
		u.cpuDay, u.cpu = d, cpu
	}
}
