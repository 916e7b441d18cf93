package gvisor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/privdir"
	"airlock/internal/testenv"
)

// The keeper's copy is named by its content: a build of the same size
// and modification time as an earlier one (a build system fixing the
// times) gets its own copy, never the earlier build's; a copy whose
// content is no longer its name's (a flipped bit on disk) is made again.
// checked against a mutant: named by size and time again, the second
// build got the first's copy; a copy found by its name alone was bound
// damaged.
func TestCopyKeeperByContent(t *testing.T) {
	dir, src := t.TempDir(), filepath.Join(t.TempDir(), "airlock")
	stamp := time.Unix(1, 0)
	build := func(content string) string {
		t.Helper()
		if err := os.WriteFile(src, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(src, stamp, stamp); err != nil {
			t.Fatal(err)
		}
		dst, digest, err := copyKeeper(dir, src)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(dst) != keeperPrefix+digest {
			t.Errorf("the copy %s is not named by its digest %s", dst, digest)
		}
		if got, err := os.ReadFile(dst); err != nil || string(got) != content {
			t.Errorf("the copy of %q holds %q: %v", content, got, err)
		}
		return dst
	}
	first := build("build one")
	second := build("build two")
	if first == second {
		t.Errorf("two builds share the copy %s", first)
	}
	if again := build("build one"); again != first {
		t.Errorf("the first build again: %s, want its copy %s", again, first)
	}
	if err := os.WriteFile(first, []byte("build 0ne"), 0o500); err != nil {
		t.Fatal(err)
	}
	build("build one")
}

// SweepKeepers removes the copies no checkpoint needs and keeps the
// rest: those named in keep, and those used within keeperGrace (a
// server or doctor of their version may be starting sandboxes with
// them). checked against a mutant: a sweep that ignored keep removed a
// copy a paused session needed.
func TestSweepKeepers(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * keeperGrace)
	files := map[string]bool{ // name: old
		keeperPrefix + "aa": true, keeperPrefix + "bb": true, keeperPrefix + "cc": false,
		".tmp-1": true, ".tmp-2": false, "other": true,
	}
	for name, isOld := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o500); err != nil {
			t.Fatal(err)
		}
		if isOld {
			os.Chtimes(p, old, old)
		}
	}
	gone, later, err := SweepKeepers(dir, map[string]bool{"aa": true})
	if err != nil || !slices.Equal(gone, []string{"bb"}) {
		t.Errorf("swept %v %v, want [bb]", gone, err)
	}
	// The next sweep is due when the first grace of what was left for
	// it alone ends: the young copy's or the young crash remains' (their
	// order of writing is the map's: either may be first).
	var due time.Time
	for _, name := range []string{keeperPrefix + "cc", ".tmp-2"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if d := st.ModTime().Add(keeperGrace); due.IsZero() || d.Before(due) {
			due = d
		}
	}
	if !later.Equal(due) {
		t.Errorf("next sweep due %v, want the first grace's end %v", later, due)
	}
	for name := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if want := name == keeperPrefix+"bb" || name == ".tmp-1"; want != os.IsNotExist(err) {
			t.Errorf("%s: removed %v, want %v", name, os.IsNotExist(err), want)
		}
	}
	if gone, _, err := SweepKeepers(filepath.Join(dir, "none"), nil); err != nil || gone != nil {
		t.Errorf("a missing directory: %v %v", gone, err)
	}
}

// keeperFor names only a regular file in the keeper directory, by a
// well-formed digest: what a memory description says is never a path
// (no traversal out of the directory, no symlink followed), and a copy
// that is not there is ErrKeeperGone. checked against mutants: without
// the hex check, a digest of "../" reached a file outside; with Stat for
// Lstat, a symlink named as a copy was bound.
func TestKeeperForNamesOnlyCopies(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "keepers")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	good := strings.Repeat("ab", 32)
	linked := strings.Repeat("cd", 32)
	// A file outside whose name a traversal of the same length reaches.
	escape := "/../../" + strings.Repeat("e", 57)
	for name, target := range map[string]string{keeperPrefix + good: "", keeperPrefix + linked: filepath.Join(root, "elsewhere")} {
		if target != "" {
			os.WriteFile(target, []byte("x"), 0o500)
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o500); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, strings.Repeat("e", 57)), []byte("x"), 0o500); err != nil {
		t.Fatal(err)
	}
	h := &Host{keeperDir: dir}
	if p, err := h.keeperFor(good); err != nil || p != filepath.Join(dir, keeperPrefix+good) {
		t.Errorf("a copy that is there: %q %v", p, err)
	}
	for _, d := range []string{"", escape, strings.ToUpper(good), good[:63], linked, strings.Repeat("01", 32)} {
		if p, err := h.keeperFor(d); !errors.Is(err, ErrKeeperGone) {
			t.Errorf("digest %q: %q %v, want ErrKeeperGone", d, p, err)
		}
	}
}

