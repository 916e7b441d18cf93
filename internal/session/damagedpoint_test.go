package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
	"airlock/internal/testenv"
)

// liveSealed creates a session of tenant holding files, its recovery
// point sealed.
func liveSealed(t *testing.T, m *Manager, tenant string, files map[string]string) *Session {
	t.Helper()
	ctx := identity.With(context.Background(), identity.Identity{Tenant: tenant, KeyID: "k-" + tenant})
	s, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, files)
	sealed(t, s)
	return s
}

// logged is a manager's log, kept for a test to read.
func logged(m *Manager) *bytes.Buffer {
	var buf bytes.Buffer
	m.log = slog.New(slog.NewTextHandler(&buf, nil))
	return &buf
}

// keptPoints are the recovery points kept for inspection under dir.
func keptPoints(dir, id string) []string {
	got, _ := filepath.Glob(filepath.Join(dir, ".kept-point-"+id+"-*"))
	return got
}

// TestDamagedPointKept: a recovery point that cannot be recovered after
// a kill -9 (its point.json garbage, emptied, of another session; a file
// of its tree lost, a symlink to a host file or a FIFO in its place; its
// tree a symlink to a host directory; over persistence.max_image_bytes
// as configured now) is never left where nothing counts or removes it:
// it is kept aside whole (.kept-point-<id>-<time>, kept.json saying
// why), counted against its tenant's quota when point.json still says
// whose it is (else the unknown tenant's) and in airlock_paused_kept,
// logged once, removed by the sweep when it expires; the other
// sessions of the same server are recovered as usual, and no host file
// is read or touched. Checked against mutants: recoverLive leaving a
// damaged point in place as before (nothing kept, nothing counted), and
// the tenant never read from a point.json that passes its checksum
// (counted as unknown).
func TestDamagedPointKept(t *testing.T) {
	secret := "root:$6$secret-hash:19000:0:99999:7:::"
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, point string)
		tenant string // whose it is counted for
		why    string
		max    config.Size // persistence.max_image_bytes at the restart (0: as before)
	}{
		{"point.json garbage", func(t *testing.T, point string) {
			os.WriteFile(filepath.Join(point, "point.json"), []byte("{{{garbage"), 0o600)
		}, UnknownTenant, "malformed", 0},
		{"point.json empty", func(t *testing.T, point string) {
			os.WriteFile(filepath.Join(point, "point.json"), nil, 0o600)
		}, UnknownTenant, "malformed", 0},
		{"a file lost", func(t *testing.T, point string) {
			os.Remove(filepath.Join(point, "tree", "a.txt"))
		}, "acme", "missing", 0},
		{"a file a symlink to a host file", func(t *testing.T, point string) {
			host := filepath.Join(t.TempDir(), "shadow")
			os.WriteFile(host, []byte(secret[:3]), 0o600) // a.txt's size
			os.Remove(filepath.Join(point, "tree", "a.txt"))
			os.Symlink(host, filepath.Join(point, "tree", "a.txt"))
		}, "acme", "not a file or directory (symlink)", 0},
		{"a file a FIFO", func(t *testing.T, point string) {
			os.Remove(filepath.Join(point, "tree", "a.txt"))
			unix.Mkfifo(filepath.Join(point, "tree", "a.txt"), 0o600)
		}, "acme", "not a file or directory", 0},
		{"tree a symlink to a host directory", func(t *testing.T, point string) {
			host := t.TempDir()
			os.WriteFile(filepath.Join(host, "victim"), []byte(secret), 0o600)
			os.RemoveAll(filepath.Join(point, "tree"))
			os.Symlink(host, filepath.Join(point, "tree"))
			t.Cleanup(func() {
				if b, err := os.ReadFile(filepath.Join(host, "victim")); err != nil || string(b) != secret {
					t.Errorf("the host directory behind tree/ was touched: %v", err)
				}
			})
		}, "acme", "symlink", 0},
		{"over max_image_bytes", func(t *testing.T, point string) {}, "acme", "more than a paused session may hold", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := persistConfig(t)
			m1, _, _ := newTestManager(t, cfg)
			bad := liveSealed(t, m1, "acme", map[string]string{"a.txt": "one", "sub/b.txt": "bee"})
			good := liveSealed(t, m1, "acme", map[string]string{"ok.txt": "fine"})
			killed := killedAt(t, cfg)
			if c.max != 0 {
				// bad's 6 bytes over it, good's 4 not.
				killed.Persistence.MaxImageBytes = c.max
			}
			dir := killed.Persistence.Dir
			c.damage(t, pauseimage.LiveDir(dir, bad.ID()))

			m, _, _ := newTestManager(t, killed)
			log := logged(m)
			if err := m.LoadPaused(); err != nil {
				t.Fatal(err)
			}
			got := map[string]apitype.Session{}
			for _, s := range m.List() {
				got[s.ID] = s
			}
			if _, ok := got[bad.ID()]; ok {
				t.Errorf("the damaged point was recovered: %+v", got[bad.ID()])
			}
			if g, ok := got[good.ID()]; !ok || g.State != apitype.StatePaused {
				t.Fatalf("the whole point beside it was not recovered: %+v", got)
			}
			kept := keptPoints(dir, bad.ID())
			if len(kept) != 1 {
				t.Fatalf("kept %v", kept)
			}
			if _, err := os.Lstat(pauseimage.LiveDir(dir, bad.ID())); !os.IsNotExist(err) {
				t.Errorf("the point stayed where a start recovers it: %v", err)
			}
			all, err := pauseimage.ListKept(dir, time.Hour)
			if err != nil || len(all) != 1 || all[0].ID != bad.ID() || all[0].Tenant != c.tenant || !strings.Contains(strings.ToLower(all[0].Reason), c.why) {
				t.Fatalf("ListKept %+v %v, want tenant %q, why %q", all, err, c.tenant, c.why)
			}
			u := m.PausedUsage()[c.tenant]
			if u.Kept != 1 || u.DiskBytes < all[0].Bytes || all[0].Bytes == 0 && c.name == "a file lost" {
				t.Errorf("paused usage of %s %+v, want the kept point's %d bytes", c.tenant, u, all[0].Bytes)
			}
			if !strings.Contains(log.String(), "recovery point cannot be recovered; it is kept for inspection") || !strings.Contains(log.String(), bad.ID()) {
				t.Errorf("not logged: %s", log)
			}
			noneOf(t, dir, secret)

			// A restart finds it kept, counted the same; never as a point.
			m2 := restarted(t, killedAt(t, killed))
			if u2 := m2.PausedUsage()[c.tenant]; u2.Kept != 1 {
				t.Errorf("after a restart: %+v", u2)
			}
			for _, s := range m2.List() {
				if s.ID == bad.ID() {
					t.Errorf("listed after a restart: %+v", s)
				}
			}

			r, err := m.ResumeFor(context.Background(), good.ID())
			if err != nil {
				t.Fatal(err)
			}
			checkFiles(t, r, map[string]string{"ok.txt": "fine"})

			// At its expiry, the sweep removes it.
			m.mu.Lock()
			k := m.kept[kept[0]]
			k.Expires = time.Now().Add(-time.Second)
			m.kept[kept[0]] = k
			m.mu.Unlock()
			m.sweepPaused()
			if got := keptPoints(dir, bad.ID()); len(got) != 0 {
				t.Errorf("an expired kept point stayed: %v", got)
			}
			if u := m.PausedUsage()[c.tenant]; u.Kept != 0 {
				t.Errorf("after its expiry: %+v", u)
			}
		})
	}
}

