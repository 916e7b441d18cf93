package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
)

// TestMCPClusterRestart: MCP on a cluster (two servers sharing one
// PostgreSQL, persistence on) across a SIGTERM restart of the pod that
// holds a session create_session made. The pod's shutdown pauses it and
// the cluster lists it paused on its pod; the other pod's /mcp naming it
// answers a tool error naming the pod that holds it (its API's 421:
// the session is restored only where its image is) and takes nothing
// over; a new connection to its own pod names it and gets it back, its
// files whole, and it is that connection's (it ends with it).
//
// Direct to each pod, not through the chart's router: deploy's
// TestRouterWithAirlock runs its pods on loopback addresses, where the
// MCP SDK's DNS-rebinding guard refuses the router's Host (pods on a pod
// network do not trip it), so MCP is not routed on this machine. A
// client whose new MCP session the Service sends to the other pod meets
// the same tool error as here.
func TestMCPClusterRestart(t *testing.T) {
	_, servers := sharedCluster(t, 2, withPersistence)
	s0, s1 := servers[0], servers[1]
	ctx := context.Background()
	key := s0.newKey("team-mcp")

	cs := s0.mcpHTTP(key, nil)
	made, _ := mcpCall(t, cs, "create_session", nil)["session_id"].(string)
	if !strings.HasPrefix(made, "airlock-0.") {
		t.Fatalf("create_session on airlock-0 made %q", made)
	}
	mcpCall(t, cs, "write_file", map[string]any{"path": "keep.txt", "content": "kept", "session_id": made})

	s0 = restart(t, s0, syscall.SIGTERM)
	cs.Close()
	// The cluster lists it paused, on its pod (the directory is shared).
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := s1.as(key).Sessions(ctx)
		var info apitype.Session
		for _, x := range l {
			if x.ID == made {
				info = x
			}
		}
		if err == nil && info.State == apitype.StatePaused && info.Pod == "airlock-0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other pod's listing after the restart: %+v %v", l, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The other pod's MCP: a tool error naming airlock-0, nothing taken.
	other := s1.mcpHTTP(key, nil)
	res, err := other.CallTool(ctx, &sdk.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "print(1)", "session_id": made}})
	if err != nil {
		t.Fatalf("execute_code on airlock-1: a protocol error: %v", err)
	}
	if txt := toolText(res); !res.IsError || !strings.Contains(txt, "airlock-0") {
		t.Errorf("execute_code naming airlock-0's session on airlock-1: %v %s", res.IsError, txt)
	}
	other.Close()
	if info, err := s0.as(key).Session(ctx, made); err != nil || info.State != apitype.StatePaused {
		t.Fatalf("after the other pod was asked: %+v %v (want it paused still)", info, err)
	}

	// Its own pod: a new connection names it and gets it back.
	cs0 := s0.mcpHTTP(key, nil)
	out := mcpCall(t, cs0, "execute_code", map[string]any{"code": "print(open('keep.txt').read())", "session_id": made})
	if note, _ := out["note"].(string); out["stdout"] != "kept\n" || !strings.Contains(note, "resumed") {
		t.Fatalf("naming the session on its pod after the restart: %v", out)
	}
	cs0.Close()
	s0.waitEnded(s0.as(key), made, 30*time.Second)
}

// toolText is a tool result's text.
func toolText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