// A keeper copy, or its directory, that another user could write is
// never bound (package privdir): the restore is refused with the copy
// named (errdefs.ErrImageCorrupt: kept for inspection), and falls back
// to the files; a copy group-writable by the server's own group (what
// kubelet's fsGroup makes of a volume's files) is bound. copyKeeper
// makes such a copy of its own keeper again, and refuses a directory
// another user could write. checked against mutants: keeperFor without
// the ownership check (a copy of another uid's was bound), copyKeeper
// touching a sound copy of another owner instead of replacing it.
func TestKeeperCopiesAreTheServers(t *testing.T) {
	testenv.RequireRoot(t, "copies of other owners")
	const other = 54321
	dir := filepath.Join(t.TempDir(), "keepers")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// kubelet's fsGroup layout: a setgid directory of the server's group.
	if err := os.Chmod(dir, 0o700|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	h := &Host{keeperDir: dir}
	copyOf := func(content string, uid int, mode os.FileMode) string {
		t.Helper()
		sum := sha256.Sum256([]byte(content))
		digest := hex.EncodeToString(sum[:])
		p := filepath.Join(dir, keeperPrefix+digest)
		if err := os.WriteFile(p, []byte(content), 0o500); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, os.Getegid()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return digest
	}
	for _, c := range []struct {
		name    string
		uid     int
		mode    os.FileMode
		trusted bool
	}{
		{"the server's", os.Geteuid(), 0o500, true},
		{"fsGroup's", os.Geteuid(), 0o760, true},
		{"another user's", other, 0o500, false},
		{"every user's", os.Geteuid(), 0o502, false},
	} {
		digest := copyOf(c.name, c.uid, c.mode)
		p, err := h.keeperFor(digest)
		if c.trusted {
			if err != nil {
				t.Errorf("%s copy: %v", c.name, err)
			}
			continue
		}
		var ke *KeeperError
		if !errors.As(err, &ke) || ke.Copy != filepath.Join(dir, keeperPrefix+digest) || !errors.Is(err, errdefs.ErrImageCorrupt) || !errors.Is(err, ErrKeeperGone) {
			t.Errorf("%s copy: %q %v, want refused, the copy named", c.name, p, err)
		}
		if strings.Contains(errdefs.Message(err), dir) {
			t.Errorf("the client's reason names a host path: %s", errdefs.Message(err))
		}
	}
	// The directory: writable by every user, nothing in it is bound.
	good := copyOf("good", os.Geteuid(), 0o500)
	os.Chmod(dir, 0o777)
	if _, err := h.keeperFor(good); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("a copy in a world-writable directory: %v", err)
	}
	if err := CheckKeepers(dir); !errors.Is(err, privdir.ErrNotPrivate) {
		t.Errorf("CheckKeepers on a world-writable directory: %v", err)
	}
	src := filepath.Join(t.TempDir(), "airlock")
	os.WriteFile(src, []byte("build"), 0o755)
	if _, _, err := copyKeeper(dir, src); !errors.Is(err, privdir.ErrNotPrivate) {
		t.Errorf("copyKeeper into a world-writable directory: %v", err)
	}
	os.Chmod(dir, 0o700)
	if err := CheckKeepers(dir); !errors.Is(err, privdir.ErrNotPrivate) {
		t.Errorf("CheckKeepers with another user's copy: %v", err)
	}

	// The server's own keeper, found as another user's copy: made again.
	sum := sha256.Sum256([]byte("build"))
	planted := filepath.Join(dir, keeperPrefix+hex.EncodeToString(sum[:]))
	os.WriteFile(planted, []byte("build"), 0o500)
	os.Chown(planted, other, other)
	dst, _, err := copyKeeper(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := privdir.File(dst); err != nil {
		t.Errorf("the server's copy, after copyKeeper: %v", err)
	}
}

// The keepers in use are the host's own and every live sandbox's, as
// long as one is bound to it. checked against a mutant: bind never
// counting (a restored sandbox's copy was not in use).
func TestKeepersInUse(t *testing.T) {
	h := &Host{keeperDigest: "own"}
	h.bind("old", 1)
	h.bind("old", 1)
	h.bind("older", 1)
	h.bind("older", -1)
	if got := h.KeepersInUse(); !reflect.DeepEqual(got, map[string]bool{"own": true, "old": true}) {
		t.Errorf("in use %v", got)
	}
	h.bind("old", -1)
	h.bind("old", -1)
	if got := h.KeepersInUse(); !reflect.DeepEqual(got, map[string]bool{"own": true}) {
		t.Errorf("in use once closed %v", got)
	}
}
