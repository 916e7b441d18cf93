package store

import (
	"context"
	"sync"
	"time"
)

// The ledger counts what tenants hold against their quotas: sessions
// live, executions in flight, executions started in the last minute,
// CPU time used today (UTC). Package quota decides the quotas and words
// the refusals; the ledger only counts and admits, exactly, under any
// concurrency.
//
// SQLite's is this process's memory (one machine, one server: what the
// quotas always were); PostgreSQL's is rows of the shared database, so
// that a tenant's quotas hold across every server of a cluster.

// Kinds of holdings.
const (
	HoldSession   = "session"
	HoldExecution = "execution"
)

// Names of the quotas a ledger enforces (config.Quotas' keys).
const (
	QuotaSessions   = "max_sessions"
	QuotaConcurrent = "max_concurrent_executions"
	QuotaPerMinute  = "executions_per_minute"
	QuotaCPU        = "cpu_seconds_per_day"
)

// Claim is what an admission asks for.
type Claim struct {
	Tenant string
	// Kind is HoldSession or HoldExecution.
	Kind string
	// Max bounds the tenant's live holdings of Kind (0: counted, not
	// bounded).
	Max int
	// PerMinute bounds executions started in any 60 seconds, CPUPerDay
	// the CPU time used today (UTC), before this one (0: no bound).
	PerMinute int
	CPUPerDay time.Duration
}

// Usage is what the tenant held when a claim was decided.
type Usage struct {
	Live   int       // holdings of the claim's kind
	Recent int       // executions started in the last 60 seconds
	Oldest time.Time // the first of those
	CPU    time.Duration
}

// Admission is a ledger's answer: Refused names the quota that refused
// ("" when admitted, with Release to give the place back).
type Admission struct {
	Refused string
	Usage
	release func()
}

// Release gives an admitted place back; later calls do nothing.
func (a Admission) Release() {
	if a.release != nil {
		a.release()
	}
}

// Ledger is a store's count of holdings.
type Ledger interface {
	// Admit checks c's bounds (CPU, then the live count, then the rate)
	// and takes a place when none is reached. An error (the store
	// unreachable) admits nothing.
	Admit(ctx context.Context, c Claim) (Admission, error)
	// AddCPU counts CPU time a tenant's execution used (it never
	// blocks).
	AddCPU(tenant string, cpu time.Duration)
	// collect removes what no longer counts (the heartbeat runs it).
	collect(ctx context.Context, now time.Time) error
	close()
}

// Ledger is the store's ledger.
func (d *DB) Ledger() Ledger { return d.ledger }

func day(now time.Time) int64 { return now.UTC().Unix() / 86400 }

// memLedger counts in memory: holdings end with the process; the day's
// CPU is read back from the audit log at start (seed).
type memLedger struct {
	now     func() time.Time
	mu      sync.Mutex
	tenants map[string]*memUsage
}

type memUsage struct {
	live   map[string]int
	starts []time.Time // executions started in the last minute
	cpuDay int64
	cpu    time.Duration
}

func newMemLedger(now func() time.Time) *memLedger {
	return &memLedger{now: now, tenants: map[string]*memUsage{}}
}

func (l *memLedger) usage(tenant string) *memUsage {
	u := l.tenants[tenant]
	if u == nil {
		u = &memUsage{live: map[string]int{}}
		l.tenants[tenant] = u
	}
	if d := day(l.now()); u.cpuDay != d {
		u.cpuDay, u.cpu = d, 0
	}
	return u
}

func (l *memLedger) Admit(_ context.Context, c Claim) (Admission, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.usage(c.Tenant)
	now := l.now()
	cut := now.Add(-time.Minute)
	i := 0
	for i < len(u.starts) && !u.starts[i].After(cut) {
		i++
	}
	u.starts = u.starts[i:]
	a := Admission{Usage: Usage{Live: u.live[c.Kind], Recent: len(u.starts), CPU: u.cpu}}
	if len(u.starts) > 0 {
		a.Oldest = u.starts[0]
	}
	switch {
	case c.CPUPerDay > 0 && u.cpu >= c.CPUPerDay:
		a.Refused = QuotaCPU
	case c.Max > 0 && a.Live >= c.Max:
		a.Refused = map[string]string{HoldSession: QuotaSessions, HoldExecution: QuotaConcurrent}[c.Kind]
	case c.PerMinute > 0 && a.Recent >= c.PerMinute:
		a.Refused = QuotaPerMinute
	}
	if a.Refused != "" {
		return a, nil
	}
	if c.Kind == HoldExecution {
		u.starts = append(u.starts, now)
	}
	u.live[c.Kind]++
	var once sync.Once
	a.release = func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if u.live[c.Kind] > 0 {
				u.live[c.Kind]--
			}
		})
	}
	return a, nil
}

func (l *memLedger) AddCPU(tenant string, cpu time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.usage(tenant).cpu += cpu
}

// seed sets each tenant's CPU time used today.
func (l *memLedger) seed(used map[string]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tenant, cpu := range used {
		l.usage(tenant).cpu = cpu
	}
}

func (l *memLedger) collect(context.Context, time.Time) error { return nil }
func (l *memLedger) close()                                   {}

// NewMemoryLedger is a ledger in this process's memory, on the clock
// now (tests of quotas).
func NewMemoryLedger(now func() time.Time) Ledger { return newMemLedger(now) }
