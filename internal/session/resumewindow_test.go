package session

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
)

// TestResumeKilledBeforeFirstPoint: a server killed between a resume
// and its first recovery point's commit (issue #21) still has the
// session's files at the next start.
func TestResumeKilledBeforeFirstPoint(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	s := pausedWithFiles(t, m, ctx)
	var at *config.Config
	var cerr error
	dir := t.TempDir()
	liveHook = func(point, id string) {
		if point == "sealing" && at == nil {
			at, cerr = copyPersistence(cfg, dir)
		}
	}
	defer func() { liveHook = nil }()
	r, err := m.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	sealed(t, r)
	liveHook = nil
	if cerr != nil || at == nil {
		t.Fatal("no copy at the first seal:", cerr)
	}
	m2 := restarted(t, at)
	l := m2.List()
	if len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused {
		t.Fatalf("killed between the resume and its first point: the next start lists %+v", l)
	}
}

// TestResumedMarkerAtStart: a start that finds a resumed session's
// set-aside image (its end failed, or the server was killed before it)
// beside a later copy of the session, a sealed recovery point or a later
// pause's image, keeps the later copy and ends the set-aside image.
// Until its end succeeds, the marker counts in the quota.
func TestResumedMarkerAtStart(t *testing.T) {
	defer func(d time.Duration) { removeRetry = d }(removeRetry)
	removeRetry = time.Hour // nothing retries the marker's end meanwhile
	for _, later := range []string{"point", "pause"} {
		t.Run(later, func(t *testing.T) {
			cfg := persistConfig(t)
			m, _, _ := newTestManager(t, cfg)
			ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
			s := pausedWithFiles(t, m, ctx)
			// The marker's end fails: it stays beside what follows.
			undo := pauseimage.SetRemoveFault(func(step, name string) error {
				if step == "mark" && strings.HasPrefix(name, ".resumed-") {
					return errors.New("EIO (injected)")
				}
				return nil
			})
			defer undo()
			r, err := m.ResumeFor(ctx, s.ID())
			if err != nil {
				t.Fatal(err)
			}
			sealed(t, r)
			// Its end failed: it still counts (checked against a
			// mutant: the marker's count zeroed all the same).
			if r.live.marker.Load() == 0 {
				t.Error("the marker, not ended, counts no more in the quota")
			}
			if _, err := execute(t, r, "write after resume", nil); err != nil {
				t.Fatal(err)
			}
			sealed(t, r)
			if later == "pause" {
				if _, err := r.Pause(context.Background(), ""); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := os.Lstat(pauseimage.ResumedDir(cfg.Persistence.Dir, s.ID())); err != nil {
				t.Fatalf("the marker is not in place for the test: %v", err)
			}
			at, err := copyPersistence(cfg, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			undo()
			m2 := restarted(t, at)
			l := m2.List()
			if len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused {
				t.Fatalf("the next start lists %+v", l)
			}
			if _, err := os.Lstat(pauseimage.ResumedDir(at.Persistence.Dir, s.ID())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the marker outlived the start: %v", err)
			}
			r2, err := m2.ResumeFor(ctx, s.ID())
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"after": "resume"}
			for k, v := range someFiles {
				want[k] = v
			}
			checkFiles(t, r2, want)
		})
	}
}
