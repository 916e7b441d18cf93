package runtimes

import (
	"airlock/internal/testenv"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPythonRuntime runs the Python session runtime's own test suite
// (python/tests, unittest), which starts the airlock_runtime package the way the
// server does and drives it over the frame protocol.
func TestPythonRuntime(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Skip(t, "skipping the Python session runtime tests: %s is not available (%v)", python, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// -B and PYTHONDONTWRITEBYTECODE: leave no __pycache__ in the source tree.
	cmd := exec.CommandContext(ctx, python, "-B", "-m", "unittest", "discover", "-s", "python/tests", "-v")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python runtime tests failed: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}
