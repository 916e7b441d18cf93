package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
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

// holdSeals holds every seal of a session id (every session's: "") as
// it begins ("sealing") until release is called (at the test's end at
// the latest), and says on the channel it returns each time one is
// held.
// onSealed, if set, is called (on the seal's goroutine) as one is
// sealed.
func holdSeals(t *testing.T, id string, onSealed func()) (held <-chan struct{}, release func()) {
	t.Helper()
	h, gate := make(chan struct{}, 16), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	liveHook = func(point, sid string) {
		if id != "" && sid != id {
			return
		}
		if point == "sealed" && onSealed != nil {
			onSealed()
		}
		if point != "sealing" {
			return
		}
		select {
		case h <- struct{}{}:
		default:
		}
		<-gate
	}
	t.Cleanup(func() { release(); liveHook = nil })
	return h, release
}

// holdClose holds f's Close as it begins until the function it returns
// is called (at the test's end at the latest); reached is closed once
// Close began.
func holdClose(t *testing.T, f *fakeInstance) (reached <-chan struct{}, release func()) {
	r, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	h := func() {
		close(r)
		<-gate
	}
	f.closeHook.Store(&h)
	t.Cleanup(release)
	return r, release
}

// leftIn is what dir holds, by name.
func leftIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// noneListed fails unless m lists no session and its persistence.dir
// holds nothing.
func noneListed(t *testing.T, m *Manager, what string) {
	t.Helper()
	if l := m.List(); len(l) != 0 {
		t.Errorf("%s: listed %+v", what, l)
	}
	if left := leftIn(t, m.persistDir()); len(left) != 0 {
		t.Errorf("%s: persistence.dir holds %v", what, left)
	}
}

// TestDeletedWhileExecutingStaysDeleted (issue #21): a session deleted
// while an execution runs never comes back, whatever the server's end:
// its recovery point's end is durable before the delete returns (its
// teardown, after the execution, held meanwhile), and the execution
// that ends with it (its seal held meanwhile) seals nothing. A server killed right after the delete (persistence.dir as
// it is then) lists nothing at its next start, and leaves nothing
// there; nor does the first server once the held seal goes on. Checked
// against a mutant: the point ended in the teardown, after the
// execution returned (as before: the restart listed the session paused,
// recovered).
func TestDeletedWhileExecutingStaysDeleted(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	f := src.last()
	writeFiles(t, s, someFiles)
	sealed(t, s)
	_, release := holdSeals(t, s.ID(), nil)
	// Its teardown held too, until the kill: the delete's answer waits
	// for neither.
	_, gate := holdClose(t, f)
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "write a.txt 1; mark; sleep"}, nil)
		done <- err
	}()
	<-f.marks
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	crashed := killedAt(t, cfg)
	release()
	gate()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("the execution never returned")
	}
	<-s.gone
	noneListed(t, restarted(t, crashed), "killed right after the delete")
	m.seals.Wait()
	if ids, _ := pauseimage.ListLive(cfg.Persistence.Dir); len(ids) != 0 {
		t.Errorf("recovery points left after the delete: %v", ids)
	}
	noneListed(t, restarted(t, killedAt(t, cfg)), "killed once the seals were over")
}

// TestDeletedBeforeFirstPoint (issue #21): a session deleted before its
// first recovery point is sealed (its first seal held as it begins)
// leaves nothing: a server killed right after the delete lists nothing
// at its next start, and the held seal, let go, makes no point of its
// own (nothing is left in persistence.dir). Checked against a mutant: a seal that finds the session
// ended once it made its point goes on (the restart listed the session,
// recovered, and its point was left).
func TestDeletedBeforeFirstPoint(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	// A seal that commits after the delete: persistence.dir as a kill
	// at that moment leaves it (reported once the seals are over).
	var atSealed *config.Config
	var sealedErr error
	sealedDir := t.TempDir()
	held, release := holdSeals(t, "", func() {
		if atSealed == nil && sealedErr == nil {
			atSealed, sealedErr = copyPersistence(cfg, sealedDir)
		}
	})
	s := create(t, m, "python")
	select {
	case <-held:
	case <-time.After(wait):
		t.Fatal("the first seal never began")
	}
	// Its teardown held as it begins, its workspace still there: the
	// delete's end of the point is done by then, and the held seal goes
	// on meanwhile.
	reached, closeGo := holdClose(t, src.last())
	deleted := make(chan error, 1)
	go func() { deleted <- m.DeleteFor(context.Background(), s.ID()) }()
	select {
	case <-reached:
	case <-time.After(wait):
		t.Fatal("the teardown never began")
	}
	crashed := killedAt(t, cfg)
	release()
	sealed(t, s)
	closeGo()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	<-s.gone
	m.seals.Wait()
	noneListed(t, restarted(t, crashed), "killed right after the delete")
	if sealedErr != nil {
		t.Fatal(sealedErr)
	}
	if atSealed != nil {
		t.Error("a point was sealed after the delete")
		noneListed(t, restarted(t, atSealed), "killed as the held seal sealed")
	}
	if left := leftIn(t, cfg.Persistence.Dir); len(left) != 0 {
		t.Errorf("the held seal left %v", left)
	}
	noneListed(t, restarted(t, killedAt(t, cfg)), "killed once the seal was over")
}