// noneOf fails if a regular file under dir holds secret.
func noneOf(t *testing.T, dir, secret string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the host's secret", p)
			}
		}
		return nil
	})
}

// TestPointsOfOneID: two recovery points that say they are of one
// session (a point copied under another session's name: its point.json
// names the first) and a point whose session collides with a paused
// session's image. The copy is kept aside (counted as the unknown
// tenant's: its description is not its own), the original recovered;
// a point beside a whole image of its session is not needed (the pause
// completed) and removed; a point beside an image whose description is
// damaged is recovered, the image kept aside. Checked against mutants:
// the image beside a point not checked first (the point removed, the
// session lost), and a point.json naming another session trusted for
// its tenant (the copy counted as acme's).
func TestPointsOfOneID(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	a := liveSealed(t, m1, "acme", map[string]string{"a.txt": "A"})
	b := liveSealed(t, m1, "acme", map[string]string{"b.txt": "B"})
	c := liveSealed(t, m1, "acme", map[string]string{"c.txt": "C"})
	killed := killedAt(t, cfg)
	dir := killed.Persistence.Dir
	// A copy of a's point under the name of a session that never was.
	copyID := "s-copy0000000000"
	if err := os.Rename(pauseimage.LiveDir(dir, b.ID()), filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", pauseimage.LiveDir(dir, a.ID()), pauseimage.LiveDir(dir, copyID)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// c has a damaged image beside its point.
	os.Mkdir(filepath.Join(dir, c.ID()), 0o700)
	os.WriteFile(filepath.Join(dir, c.ID(), "meta.json"), []byte("garbage"), 0o600)

	m := restarted(t, killed)
	got := map[string]apitype.Session{}
	for _, s := range m.List() {
		got[s.ID] = s
	}
	if len(got) != 2 || got[a.ID()].State != apitype.StatePaused || got[c.ID()].State != apitype.StatePaused {
		t.Fatalf("listed %+v, want %s and %s paused", got, a.ID(), c.ID())
	}
	if len(keptPoints(dir, copyID)) != 1 {
		t.Errorf("the copy was not kept aside")
	}
	if k, _ := filepath.Glob(filepath.Join(dir, ".kept-image-"+c.ID()+"-*")); len(k) != 1 {
		t.Errorf("the damaged image beside c's point was not kept aside: %v", k)
	}
	if u := m.PausedUsage()[UnknownTenant]; u.Kept != 2 {
		t.Errorf("the unknown tenant's kept: %+v, want the copy and the damaged image", u)
	}
	if u := m.PausedUsage()["acme"]; u.Kept != 0 || u.Sessions != 2 {
		t.Errorf("acme's: %+v", u)
	}
	for id, want := range map[string]map[string]string{a.ID(): {"a.txt": "A"}, c.ID(): {"c.txt": "C"}} {
		r, err := m.ResumeFor(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, r, want)
	}
}

// TestRecoveredForAGoneTenant: a point of a tenant whose key (or the
// tenant itself) no longer exists is recovered as its tenant's paused
// session all the same: listed and resumable for that tenant only,
// counted against its quota, and expiring persistence.keep after its
// point as any paused session (not left on the disk for ever).
func TestRecoveredForAGoneTenant(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	s := liveSealed(t, m1, "gone", map[string]string{"a.txt": "A"})
	killed := killedAt(t, cfg)
	m := restarted(t, killed)
	other := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	if l := m.List(); len(l) != 1 || l[0].Tenant != "gone" || l[0].State != apitype.StatePaused {
		t.Errorf("listed %+v", l)
	}
	if _, err := m.ResumeFor(other, s.ID()); err == nil {
		t.Errorf("another tenant resumed it")
	}
	if u := m.PausedUsage()["gone"]; u.Sessions != 1 || u.DiskBytes == 0 {
		t.Errorf("not counted for its tenant: %+v", u)
	}
	m.mu.Lock()
	m.paused[s.ID()].meta.PausedAt = time.Now().Add(-killed.Persistence.Keep.D() - time.Second)
	m.mu.Unlock()
	m.sweepPaused()
	if l := m.List(); len(l) != 0 {
		t.Errorf("not expired: %+v", l)
	}
	if ents, _ := os.ReadDir(killed.Persistence.Dir); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left on the disk: %v", names)
	}
}

