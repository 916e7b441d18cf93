package session

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
)

// TestEndedPausedNeverComesBack: every way a paused session's image ends
// (a client's delete, persistence.keep, a resume) fails at each step of
// the end (its mark, the mark's sync, the deletion), then the server
// restarts. A failure before the end is durable is reported (the delete,
// the resume) or tried again (the expiry), and the session stays paused,
// whole; one after it ends the session, which never comes back, and
// nothing of it is left on disk.
func TestEndedPausedNeverComesBack(t *testing.T) {
	defer func(d time.Duration) { removeRetry = d }(removeRetry)
	removeRetry = time.Hour // the test sweeps itself
	boom := errors.New("EIO (injected)")
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"})
	for _, how := range []string{"delete", "expire", "resume"} {
		for _, step := range []string{"mark", "sync", "delete"} {
			t.Run(how+"/"+step, func(t *testing.T) {
				cfg := persistConfig(t)
				id, m2 := pausedByRestart(t, cfg, ctx)
				undo := pauseimage.SetRemoveFault(func(at, name string) error {
					if at == step {
						return boom
					}
					return nil
				})
				defer undo()
				durable := step == "delete"
				var r *Session
				var err error
				switch how {
				case "delete":
					err = m2.DeleteFor(ctx, id)
					if durable != (err == nil) {
						t.Fatalf("delete failing at %s: %v", step, err)
					}
					if !durable && !errors.Is(err, errdefs.ErrUnavailable) {
						t.Errorf("delete failing at %s: %v, want 503 unavailable", step, err)
					}
				case "expire":
					m2.mu.Lock()
					m2.paused[id].meta.PausedAt = time.Now().Add(-2 * cfg.Persistence.Keep.D())
					m2.mu.Unlock()
					m2.sweepPaused()
				case "resume":
					r, err = m2.ResumeFor(ctx, id)
					if durable != (err == nil) {
						t.Fatalf("resume failing at %s: %v", step, err)
					}
					if !durable && len(m2.sessions) != 0 {
						t.Errorf("a resume that failed left its session live")
					}
				}
				l := m2.List()
				if durable {
					want := 0
					if how == "resume" {
						want = 1 // live
					}
					if len(l) != want || (want == 1 && l[0].State == apitype.StatePaused) {
						t.Fatalf("%s failing at %s, after it: %+v", how, step, l)
					}
				} else if len(l) != 1 || l[0].State != apitype.StatePaused {
					t.Fatalf("%s failing at %s, not durable, yet the session is not listed paused: %+v", how, step, l)
				}
				undo()
				if r != nil {
					writeFiles(t, r, map[string]string{"after": "resume"})
				}
				m2.Close() // pauses the resumed session, with its change

				m3, _, _ := newTestManager(t, cfg)
				if err := m3.LoadPaused(); err != nil {
					t.Fatal(err)
				}
				l = m3.List()
				switch {
				case durable && how != "resume":
					if len(l) != 0 {
						t.Fatalf("%s ended the session, yet the next start lists it: %+v", how, l)
					}
				default:
					if len(l) != 1 || l[0].ID != id || l[0].State != apitype.StatePaused {
						t.Fatalf("after the restart: %+v", l)
					}
					r, err := m3.ResumeFor(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					want := map[string]string{}
					for k, v := range someFiles {
						want[k] = v
					}
					if durable {
						want["after"] = "resume"
					}
					checkFiles(t, r, want)
					if err := m3.DeleteFor(ctx, id); err != nil {
						t.Fatal(err)
					}
				}
				// Nothing of it is left: the remains an end left
				// behind are swept (by the start's List, or a sweep).
				m3.sweepPaused()
				if ents, _ := os.ReadDir(cfg.Persistence.Dir); len(ents) != 0 {
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					t.Errorf("left on disk: %v", names)
				}
			})
		}
	}
}

// TestEndRetried: a paused session's image that ended where nobody could
// be told (a delete that won a race with the pause) but could not be
// removed is removed by a later sweep, before any restart lists it.
func TestEndRetried(t *testing.T) {
	defer func(d time.Duration) { removeRetry = d }(removeRetry)
	removeRetry = 10 * time.Millisecond
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	writeFiles(t, s, someFiles)
	m.Close()
	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	swept := make(chan struct{}, 100)
	m2.hook = func(point, _ string) {
		if point == "swept" {
			swept <- struct{}{}
		}
	}
	failing := make(chan bool, 1)
	failing <- true
	defer pauseimage.SetRemoveFault(func(at, name string) error {
		f := <-failing
		failing <- f
		if f && at == "mark" {
			return errors.New("EIO (injected)")
		}
		return nil
	})()
	// As a pause that lost to a delete does.
	m2.mu.Lock()
	delete(m2.paused, id)
	m2.mu.Unlock()
	m2.endImageLater(id)
	if _, err := os.Stat(cfg.Persistence.Dir + "/" + id); err != nil {
		t.Fatalf("the image went despite the failure: %v", err)
	}
	select { // a sweep that failed again
	case <-swept:
	case <-time.After(30 * time.Second):
		t.Fatal("no sweep tried again")
	}
	<-failing
	failing <- false
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(cfg.Persistence.Dir + "/" + id); errors.Is(err, os.ErrNotExist) {
			break
		}
		select {
		case <-swept:
		case <-deadline:
			t.Fatal("no later sweep removed it")
		}
	}
	m2.Close()
	m3, _, _ := newTestManager(t, cfg)
	if err := m3.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if l := m3.List(); len(l) != 0 {
		t.Fatalf("the next start lists it: %+v", l)
	}
}

// TestResumeMeetsShutdown: a shutdown that begins once a resume has ended
// its image (the resumed session is its only copy) pauses the resumed
// session like any other, files and all; it was torn down and lost.
func TestResumeMeetsShutdown(t *testing.T) {
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"})
	cfg := persistConfig(t)
	id, m2 := pausedByRestart(t, cfg, ctx)
	// The resume's commit sets its image aside (a rename, then a sync):
	// the shutdown begins right then (Close's first step; the rest of
	// Close waits for this creation).
	undo := pauseimage.SetRemoveFault(func(at, name string) error {
		if at == "sync" && name == id {
			m2.mu.Lock()
			m2.closed = true
			m2.mu.Unlock()
		}
		return nil
	})
	defer undo()
	if _, err := m2.ResumeFor(ctx, id); err != nil {
		t.Fatalf("a resume whose image was set aside failed: %v", err)
	}
	undo()
	m2.Close()

	m3, _, _ := newTestManager(t, cfg)
	if err := m3.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	l := m3.List()
	if len(l) != 1 || l[0].ID != id || l[0].State != apitype.StatePaused {
		t.Fatalf("after the restart: %+v, want %s paused", l, id)
	}
	r, err := m3.ResumeFor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, someFiles)
	if err := m3.DeleteFor(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// pausedByRestart creates a bash session of ctx's caller with someFiles
// in it, then shuts its manager down (which pauses it) and starts
// another on cfg, which lists it paused.
func pausedByRestart(t *testing.T, cfg *config.Config, ctx context.Context) (string, *Manager) {
	t.Helper()
	m1, _, _ := newTestManager(t, cfg)
	s, err := m1.Create(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	m1.Close()
	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	return s.ID(), m2
}