// smallFiles fit in a persistence.max_image_bytes of 1 KiB.
var smallFiles = map[string]string{"notes.txt": "hello", "data/x.json": `{"k": 1}`}

// TestShutdownKeepsWhatItCannotPause (issue #21): a session a shutdown
// cannot pause (its code ignores the interrupt past
// persistence.shutdown_timeout; its workspace is over
// persistence.max_image_bytes) ends, but its recovery point stays: the
// next start lists it paused, recovered, with the files of its last
// sealed point, as after a kill -9; a delete at that moment is refused
// (503), never told done and then back. With on_shutdown "end" nothing
// is kept. Checked against a mutant: a shutdown's end removing the
// point (the sessions were gone after the restart).
func TestShutdownKeepsWhatItCannotPause(t *testing.T) {
	for _, onShutdown := range []string{"pause", "end"} {
		t.Run(onShutdown, func(t *testing.T) {
			cfg := persistConfig(t)
			cfg.Persistence.ShutdownTimeout = config.Duration(300 * time.Millisecond)
			cfg.Persistence.OnShutdown = onShutdown
			cfg.Persistence.MaxImageBytes = 1 << 10
			m, _, _ := newTestManager(t, cfg)
			stuck, big, idle := create(t, m, "python"), create(t, m, "python"), create(t, m, "python")
			for _, s := range []*Session{stuck, big, idle} {
				writeFiles(t, s, smallFiles)
			}
			// Over max_image_bytes: neither sealed nor paused.
			if _, err := execute(t, big, "write big.txt "+strings.Repeat("x", 2<<10), nil); err != nil {
				t.Fatal(err)
			}
			for _, s := range []*Session{stuck, big, idle} {
				sealed(t, s)
			}
			go stuck.Execute(context.Background(), apitype.ExecuteRequest{Code: "hang"}, nil)
			busy(t, stuck)
			m.Close()
			want := map[string]apitype.EndCode{stuck.ID(): apitype.EndShutdown, big.ID(): apitype.EndShutdown, idle.ID(): apitype.EndPaused}
			if onShutdown == "end" {
				want[idle.ID()] = apitype.EndShutdown
			}
			for _, s := range []*Session{stuck, big, idle} {
				if end := ended(t, s); end.Code != want[s.ID()] {
					t.Errorf("%s ended for %q, want %q", s.ID(), end.Code, want[s.ID()])
				}
			}
			err := m.DeleteFor(context.Background(), stuck.ID())
			if onShutdown == "pause" && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("a delete of a session the shutdown kept: %v, want unavailable", err)
			}
			if onShutdown == "end" && err != nil {
				t.Errorf("a delete of a session the shutdown ended: %v", err)
			}
			m2 := restarted(t, cfg)
			l := m2.List()
			if onShutdown == "end" {
				if len(l) != 0 {
					t.Errorf("on_shutdown end: listed %+v", l)
				}
				return
			}
			got := map[string]apitype.Session{}
			for _, s := range l {
				got[s.ID] = s
			}
			for _, s := range []*Session{stuck, big} {
				p := got[s.ID()]
				if p.State != apitype.StatePaused || p.Paused == nil || !strings.HasPrefix(p.Paused.Recovered, "recovered after the server ended unexpectedly") {
					t.Errorf("%s after the restart: %+v", s.ID(), p)
				}
			}
			if p := got[idle.ID()]; p.State != apitype.StatePaused || p.Paused == nil || p.Paused.Recovered != "" {
				t.Errorf("the paused session after the restart: %+v", p)
			}
			if p := got[big.ID()]; p.Paused != nil && !strings.Contains(p.Paused.Recovered, "could not be kept") {
				t.Errorf("the session over max_image_bytes does not say its point is behind: %q", p.Paused.Recovered)
			}
			for _, s := range []*Session{stuck, big} {
				r, err := m2.ResumeFor(context.Background(), s.ID())
				if err != nil {
					t.Fatal(err)
				}
				checkFiles(t, r, smallFiles)
			}
		})
	}
}

