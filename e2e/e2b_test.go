package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// TestE2BSDKGVisorMemory runs E2B's keepMemory (create's lifecycle and
// pause) through the JS SDK on a gVisor server with persistence, whose
// pauses keep memory by default (e2b/memory.test.mjs): accepted, and the
// resumed interpreter has its variables; keepMemory false in pause and in
// the lifecycle pauses with the files only (the variables gone).
func TestE2BSDKGVisorMemory(t *testing.T) {
	runE2BScript(t, "memory.test.mjs", map[string]any{"isolation": "gvisor", "gvisor": map[string]any{"runsc": testenv.Runsc(t)},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}, "zygote": false},
		"persistence": map[string]any{"enabled": true}})
}

// e2bSDK is node and the directory of e2e/e2b, where E2B's SDKs are
// installed (a skip says how when they are not).
func e2bSDK(t *testing.T) (node, dir string) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not installed (scripts/install-deps.sh installs it)")
	}
	dir, _ = filepath.Abs("e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		testenv.Skip(t, "E2B's SDKs are not installed: run `npm ci` in e2e/e2b (scripts/test.sh does)")
	}
	return node, dir
}

// e2bEnv is the environment of an SDK script against s with key: the
// two variables E2B's users change (and the sandbox URL, one port).
func e2bEnv(s *server, key string) []string {
	return append(os.Environ(), "E2B_API_KEY=e2b_"+strings.TrimPrefix(key, "alk_"), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL)
}

// runE2BScript runs one of e2e/e2b's node test scripts against a keys
// server with cfg; every sandbox it makes it kills.
func runE2BScript(t *testing.T, script string, cfg map[string]any) {
	node, dir := e2bSDK(t)
	s := keysServer(t, cfg)
	defer s.stop()
	key := s.newKey("e2b-team")
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "--test-concurrency=1", script)
	cmd.Dir = dir
	cmd.Env = e2bEnv(s, key)
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

// TestE2BSDKRestart: E2B sandboxes outlive their server. The JS SDK
// (e2b/restart.mjs) pauses two sandboxes; the server restarts (SIGTERM,
// the same address, data_dir and store); the SDK's objects, holding
// their tokens of before, go on: both are listed paused with their
// metadata, a call resumes the autoResume one, connect the other with
// the same tokens. A wrong token is still refused after the restart.
func TestE2BSDKRestart(t *testing.T) {
	e2bAcrossRestart(t, "restart.mjs", "PAUSED ", syscall.SIGTERM)
}

// TestE2BSDKKilled: E2B sandboxes that were never paused outlive a
// server killed with SIGKILL (e2b/killed.mjs): the next start lists
// them paused, recovered from their last completed operation, and the
// SDK's objects of before resume them (a call, connect) with their
// files and tokens.
func TestE2BSDKKilled(t *testing.T) {
	e2bAcrossRestart(t, "killed.mjs", "LIVE ", syscall.SIGKILL)
}

// e2bAcrossRestart runs the SDK script, which prints ready and the
// sandboxes' ids, stops the server with sig, starts it again on the
// same address, data_dir and store, and lets the script finish.
func e2bAcrossRestart(t *testing.T, script, ready string, sig syscall.Signal) {
	node, dir := e2bSDK(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := keysServer(t, map[string]any{"server": map[string]any{"listen": addr},
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}}})
	key := s.newKey("e2b-team")
	cmd := exec.Command(node, script)
	cmd.Dir, cmd.Env = dir, e2bEnv(s, key)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					cmd.Wait()
					t.Fatalf("the SDK script ended before %q:\n%s", prefix, stderr.String())
				}
				t.Logf("sdk: %s", l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-time.After(3 * time.Minute):
				t.Fatalf("no %q from the SDK script:\n%s", prefix, stderr.String())
			}
		}
	}
	ids := strings.Fields(next(ready))[1:]
	if sig == syscall.SIGKILL {
		// What each wrote is in its recovery point before the kill
		// (killed.mjs: a.txt in the first, b.txt in the second).
		for i, name := range []string{"a.txt", "b.txt"} {
			waitPoint(t, s, ids[i], name)
		}
	}
	s = restart(t, s, sig)
	if s.URL != "http://"+addr {
		t.Fatalf("the server came back on %s, not %s", s.URL, addr)
	}
	code, body := s.raw("GET", "/files?path=/home/user/a.txt", nil, map[string]string{"E2b-Sandbox-Id": ids[0], "E2b-Sandbox-Port": "49983", "X-Access-Token": strings.Repeat("0", 48)})
	if code != 401 {
		t.Errorf("a wrong token after the restart: %d %s", code, body)
	}
	fmt.Fprintln(stdin, "restarted")
	next("DONE")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the SDK script: %v\n%s", err, stderr.String())
	}
	if l, err := s.as(key).Sessions(context.Background()); err != nil || len(l) != 0 {
		t.Errorf("sessions left after both sandboxes were killed: %v %v", l, err)
	}
}
