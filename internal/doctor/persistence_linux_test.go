package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/testenv"
)

// Doctor says why a server would refuse persistence.dir, or not bind a
// keeper copy: a directory every user may write, one above it every
// user may write (named, with the chmod that mends it, even before
// persistence.dir is made), a copy of another user's. checked against
// mutants: persistenceChecks reporting OK without the checks, privdir's
// walk not checking the directories above (the parent passed).
func TestDoctorPersistence(t *testing.T) {
	testenv.RequireRoot(t, "a keeper copy of another owner")
	cfg := config.Default()
	cfg.Persistence.Enabled = true
	cfg.Persistence.Dir = filepath.Join(t.TempDir(), "sessions")
	status := func() Check {
		r := &Report{}
		persistenceChecks(r, cfg)
		if len(r.Checks) != 1 {
			t.Fatalf("checks %+v", r.Checks)
		}
		return r.Checks[0]
	}
	if c := status(); c.Status != OK {
		t.Errorf("no persistence.dir yet: %+v", c)
	}
	parent := filepath.Dir(cfg.Persistence.Dir)
	os.Chmod(parent, 0o777)
	if c := status(); c.Status != Fail || !strings.Contains(c.Detail, parent+" above it") || !strings.Contains(c.Detail, "chmod o-w "+parent) {
		t.Errorf("no persistence.dir yet, its parent every user's: %+v", c)
	}
	os.Chmod(parent, 0o700)
	os.Mkdir(cfg.Persistence.Dir, 0o777)
	os.Chmod(cfg.Persistence.Dir, 0o777)
	if c := status(); c.Status != Fail || !strings.Contains(c.Detail, "every user may write it") {
		t.Errorf("a world-writable persistence.dir: %+v", c)
	}
	os.Chmod(cfg.Persistence.Dir, 0o700)
	keepers := filepath.Join(cfg.Persistence.Dir, ".gvisor-keepers")
	os.Mkdir(keepers, 0o700)
	copyPath := filepath.Join(keepers, "keeper-"+strings.Repeat("ab", 32))
	os.WriteFile(copyPath, []byte("x"), 0o500)
	if c := status(); c.Status != OK {
		t.Errorf("the server's own: %+v", c)
	}
	os.Chown(copyPath, 54321, 54321)
	if c := status(); c.Status != Fail || !strings.Contains(c.Detail, "belongs to uid 54321") {
		t.Errorf("another user's keeper copy: %+v", c)
	}
}

// TestDoctorPersistenceOffLeftovers: with persistence off, doctor says
// nothing of a persistence.dir that holds nothing, and warns of one
// that holds paused sessions, recovery points and kept images from an
// earlier run (the server leaves them untouched), with their counts.
// Checked against a mutant: persistenceChecks returning at once with
// persistence off, as before.
func TestDoctorPersistenceOffLeftovers(t *testing.T) {
	cfg := config.Default()
	cfg.Persistence.Dir = filepath.Join(t.TempDir(), "sessions")
	checks := func() []Check {
		r := &Report{}
		persistenceChecks(r, cfg)
		return r.Checks
	}
	if c := checks(); len(c) != 0 {
		t.Errorf("nothing left: %+v", c)
	}
	for _, d := range []string{"s-1", "s-2", ".live-s-3", ".kept-point-s-4-20260101T000000.000Z", ".gvisor-keepers", ".tmp-rm-x"} {
		os.MkdirAll(filepath.Join(cfg.Persistence.Dir, d), 0o700)
	}
	c := checks()
	if len(c) != 1 || c[0].Status != Warn || !strings.Contains(c[0].Detail, "persistence is off, but "+cfg.Persistence.Dir+" holds 2 paused sessions, 1 recovery points of live sessions and 1 images kept for inspection") {
		t.Errorf("leftovers: %+v", c)
	}
}