// TestShutdownOnFullDiskKeepsPoint (issue #21): a shutdown whose pause
// of a session fails because persistence.dir's disk is full (no inode
// left for the image's description) keeps the session's recovery
// point: the next start lists it paused, recovered, with its files.
// Checked against a mutant: a shutdown's end removing the point (listed
// nothing after the restart).
func TestShutdownOnFullDiskKeepsPoint(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs as persistence.dir")
	cfg := persistConfig(t)
	dir := cfg.Persistence.Dir
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=128m,nr_inodes=1000,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	m, _, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	writeFiles(t, s, smallFiles)
	sealed(t, s)
	// The disk full from now on: the image's temporary directory and
	// files.tar get the last two inodes, its description none.
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	used := fs.Files - fs.Ffree
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=128m,nr_inodes=%d,mode=0700", used+2)); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if end := ended(t, s); end.Code != apitype.EndShutdown {
		t.Fatalf("the session ended for %q, want shutdown (its pause onto the full disk failing)", end.Code)
	}
	m2 := restarted(t, killedAt(t, cfg))
	l := m2.List()
	if len(l) != 1 || l[0].ID != s.ID() || l[0].Paused == nil || !strings.HasPrefix(l[0].Paused.Recovered, "recovered after the server ended unexpectedly") {
		t.Fatalf("after the restart: %+v", l)
	}
	r, err := m2.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, smallFiles)
}

// TestShutdownKeepsResumedImage (issue #21): a resumed session the
// shutdown cannot pause before its first recovery point is sealed (the
// seal held; its code ignores the interrupt) keeps the image its resume
// set aside: the next start lists it paused as it was before the resume,
// its files whole, whether the server then ended cleanly or was killed
// as the session ended. Checked against a mutant: a shutdown's end
// ending the point and the set-aside image (nothing listed).
func TestShutdownKeepsResumedImage(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Persistence.ShutdownTimeout = config.Duration(300 * time.Millisecond)
	m, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	s := pausedWithFiles(t, m, ctx)
	_, release := holdSeals(t, s.ID(), nil)
	r, err := m.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	go r.Execute(context.Background(), apitype.ExecuteRequest{Code: "hang"}, nil)
	busy(t, r)
	closed := make(chan struct{})
	go func() { defer close(closed); m.Close() }()
	if end := ended(t, r); end.Code != apitype.EndShutdown {
		t.Fatalf("the resumed session ended for %q, want shutdown", end.Code)
	}
	killed := killedAt(t, cfg)
	release()
	<-closed
	for name, c := range map[string]*config.Config{"killed as it ended": killed, "after the shutdown": cfg} {
		m2 := restarted(t, c)
		l := m2.List()
		if len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused {
			t.Errorf("%s: listed %+v", name, l)
			continue
		}
		r2, err := m2.ResumeFor(ctx, s.ID())
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, r2, someFiles)
	}
}

// TestDiscardAfterShutdown: a session its creator never hears of that a
// shutdown ended first, its recovery point kept, is discarded for good:
// the next start does not list it paused, and a delete after it is done
// (not 503 "kept"). checked against mutants: with Delete doing nothing
// for an ended session (as before), the restart listed it paused; with
// the discard not recording the end as deleted, the delete said 503.
func TestDiscardAfterShutdown(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	writeFiles(t, s, smallFiles)
	sealed(t, s)
	s.terminate(apitype.Ended(apitype.EndShutdown))
	<-s.gone
	if _, err := m.Get(s.ID()); err == nil {
		t.Fatal("the session ended by the shutdown is still live")
	}
	m.Discard(context.Background(), s.ID())
	// Deleted, no longer kept: a delete now is done, not 503.
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Errorf("a delete after the discard: %v", err)
	}
	m.Close()
	if l := restarted(t, cfg).List(); len(l) != 0 {
		t.Fatalf("a discarded session after the restart: %+v", l)
	}
}
