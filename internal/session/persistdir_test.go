package session

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"airlock/internal/errdefs"
	"airlock/internal/privdir"
	"airlock/internal/testenv"
)

// persistence.dir is the server's own or nothing is kept there: a
// server does not start on one another user could write (another
// owner, every user's write bit), and a pause refuses (503, the session
// keeps running, nothing written) once it has become one; a directory
// group-writable by the server's own group (Kubernetes' fsGroup) is
// taken, and narrowed to 0700. checked against mutants: LoadPaused
// without the check (started on a world-writable directory), the
// pause's check removed (an image written into it).
func TestPersistenceDirIsTheServers(t *testing.T) {
	testenv.RequireRoot(t, "a directory of another owner")
	cfg := persistConfig(t)
	dir := cfg.Persistence.Dir
	m, _, _ := newTestManager(t, cfg)
	for _, c := range []struct {
		name     string
		uid, gid int
		mode     os.FileMode
	}{
		{"every user's", os.Geteuid(), os.Getegid(), 0o777},
		{"another owner's", 54321, os.Getegid(), 0o700},
		{"another group's", os.Geteuid(), 54321, 0o770},
	} {
		os.Chown(dir, c.uid, c.gid)
		os.Chmod(dir, c.mode)
		if err := m.LoadPaused(); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), privdir.ErrNotPrivate.Error()) {
			t.Errorf("%s persistence.dir: started (%v)", c.name, err)
		}
	}
	os.Chown(dir, os.Geteuid(), os.Getegid())
	os.Chmod(dir, 0o770|os.ModeSetgid)
	if err := m.LoadPaused(); err != nil {
		t.Fatalf("an fsGroup's persistence.dir: %v", err)
	}
	if st, _ := os.Lstat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("persistence.dir left %v, want 0700", st.Mode())
	}

	s := create(t, m, "python")
	writeFiles(t, s, someFiles)
	os.Chmod(dir, 0o777)
	if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), privdir.ErrNotPrivate.Error()) {
		t.Errorf("a pause into a world-writable persistence.dir: %v", err)
	}
	if !s.End().Zero() {
		t.Errorf("the session ended: %v", s.End())
	}
	if ents, _ := persisted(dir); len(ents) != 0 {
		t.Errorf("written into it: %v", ents)
	}
	os.Chmod(dir, 0o700)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Errorf("the pause once the directory is mended: %v", err)
	}
}
