package fontcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/jail/jailtest"
	"airlock/internal/testenv"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { jail.RunTests(m) }

// On a host with no font list (a fresh machine, where only the tests run
// and never `airlock doctor`), Ensure builds one from inside a jail,
// keeps only the font list, and a second call reuses it.
func TestEnsureBuildsOnce(t *testing.T) {
	testenv.RequireRoot(t, "building the font list in a jail")
	cfg := config.Default()
	if _, err := os.Stat(cfg.Runtimes.Python); err != nil {
		testenv.Skip(t, "%s missing: run scripts/install-deps.sh", cfg.Runtimes.Python)
	}
	h, cfg := jailtest.Host(t, "fontcache", func(c *config.Config) { c.CacheDir = t.TempDir() })
	built, err := Ensure(t.Context(), h, cfg)
	if err != nil || !built {
		t.Fatalf("first Ensure: built %v, %v", built, err)
	}
	ents, err := os.ReadDir(Dir(cfg))
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
	if built, err := Ensure(t.Context(), h, cfg); err != nil || built {
		t.Fatalf("second Ensure: built %v, %v", built, err)
	}
}