// TestPersistenceOffSaysWhatItLeaves: a server started with persistence
// off on a persistence.dir that holds paused sessions, recovery points
// and kept images (an earlier run's, with it on) touches none of them
// and says so in its log, with their counts: never a silent loss.
// Checked against a mutant: LoadPaused returning at once as before
// (nothing logged).
func TestPersistenceOffSaysWhatItLeaves(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	liveSealed(t, m1, "acme", map[string]string{"a.txt": "A"})
	liveSealed(t, m1, "acme", map[string]string{"b.txt": "B"})
	pausedWith(t, m1, map[string]string{"c.txt": "C"})
	killed := killedAt(t, cfg)
	before, _ := os.ReadDir(killed.Persistence.Dir)
	off := *killed
	off.Persistence.Enabled = false
	m, _, _ := newTestManager(t, &off)
	log := logged(m)
	if err := m.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if l := m.List(); len(l) != 0 {
		t.Errorf("listed with persistence off: %+v", l)
	}
	if !strings.Contains(log.String(), "persistence is off, but "+off.Persistence.Dir+" holds 1 paused sessions, 2 recovery points of live sessions and 0 images kept for inspection") {
		t.Errorf("log: %s", log)
	}
	after, _ := os.ReadDir(killed.Persistence.Dir)
	if fmt.Sprint(names(before)) != fmt.Sprint(names(after)) {
		t.Errorf("persistence.dir changed: %v, was %v", names(after), names(before))
	}
	// Turned on again, all of it comes back.
	if l := restarted(t, killed).List(); len(l) != 3 {
		t.Errorf("with persistence on again: %+v", l)
	}
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestRecoveryOnFullDisk: a recovery the disk has no room for (the
// image of a point is written beside it: a tmpfs with no inode left for
// it) loses nothing: the point stays in place, whole, neither recovered
// nor kept aside, counted against its tenant's quota meanwhile, the log
// says it is tried again at the next start; the next start with room
// recovers it; one still there when its session would have expired is
// removed by the sweep. Checked against mutants: a disk error treated
// as damage (the point kept aside, the session lost), and the pending
// point not counted (acme's usage 0).
func TestRecoveryOnFullDisk(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs as persistence.dir")
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	s := liveSealed(t, m1, "acme", map[string]string{"a.txt": "A", "sub/b.txt": "B"})
	src := killedAt(t, cfg)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=128m,nr_inodes=1000,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	killed, err := copyPersistence(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	// The image's temporary directory gets the last inode; its files
	// none.
	used := fs.Files - fs.Ffree
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=128m,nr_inodes=%d,mode=0700", used+1)); err != nil {
		t.Fatal(err)
	}
	m, _, _ := newTestManager(t, killed)
	log := logged(m)
	if err := m.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if l := m.List(); len(l) != 0 {
		t.Errorf("listed without room to recover: %+v", l)
	}
	if _, err := os.Stat(filepath.Join(pauseimage.LiveDir(dir, s.ID()), "point.json")); err != nil {
		t.Errorf("the point is not in place: %v", err)
	}
	if k := keptPoints(dir, s.ID()); len(k) != 0 {
		t.Errorf("kept aside for a full disk: %v", k)
	}
	if !strings.Contains(log.String(), "tried again at the next start") {
		t.Errorf("log: %s", log)
	}
	// Counted meanwhile (it takes the disk), not as kept for inspection.
	if u := m.PausedUsage()["acme"]; u.DiskBytes < 2 || u.Kept != 0 || u.Sessions != 0 {
		t.Errorf("acme's usage with the point pending: %+v", u)
	}
	// The next start, with room (a copy of the disk as it is now).
	later := killedAt(t, killed)
	// Still here when its session would have expired: removed.
	m.mu.Lock()
	k, ok := m.kept[pauseimage.LiveDir(dir, s.ID())]
	if !ok || !k.Pending || k.Expires.After(time.Now().Add(killed.Persistence.Keep.D())) {
		m.mu.Unlock()
		t.Fatalf("the pending point: %+v %v", k, ok)
	}
	k.Expires = time.Now().Add(-time.Second)
	m.kept[k.Dir] = k
	m.mu.Unlock()
	m.sweepPaused()
	if _, err := os.Lstat(pauseimage.LiveDir(dir, s.ID())); !os.IsNotExist(err) {
		t.Errorf("an expired pending point stays: %v", err)
	}
	if u := m.PausedUsage()["acme"]; u.DiskBytes != 0 {
		t.Errorf("acme's usage once it expired: %+v", u)
	}
	m.Close()
	m2 := restarted(t, later)
	if l := m2.List(); len(l) != 1 || l[0].ID != s.ID() {
		t.Fatalf("with room again: %+v", l)
	}
	r, err := m2.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, map[string]string{"a.txt": "A", "sub/b.txt": "B"})
}

// TestDamagedImagesAtStart: a paused session's image damaged or edited
// on the disk, as a start finds it. Its description (meta.json)
// emptied, truncated, garbage, a FIFO, a symlink to a whole meta.json;
// the image's directory a symlink to a whole image elsewhere; a resumed
// marker (.resumed-<id>, a resume the server ended before its first
// point) that is a symlink to a whole image or whose description is
// garbage: none is listed, each is kept aside whole (.kept-image-…),
// counted and expiring, nothing read through a symlink. Its files
// (files.tar) a FIFO or a symlink to a host file: listed paused, and a
// resume refuses it at once as corrupt (no hang), starting no sandbox.
// A kept directory a crash left half made (kept.json only) is counted
// and expires. Every other paused session is listed and resumes.
// Checked against mutants: ListResumed skipping what is not a
// directory (the symlinked marker left where nothing counts it), and
// openRegular without O_NONBLOCK (the FIFO files.tar hangs the resume).
func TestDamagedImagesAtStart(t *testing.T) {
	secret := "root:$6$secret-hash:19000:0:99999:7:::"
	type result int
	const (
		keptAside result = iota
		refusedOnResume
	)
	for _, c := range []struct {
		name    string
		damage  func(t *testing.T, root, id string)
		outcome result
	}{
		{"meta.json empty", func(t *testing.T, root, id string) {
			os.WriteFile(filepath.Join(root, id, "meta.json"), nil, 0o600)
		}, keptAside},
		{"meta.json truncated", func(t *testing.T, root, id string) {
			p := filepath.Join(root, id, "meta.json")
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()/2)
		}, keptAside},
		{"meta.json garbage", func(t *testing.T, root, id string) {
			os.WriteFile(filepath.Join(root, id, "meta.json"), []byte("\x00\xffgarbage"), 0o600)
		}, keptAside},
		{"meta.json a FIFO", func(t *testing.T, root, id string) {
			os.Remove(filepath.Join(root, id, "meta.json"))
			unix.Mkfifo(filepath.Join(root, id, "meta.json"), 0o600)
		}, keptAside},
		{"meta.json a symlink to a whole one", func(t *testing.T, root, id string) {
			whole := filepath.Join(t.TempDir(), "meta.json")
			os.Rename(filepath.Join(root, id, "meta.json"), whole)
			os.Symlink(whole, filepath.Join(root, id, "meta.json"))
		}, keptAside},
		{"the image a symlink to a whole image", func(t *testing.T, root, id string) {
			elsewhere := filepath.Join(t.TempDir(), id)
			os.Rename(filepath.Join(root, id), elsewhere)
			os.Symlink(elsewhere, filepath.Join(root, id))
		}, keptAside},
		{"a resumed marker a symlink to a whole image", func(t *testing.T, root, id string) {
			elsewhere := filepath.Join(t.TempDir(), id)
			os.Rename(filepath.Join(root, id), elsewhere)
			os.Symlink(elsewhere, pauseimage.ResumedDir(root, id))
		}, keptAside},
		{"a resumed marker with its description garbage", func(t *testing.T, root, id string) {
			os.Rename(filepath.Join(root, id), pauseimage.ResumedDir(root, id))
			os.WriteFile(filepath.Join(pauseimage.ResumedDir(root, id), "meta.json"), []byte("garbage"), 0o600)
		}, keptAside},
		{"files.tar a FIFO", func(t *testing.T, root, id string) {
			os.Remove(filepath.Join(root, id, "files.tar"))
			unix.Mkfifo(filepath.Join(root, id, "files.tar"), 0o600)
		}, refusedOnResume},
		{"files.tar a symlink to a host file", func(t *testing.T, root, id string) {
			host := filepath.Join(t.TempDir(), "shadow")
			os.WriteFile(host, []byte(secret), 0o600)
			os.Remove(filepath.Join(root, id, "files.tar"))
			os.Symlink(host, filepath.Join(root, id, "files.tar"))
		}, refusedOnResume},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := persistConfig(t)
			m1, _, _ := newTestManager(t, cfg)
			bad := pausedWith(t, m1, map[string]string{"a.txt": "A"})
			good := pausedWith(t, m1, map[string]string{"ok.txt": "fine"})
			m1.Close()
			root := cfg.Persistence.Dir
			c.damage(t, root, bad.ID())
			// A kept directory a crash in KeepImage left (kept.json only).
			half := filepath.Join(root, ".kept-image-s-half-20260101T000000.000Z")
			os.Mkdir(half, 0o700)
			os.WriteFile(filepath.Join(half, "kept.json"), []byte(`{"id":"s-half","tenant":"acme","expires":"2000-01-01T00:00:00Z"}`), 0o600)

			m, src, _ := newTestManager(t, cfg)
			if err := m.LoadPaused(); err != nil {
				t.Fatal(err)
			}
			got := map[string]apitype.Session{}
			for _, s := range m.List() {
				got[s.ID] = s
			}
			if _, ok := got[good.ID()]; !ok {
				t.Fatalf("the whole paused session beside it is not listed: %+v", got)
			}
			switch c.outcome {
			case keptAside:
				if _, ok := got[bad.ID()]; ok {
					t.Errorf("listed: %+v", got[bad.ID()])
				}
				if k, _ := filepath.Glob(filepath.Join(root, ".kept-image-"+bad.ID()+"-*")); len(k) != 1 {
					t.Errorf("not kept aside: %v", k)
				}
				if u := m.PausedUsage()[UnknownTenant]; u.Kept != 1 {
					t.Errorf("the unknown tenant's kept: %+v", u)
				}
				for _, p := range []string{filepath.Join(root, bad.ID()), pauseimage.ResumedDir(root, bad.ID())} {
					if _, err := os.Lstat(p); !os.IsNotExist(err) {
						t.Errorf("%s stays: %v", p, err)
					}
				}
			case refusedOnResume:
				if g, ok := got[bad.ID()]; !ok || g.State != apitype.StatePaused {
					t.Fatalf("not listed paused: %+v", got)
				}
				before := len(src.all)
				done := make(chan error, 1)
				go func() {
					_, err := m.ResumeFor(context.Background(), bad.ID())
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, errdefs.ErrImageCorrupt) {
						t.Errorf("resume: %v", err)
					}
				case <-time.After(time.Minute):
					t.Fatal("the resume hangs")
				}
				if len(src.all) != before {
					t.Error("a sandbox was started for it")
				}
			}
			noneOf(t, root, secret)
			// The half-made kept directory is counted for its tenant
			// (0 bytes), and expired.
			m.sweepPaused()
			if _, err := os.Stat(half); !os.IsNotExist(err) {
				t.Errorf("an expired half-made kept directory stays: %v", err)
			}
			r, err := m.ResumeFor(context.Background(), good.ID())
			if err != nil {
				t.Fatal(err)
			}
			checkFiles(t, r, map[string]string{"ok.txt": "fine"})
		})
	}
}

