// Package imagetest owns the template roots the privileged tests of the
// packages above image share: Debian roots built from a recipe with
// debootstrap once per machine (minutes the first time) and cached outside
// the repository, under $AIRLOCK_TEST_TEMPLATE_CACHE or
// ~/.cache/airlock-templates, keyed by the package list; and stores
// holding them as templates.
//
// It must never be imported by anything but tests, and never change a
// cached root (tests share them, read-only).
package imagetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"airlock/internal/image"
	"airlock/internal/testenv"
)

// CacheDir is where the tests' Debian roots are cached.
func CacheDir() string {
	if d := os.Getenv("AIRLOCK_TEST_TEMPLATE_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "airlock-templates")
}

// Debian returns the cached root of recipe (image.Recipes), building it
// first if needed. Without root or debootstrap the test skips (fails in a
// strict run).
func Debian(t testing.TB, recipe string) string {
	t.Helper()
	testenv.RequireRoot(t, "building a Debian template root")
	if _, err := exec.LookPath("debootstrap"); err != nil {
		if _, err := os.Stat("/usr/sbin/debootstrap"); err != nil {
			testenv.Skip(t, "template test: debootstrap is not installed (scripts/install-deps.sh --tests installs it)")
		}
	}
	pkgs, ok := image.Recipes[recipe]
	if !ok {
		t.Fatalf("no recipe %q", recipe)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	root, err := image.BuildDebian(ctx, CacheDir(), pkgs, nil)
	if err != nil {
		t.Fatalf("building the %s root: %v", recipe, err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Logf("built the %s root in %s (cached from now on in %s)", recipe, d.Round(time.Second), CacheDir())
	}
	return root
}

// Store returns the tests' shared template store (under CacheDir, kept
// across runs like the roots) holding the recipes as templates of the
// same names, each imported from its cached root when missing or built
// from another package list. Tests only read it: one that imports or
// removes templates makes a store of its own.
func Store(t testing.TB, recipes ...string) *image.Store {
	t.Helper()
	s, err := image.Open(filepath.Join(CacheDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recipes {
		root := Debian(t, r)
		if tm, err := s.Get(r); err == nil && tm.Digest == image.DebianKey(image.Recipes[r]) {
			continue
		}
		start := time.Now()
		if _, err := s.Build(context.Background(), r, CacheDir(), image.Recipes[r], image.ImportOptions{}); err != nil {
			t.Fatalf("importing %s from %s: %v", r, root, err)
		}
		t.Logf("imported the %s template in %s", r, time.Since(start).Round(time.Second))
	}
	return s
}
