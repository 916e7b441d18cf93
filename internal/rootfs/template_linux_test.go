package rootfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPrepareTemplateLoadsFilesOnce: files named by a key are read only
// to make the template, written under Files' (which win on the same
// path); a template found again reads none, and another key (another
// binary) gets a template of its own.
func TestPrepareTemplateLoadsFilesOnce(t *testing.T) {
	dir := t.TempDir()
	loads := 0
	spec := DefaultSpec(filepath.Join(dir, "root"), "test")
	spec.Files = map[string]string{"/opt/a/both.py": "from Files", "/opt/a/own.py": "own"}
	spec.LoadFiles = func() map[string]string {
		loads++
		return map[string]string{"/opt/a/both.py": "embedded", "/opt/a/embedded.py": "embedded"}
	}
	spec.FilesKey = "build one"
	first, err := PrepareTemplate(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"opt/a/both.py": "from Files", "opt/a/own.py": "own", "opt/a/embedded.py": "embedded"} {
		if got, err := os.ReadFile(filepath.Join(first, p)); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	again, err := PrepareTemplate(dir, spec)
	if err != nil || again != first || loads != 1 {
		t.Errorf("again: %s, %v, %d loads; want %s after 1", again, err, loads, first)
	}
	spec.FilesKey = "build two"
	if other, err := PrepareTemplate(dir, spec); err != nil || other == first || loads != 2 {
		t.Errorf("another key: %s, %v, %d loads; want a new template after 2", other, err, loads)
	}
}
