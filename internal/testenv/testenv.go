// Package testenv owns how airlock's tests skip: a test that cannot run
// here (not root, a tool missing, an old kernel) says why and skips,
// except in a strict run — the README's test command and CI set
// AIRLOCK_TEST_STRICT=1 (CI=true counts too) — where a skip is a failure,
// so that no tier is ever skipped silently where it must run.
//
// It must never be imported by anything but tests.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Strict reports whether skips are failures in this run.
func Strict() bool {
	return os.Getenv("AIRLOCK_TEST_STRICT") == "1" || os.Getenv("CI") == "true"
}

// Skip skips t with the reason, or fails it in a strict run.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("%s (a strict run, AIRLOCK_TEST_STRICT=1 or CI=true, must not skip this test)", why)
	}
	t.Skip(why)
}

// RequireRoot skips (or fails, in a strict run) a privileged test when not
// running as root.
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "privileged test: %s needs root (CI runs as root)", what)
	}
}

// Runsc returns the runsc binary gVisor tests use: $AIRLOCK_TEST_RUNSC
// (scripts/test.sh builds the pinned version and sets it), else runsc on
// PATH. Without one the test skips, or fails in a strict run.
func Runsc(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AIRLOCK_TEST_RUNSC"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("AIRLOCK_TEST_RUNSC: %v", err)
		}
		return p
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	Skip(t, "gVisor test: no runsc (set AIRLOCK_TEST_RUNSC, or run scripts/test.sh, which builds the pinned runsc)")
	return ""
}
