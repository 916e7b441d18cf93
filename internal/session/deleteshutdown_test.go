package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// deleteAgain is a client's retry of a delete that was answered: it
// must say the same.
func deleteAgain(t *testing.T, m *Manager, id string, first error) {
	t.Helper()
	again := m.DeleteFor(context.Background(), id)
	if (first == nil) != (again == nil) || (first != nil && !errors.Is(again, errdefs.ErrUnavailable)) {
		t.Errorf("a delete answered %v, then %v", first, again)
	}
}

// TestDeleteRacesShutdown (issue #21): a client's delete that meets the
// server's shutdown gets a clear answer, and what it says holds after
// the restart: done (nil), and the session never comes back; or 503
// (kept), and the next start lists it paused, recovered. Each sandbox is
// closed (the fake's check at the test's end). The windows: the
// shutdown's pause writing the image; its teardown, the pause having
// failed; the shutdown's end and the delete at once (many rounds).
func TestDeleteRacesShutdown(t *testing.T) {
	t.Run("while the pause writes", func(t *testing.T) {
		cfg := persistConfig(t)
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, smallFiles)
		sealed(t, s)
		writing, release := make(chan struct{}), make(chan struct{})
		m.imageFault = func(string) error {
			close(writing)
			<-release
			return nil
		}
		closed := make(chan struct{})
		go func() { defer close(closed); m.Close() }()
		<-writing
		err := m.DeleteFor(context.Background(), s.ID())
		close(release)
		<-closed
		if err != nil {
			t.Fatalf("a delete while the shutdown pauses the session: %v", err)
		}
		if end := ended(t, s); end.Code != apitype.EndDeleted {
			t.Errorf("ended %+v, want deleted", end)
		}
		deleteAgain(t, m, s.ID(), err)
		noneListed(t, restarted(t, cfg), "deleted while the shutdown paused it")
	})

	t.Run("while the teardown runs", func(t *testing.T) {
		cfg := persistConfig(t)
		m, src, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, smallFiles)
		sealed(t, s)
		m.imageFault = func(string) error { return fmt.Errorf("%w: the disk failed (a test's fault)", errdefs.ErrUnavailable) }
		reached, release := holdClose(t, src.last())
		closed := make(chan struct{})
		go func() { defer close(closed); m.Close() }()
		<-reached
		err := m.DeleteFor(context.Background(), s.ID())
		release()
		<-closed
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "next start") {
			t.Fatalf("a delete as the shutdown tears the session down: %v, want unavailable, kept", err)
		}
		deleteAgain(t, m, s.ID(), err)
		m2 := restarted(t, cfg)
		if l := m2.List(); len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused {
			t.Fatalf("kept, as the delete said: listed %+v", l)
		}
		if err := m2.DeleteFor(context.Background(), s.ID()); err != nil {
			t.Fatal(err)
		}
		noneListed(t, m2, "deleted after the restart")
	})

	t.Run("ended by the shutdown as the delete begins", func(t *testing.T) {
		cfg := persistConfig(t)
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, smallFiles)
		sealed(t, s)
		m.imageFault = func(string) error { return fmt.Errorf("%w: the disk failed (a test's fault)", errdefs.ErrUnavailable) }
		found, release := make(chan struct{}), make(chan struct{})
		m.hook = func(point, _ string) {
			if point == "deleting" {
				close(found)
				<-release
			}
		}
		deleted := make(chan error, 1)
		go func() { deleted <- m.DeleteFor(context.Background(), s.ID()) }()
		<-found
		closed := make(chan struct{})
		go func() { defer close(closed); m.Close() }()
		if end := ended(t, s); end.Code != apitype.EndShutdown {
			t.Fatalf("ended %+v, want shutdown (its pause failed)", end)
		}
		close(release)
		err := <-deleted
		<-closed
		m.hook = nil
		if err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatal(err)
		}
		deleteAgain(t, m, s.ID(), err)
		l := restarted(t, cfg).List()
		if err == nil && len(l) != 0 {
			t.Fatalf("deleted (the delete said), back after the restart: %+v", l)
		}
		if err != nil && (len(l) != 1 || l[0].State != apitype.StatePaused) {
			t.Fatalf("kept (the delete said %v), after the restart: %+v", err, l)
		}
	})

	t.Run("at once", func(t *testing.T) {
		for round := range 40 {
			cfg := persistConfig(t)
			m, _, _ := newTestManager(t, cfg)
			s := create(t, m, "python")
			writeFiles(t, s, smallFiles)
			sealed(t, s)
			// The shutdown's pause fails: it ends the session, keeping
			// its point, as the delete ends it.
			m.imageFault = func(string) error { return fmt.Errorf("%w: the disk failed (a test's fault)", errdefs.ErrUnavailable) }
			go m.Close()
			err := m.DeleteFor(context.Background(), s.ID())
			if err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("round %d: %v", round, err)
			}
			m.Close()
			deleteAgain(t, m, s.ID(), err)
			l := restarted(t, cfg).List()
			if err == nil && len(l) != 0 {
				t.Fatalf("round %d: deleted (the delete said), back after the restart: %+v", round, l)
			}
			if err != nil && (len(l) != 1 || l[0].State != apitype.StatePaused) {
				t.Fatalf("round %d: kept (the delete said %v), after the restart: %+v", round, err, l)
			}
		}
	})
}

// TestEndUnlessPausedKeptAtShutdown: a caller that found the session
// live (E2B's sandbox timer) and ends it after this server's shutdown
// ended it keeping its recovery point is told it did not end for good:
// the next start lists it paused, and the caller's record of it (an E2B
// sandbox's) must stay. One it ends itself has ended for good.
// Checked against a mutant: EndUnlessPaused telling only a pause apart
// (as before) reported the kept session ended, and E2B's timer dropped
// its sandbox's record.
func TestEndUnlessPausedKeptAtShutdown(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	other := create(t, m, "python")
	writeFiles(t, s, smallFiles)
	sealed(t, s)
	if !other.EndUnlessPaused(apitype.Ended(apitype.EndDeleted)) {
		t.Fatal("a session ended by its caller: not ended for good")
	}
	// The shutdown's pause fails: it ends the session keeping its point,
	// after the caller found it live (s, held) and before it ends it.
	m.imageFault = func(string) error { return fmt.Errorf("%w: the disk failed (a test's fault)", errdefs.ErrUnavailable) }
	m.Close()
	if end := ended(t, s); end.Code != apitype.EndShutdown {
		t.Fatalf("ended %+v, want shutdown (its pause failed)", end)
	}
	if s.EndUnlessPaused(apitype.Ended(apitype.EndDeleted)) {
		t.Error("a session the shutdown kept: reported ended for good")
	}
	if l := restarted(t, cfg).List(); len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused {
		t.Fatalf("kept, after the restart: %+v", l)
	}
}
