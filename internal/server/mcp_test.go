package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/config"
)

// mcpClient connects an MCP client to the server's own MCP server (the
// one /mcp serves) over in-memory transports, as the server's operator.
func mcpClient(t *testing.T, s *Server) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := s.mcp.SDK().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func mcpCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) (text string, isError bool, out map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: a protocol error: %v", tool, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text += tc.Text
		}
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return text, res.IsError, out
}

// Packages and network over MCP, through the API's own validation and
// admission: install_packages installs from the operator's index into
// the default session, whose state is kept; create_session takes the
// API's network policy, and one beyond the server's policy is refused
// with the API's reason.
func TestMCPPackagesAndNetwork(t *testing.T) {
	demo, demoWhl := wheel(t, "airlock-demo", "1.0", "airlock_demo", "from airlock_dep import BASE\nVALUE = BASE + 1\n", "airlock-dep>=2")
	dep, depWhl := wheel(t, "airlock-dep", "2.1", "airlock_dep", "BASE = 41\n")
	_, indexPort := pepIndex(t, map[string][]byte{demo: demoWhl, dep: depWhl}, map[string]string{"airlock-demo": demo, "airlock-dep": dep})
	allowed := fmt.Sprintf("pypi.a.test:%d", indexPort)
	_, _, port, s := egressServerS(t, func(cfg *config.Config) {
		cfg.Packages.Pip.IndexURL = "http://" + allowed + "/simple"
		cfg.Packages.Pip.Deny = []string{"evil-pkg"}
		cfg.Network.AllowOnly = []string{allowed}
		cfg.Network.MaxAllow = 2
	})
	cs := mcpClient(t, s)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var install *sdk.Tool
	for _, tool := range tools.Tools {
		if tool.Name == "install_packages" {
			install = tool
		}
	}
	if schema, _ := json.Marshal(install); install == nil || !strings.Contains(string(schema), `"enum":["pip"]`) {
		t.Fatalf("install_packages: %s", schema)
	}

	mcpCall(t, cs, "execute_code", map[string]any{"code": "kept = 'state'"})
	text, isErr, out := mcpCall(t, cs, "install_packages", map[string]any{"packages": []string{"airlock-demo==1.0"}})
	if isErr || !strings.Contains(text, "airlock-demo 1.0") || !strings.Contains(text, "airlock-dep 2.1") || len(out["installed"].([]any)) != 2 {
		t.Fatalf("install_packages: %s %v", text, out)
	}
	if text, _, out = mcpCall(t, cs, "execute_code", map[string]any{"code": "import airlock_demo\n(airlock_demo.VALUE, kept)"}); out["result"] != "(42, 'state')" {
		t.Errorf("after the install, in the same session: %s", text)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"packages": []string{"evil-pkg==1"}}, "not allowed by the server's policy"},
		{map[string]any{"packages": []string{"git+https://example.com/x"}}, "not a package requirement"},
		{map[string]any{"packages": []string{"left-pad"}, "manager": "npm"}, "npm does not equal any of: [pip]"},
		{map[string]any{"packages": []string{}}, "packages is empty"},
	} {
		if text, isErr, _ := mcpCall(t, cs, "install_packages", c.args); !isErr || !strings.Contains(text, c.want) {
			t.Errorf("install_packages %v: %v %s, want %q", c.args, isErr, text, c.want)
		}
	}

	// A session with a network: it reaches what it was allowed.
	text, isErr, out = mcpCall(t, cs, "create_session", map[string]any{"network": map[string]any{"allow": []string{allowed}}})
	if isErr || !strings.Contains(text, "it may reach: "+allowed) || fmt.Sprint(out["network"]) != "["+allowed+"]" {
		t.Fatalf("create_session with a network: %s %v", text, out)
	}
	sid := out["session_id"].(string)
	code := fmt.Sprintf("import urllib.request\nurllib.request.urlopen('http://%s/simple/airlock-dep/', timeout=10).read().decode()", allowed)
	if text, _, out = mcpCall(t, cs, "execute_code", map[string]any{"code": code, "session_id": sid}); !strings.Contains(fmt.Sprint(out["result"]), dep) {
		t.Errorf("the session's egress: %s", text)
	}
	// The default session still has none.
	if text, _, _ = mcpCall(t, cs, "execute_code", map[string]any{"code": code}); !strings.Contains(text, "error: ") {
		t.Errorf("the default session reached the network: %s", text)
	}
	// Beyond the server's policy: the API's refusals, nothing created.
	for _, c := range []struct {
		allow []string
		want  string
	}{
		{[]string{fmt.Sprintf("files.a.test:%d", port)}, "outside the server's network.allow_only"},
		{[]string{"files.a.test:1", "files.a.test:2", "files.a.test:3"}, "more than the server's network.max_allow (2)"},
		{[]string{"not a host"}, "invalid argument"},
	} {
		text, isErr, _ := mcpCall(t, cs, "create_session", map[string]any{"network": map[string]any{"allow": c.allow}})
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("create_session with network %v: %v %s, want %q", c.allow, isErr, text, c.want)
		}
	}
	if n := len(s.manager.List()); n != 2 {
		t.Errorf("%d sessions, want 2 (the default one and the one with a network)", n)
	}
}
