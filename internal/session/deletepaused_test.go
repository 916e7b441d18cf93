package session

import (
	"context"
	"errors"
	"testing"

	"airlock/internal/errdefs"
)

// TestDeletePausedOnly: a delete only if paused (the MCP sweep of the
// sessions of the last run no connection named) deletes a paused
// session, refuses a live one (resumed in between) with 409, which runs
// on, and is done for one ended already. checked against a mutant: with
// a live session deleted as DeleteFor does, the resumed session ended.
func TestDeletePausedOnly(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	ctx := context.Background()
	s := create(t, m, "python")
	writeFiles(t, s, someFiles)
	if _, err := s.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	r, err := m.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeletePausedFor(ctx, r.ID()); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a paused-only delete of a live session: %v, want conflict", err)
	}
	if !r.End().Zero() {
		t.Fatalf("the live session ended: %+v", r.End())
	}
	checkFiles(t, r, someFiles)
	if _, err := r.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.DeletePausedFor(ctx, r.ID()); err != nil {
		t.Fatalf("a paused-only delete of a paused session: %v", err)
	}
	if l := m.List(); len(l) != 0 {
		t.Errorf("listed after the delete: %+v", l)
	}
	if err := m.DeletePausedFor(ctx, r.ID()); err != nil {
		t.Errorf("a paused-only delete of a deleted session: %v", err)
	}
}
