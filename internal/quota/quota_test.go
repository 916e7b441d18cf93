package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/session"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func tracker(def config.Quotas, own map[string]config.Quotas) (*Tracker, *clock) {
	c := &clock{t: time.Date(2026, 11, 25, 23, 0, 0, 0, time.UTC)}
	t := New(def, func(_ context.Context, tenant string) (config.Quotas, error) { return own[tenant], nil })
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

func TestSessions(t *testing.T) {
	tr, _ := tracker(config.Quotas{MaxSessions: 5}, map[string]config.Quotas{"a": {MaxSessions: 2}})
	r1, err := tr.AdmitSession(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.AdmitSession(a); err != nil {
		t.Fatal(err)
	}
	_, err = tr.AdmitSession(a)
	refused(t, err, "max_sessions", 5*time.Second)
	// Another tenant has the default (5); the operator has none.
	for i := 0; i < 5; i++ {
		if _, err := tr.AdmitSession(identity.Identity{Tenant: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		if _, err := tr.AdmitSession(identity.Identity{Admin: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A creation that failed gives its place back (once, however often
	// release is called), as does a session's end.
	r1()
	r1()
	if _, err := tr.AdmitSession(a); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	_, err = tr.AdmitSession(a)
	refused(t, err, "max_sessions", 5*time.Second)
	tr.SessionEnded(session.SessionEvent{Caller: session.Caller{Tenant: "a"}})
	if _, err := tr.AdmitSession(a); err != nil {
		t.Fatalf("after an end: %v", err)
	}
}

func TestExecutionsPerMinute(t *testing.T) {
	tr, c := tracker(config.Quotas{ExecutionsPerMinute: 3}, nil)
	for i := 0; i < 3; i++ {
		if err := tr.AdmitExecution(a); err != nil {
			t.Fatal(err)
		}
		c.t = c.t.Add(10 * time.Second)
	}
	refused(t, tr.AdmitExecution(a), "executions_per_minute", 30*time.Second)
	c.t = c.t.Add(30 * time.Second) // the first leaves the window
	if err := tr.AdmitExecution(a); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	refused(t, tr.AdmitExecution(a), "executions_per_minute", 10*time.Second)
}

func TestCPUSecondsPerDay(t *testing.T) {
	tr, c := tracker(config.Quotas{CPUSecondsPerDay: 10}, nil)
	if err := tr.AdmitExecution(a); err != nil {
		t.Fatal(err)
	}
	tr.ExecutionFinished(session.ExecutionEvent{Caller: session.Caller{Tenant: "a"}, CPU: 9 * time.Second})
	if err := tr.AdmitExecution(a); err != nil {
		t.Fatalf("under the quota: %v", err)
	}
	tr.ExecutionFinished(session.ExecutionEvent{Caller: session.Caller{Tenant: "a"}, CPU: 2 * time.Second})
	refused(t, tr.AdmitExecution(a), "cpu_seconds_per_day", time.Hour) // 23:00 UTC
	c.t = c.t.Add(time.Hour)
	if err := tr.AdmitExecution(a); err != nil {
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

// The day's CPU use, as the audit log has it, survives a restart.
func TestSeedCPU(t *testing.T) {
	tr, _ := tracker(config.Quotas{CPUSecondsPerDay: 10}, nil)
	tr.SeedCPU(map[string]time.Duration{"a": 11 * time.Second, "b": time.Second})
	refused(t, tr.AdmitExecution(a), "cpu_seconds_per_day", time.Hour)
	if err := tr.AdmitExecution(identity.Identity{Tenant: "b"}); err != nil {
		t.Error(err)
	}
}
