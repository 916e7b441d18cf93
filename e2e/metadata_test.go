package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/client"
)

// TestReservedMetadataOverHTTP: metadata keys under "airlock." are the
// server's own marks (its /mcp's airlock.mcp, which a restart adopts),
// refused with 400 on every transport that takes a client's metadata,
// over real HTTP: the v1 API's create, E2B's (both paths), and MCP's
// create_session (which takes none: an argument it does not know is
// refused). The sessions MCP makes carry the mark, set by the server.
// checked against a mutant: Manager.Create without its check (both
// creates answered 201).
func TestReservedMetadataOverHTTP(t *testing.T) {
	s := keysServer(t, map[string]any{"persistence": map[string]any{"enabled": true},
		"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}}})
	defer s.stop()
	key := s.newKey("team-a")
	bearer := map[string]string{"Authorization": "Bearer " + key}
	e2bKey := map[string]string{"X-API-KEY": "e2b_" + strings.TrimPrefix(key, "alk_")}
	refused := func(where string, status int, body []byte) {
		t.Helper()
		if status != 400 || !strings.Contains(string(body), "reserved") {
			t.Errorf("%s: %d %s, want 400 saying the key is reserved", where, status, body)
		}
	}
	for _, k := range []string{"airlock.mcp", "airlock.other"} {
		md := map[string]string{"team": "a", k: "connection"}
		status, body := s.raw("POST", "/v1/sessions", map[string]any{"language": "python", "metadata": md}, bearer)
		refused("POST /v1/sessions "+k, status, body)
		for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
			status, body = s.raw("POST", path, map[string]any{"templateID": "base", "metadata": md}, e2bKey)
			refused("POST "+path+" "+k, status, body)
		}
	}
	// Nothing was made of them.
	c := client.New(s.URL, client.WithToken(key))
	if list, err := c.Sessions(context.Background()); err != nil || len(list) != 0 {
		t.Fatalf("sessions after the refusals: %+v %v", list, err)
	}

	cs := s.mcpHTTP(key, nil)
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_session",
		Arguments: map[string]any{"language": "python", "metadata": map[string]string{"airlock.mcp": "mine"}}})
	if err == nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		t.Errorf("create_session with metadata: taken: %s", b)
	}
	made := mcpCall(t, cs, "create_session", map[string]any{"language": "python"})
	id, _ := made["session_id"].(string)
	info, err := c.Session(context.Background(), id)
	if err != nil || info.Metadata["airlock.mcp"] != "connection" || len(info.Metadata) != 1 {
		t.Fatalf("MCP's session %q: %+v %v, want its mark", id, info, err)
	}
}
