package workspace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/errdefs"
)

// A host directory that files are copied out into is written with a
// workspace's care: nested directories are made beneath it, a symlink in
// it is replaced rather than followed, a symlinked directory is not gone
// through, and errors name the host path, not /workspace.
func TestOpenOut(t *testing.T) {
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	os.WriteFile(target, []byte("host"), 0o644)
	dir := filepath.Join(t.TempDir(), "out")
	d, err := OpenOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	os.Symlink(target, filepath.Join(dir, "victim"))
	os.Symlink(outside, filepath.Join(dir, "link"))
	for rel, data := range map[string]string{"a/b/c.txt": "nested", "victim": "replaced"} {
		if _, err := d.Write(rel, strings.NewReader(data), 1<<20, 0o644); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		st, err := os.Lstat(filepath.Join(dir, rel))
		if b, _ := os.ReadFile(filepath.Join(dir, rel)); err != nil || !st.Mode().IsRegular() || string(b) != data {
			t.Errorf("%s: %v %v %q", rel, st, err, b)
		}
	}
	_, err = d.Write("link/x", bytes.NewReader([]byte("x")), 1<<20, 0o644)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), filepath.Join(dir, "link")) || strings.Contains(err.Error(), "/workspace") {
		t.Errorf("through a symlinked directory: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "host" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("written beneath the symlinked directory: %v", ents)
	}
	if _, err := OpenOut(target); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a file as the directory: %v", err)
	}
}

// OpenOutBeneath refuses a parent that is a symlink (to a host
// directory holding rel), never following it. Checked against a mutant:
// the parent opened without O_NOFOLLOW (as before) opened the host
// directory's rel.
func TestOpenOutBeneathParentSymlink(t *testing.T) {
	host := t.TempDir()
	if err := os.Mkdir(filepath.Join(host, "tree"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "point")
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	d, err := OpenOutBeneath(link, "tree")
	if err == nil {
		d.Close()
		t.Fatal("a symlinked parent was followed")
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("refused with %v, want invalid (not a directory: a symlink)", err)
	}
	d, err = OpenOutBeneath(host, "tree")
	if err != nil {
		t.Fatalf("a real parent: %v", err)
	}
	d.Close()
}
