package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"airlock/internal/testenv"
)

// The real client libraries agents use, driving a real server: the MCP
// TypeScript client over stdio (`airlock mcp`) and streamable HTTP, and
// agent loops of LangChain JS, the OpenAI Agents SDK and the Vercel AI SDK
// with scripted fake models, the agents guide's JavaScript module as pasted, and
// the requests those frameworks' converters send to OpenAI and Anthropic
// after an airlock tool call, captured by a local stand-in for their APIs
// (e2e/agents/*.test.mjs). Their npm packages are
// pinned in e2e/agents/package-lock.json and installed by scripts/test.sh.
func TestAgentLibraries(t *testing.T) {
	bin := airlockBinary(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not installed (scripts/install-deps.sh installs it)")
	}
	dir, _ := filepath.Abs("agents")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testenv.Skip(t, "the agent libraries are not installed: run `npm ci` in e2e/agents (scripts/test.sh does)")
	}
	const token = "agent-test-token"
	s := startServer(t, map[string]any{
		"server": map[string]any{"token": token, "auth": "keys"},
		"pool":   map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}},
	})
	defer s.stop()
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "--test-concurrency=1", "mcp.test.mjs", "bridge.test.mjs", "agents.test.mjs", "readme.test.mjs", "converters.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"AIRLOCK_URL="+s.URL, "AIRLOCK_TOKEN="+token, "AIRLOCK_BIN="+bin, "AIRLOCK_CONFIG="+s.cfgPath,
		"AIRLOCK_USER_BIN="+userBinary(t))
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the agent library tests failed: %v", err)
	}
}
