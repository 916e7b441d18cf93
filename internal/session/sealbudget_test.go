package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
)

// TestSealBudgetTake: a tenant's bucket starts full; a seal is let
// through while it is not empty, whatever it costs (into debt), and
// none while it is in debt, saying how long until it is not; it
// refills at the rate, never past the burst; tenants do not share one;
// no budget lets everything through.
func TestSealBudgetTake(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1000, 0)
	type take struct {
		tenant string
		n      int64
		at     time.Duration // after t0
		ok     bool
		wait   time.Duration // when refused, at least
	}
	for _, tc := range []struct {
		name        string
		rate, burst int64
		takes       []take
	}{
		{"within the burst", mib, 4 * mib, []take{
			{"a", mib, 0, true, 0}, {"a", 2 * mib, 0, true, 0}, {"a", mib - 1, 0, true, 0}, {"a", 1, 0, true, 0},
			{"a", 1, 0, false, 0},
		}},
		{"one seal larger than the burst goes, then debt", mib, mib, []take{
			{"a", 10 * mib, 0, true, 0},
			{"a", 1, 0, false, 9 * time.Second},
			{"a", 1, 8 * time.Second, false, time.Second},
			{"a", 1, 9*time.Second + 2*time.Millisecond, true, 0},
		}},
		{"refills at the rate, never past the burst", mib, 2 * mib, []take{
			{"a", 2 * mib, 0, true, 0},
			{"a", 1, 0, false, 0},
			{"a", mib, time.Second, true, 0},
			{"a", 1, time.Second, false, 0},
			{"a", 2 * mib, time.Hour, true, 0},
			{"a", 1, time.Hour, false, 0},
		}},
		{"tenants apart", mib, mib, []take{
			{"a", 5 * mib, 0, true, 0}, {"a", 1, 0, false, 0},
			{"b", mib, 0, true, 0}, {"b", 1, 0, false, 0},
			{"", mib, 0, true, 0},
		}},
		{"no budget", 0, 0, []take{{"a", 1 << 40, 0, true, 0}, {"a", 1 << 40, 0, true, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newSealBudget(tc.rate, tc.burst)
			for i, k := range tc.takes {
				wait, ok := b.take(k.tenant, k.n, t0.Add(k.at))
				if ok != k.ok {
					t.Fatalf("take %d (%+v): ok %v", i, k, ok)
				}
				if !ok && (wait < k.wait || wait <= 0) {
					t.Errorf("take %d (%+v): wait %s, want at least %s", i, k, wait, k.wait)
				}
			}
		})
	}
}

