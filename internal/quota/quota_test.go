package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/session"
	"airlock/internal/store"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func tracker(def config.Quotas, own map[string]config.Quotas) (*Tracker, *clock) {
	c := &clock{t: time.Date(2026, 11, 25, 23, 0, 0, 0, time.UTC)}
	t := New(def, func(_ context.Context, tenant string) (config.Quotas, error) { return own[tenant], nil }, store.NewMemoryLedger(c.now))
	t.now = c.now
	return t, c
}

// refused checks a quota refusal: ErrQuota naming the quota, with a retry.
func refused(t *testing.T, err error, quota string, after time.Duration) {
	t.Helper()
	ra, ok := errdefs.RetryAfter(err)
	if !errors.Is(err, errdefs.ErrQuota) || !strings.Contains(err.Error(), quota) || !ok || ra != after {
		t.Errorf("%v (retry %s, %v); want quota %s with retry after %s", err, ra, ok, quota, after)
	}
	if errdefs.HTTPStatus(err) != 429 {
		t.Errorf("status %d", errdefs.HTTPStatus(err))
	}
}

var a = identity.Identity{Tenant: "a", KeyID: "k"}

// admitErr admits an execution that is never released (the quotas under
// test do not count what runs).
func admitErr(tr *Tracker, who identity.Identity) error {
	_, err := tr.AdmitExecution(context.Background(), who)
	return err
}

