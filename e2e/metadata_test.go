package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// TestReservedMetadataOverHTTP: metadata keys under "airlock." are the
// server's own marks (its /mcp's airlock.mcp, which a restart adopts),
// refused with 400 on every transport that takes a client's metadata,
// over real HTTP: the v1 API's create, E2B's (both paths), and MCP's
// create_session (which takes none: an argument it does not know is
// refused). The sessions MCP makes carry the mark, set by the server,
// and a fork does not inherit it: a REST fork of MCP's session has
// none, MCP's fork of a REST session has it. checked against mutants:
// Manager.Create without its check (every create answered 201), the
// fork's metadata left as its source's (the REST fork kept the mark).
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

	// A fork through the v1 API is its client's: not the MCP
	// connection's (whose restart would adopt it, or end it unnamed).
	ctx := context.Background()
	f, err := c.ForkSession(ctx, id)
	if err != nil || len(f.Metadata) != 0 {
		t.Errorf("a REST fork of MCP's session: %+v %v, want no marks", f, err)
	}
	// A client's labels go with its fork; MCP's fork_session marks its
	// fork as its own.
	rest, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := c.ForkSession(ctx, rest.ID); err != nil || !maps.Equal(f.Metadata, map[string]string{"team": "a"}) {
		t.Errorf("a REST fork of a REST session: %+v %v, want its labels", f, err)
	}
	mf := mcpCall(t, cs, "fork_session", map[string]any{"session_id": rest.ID})
	fid, _ := mf["session_id"].(string)
	if info, err := c.Session(ctx, fid); err != nil || !maps.Equal(info.Metadata, map[string]string{"team": "a", "airlock.mcp": "connection"}) {
		t.Errorf("MCP's fork %q of a REST session: %+v %v, want its labels and MCP's mark", fid, info, err)
	}
}
