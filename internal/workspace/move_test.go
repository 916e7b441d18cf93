package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"airlock/internal/errdefs"
)

// TestMoveFrom: a file moves from beneath one host directory to beneath
// another, its parents made, replacing a file; a parent on the way that
// is a symlink (out of the root) is refused, nothing moved through it.
// Checked against a mutant: the target's parents resolved without
// RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH.
func TestMoveFrom(t *testing.T) {
	a, b, out := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(a, "f"), []byte("one"), 0o600)
	os.WriteFile(filepath.Join(a, "g"), []byte("two"), 0o600)
	os.MkdirAll(filepath.Join(b, "x"), 0o755)
	os.WriteFile(filepath.Join(b, "x", "y"), []byte("old"), 0o600)
	os.Symlink(out, filepath.Join(b, "link"))
	src, err := OpenOut(a)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := OpenOut(b)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.MoveFrom(src, "f", "x/y"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b, "x", "y")); string(got) != "one" {
		t.Errorf("x/y holds %q", got)
	}
	if err := dst.MoveFrom(src, "g", "new/deep/z"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b, "new", "deep", "z")); string(got) != "two" {
		t.Errorf("new/deep/z holds %q", got)
	}
	os.WriteFile(filepath.Join(a, "h"), []byte("three"), 0o600)
	if err := dst.MoveFrom(src, "h", "link/escaped"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("through a symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "escaped")); err == nil {
		t.Error("moved through the symlink, out of the root")
	}
	if err := dst.Fsync("", "x/y", "new/deep"); err != nil {
		t.Error(err)
	}
}

// TestSnapshotSame: Same tells an unchanged workspace from one with a
// file changed, added or removed, and never calls a truncated or
// unlisted snapshot the same.
func TestSnapshotSame(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("1"), 0o600)
	d, err := OpenOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s1 := TakeSnapshot(d)
	if !s1.Same(TakeSnapshot(d)) {
		t.Error("an unchanged workspace is not the same")
	}
	os.WriteFile(filepath.Join(dir, "b"), []byte("2"), 0o600)
	s2 := TakeSnapshot(d)
	if s1.Same(s2) || s2.Same(s1) {
		t.Error("a file added is the same")
	}
	os.WriteFile(filepath.Join(dir, "a"), []byte("longer"), 0o600)
	if s2.Same(TakeSnapshot(d)) {
		t.Error("a file changed is the same")
	}
	if (Snapshot{}).Same(Snapshot{}) || SnapshotOf(nil, true).Same(SnapshotOf(nil, true)) {
		t.Error("an unlisted or truncated snapshot is the same")
	}
}
