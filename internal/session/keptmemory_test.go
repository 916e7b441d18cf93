package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/instance"
	"airlock/internal/pauseimage"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// refusingSource is a memSource whose memory restores are refused with
// what refuse says (as a gVisor host refuses a keeper copy).
type refusingSource struct {
	memSource
	refuse func() error
}

func (s refusingSource) KeepsMemory() bool { return true }
func (s refusingSource) Restore(context.Context, runtimes.Runtime, config.Limits, instance.Memory, func(*workspace.Dir) error) (Instance, error) {
	return nil, s.refuse()
}

// A resume whose memory restore is refused for its keeper copy being
// damaged (or not the server's) brings the files back and keeps the
// memory image aside for the operator, as a corrupt one: with the
// refused copy linked beside it, restored_reason saying so, counted in
// the tenant's paused bytes (the quota, the metrics) until the paused
// session would have expired, then removed; a restarted server finds it
// and counts it too. A copy that is missing leaves nothing to inspect:
// the memory image goes with the image. checked against mutants: the
// copy not linked, the kept bytes not counted in the quota, the sweep
// not removing an expired kept image, LoadPaused not listing them.
func TestKeeperRefusedMemoryKept(t *testing.T) {
	m, cfg, ms := newMemManager(t)
	ctx := context.Background()
	dir := cfg.Persistence.Dir
	digest := strings.Repeat("ab", 32)
	copyPath := filepath.Join(dir, ".gvisor-keepers", "keeper-"+digest)
	os.MkdirAll(filepath.Dir(copyPath), 0o700)
	if err := os.WriteFile(copyPath, []byte("a damaged keeper"), 0o500); err != nil {
		t.Fatal(err)
	}
	var refusal error
	m.sources[cfg.Isolation] = refusingSource{ms, func() error { return refusal }}
	keptDirs := func() []string {
		k, _ := filepath.Glob(filepath.Join(dir, ".kept-memory-*"))
		return k
	}
	pausedWithMemory := func() *Session {
		t.Helper()
		s, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, s, someFiles)
		if info, err := m.PauseFor(ctx, s.ID(), apitype.RestoreMemory); err != nil || info.Paused.MemoryBytes == 0 {
			t.Fatalf("pause: %+v %v", info, err)
		}
		return s
	}

	s := pausedWithMemory()
	refusal = &instance.KeeperError{Digest: digest, Copy: copyPath}
	r, err := m.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	info := r.Info()
	if info.Restored != apitype.RestoreFiles || !strings.Contains(info.RestoredReason, "keeper") || !strings.Contains(info.RestoredReason, "kept on the server for inspection") {
		t.Errorf("resumed: %q %q", info.Restored, info.RestoredReason)
	}
	checkFiles(t, r, someFiles)
	kept := keptDirs()
	if len(kept) != 1 {
		t.Fatalf("kept %v", kept)
	}
	if b, err := os.ReadFile(filepath.Join(kept[0], "memory", "pages")); string(b) != "the sandbox's memory" {
		t.Errorf("the kept memory: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(kept[0], "keeper-"+digest)); string(b) != "a damaged keeper" {
		t.Errorf("the kept keeper copy: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, s.ID())); !os.IsNotExist(err) {
		t.Errorf("the resumed session's image stayed: %v", err)
	}
	all, err := pauseimage.ListKept(dir, time.Hour)
	if err != nil || len(all) != 1 || all[0].Bytes == 0 || all[0].Tenant != s.owner.Tenant {
		t.Fatalf("ListKept %+v %v", all, err)
	}
	k := all[0]
	sealed(t, r)
	if u, live := m.PausedUsage()[k.Tenant], liveBytes(m, k.Tenant); u.DiskBytes != k.Bytes+live || u.Sessions != 0 {
		t.Errorf("paused usage %+v, want the kept %d bytes and the live point's %d", u, k.Bytes, live)
	}
	// The tenant's quota counts it (beside the resumed session's point).
	m.cfg.Quotas.MaxPausedBytes = config.Size(k.Bytes + liveBytes(m, k.Tenant) + 10)
	if _, err := m.reserveImage(k.Tenant, "", 11, 11); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("a reservation past the quota with the kept image: %v", err)
	}
	if release, err := m.reserveImage(k.Tenant, "", 10, 10); err != nil {
		t.Errorf("a reservation within it: %v", err)
	} else {
		release()
	}
	m.cfg.Quotas.MaxPausedBytes = 0

	// A restarted server finds it, and counts it (the resumed session
	// ended first: a server killed under it would recover it too).
	if err := m.Delete(r.ID()); err != nil {
		t.Fatal(err)
	}
	<-r.gone
	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if u := m2.PausedUsage()[k.Tenant]; u.DiskBytes != k.Bytes {
		t.Errorf("after a restart: %+v, want the kept %d bytes", u, k.Bytes)
	}

	// A missing copy: the memory image goes with the image.
	s2 := pausedWithMemory()
	refusal = &instance.KeeperError{Digest: strings.Repeat("cd", 32)}
	r2, err := m.ResumeFor(ctx, s2.ID())
	if err != nil {
		t.Fatal(err)
	}
	if info := r2.Info(); info.Restored != apitype.RestoreFiles || !strings.Contains(info.RestoredReason, "keeper") || strings.Contains(info.RestoredReason, "kept") {
		t.Errorf("resumed without the copy: %q %q", info.Restored, info.RestoredReason)
	}
	if got := keptDirs(); len(got) != 1 {
		t.Errorf("kept for a missing copy: %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, s2.ID())); !os.IsNotExist(err) {
		t.Errorf("the image stayed: %v", err)
	}

	// At its expiry (the paused session's), it goes.
	m.mu.Lock()
	k = m.kept[kept[0]]
	k.Expires = time.Now().Add(-time.Second)
	m.kept[kept[0]] = k
	m.mu.Unlock()
	m.sweepPaused()
	if got := keptDirs(); len(got) != 0 {
		t.Errorf("an expired kept image stayed: %v", got)
	}
	sealed(t, r2)
	if u := m.PausedUsage()[k.Tenant]; u.DiskBytes != liveBytes(m, k.Tenant) {
		t.Errorf("after its expiry: %+v, want the live point's %d", u, liveBytes(m, k.Tenant))
	}
}

// liveBytes is what tenant's live sessions' recovery points (and
// set-aside images) take: counted in its paused usage.
func liveBytes(m *Manager, tenant string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	m.eachPausedLocked(func(b pausedBytes) {
		if b.live != "" && b.tenant == tenant {
			n += b.bytes
		}
	})
	return n
}

// Whoever keeps what paused images refer to (the server, gVisor keeper
// copies) hears whenever images go: a resume, a delete, an expiry; a
// pause does not remove one. checked against mutants: each of the three
// calls removed.
func TestImagesRemovedHeard(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	var heard atomic.Int32
	m.OnImagesRemoved(func() { heard.Add(1) })
	ctx := context.Background()
	check := func(what string, want int32) {
		t.Helper()
		if got := heard.Swap(0); got != want {
			t.Errorf("%s: heard %d times, want %d", what, got, want)
		}
	}
	a, b, c := pausedWith(t, m, someFiles), pausedWith(t, m, someFiles), pausedWith(t, m, someFiles)
	check("pauses", 0)
	if _, err := m.ResumeFor(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	check("a resume", 1)
	if err := m.DeleteFor(ctx, b.ID()); err != nil {
		t.Fatal(err)
	}
	check("a delete", 1)
	m.mu.Lock()
	m.paused[c.ID()].meta.PausedAt = time.Now().Add(-m.cfg.Persistence.Keep.D() - time.Second)
	m.mu.Unlock()
	m.sweepPaused()
	check("an expiry", 1)
	if _, err := os.Stat(filepath.Join(m.persistDir(), c.ID())); !os.IsNotExist(err) {
		t.Errorf("the expired image: %v", err)
	}
}

// A memory image kept by an older airlock (no kept.json: whose it is not
// recorded) is counted for its paused session's tenant when that session
// is still paused, else for UnknownTenant, never for the tenant "" (nor
// any tenant's quota). An expired kept image whose removal fails stays
// counted and is removed by a later sweep while the server runs, not at
// its next start. checked against mutants: LoadPaused not attributing
// (both counted for ""), the failed removal dropped from the count and
// not tried again (the usage fell to 0, no later sweep removed it).
func TestKeptAttributedAndRetried(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"})
	paused, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PauseFor(ctx, paused.ID(), apitype.RestoreFiles); err != nil {
		t.Fatal(err)
	}
	gone, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(gone.ID()); err != nil {
		t.Fatal(err)
	}
	before := m.PausedUsage()["acme"].DiskBytes
	legacy := func(id string) string {
		t.Helper()
		p := filepath.Join(cfg.Persistence.Dir, ".kept-memory-"+id+"-20260101T000000.000Z")
		if err := os.MkdirAll(filepath.Join(p, "memory"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "memory", "pages"), []byte("12345"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	legacy(paused.ID())
	orphan := legacy(gone.ID())

	m2, _, _ := newTestManager(t, cfg)
	removed := make(chan string, 10)
	m2.hook = func(point, id string) {
		if point == "kept-removed" {
			removed <- id
		}
	}
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	u := m2.PausedUsage()
	if u["acme"].DiskBytes != before+5 || u[UnknownTenant].DiskBytes != 5 || u[""].DiskBytes != 0 {
		t.Errorf("usage %+v: want acme %d + 5 (its paused session's), %s 5, \"\" none", u, before, UnknownTenant)
	}

	// Its removal fails (its rename, marking it removed, fails): still
	// counted, and removed by a later sweep once it can be.
	defer func(d time.Duration) { removeRetry = d }(removeRetry)
	removeRetry = 10 * time.Millisecond
	var blocked atomic.Bool
	blocked.Store(true)
	defer pauseimage.SetRemoveFault(func(step, name string) error {
		if step == "mark" && name == filepath.Base(orphan) && blocked.Load() {
			return errors.New("EIO (injected)")
		}
		return nil
	})()
	m2.mu.Lock()
	k := m2.kept[orphan]
	k.Expires = time.Now().Add(-time.Second)
	m2.kept[orphan] = k
	m2.mu.Unlock()
	m2.sweepPaused()
	if _, err := os.Stat(orphan); err != nil {
		t.Fatalf("removed despite the obstacle: %v", err)
	}
	if u := m2.PausedUsage()[UnknownTenant]; u.DiskBytes != 5 {
		t.Errorf("not removed, yet not counted: %+v", u)
	}
	blocked.Store(false)
	select {
	case id := <-removed:
		if id != gone.ID() {
			t.Errorf("removed %s, want %s", id, gone.ID())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no later sweep removed it")
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	if u := m2.PausedUsage()[UnknownTenant]; u.DiskBytes != 0 {
		t.Errorf("still counted: %+v", u)
	}
}

// A paused session whose description (meta.json) is damaged is not
// listed at the next start, but never left where nothing counts or
// removes it: its image is kept for inspection (.kept-image-<id>-<time>,
// kept.json saying why), counted against the unknown tenant's quota and
// in the paused sessions' metrics, and removed by the sweep once it
// expires (persistence.keep after the start that found it). Checked
// against mutants: LoadPaused skipping it as before (nothing kept,
// nothing counted), and its bytes not counted (the usage 0).
func TestDamagedDescriptionKept(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	s, err := m1.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	if _, err := s.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	m1.Close()
	dir := cfg.Persistence.Dir
	if err := os.WriteFile(filepath.Join(dir, s.ID(), "meta.json"), []byte(`{"version":1,"sha256":"00","body":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	m, _, _ := newTestManager(t, cfg)
	if err := m.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if l := m.List(); len(l) != 0 {
		t.Errorf("a damaged description listed: %+v", l)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, ".kept-image-"+s.ID()+"-*"))
	if len(kept) != 1 {
		t.Fatalf("kept %v", kept)
	}
	if _, err := os.Stat(filepath.Join(dir, s.ID())); !os.IsNotExist(err) {
		t.Errorf("the image stayed where a paused session's is: %v", err)
	}
	all, err := pauseimage.ListKept(dir, time.Hour)
	if err != nil || len(all) != 1 || all[0].ID != s.ID() || all[0].Tenant != UnknownTenant || all[0].Bytes == 0 || !strings.Contains(all[0].Reason, "corrupt") {
		t.Fatalf("ListKept %+v %v", all, err)
	}
	if u := m.PausedUsage()[UnknownTenant]; u.DiskBytes != all[0].Bytes {
		t.Errorf("paused usage %+v, want the kept %d bytes", u, all[0].Bytes)
	}
	m.cfg.Quotas.MaxPausedBytes = config.Size(all[0].Bytes + 10)
	if _, err := m.reserveImage(UnknownTenant, "", 11, 11); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("a reservation past the quota with the kept image: %v", err)
	}
	m.cfg.Quotas.MaxPausedBytes = 0

	// A restart finds it kept, counted the same.
	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if u := m2.PausedUsage()[UnknownTenant]; u.DiskBytes != all[0].Bytes {
		t.Errorf("after a restart: %+v", u)
	}

	// At its expiry, the sweep removes it.
	m.mu.Lock()
	k := m.kept[kept[0]]
	k.Expires = time.Now().Add(-time.Second)
	m.kept[kept[0]] = k
	m.mu.Unlock()
	m.sweepPaused()
	if got, _ := filepath.Glob(filepath.Join(dir, ".kept-image-*")); len(got) != 0 {
		t.Errorf("an expired kept image stayed: %v", got)
	}
	if u := m.PausedUsage()[UnknownTenant]; u.DiskBytes != 0 {
		t.Errorf("after its expiry: %+v", u)
	}
}