// createFor creates a Python session of m for the tenant acme.
func createFor(t *testing.T, m *Manager) *Session {
	t.Helper()
	s, err := m.Create(identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"}), apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seals records the seals m tries.
func seals(m *Manager) func() []SealEvent {
	var mu sync.Mutex
	var got []SealEvent
	m.OnSeal(func(e SealEvent) {
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	})
	return func() []SealEvent {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// TestSealDeferredByBudget: a tenant past its seal budget (a sandbox
// rewriting a large file before every cheap operation) has its seals
// deferred: nothing is copied, the point stays at its last sealed
// operation (a kill recovers that), the session's info says it is
// stale and why, the metric says "deferred", every operation after it
// too; once the budget has refilled, the point catches up by itself,
// coalesced, but not while an execution runs (that execution's end
// seals it). Checked against mutants: the budget never refusing (the
// large file is copied at every operation); the catch-up not waiting
// for the running execution (a seal starts during it).
func TestSealDeferredByBudget(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	events := seals(m)
	s := createFor(t, m)
	writeFiles(t, s, map[string]string{"big.bin": strings.Repeat("A", 64<<10)})
	sealed(t, s)
	// (The session's first seal may race with the upload: refused as
	// the file changes under it, it is sealed by the upload's.)
	var first int64
	for _, e := range events() {
		first += e.Bytes
	}
	if rp := s.Info().RecoveryPoint; first < 64<<10 || rp == nil || rp.Stale {
		t.Fatalf("the first seals wrote %d bytes: %+v", first, rp)
	}
	// The tenant's budget spent for an hour to come.
	if _, ok := m.budget.take("acme", int64(m.budget.rate)*3600+int64(m.budget.burst), time.Now()); !ok {
		t.Fatal("the budget refused its first take")
	}
	for i := range 5 {
		writeFiles(t, s, map[string]string{"big.bin": strings.Repeat(string(rune('B'+i)), 64<<10)})
		sealed(t, s)
	}
	for _, e := range events() {
		if e.Outcome != SealDeferred || e.Bytes != 0 {
			t.Errorf("a seal past the budget: %+v", e)
		}
	}
	rp := s.Info().RecoveryPoint
	if rp == nil || !rp.Stale || rp.StaleSince == nil || s.Info().RecoveryPointAt == nil || !strings.Contains(rp.StaleReason, "persistence.seal_bytes_per_second") || rp.DiskBytes < 64<<10 {
		t.Fatalf("recovery point past the budget: %+v", rp)
	}
	recoveredFiles(t, restarted(t, killedAt(t, cfg)), s.ID(), map[string]string{"big.bin": strings.Repeat("A", 64<<10)}, 0)

	// Refilled while an execution runs: no seal starts until it ends.
	f := src.all[len(src.all)-1]
	m.budget.mu.Lock()
	m.budget.by["acme"].tokens = m.budget.burst
	m.budget.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "write c.txt 3; mark; sleep"}, nil)
		done <- err
	}()
	<-f.marks
	s.live.caughtUp()
	s.live.mu.Lock()
	started := s.live.idle != nil || s.live.pending
	s.live.mu.Unlock()
	if started {
		t.Error("a deferred seal started while an execution ran")
	}
	s.Interrupt()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sealed(t, s)
	if rp := s.Info().RecoveryPoint; rp == nil || rp.Stale {
		t.Errorf("after the execution, refilled: %+v", rp)
	}

	// Deferred again, then caught up by itself once idle.
	if _, ok := m.budget.take("acme", int64(m.budget.rate)*3600+int64(m.budget.burst), time.Now()); !ok {
		t.Fatal("the budget refused")
	}
	writeFiles(t, s, map[string]string{"big.bin": "Z", "d.txt": "4"})
	sealed(t, s)
	if rp := s.Info().RecoveryPoint; rp == nil || !rp.Stale {
		t.Fatalf("deferred: %+v", rp)
	}
	m.budget.mu.Lock()
	m.budget.by["acme"].tokens = m.budget.burst
	m.budget.mu.Unlock()
	s.live.caughtUp()
	sealed(t, s)
	if rp := s.Info().RecoveryPoint; rp == nil || rp.Stale {
		t.Errorf("caught up: %+v", rp)
	}
	want := map[string]string{"big.bin": "Z", "c.txt": "3", "d.txt": "4"}
	recoveredFiles(t, restarted(t, killedAt(t, cfg)), s.ID(), want, 1)
}

// TestSealQuota: a tenant's recovery points count against its
// quotas.max_paused_bytes, like its paused sessions: a seal that would
// take the tenant over it is refused (the point stays at its last
// sealed operation, stale, saying why; the metric says "quota"), and a
// pause of another session that would is refused too; a session's own
// point does not count against its own pause (its image supersedes
// it), nor against its own next seal. Checked against mutants: the
// seal not asking the quota (the point takes the tenant over it); the
// quota's count without the live points (the other pause goes
// through).
func TestSealQuota(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Quotas.MaxPausedBytes = 100 << 10
	m, _, _ := newTestManager(t, cfg)
	events := seals(m)
	a, b := createFor(t, m), createFor(t, m)
	writeFiles(t, a, map[string]string{"a.bin": strings.Repeat("a", 40<<10)})
	sealed(t, a)
	// Its own next seal replaces the point: 60 KiB, not 100.
	writeFiles(t, a, map[string]string{"a.bin": strings.Repeat("A", 60<<10)})
	sealed(t, a)
	if rp := a.Info().RecoveryPoint; rp == nil || rp.Stale || rp.DiskBytes < 60<<10 {
		t.Fatalf("a's point: %+v", rp)
	}
	if u := m.PausedUsage()["acme"]; u.DiskBytes < 60<<10 {
		t.Errorf("paused usage %+v does not count a's point", u)
	}
	events()
	writeFiles(t, b, map[string]string{"b.bin": strings.Repeat("b", 50<<10)})
	sealed(t, b)
	if e := events(); len(e) == 0 || e[len(e)-1].Outcome != SealQuota {
		t.Errorf("b's seal over the quota: %+v", e)
	}
	rp := b.Info().RecoveryPoint
	if rp == nil || !rp.Stale || !strings.Contains(rp.StaleReason, "quotas.max_paused_bytes") {
		t.Fatalf("b's point over the quota: %+v", rp)
	}
	if u := m.PausedUsage()["acme"]; u.DiskBytes > int64(cfg.Quotas.MaxPausedBytes) {
		t.Errorf("the tenant takes %d bytes, over its quota", u.DiskBytes)
	}
	// b's pause (50 KiB beside a's 60) is refused; a's own pause is not
	// (its image replaces its point).
	if _, err := b.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("b's pause beside a's point: %v", err)
	}
	if _, err := a.Pause(context.Background(), ""); err != nil {
		t.Errorf("a's pause over its own point: %v", err)
	}
}

