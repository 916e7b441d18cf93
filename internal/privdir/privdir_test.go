package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"airlock/internal/testenv"
)

// A directory or file another user could write is refused: another
// owner, every user's write bit, a group's write bit for a group the
// server is not in, a symlink, the wrong type. A group the server is in
// (Kubernetes' fsGroup: kubelet makes a volume's files group-writable
// at mount) may write; Ensure then narrows the directory to its mode.
// checked against mutants: the owner check removed (another uid's
// directory passed), the group exception widened to every group (a
// foreign group's passed), Lstat for Stat (a symlink to a good
// directory passed), no narrowing (the fsGroup's bits stayed).
func TestPrivate(t *testing.T) {
	testenv.RequireRoot(t, "directories of other owners and groups")
	const other = 54321 // a uid and gid nobody here is
	root := t.TempDir()
	mk := func(name string, dir bool, mode os.FileMode, uid, gid int) string {
		t.Helper()
		p := filepath.Join(root, name)
		var err error
		if dir {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, []byte("x"), 0o600)
		}
		if err == nil {
			err = os.Chown(p, uid, gid)
		}
		if err == nil {
			err = os.Chmod(p, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	me, mine := os.Geteuid(), os.Getegid()
	good := mk("good", true, 0o700, me, mine)
	fsGroup := mk("fsgroup", true, 0o770|os.ModeSetgid, me, mine)
	for _, c := range []struct {
		p   string
		dir bool
		ok  bool
	}{
		{good, true, true},
		{fsGroup, true, true},
		{mk("readable", true, 0o755, me, mine), true, true},
		{mk("other-owner", true, 0o700, other, mine), true, false},
		{mk("world", true, 0o777, me, mine), true, false},
		{mk("world-sticky", true, 0o1777, me, mine), true, false},
		{mk("other-group", true, 0o770, me, other), true, false},
		{mk("other-group-ro", true, 0o750, me, other), true, true},
		{mk("file", false, 0o500, me, mine), false, true},
		{mk("file-fsgroup", false, 0o760, me, mine), false, true},
		{mk("file-other-owner", false, 0o500, other, mine), false, false},
		{mk("file-world", false, 0o502, me, mine), false, false},
		{mk("file-other-group", false, 0o520, me, other), false, false},
		{good, false, false}, // a directory where a file is wanted
		{filepath.Join(root, "file"), true, false},
	} {
		var err error
		if c.dir {
			_, err = Dir(c.p)
		} else {
			_, err = File(c.p)
		}
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrNotPrivate) {
			t.Errorf("%s (dir %v): %v, want ok %v", filepath.Base(c.p), c.dir, err, c.ok)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(link); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("a symlink to a good directory: %v", err)
	}
	if err := Ensure(link, 0o700); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Ensure on a symlink: %v", err)
	}

	// Ensure makes what is missing, and narrows a good directory.
	made := filepath.Join(root, "a", "b")
	if err := Ensure(made, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(made); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Errorf("made %v %v", st, err)
	}
	if err := Ensure(fsGroup, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(fsGroup); st.Mode().Perm() != 0o700 {
		t.Errorf("an fsGroup directory left %v, want narrowed to 0700", st.Mode())
	}
	world := filepath.Join(root, "world")
	if err := Ensure(world, 0o700); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Ensure on a world-writable directory: %v", err)
	}
	if st, _ := os.Lstat(world); st.Mode().Perm() != 0o777 {
		t.Errorf("a refused directory was changed: %v", st.Mode())
	}
}

// Ensure checks and narrows one directory, never what a symlink swapped
// in for it between the check and the change points to (whoever may
// write its parent could point it at any directory of the server's
// user's, root's included). checked against a mutant: the change made
// by path (os.Chmod), as before: the symlink's target was narrowed.
func TestEnsureNeverFollowsASwap(t *testing.T) {
	root := t.TempDir()
	dir, victim := filepath.Join(root, "dir"), filepath.Join(root, "victim")
	for _, d := range []string{dir, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	afterCheck = func() {
		if err := os.Rename(dir, dir+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, dir); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { afterCheck = nil }()
	if err := Ensure(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o755 {
		t.Errorf("the swapped-in symlink's target was changed to %v", st.Mode())
	}
	if st, _ := os.Stat(dir + ".old"); st.Mode().Perm() != 0o700 {
		t.Errorf("the directory checked was left %v, want 0700", st.Mode())
	}
}
