package exeseal

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// scripts/build.sh's stamp is the same from any checkout: it names each
// source file by its import path, never by where the checkout is, so a
// build is reproducible in another directory. checked against a mutant:
// with absolute paths hashed, the two copies' stamps differed.
func TestStampAnyCheckout(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var stamps []string
	for _, name := range []string{"a", "checkout-b"} {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"go.mod", "go.sum", "cmd", "internal", "scripts/build.sh"} {
			if out, err := exec.Command("cp", "-a", filepath.Join(repo, f), filepath.Join(dir, f)).CombinedOutput(); err != nil {
				t.Fatalf("cp %s: %v\n%s", f, err, out)
			}
		}
		out, err := exec.Command(filepath.Join(dir, "scripts/build.sh"), "--stamp").CombinedOutput()
		if err != nil {
			t.Fatalf("build.sh --stamp: %v\n%s", err, out)
		}
		s := strings.TrimSpace(string(out))
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(s) {
			t.Fatalf("build.sh --stamp printed %q, want a SHA-256", s)
		}
		stamps = append(stamps, s)
	}
	if stamps[0] != stamps[1] {
		t.Errorf("two checkouts of the same sources got stamps %s and %s", stamps[0], stamps[1])
	}
}