// TestSealOnFullDisk: a seal that meets a full disk in the middle (room
// in bytes, no inode left for the staged file: ENOSPC) loses nothing:
// the execution succeeds and the session runs on, its point stays the
// last sealed one, whole (a kill now recovers it), the session says
// its point is stale and why, the seal counts as failed; once there is
// room, the next operation seals, and a kill then recovers it. Checked
// against a mutant: a seal failing for the disk taken for sealed (the
// point not said stale).
func TestSealOnFullDisk(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs as persistence.dir")
	cfg := persistConfig(t)
	dir := cfg.Persistence.Dir
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=128m,nr_inodes=1000,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	m, _, _ := newTestManager(t, cfg)
	outcomes := make(chan string, 100)
	m.OnSeal(func(e SealEvent) { outcomes <- e.Outcome })
	s := liveSealed(t, m, "acme", map[string]string{"a.txt": "1"})
	for len(outcomes) > 0 {
		<-outcomes
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=128m,nr_inodes=%d,mode=0700", fs.Files-fs.Ffree)); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, s, "write b.txt 2", nil); err != nil {
		t.Fatalf("an execution on a full disk: %v", err)
	}
	sealed(t, s)
	if o := <-outcomes; o != "failed" {
		t.Errorf("the seal on a full disk: %q", o)
	}
	info := s.Info()
	if info.RecoveryPoint == nil || !info.RecoveryPoint.Stale || !strings.Contains(info.RecoveryPoint.StaleReason, "full or failing") {
		t.Errorf("the point does not say it is stale: %+v", info.RecoveryPoint)
	}
	if ents, _ := os.ReadDir(filepath.Join(pauseimage.LiveDir(dir, s.ID()), "stage")); len(ents) != 0 {
		t.Errorf("the failed seal left %d staged files", len(ents))
	}
	checkRecovered := func(want map[string]string) {
		t.Helper()
		m2 := restarted(t, killedAt(t, cfg))
		r, err := m2.ResumeFor(context.Background(), s.ID())
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, r, want)
		ents, _, _ := r.Files(context.Background()).List("", true)
		if len(ents) != len(want) {
			t.Errorf("recovered %d entries, want %v", len(ents), want)
		}
	}
	checkRecovered(map[string]string{"a.txt": "1"})

	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=128m,nr_inodes=1000,mode=0700"); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, s, "write c.txt 3", nil); err != nil {
		t.Fatal(err)
	}
	sealed(t, s)
	if o := <-outcomes; o != "sealed" {
		t.Errorf("the seal with room again: %q", o)
	}
	if info := s.Info(); info.RecoveryPoint == nil || info.RecoveryPoint.Stale {
		t.Errorf("still stale: %+v", info.RecoveryPoint)
	}
	checkRecovered(map[string]string{"a.txt": "1", "b.txt": "2", "c.txt": "3"})
}

