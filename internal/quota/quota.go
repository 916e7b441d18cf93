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
// What tenants hold is counted by the store's ledger (store.Ledger): in
// this process's memory with SQLite, across every server of a cluster
// with PostgreSQL. It must never block a request beyond its own short
// lock and one bounded call to the ledger, never admit when the ledger
// cannot answer (a 503), and never apply to callers without a tenant
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
	"airlock/internal/store"
)

// Source gives a tenant's own quotas (the store's tenants table).
type Source func(ctx context.Context, tenant string) (config.Quotas, error)

// Tracker admits and counts.
type Tracker struct {
	def    config.Quotas
	source Source
	ledger store.Ledger
	now    func() time.Time
	// ttl: how long a tenant's quotas are cached (a change by `airlock
	// keys` applies within it).
	ttl time.Duration

	mu      sync.Mutex
	tenants map[string]*usage
}

type usage struct {
	q   config.Quotas
	qAt time.Time
	// sessions are the places this server holds for the tenant's
	// sessions (any one is given back when one of them ends); running
	// counts its executions admitted and not released.
	sessions []*place
	running  int
	refused  map[string]uint64
}

// place is an admitted session's.
type place struct {
	once sync.Once
	a    store.Admission
}

func (p *place) release() { p.once.Do(p.a.Release) }

// New returns a tracker with def as every tenant's quotas, overridden
// field by field by source's (which may be nil), counting in ledger.
func New(def config.Quotas, source Source, ledger store.Ledger) *Tracker {
	return &Tracker{def: def, source: source, ledger: ledger, now: time.Now, ttl: 2 * time.Second, tenants: map[string]*usage{}}
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

// quotasOf is the tenant's quotas, read under the lock.
func (t *Tracker) quotasOf(tenant string) config.Quotas {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usageLocked(tenant).q
}

// refuse counts a refusal and words it: which quota, the usage that
// reached it, when to retry.
func (t *Tracker) refuse(tenant string, a store.Admission, q config.Quotas) error {
	now := t.now()
	var after time.Duration
	var msg string
	switch a.Refused {
	case store.QuotaSessions:
		after, msg = 5*time.Second, fmt.Sprintf("tenant %s has %d live sessions, its maximum; end one (DELETE /v1/sessions/{id}) and retry", tenant, a.Live)
	case store.QuotaConcurrent:
		after, msg = time.Second, fmt.Sprintf("tenant %s has %d executions running, its maximum; retry when one ends", tenant, a.Live)
	case store.QuotaPerMinute:
		after = a.Oldest.Add(time.Minute).Sub(now)
		if a.Oldest.IsZero() || after <= 0 {
			after = time.Second
		}
		msg = fmt.Sprintf("tenant %s started %d executions in the last minute, its maximum", tenant, a.Recent)
	case store.QuotaCPU:
		midnight := time.Unix((now.UTC().Unix()/86400+1)*86400, 0)
		after, msg = midnight.Sub(now), fmt.Sprintf("tenant %s used %.1f of its %d CPU-seconds today (UTC)", tenant, a.CPU.Seconds(), q.CPUSecondsPerDay)
	}
	t.mu.Lock()
	t.usageLocked(tenant).refused[a.Refused]++
	t.mu.Unlock()
	return &errdefs.RetryError{After: after, Err: fmt.Errorf("%w: quota %s: %s", errdefs.ErrQuota, a.Refused, msg)}
}

// AdmitSession counts a new session of the caller's tenant.
func (t *Tracker) AdmitSession(ctx context.Context, who identity.Identity) (func(), error) {
	if who.Tenant == "" {
		return func() {}, nil
	}
	q := t.quotasOf(who.Tenant)
	a, err := t.ledger.Admit(ctx, store.Claim{Tenant: who.Tenant, Kind: store.HoldSession, Max: q.MaxSessions})
	if err != nil {
		return nil, err
	}
	if a.Refused != "" {
		return nil, t.refuse(who.Tenant, a, q)
	}
	p := &place{a: a}
	t.mu.Lock()
	u := t.usageLocked(who.Tenant)
	u.sessions = append(u.sessions, p)
	t.mu.Unlock()
	return func() { t.sessionGone(who.Tenant, p) }, nil
}

// sessionGone gives back p, or (nil) any one place of the tenant's
// sessions: they are alike.
func (t *Tracker) sessionGone(tenant string, p *place) {
	t.mu.Lock()
	u := t.tenants[tenant]
	if u == nil {
		t.mu.Unlock()
		return
	}
	for i, s := range u.sessions {
		if p == nil || s == p {
			p = s
			u.sessions = append(u.sessions[:i], u.sessions[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	if p != nil {
		p.release()
	}
}

// noop is the release of what was never counted.
func noop() {}

// AdmitExecution counts an execution of the caller's tenant. release
// gives its place among the tenant's max_concurrent_executions back; it
// must be called when the execution ends (later calls do nothing).
func (t *Tracker) AdmitExecution(ctx context.Context, who identity.Identity) (release func(), err error) {
	if who.Tenant == "" {
		return noop, nil
	}
	q := t.quotasOf(who.Tenant)
	a, err := t.ledger.Admit(ctx, store.Claim{Tenant: who.Tenant, Kind: store.HoldExecution, Max: q.MaxConcurrentExecutions,
		PerMinute: q.ExecutionsPerMinute, CPUPerDay: time.Duration(q.CPUSecondsPerDay) * time.Second})
	if err != nil {
		return nil, err
	}
	if a.Refused != "" {
		return nil, t.refuse(who.Tenant, a, q)
	}
	t.mu.Lock()
	u := t.usageLocked(who.Tenant)
	u.running++
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.Release()
			t.mu.Lock()
			defer t.mu.Unlock()
			if u.running > 0 {
				u.running--
			}
		})
	}, nil
}

// Running is how many executions of the tenant this server admitted and
// did not release (tests, metrics).
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

// SessionEnded gives one of the tenant's session places back.
func (t *Tracker) SessionEnded(e session.SessionEvent) {
	if e.Tenant != "" {
		t.sessionGone(e.Tenant, nil)
	}
}

func (t *Tracker) ExecutionStarted(session.ExecutionEvent) {}

// ExecutionFinished counts the execution's CPU time against the day's.
func (t *Tracker) ExecutionFinished(e session.ExecutionEvent) {
	if e.Tenant == "" || e.CPU <= 0 {
		return
	}
	t.ledger.AddCPU(e.Tenant, e.CPU)
}

func (t *Tracker) FileTransferred(session.FileEvent) {}

func (t *Tracker) NetworkChanged(session.NetworkEvent) {}

func (t *Tracker) PortUsed(session.PortEvent)       {}
func (t *Tracker) ToolCalled(session.ToolCallEvent) {}
