package gvisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The keeper's copy is named by its content: a build of the same size
// and modification time as an earlier one (a build system fixing the
// times) gets its own copy, never the earlier build's. checked against a
// mutant: named by size and time again, the second build got the first's
// copy.
func TestCopyKeeperByContent(t *testing.T) {
	state, src := t.TempDir(), filepath.Join(t.TempDir(), "airlock")
	stamp := time.Unix(1, 0)
	build := func(content string) string {
		t.Helper()
		if err := os.WriteFile(src, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(src, stamp, stamp); err != nil {
			t.Fatal(err)
		}
		dst, err := copyKeeper(state, src)
		if err != nil {
			t.Fatal(err)
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
}