func TestSessions(t *testing.T) {
	tr, _ := tracker(config.Quotas{MaxSessions: 5}, map[string]config.Quotas{"a": {MaxSessions: 2}})
	r1, err := tr.AdmitSession(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.AdmitSession(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	_, err = tr.AdmitSession(context.Background(), a)
	refused(t, err, "max_sessions", 5*time.Second)
	// Another tenant has the default (5); the operator has none.
	for i := 0; i < 5; i++ {
		if _, err := tr.AdmitSession(context.Background(), identity.Identity{Tenant: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		if _, err := tr.AdmitSession(context.Background(), identity.Identity{Admin: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A creation that failed gives its place back (once, however often
	// release is called), as does a session's end.
	r1()
	r1()
	if _, err := tr.AdmitSession(context.Background(), a); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	_, err = tr.AdmitSession(context.Background(), a)
	refused(t, err, "max_sessions", 5*time.Second)
	tr.SessionEnded(session.SessionEvent{Caller: session.Caller{Tenant: "a"}})
	if _, err := tr.AdmitSession(context.Background(), a); err != nil {
		t.Fatalf("after an end: %v", err)
	}
}

func TestExecutionsPerMinute(t *testing.T) {
	tr, c := tracker(config.Quotas{ExecutionsPerMinute: 3}, nil)
	for i := 0; i < 3; i++ {
		if err := admitErr(tr, a); err != nil {
			t.Fatal(err)
		}
		c.t = c.t.Add(10 * time.Second)
	}
	refused(t, admitErr(tr, a), "executions_per_minute", 30*time.Second)
	c.t = c.t.Add(30 * time.Second) // the first leaves the window
	if err := admitErr(tr, a); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	refused(t, admitErr(tr, a), "executions_per_minute", 10*time.Second)
}

func TestCPUSecondsPerDay(t *testing.T) {
	tr, c := tracker(config.Quotas{CPUSecondsPerDay: 10}, nil)
	if err := admitErr(tr, a); err != nil {
		t.Fatal(err)
	}
	tr.ExecutionFinished(session.ExecutionEvent{Caller: session.Caller{Tenant: "a"}, CPU: 9 * time.Second})
	if err := admitErr(tr, a); err != nil {
		t.Fatalf("under the quota: %v", err)
	}
	tr.ExecutionFinished(session.ExecutionEvent{Caller: session.Caller{Tenant: "a"}, CPU: 2 * time.Second})
	refused(t, admitErr(tr, a), "cpu_seconds_per_day", time.Hour) // 23:00 UTC
	c.t = c.t.Add(time.Hour)
	if err := admitErr(tr, a); err != nil {
		t.Fatalf("a new UTC day: %v", err)
	}
}

// A tenant's own quotas override the defaults field by field, and a
// change reaches the tracker within its cache's time.
func TestQuotasOverDefaults(t *testing.T) {
	own := map[string]config.Quotas{"a": {MaxSessions: 1}}
	tr, c := tracker(config.Quotas{ExecutionsPerMinute: 7, MaxLimits: config.Limits{Memory: 1 << 30}}, own)
	q := tr.Of(a)
	if q.MaxSessions != 1 || q.ExecutionsPerMinute != 7 || q.MaxLimits.Memory != 1<<30 {
		t.Errorf("quotas %+v", q)
	}
	own["a"] = config.Quotas{MaxSessions: 9}
	c.t = c.t.Add(3 * time.Second)
	if q := tr.Of(a); q.MaxSessions != 9 {
		t.Errorf("after a change: %+v", q)
	}
	if q := tr.Of(identity.Identity{Admin: true}); q.MaxSessions != 0 || q.ExecutionsPerMinute != 0 {
		t.Errorf("the operator has quotas: %+v", q)
	}
}

// At most max_concurrent_executions of a tenant are admitted and not
// released; the refusal names the quota and retries in a second; a
// release gives one place back however often it is called; other tenants
// and the operator are not affected.
func TestMaxConcurrentExecutions(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  config.Quotas
		own  map[string]config.Quotas
		who  identity.Identity
		max  int // 0: unlimited
	}{
		{"server's quota", config.Quotas{MaxConcurrentExecutions: 3}, nil, a, 3},
		{"the tenant's own over it", config.Quotas{MaxConcurrentExecutions: 3}, map[string]config.Quotas{"a": {MaxConcurrentExecutions: 1}}, a, 1},
		{"the tenant's own, no server quota", config.Quotas{}, map[string]config.Quotas{"a": {MaxConcurrentExecutions: 2}}, a, 2},
		{"unset: unlimited", config.Quotas{}, nil, a, 0},
		{"the operator has none", config.Quotas{MaxConcurrentExecutions: 1}, nil, identity.Identity{Admin: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := tracker(tc.def, tc.own)
			n := tc.max
			if n == 0 {
				n = 50
			}
			var held []func()
			for i := 0; i < n; i++ {
				r, err := tr.AdmitExecution(context.Background(), tc.who)
				if err != nil {
					t.Fatalf("execution %d of %d: %v", i+1, n, err)
				}
				held = append(held, r)
			}
			_, err := tr.AdmitExecution(context.Background(), tc.who)
			if tc.max == 0 {
				if err != nil {
					t.Fatalf("unlimited: %v", err)
				}
				return
			}
			refused(t, err, "max_concurrent_executions", time.Second)
			if r, err := tr.AdmitExecution(context.Background(), identity.Identity{Tenant: "b"}); err != nil {
				t.Errorf("another tenant: %v", err)
			} else {
				r()
			}
			held[0]()
			held[0]() // once only: no second place
			if _, err := tr.AdmitExecution(context.Background(), tc.who); err != nil {
				t.Fatalf("after a release: %v", err)
			}
			_, err = tr.AdmitExecution(context.Background(), tc.who)
			refused(t, err, "max_concurrent_executions", time.Second)
			if got := tr.Running(tc.who.Tenant); got != tc.max {
				t.Errorf("running %d, want %d", got, tc.max)
			}
		})
	}
}

// A refusal for concurrency uses none of the per-minute window, and the
// rate's refusal takes no place among the running.
func TestConcurrencyAndRate(t *testing.T) {
	tr, _ := tracker(config.Quotas{MaxConcurrentExecutions: 1, ExecutionsPerMinute: 2}, nil)
	r, err := tr.AdmitExecution(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		_, err := tr.AdmitExecution(context.Background(), a)
		refused(t, err, "max_concurrent_executions", time.Second)
	}
	r()
	r2, err := tr.AdmitExecution(context.Background(), a)
	if err != nil {
		t.Fatalf("the second of the minute: %v", err)
	}
	r2()
	_, err = tr.AdmitExecution(context.Background(), a)
	refused(t, err, "executions_per_minute", time.Minute)
	if n := tr.Running("a"); n != 0 {
		t.Errorf("running %d after a rate refusal", n)
	}
}

// Many goroutines admitting and releasing at once never hold more than
// the quota, and end with nothing running (go test -race).
func TestConcurrentAdmissions(t *testing.T) {
	const max, workers, rounds = 4, 16, 200
	tr, _ := tracker(config.Quotas{MaxConcurrentExecutions: max}, nil)
	var holding, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; i < rounds; i++ {
				r, err := tr.AdmitExecution(context.Background(), a)
				if err != nil {
					if !errors.Is(err, errdefs.ErrQuota) {
						t.Error(err)
					}
					continue
				}
				admitted.Add(1)
				h := holding.Add(1)
				for {
					p := peak.Load()
					if h <= p || peak.CompareAndSwap(p, h) {
						break
					}
				}
				holding.Add(-1)
				// Released from two goroutines at once: one place back.
				var both sync.WaitGroup
				both.Go(r)
				both.Go(r)
				both.Wait()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > max || p < 1 {
		t.Errorf("peak %d running, quota %d", p, max)
	}
	if n := tr.Running("a"); n != 0 {
		t.Errorf("%d running after every release", n)
	}
	if admitted.Load() < rounds {
		t.Errorf("only %d admitted", admitted.Load())
	}
}
