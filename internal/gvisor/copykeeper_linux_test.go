package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
	gone, err := SweepKeepers(dir, map[string]bool{"aa": true})
	if err != nil || !slices.Equal(gone, []string{"bb"}) {
		t.Errorf("swept %v %v, want [bb]", gone, err)
	}
	for name := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if want := name == keeperPrefix+"bb" || name == ".tmp-1"; want != os.IsNotExist(err) {
			t.Errorf("%s: removed %v, want %v", name, os.IsNotExist(err), want)
		}
	}
	if gone, err := SweepKeepers(filepath.Join(dir, "none"), nil); err != nil || gone != nil {
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
