package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/testenv"
)

// A directory or file another user could write is refused: another
// owner, every user's write bit, a group's write bit outside the
// fsGroup layout, a symlink, the wrong type. Kubernetes' fsGroup layout
// (kubelet makes a volume's directories setgid and group-writable, and
// its files group-writable) may be written by that group when the
// server is in it: a setgid directory of the server's group, and a file
// of that group in one; a group-writable file in a plain directory, or
// a directory without the setgid bit, is refused even for the server's
// own group (on a plain host that may be every user's, as `users`).
// Ensure then narrows the directory to its mode, the setgid bit kept.
// checked against mutants: the owner check removed (another uid's
// directory passed), the group exception widened to every group (a
// foreign group's passed), the group exception for any group of the
// server's (the plain directory's group-writable file and the
// directory without setgid passed), Lstat for Stat (a symlink to a good
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
	inFSGroup := func(name string, mode os.FileMode, gid int) string {
		t.Helper()
		p := filepath.Join(fsGroup, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, me, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
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
		{mk("world-sticky", true, 0o777|os.ModeSticky, me, mine), true, false},
		{mk("other-group", true, 0o770, me, other), true, false},
		{mk("other-group-ro", true, 0o750, me, other), true, true},
		{mk("own-group-no-setgid", true, 0o770, me, mine), true, false},
		{mk("other-group-setgid", true, 0o770|os.ModeSetgid, me, other), true, false},
		{mk("file", false, 0o500, me, mine), false, true},
		{mk("file-own-group-plain-dir", false, 0o760, me, mine), false, false},
		{inFSGroup("file-fsgroup", 0o760, mine), false, true},
		{inFSGroup("file-fsgroup-other-group", 0o760, other), false, false},
		{inFSGroup("file-fsgroup-world", 0o762, mine), false, false},
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
	if st, _ := os.Lstat(fsGroup); st.Mode().Perm() != 0o700 || st.Mode()&os.ModeSetgid == 0 {
		t.Errorf("an fsGroup directory left %v, want narrowed to 0700, setgid kept", st.Mode())
	}
	if _, err := File(filepath.Join(fsGroup, "file-fsgroup")); err != nil {
		t.Errorf("the fsGroup's file once its directory is narrowed: %v", err)
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
	afterCheck = func(string) {
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

// Every directory on the way to a private one, up to /, is checked: one
// another user owns, or every user (or a group outside the fsGroup
// layout) may write, could have its entries renamed away and replaced
// after any check, and is refused, named with the chown or chmod that
// mends it, by Ensure (which then makes nothing below it), Dir and File.
// A sticky directory (as /tmp) is accepted, since what is in it on the
// way must be root's or the server's; so is a setgid directory of the
// server's group (Kubernetes' fsGroup). A symlink on the way is followed
// only when root's or the server's. checked against mutants: the owner
// check of ancestors removed, the every-user check removed, sticky
// ignored (every sticky directory refused), the group check widened to
// any group of the server's without setgid, the symlink's owner not
// checked, symlinks followed by the kernel (no O_NOFOLLOW: the
// symlink's owner unseen).
func TestAncestors(t *testing.T) {
	testenv.RequireRoot(t, "directories of other owners and groups")
	const other = 54321
	me, mine := os.Geteuid(), os.Getegid()
	for _, c := range []struct {
		name     string
		mode     os.FileMode
		uid, gid int
		ok       bool
		says     string
	}{
		{"plain", 0o755, me, mine, true, ""},
		{"roots", 0o755, 0, 0, true, ""},
		{"another owner's", 0o755, other, mine, false, "belongs to uid 54321"},
		{"every user's", 0o777, me, mine, false, "chmod o-w"},
		{"sticky", 0o777 | os.ModeSticky, me, mine, true, ""},
		{"another owner's sticky", 0o777 | os.ModeSticky, other, mine, false, "belongs to uid 54321"},
		{"own group's", 0o775, me, mine, false, "chmod g-w"},
		{"fsGroup's", 0o775 | os.ModeSetgid, me, mine, true, ""},
		{"another group's setgid", 0o775 | os.ModeSetgid, me, other, false, "chmod g-w"},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := filepath.Join(t.TempDir(), "top")
			if err := os.Mkdir(top, 0o700); err != nil {
				t.Fatal(err)
			}
			leaf := filepath.Join(top, "leaf")
			if err := os.Mkdir(leaf, 0o700); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(leaf, "file")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(top, c.uid, c.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(top, c.mode); err != nil {
				t.Fatal(err)
			}
			_, derr := Dir(leaf)
			_, ferr := File(file)
			eerr := Ensure(filepath.Join(top, "made", "below"), 0o700)
			for what, err := range map[string]error{"Dir": derr, "File": ferr, "Ensure": eerr} {
				if c.ok && err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if !c.ok && (!errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), top+" above it") || !strings.Contains(err.Error(), c.says)) {
					t.Errorf("%s: %v, want refused naming %s and %q", what, err, top, c.says)
				}
			}
			if _, err := os.Lstat(filepath.Join(top, "made")); !c.ok && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Ensure made a directory below a refused one: %v", err)
			}
		})
	}

	// In a sticky directory, a directory on the way of another owner's is
	// refused (they could rename it away).
	sticky := t.TempDir()
	os.Chmod(sticky, 0o777|os.ModeSticky)
	theirs := filepath.Join(sticky, "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, other, other)
	if err := Ensure(filepath.Join(theirs, "dir"), 0o700); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "belongs to uid 54321") {
		t.Errorf("a directory of another owner's in a sticky one: %v", err)
	}

	// Symlinks on the way: followed when root's or the server's.
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.MkdirAll(filepath.Join(real, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	mine1, theirs1 := filepath.Join(root, "mine"), filepath.Join(root, "theirs")
	os.Symlink("real", mine1)
	os.Symlink(real, theirs1)
	if err := os.Lchown(theirs1, other, other); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(filepath.Join(mine1, "dir")); err != nil {
		t.Errorf("through a symlink of the server's: %v", err)
	}
	if err := Ensure(filepath.Join(mine1, "..", "mine", "dir", "sub"), 0o700); err != nil {
		t.Errorf("through a symlink of the server's and ..: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "dir", "sub")); err != nil {
		t.Errorf("made through the symlink: %v", err)
	}
	if _, err := Dir(filepath.Join(theirs1, "dir")); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "the symlink "+theirs1) {
		t.Errorf("through a symlink of another user's: %v", err)
	}
}

// The way is walked on descriptors: a directory on it renamed away and
// replaced (here by a symlink to another directory) after it was
// checked changes nothing of what the walk reaches: Ensure makes and
// narrows the directory below the one it checked. checked against a
// mutant: Ensure opening its directory by path after the walk (the
// swapped-in symlink's target got the directory).
func TestWalkNeverFollowsASwap(t *testing.T) {
	root := t.TempDir()
	a, victim := filepath.Join(root, "a"), filepath.Join(root, "victim")
	for _, d := range []string{a, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	afterAncestor = func(at string) {
		if at != a {
			return
		}
		if err := os.Rename(a, a+".old"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victim, a); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterAncestor = nil }()
	if err := Ensure(filepath.Join(a, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(victim, "dir")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made in the swapped-in symlink's target: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(a+".old", "dir")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the directory below the one checked: %v %v", st, err)
	}
}
