package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/internal/testenv"
)

// TestE2BSDK runs E2B's official JS SDKs (e2b@2.51.0,
// @e2b/code-interpreter@2.8.0, pinned in e2e/e2b/package-lock.json),
// unchanged, against a server authenticating with keys: the scripts in
// e2e/e2b/sdk.test.mjs set only E2B_API_KEY (an airlock key as e2b_<hex>),
// E2B_API_URL and E2B_SANDBOX_URL. Afterwards no session is left.
func TestE2BSDK(t *testing.T) {
	runE2BScript(t, "sdk.test.mjs", map[string]any{"pool": map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}},
		"ports": map[string]any{"domain": "e2b-ports.test", "scheme": "http"}})
}

// TestE2BSDKPause runs E2B's pause, connect-resume and lifecycle through
// the JS SDK on a server with persistence.enabled (e2b/pause.test.mjs).
func TestE2BSDKPause(t *testing.T) {
	runE2BScript(t, "pause.test.mjs", map[string]any{"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
		"persistence": map[string]any{"enabled": true}})
}

// runE2BScript runs one of e2e/e2b's node test scripts against a keys
// server with cfg; every sandbox it makes it kills.
func runE2BScript(t *testing.T, script string, cfg map[string]any) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not installed (scripts/install-deps.sh installs it)")
	}
	dir, _ := filepath.Abs("e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		testenv.Skip(t, "E2B's SDKs are not installed: run `npm ci` in e2e/e2b (scripts/test.sh does)")
	}
	s := keysServer(t, cfg)
	defer s.stop()
	key := s.newKey("e2b-team")
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "--test-concurrency=1", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_KEY=e2b_"+strings.TrimPrefix(key, "alk_"), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the E2B SDK scripts failed: %v", err)
	}
	if l, err := s.as(key).Sessions(context.Background()); err != nil || len(l) != 0 {
		t.Errorf("sessions left after every sandbox was killed: %v %v", l, err)
	}
}