// TestSealCatchUpAfterExecution: a deferred point whose catch-up comes
// while an execution is entered catches up as that execution leaves,
// even when it fails before it runs (and asks for no seal); the seal
// keeps the last operation the point missed, and says so (its
// recovery_point_at), not the first. Checked against mutants: leave
// not asking for the catch-up (the point stays stale); the catch-up
// labelled with behindAt (recovery_point_at before the last write).
func TestSealCatchUpAfterExecution(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := createFor(t, m)
	writeFiles(t, s, map[string]string{"a.txt": "1"})
	sealed(t, s)
	if _, ok := m.budget.take("acme", int64(m.budget.rate)*3600+int64(m.budget.burst), time.Now()); !ok {
		t.Fatal("the budget refused its first take")
	}
	writeFiles(t, s, map[string]string{"a.txt": "2"})
	sealed(t, s)
	last := time.Now()
	writeFiles(t, s, map[string]string{"b.txt": "3"})
	sealed(t, s)
	if rp := s.Info().RecoveryPoint; rp == nil || !rp.Stale {
		t.Fatalf("deferred: %+v", rp)
	}
	m.budget.mu.Lock()
	m.budget.by["acme"].tokens = m.budget.burst
	m.budget.mu.Unlock()
	leave, err := s.live.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.live.caughtUp() // the timer, while the execution is entered
	leave()           // it failed before it ran: no changed()
	sealed(t, s)
	info := s.Info()
	if rp := info.RecoveryPoint; rp == nil || rp.Stale {
		t.Fatalf("after the execution left: %+v", rp)
	}
	if at := info.RecoveryPointAt; at == nil || at.Before(last) {
		t.Errorf("the caught-up point keeps the write at or after %s, says %v", last, at)
	}
	recoveredFiles(t, restarted(t, killedAt(t, cfg)), s.ID(), map[string]string{"a.txt": "2", "b.txt": "3"}, 0)
}

// TestSealUnappliedCounts: a seal whose point committed but whose files
// could not be put in place (pauseimage.ErrUnapplied) is recorded as
// sealed: what the point takes now counts in the quota, the point is
// not stale, the metric says "sealed". Checked against a mutant:
// sealed treating it as a failure (the old size kept, stale).
func TestSealUnappliedCounts(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	events := seals(m)
	s := createFor(t, m)
	writeFiles(t, s, map[string]string{"a.txt": strings.Repeat("a", 4<<10)})
	sealed(t, s)
	events()
	s.live.mu.Lock()
	l := s.live.l
	s.live.mu.Unlock()
	s.live.bytes.Store(1) // what the point took before this seal
	s.live.sealed(l, time.Now(), fmt.Errorf("%w: EIO (injected)", pauseimage.ErrUnapplied), 4<<10)
	if got := s.live.bytes.Load(); got != l.Bytes() || got < 4<<10 {
		t.Errorf("the point takes %d bytes, counted %d", l.Bytes(), got)
	}
	if rp := s.Info().RecoveryPoint; rp == nil || rp.Stale {
		t.Errorf("an unapplied seal: %+v", rp)
	}
	if e := events(); len(e) != 1 || e[0].Outcome != SealOK {
		t.Errorf("metric: %+v", e)
	}
}