// TestHugeRecordedSizesRefused: paused images whose description records
// files of an impossible size (2^62 bytes, the checksum rewritten to
// match: an edited meta.json) are refused as damaged and kept aside,
// counted by what they take on the disk: listed as recorded, two of
// them overflowed the tenant's sum and let it pause past its quota.
// Checked against a mutant: decodeMeta without its bound (both listed;
// the tenant's usage negative).
func TestHugeRecordedSizesRefused(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	var ids []string
	for range 2 {
		ids = append(ids, pausedWith(t, m1, map[string]string{"a.txt": "A"}).ID())
	}
	m1.Close()
	for _, id := range ids {
		p := filepath.Join(cfg.Persistence.Dir, id, "meta.json")
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Version int             `json:"version"`
			SHA256  string          `json:"sha256"`
			Body    json.RawMessage `json:"body"`
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &env); err != nil || json.Unmarshal(env.Body, &body) != nil {
			t.Fatalf("meta.json: %v", err)
		}
		body["files"] = json.RawMessage(`{"size":4611686018427387904,"sha256":"00"}`)
		env.Body, _ = json.Marshal(body)
		h := sha256.Sum256(env.Body)
		env.SHA256 = hex.EncodeToString(h[:])
		raw, _ = json.Marshal(env)
		os.WriteFile(p, raw, 0o600)
	}
	m := restarted(t, cfg)
	if l := m.List(); len(l) != 0 {
		t.Errorf("listed: %+v", l)
	}
	for tenant, u := range m.PausedUsage() {
		if u.DiskBytes < 0 || u.DiskBytes > 1<<30 {
			t.Errorf("%q's usage %+v", tenant, u)
		}
	}
	if u := m.PausedUsage()[UnknownTenant]; u.Kept != 2 {
		t.Errorf("kept: %+v", u)
	}
}
