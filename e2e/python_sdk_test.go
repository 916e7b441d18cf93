package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/image/imagetest"
	"airlock/internal/testenv"
)

// python3 is Debian's interpreter, named explicitly: a developer's PATH may
// put another (pyenv) first, without Debian's setuptools and wheel.
const python3 = "/usr/bin/python3"

func requirePython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python3); err != nil {
		testenv.Skip(t, "%s is missing (scripts/install-deps.sh installs python3): %v", python3, err)
	}
}

// The Python SDK (sdk/python) against a real server: its unittest suite
// (sessions, state, plots, files, commands, typed errors, streaming,
// ports, cleanup, one-shot runs, the unix socket, pause, resume and fork
// on a second server with persistence on, the LangChain tool with a stub
// langchain_core, the agents guide's snippets, and the wheel built and installed
// offline). In a strict run (CI) a test it cannot run fails.
func TestPythonSDK(t *testing.T) {
	testPythonSDK(t, "", map[string]any{
		"pool": map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}},
		// Ports' host form here (test_ports); the template run has the
		// path form only.
		"ports": map[string]any{"domain": "ports.test", "scheme": "http"},
	})
}

// The same suite with every session on the code-interpreter template
// (templates.default), whose root has the real IPython (Debian's
// python3-ipython): rich output of IPython's own display() (the suite's
// test_html_and_json) works on both kinds of root.
func TestPythonSDKOnTemplate(t *testing.T) {
	store := imagetest.Store(t, "code-interpreter")
	testPythonSDK(t, "code-interpreter", map[string]any{
		"pool": map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": true},
		"templates": map[string]any{
			"dir": store.Dir(), "default": "code-interpreter",
			"pool": map[string]any{"code-interpreter": map[string]int{"python": 2}},
		},
	})
}

func testPythonSDK(t *testing.T, template string, cfg map[string]any) {
	requirePython(t)
	// A tool (test_tools): an upstream on the host's loopback that
	// answers with what it was asked and whether the credential came.
	secret := "sdk-tool-token-0123456789"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"q": %q, "authorized": %t}`, r.URL.Query().Get("q"), r.Header.Get("Authorization") == "Bearer "+secret)
	}))
	defer up.Close()
	token := filepath.Join(t.TempDir(), "tool-token")
	if err := os.WriteFile(token, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg["tools"] = map[string]any{"lookup": map[string]any{
		"description": "Looks q up.", "http": map[string]any{"url": up.URL + "/lookup?q={q}"},
		"arguments":  map[string]any{"type": "object", "required": []string{"q"}, "properties": map[string]any{"q": map[string]any{"type": "string", "maxLength": 16}}},
		"credential": map[string]any{"file": token},
	}}
	// A secret (test_secrets): sessions that ask for it see a placeholder.
	value := filepath.Join(t.TempDir(), "sdk-api-key")
	if err := os.WriteFile(value, []byte("sk-sdk-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg["secrets"] = map[string]any{"SDK_API_KEY": map[string]any{"file": value, "hosts": []string{"api.sdk.test"}}}
	s := keysServer(t, cfg)
	defer s.stop()
	// The SDK authenticates as a user does, with a tenant's API key; a
	// second key with a one-session quota meets QuotaExceededError.
	apiKey := s.newKey("python-sdk")
	quotaToken := s.newKey("python-sdk-quota", "--max-sessions", "1")
	// Pause, resume and fork (test_persistence): a server with
	// persistence on (this one has it off: test_sandbox checks what a
	// pause meets there).
	ps := keysServer(t, map[string]any{
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	defer ps.stop()
	persistKey := ps.newKey("python-sdk-persist")
	sdk, _ := filepath.Abs("../sdk/python")
	cmd := exec.Command(python3, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", "tests")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(),
		"AIRLOCK_URL="+s.URL, "AIRLOCK_TOKEN="+apiKey, "AIRLOCK_QUOTA_TOKEN="+quotaToken,
		"AIRLOCK_PERSIST_URL="+ps.URL, "AIRLOCK_PERSIST_TOKEN="+persistKey,
		"AIRLOCK_SOCKET="+filepath.Join(s.cfg["state_dir"].(string), "airlock.sock"),
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+sdk, "AIRLOCK_TEST_TEMPLATE="+template)
	if testenv.Strict() {
		cmd.Env = append(cmd.Env, "AIRLOCK_TEST_STRICT=1")
	}
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the Python SDK's tests failed: %v", err)
	}
	if testenv.Strict() && strings.Contains(string(out), "skipped") {
		t.Fatalf("the Python SDK's tests skipped some in a strict run")
	}
}

// The SDK's table of exceptions names exactly the server's error codes.
func TestPythonSDKErrorCodes(t *testing.T) {
	requirePython(t)
	sdk, _ := filepath.Abs("../sdk/python")
	cmd := exec.Command(python3, "-c", "import json, airlock.errors as e; print(json.dumps(sorted(e.CODES)))")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+sdk)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var want []string
	for _, k := range errdefs.Kinds() {
		want = append(want, k.Code)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("airlock.errors.CODES has %v; the server's codes (errdefs) are %v", got, want)
	}
}
