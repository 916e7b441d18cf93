package session

import (
	"context"
	"fmt"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/pauseimage"
)

// withLive is a session of tenant, id, whose recovery point and resumed
// marker take bytes and marker.
func withLive(tenant, id string, bytes, marker int64) *Session {
	s := &Session{id: id, owner: Caller{Tenant: tenant}, live: &livePoint{}}
	s.live.bytes.Store(bytes)
	s.live.marker.Store(marker)
	return s
}

// TestPausedUsageCountsEachIDOnce: what counts against a tenant's
// quotas.max_paused_bytes is the same whether asked of one session
// (pausedUsedLocked: a seal, a pause) or read once for a listing
// (pausedUsage), and both count a session's point and marker once by
// id: a session resumed while its old self tears down (two sessions of
// one id, one going) counts as the listed one when that has a point or
// marker, else as the old one, and two old ones of one id count once.
// checked against mutants: the going ones' seen check removed (G
// counted twice), the listed one's precedence removed (A3's old self
// counted), the listing's own point not left out.
func TestPausedUsageCountsEachIDOnce(t *testing.T) {
	m := &Manager{
		reserved: map[string]int64{"a": 3},
		sealing:  map[string]int64{"A1": 2},
		paused: map[string]*pausedSession{
			"P": {meta: pausedMeta{ID: "P", Tenant: "a"}, stats: pauseimage.Stats{DiskBytes: 1000}},
			"Q": {meta: pausedMeta{ID: "Q", Tenant: "b"}, stats: pauseimage.Stats{DiskBytes: 4000}},
		},
		kept: map[string]pauseimage.Kept{"k": {ID: "A1", Tenant: "a", Bytes: 5}},
		sessions: map[string]*Session{
			"A1": withLive("a", "A1", 60, 40),
			"A2": withLive("a", "A2", 0, 0), // resumed: nothing yet
			"A3": withLive("a", "A3", 7, 0), // resumed: sealed already
			"A4": withLive("a", "A4", 0, 0),
			"B1": withLive("b", "B1", 1<<20, 0),
		},
		going: map[*Session]struct{}{
			withLive("a", "A2", 30, 0): {}, // its old self: counted
			withLive("a", "A3", 50, 0): {}, // its old self: not counted
			withLive("a", "G", 20, 0):  {}, // two old selves of G: once
			withLive("a", "G", 20, 0):  {},
			withLive("b", "P", 9, 0):   {}, // a live point beside P's image
		},
	}
	// What tenant a holds but the live ones': reserved, P, kept.
	const base = 3 + 1000 + 5
	want := map[string]int64{
		"A1": base - 2 + 30 + 7 + 20,
		"A2": base + 100 + 7 + 20,
		"A3": base + 100 + 30 + 20,
		"A4": base + 100 + 30 + 7 + 20,
		"G":  base + 100 + 30 + 7,
		"P":  base + 100 + 30 + 7 + 20, // except names a live one only
	}
	u := m.pausedUsageLocked()
	for id, w := range want {
		if got := m.pausedUsedLocked("a", id); got != w {
			t.Errorf("tenant a but %s: pausedUsedLocked %d, want %d", id, got, w)
		}
		if got := u.used("a", id); got != w {
			t.Errorf("tenant a but %s: a listing's %d, want %d", id, got, w)
		}
	}
	if got, w := u.used("b", "B1"), int64(4000+9); got != w || m.pausedUsedLocked("b", "B1") != w {
		t.Errorf("tenant b but B1: %d and %d, want %d", got, m.pausedUsedLocked("b", "B1"), w)
	}
	// The metrics count the same.
	pu := m.PausedUsage()
	if a := pu["a"]; a.Sessions != 1 || a.DiskBytes != base-3+100+30+7+20 {
		t.Errorf("tenant a's metrics: %+v", a)
	}
}

// TestInfoReadsMemoryOnce: a session's description reads its sandbox's
// memory once, for its usage and for what its pause would keep.
// checked against a mutant: restores reading the cgroup again.
func TestInfoReadsMemoryOnce(t *testing.T) {
	m, _, ms := newMemManager(t)
	m.cfg.Quotas.MaxPausedBytes = 1 << 40
	s := create(t, m, "python")
	f := ms.last()
	f.memReads.Store(0)
	if info := s.Info(); info.Restores != apitype.RestoreMemory {
		t.Fatalf("restores %q", info.Restores)
	}
	if n := f.memReads.Load(); n != 1 {
		t.Errorf("a description read the sandbox's memory %d times", n)
	}
	f.memReads.Store(0)
	if list := m.List(); len(list) != 1 || list[0].Restores != apitype.RestoreMemory {
		t.Fatalf("listed: %+v", list)
	}
	if n := f.memReads.Load(); n != 1 {
		t.Errorf("a listing read the sandbox's memory %d times", n)
	}
}

// BenchmarkList lists n sessions whose pauses can keep their memory,
// under a paused quota (each asks what is left of it): the time per
// session stays flat as n grows (it grew with n while every session's
// restores read all the others, under the manager's lock).
func BenchmarkList(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cfg := persistConfig(b)
			cfg.Server.MaxSessions = n
			cfg.Quotas.MaxPausedBytes = config.Size(1 << 50)
			m, _, _ := newMemManagerWith(b, cfg)
			for range n {
				if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if got := m.List(); len(got) != n {
					b.Fatalf("listed %d of %d", len(got), n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/session")
		})
	}
}
