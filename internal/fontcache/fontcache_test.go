package fontcache_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/fontcache"
	"airlock/internal/server"
	"airlock/internal/testenv"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { server.MainIfInit(); os.Exit(m.Run()) }

// On a host with no font list (a fresh machine, where only the tests run
// and never `airlock doctor`), Ensure builds one from inside a jail, on
// the one-shot path, keeps only the font list, and a second call reuses
// it.
func TestEnsureBuildsOnce(t *testing.T) {
	testenv.RequireRoot(t, "building the font list in a jail")
	cfg := config.Default()
	if _, err := os.Stat(cfg.Runtimes.Python); err != nil {
		testenv.Skip(t, "%s missing: run scripts/install-deps.sh", cfg.Runtimes.Python)
	}
	cfg.StateDir, cfg.CgroupParent, cfg.CacheDir = "/run/airlock-fontcache-test", "airlock-fontcache-test", t.TempDir()
	t.Cleanup(func() { os.RemoveAll(cfg.StateDir) })
	l, err := server.NewLocal(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	built, err := l.FontCache(t.Context())
	if err != nil || !built {
		t.Fatalf("first Ensure: built %v, %v", built, err)
	}
	ents, err := os.ReadDir(fontcache.Dir(cfg))
	if err != nil || len(ents) == 0 {
		t.Fatalf("cache dir: %v %v", ents, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "fontlist") {
			t.Errorf("unexpected %s in the cache", e.Name())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cfg.CacheDir, ".*")); len(left) != 0 {
		t.Errorf("temporary directories left: %v", left)
	}
	if built, err := l.FontCache(t.Context()); err != nil || built {
		t.Fatalf("second Ensure: built %v, %v", built, err)
	}
}

// What comes back from the sandbox is only regular fontlist* files of
// mpl/ that look like JSON; a host without matplotlib has nothing to
// build, and that is not an error.
func TestEnsureKeepsOnlyTheFontList(t *testing.T) {
	cfg := config.Default()
	cfg.Runtimes.Python = "/proc/self/exe" // exists
	files := map[string]string{
		"mpl/fontlist-v390.json": `{"fonts": []}`,
		"mpl/fontlist-v1.txt":    "not JSON",
		"mpl/other.json":         "{}",
		"fontlist-v2.json":       "{}",
		"mpl/sub/fontlist.json":  "{}",
	}
	run := func(ctx context.Context, req apitype.ProgramRequest, sink func(string, func() (io.ReadCloser, error))) (*apitype.OneShotResult, error) {
		if req.Language != apitype.Python || req.Limits != fontcache.Limits {
			t.Errorf("request %+v", req)
		}
		for name, data := range files {
			sink(name, func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(data)), nil })
		}
		return &apitype.OneShotResult{Result: &apitype.Result{}}, nil
	}
	cfg.CacheDir = t.TempDir()
	dir, built, err := fontcache.Ensure(t.Context(), cfg, run)
	if err != nil || !built || dir != fontcache.Dir(cfg) {
		t.Fatalf("Ensure: %q %v %v", dir, built, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "fontlist-v390.json" {
		t.Errorf("cached %v", ents)
	}

	cfg.CacheDir = t.TempDir()
	noMPL := func(context.Context, apitype.ProgramRequest, func(string, func() (io.ReadCloser, error))) (*apitype.OneShotResult, error) {
		return &apitype.OneShotResult{Result: &apitype.Result{ExitCode: 1, Stderr: "ModuleNotFoundError: No module named 'matplotlib'\n"}}, nil
	}
	if dir, built, err := fontcache.Ensure(t.Context(), cfg, noMPL); dir != "" || built || err != nil {
		t.Errorf("without matplotlib: %q %v %v", dir, built, err)
	}
	crash := func(context.Context, apitype.ProgramRequest, func(string, func() (io.ReadCloser, error))) (*apitype.OneShotResult, error) {
		return &apitype.OneShotResult{Result: &apitype.Result{ExitCode: 1, Stderr: "boom\nSegfault"}}, nil
	}
	if _, _, err := fontcache.Ensure(t.Context(), cfg, crash); err == nil || !strings.Contains(err.Error(), "Segfault") {
		t.Errorf("a crash: %v", err)
	}
}
