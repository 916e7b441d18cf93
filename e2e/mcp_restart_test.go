package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/testenv"
)

// TestMCPRestartTS: the MCP TypeScript client across a SIGTERM restart
// of a server with persistence (e2e/agents/restart.mjs). Its MCP session
// does not survive (the old Mcp-Session-Id is refused, as the protocol
// has it, and the client connects again); its default session ended
// with it, while the session create_session made is listed paused by
// list_sessions and resumes, files intact, when the new connection names
// it, saying so. Nothing is left paused that no connection holds.
func TestMCPRestartTS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not installed (scripts/install-deps.sh installs it)")
	}
	dir, _ := filepath.Abs("agents")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testenv.Skip(t, "the agent libraries are not installed: run `npm ci` in e2e/agents (scripts/test.sh does)")
	}
	const token = "mcp-restart-token"
	// The same address after the restart, so that the client's next
	// request with its old Mcp-Session-Id reaches the new server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := startServer(t, map[string]any{
		"server":      map[string]any{"token": token, "auth": "keys", "listen": addr},
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	cmd := exec.Command(node, "restart.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+s.URL, "AIRLOCK_TOKEN="+token)
	cmd.WaitDelay = 10 * time.Second
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	next := func(v any) {
		t.Helper()
		if !lines.Scan() {
			cmd.Wait()
			t.Fatalf("restart.mjs ended early:\n%s", stderr.String())
		}
		if err := json.Unmarshal(lines.Bytes(), v); err != nil {
			t.Fatalf("restart.mjs: %q: %v", lines.Text(), err)
		}
	}
	var ids struct{ Def, Made string }
	next(&ids)
	if ids.Def == "" || ids.Made == "" {
		t.Fatalf("ids %+v", ids)
	}
	s = restart(t, s, syscall.SIGTERM)
	c := client.New(s.URL, client.WithToken(token))
	ctx := context.Background()
	if _, err := c.Session(ctx, ids.Def); err == nil {
		t.Errorf("the default session of a connection the restart ended is still there")
	}
	if info, err := c.Session(ctx, ids.Made); err != nil || info.State != apitype.StatePaused {
		t.Fatalf("create_session's session after the restart: %+v %v", info, err)
	}
	io.WriteString(stdin, s.URL+"\n")
	var seen struct {
		OldError string
		Listed   []struct {
			SessionID string `json:"session_id"`
			State     string
		}
		Stdout, Note string
	}
	next(&seen)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("restart.mjs: %v\n%s", err, stderr.String())
	}
	t.Logf("the old MCP session: %s", seen.OldError)
	if !strings.Contains(seen.OldError, "404") && !strings.Contains(strings.ToLower(seen.OldError), "not found") {
		t.Errorf("the old MCP session after the restart: %q", seen.OldError)
	}
	listed := false
	for _, l := range seen.Listed {
		if l.SessionID == ids.Made && l.State == apitype.StatePaused {
			listed = true
		}
		if l.SessionID == ids.Def {
			t.Errorf("list_sessions lists the ended default session: %+v", l)
		}
	}
	if !listed {
		t.Errorf("list_sessions does not list the paused session: %+v", seen.Listed)
	}
	if seen.Stdout != "kept across the restart\n" || !strings.Contains(seen.Note, "resumed") {
		t.Errorf("naming the paused session: stdout %q, note %q", seen.Stdout, seen.Note)
	}
	// The new connection closed: the session it named ended with it.
	s.waitEnded(c, ids.Made, 30*time.Second)
}
