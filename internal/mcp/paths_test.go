package mcp_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/client"
	"airlock/internal/mcp"
	"airlock/internal/runtimes"
)

// The file tools take paths the way the HTTP files API does: relative to
// /workspace, or absolute under it (what code in the sandbox sees, and
// what their schema says). Refusals say what to do and name no request
// of the server's own.
func TestFileToolPaths(t *testing.T) {
	cs, _ := connect(t)
	for _, p := range []string{"/workspace/abs.txt", "rel/r.txt", "./dot.txt", "/workspace/deep//x/./y.txt"} {
		if res, _ := call(t, cs, "write_file", map[string]any{"path": p, "content": "at " + p}); res.IsError {
			t.Errorf("write_file %q: %s", p, text(res))
			continue
		}
		if res, _ := call(t, cs, "read_file", map[string]any{"path": p}); res.IsError || text(res) != "at "+p {
			t.Errorf("read_file %q: %s", p, text(res))
		}
	}
	for p, want := range map[string]string{"/workspace/rel/r.txt": "at rel/r.txt", "abs.txt": "at /workspace/abs.txt", "deep/x/y.txt": "at /workspace/deep//x/./y.txt"} {
		if res, _ := call(t, cs, "read_file", map[string]any{"path": p}); text(res) != want {
			t.Errorf("read_file %q: %s, want %q", p, text(res), want)
		}
	}
	if res, out := call(t, cs, "list_files", map[string]any{"path": "/workspace/rel"}); res.IsError || !strings.Contains(text(res), "r.txt") {
		t.Errorf("list_files /workspace/rel: %s %v", text(res), out)
	}
	// What the model reads of a written file, and the resource it names.
	res, out := call(t, cs, "write_file", map[string]any{"path": "/workspace/rel/w.txt", "content": "w"})
	if out["path"] != "rel/w.txt" || !strings.Contains(text(res), "/workspace/rel/w.txt") {
		t.Errorf("write_file's result: %s %v", text(res), out)
	}
	if rr, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: out["uri"].(string)}); err != nil || rr.Contents[0].Text != "w" {
		t.Errorf("the resource of a written file: %v", err)
	}

	for _, c := range []struct{ tool, path, want string }{
		{"read_file", "/etc/passwd", "absolute paths must be under /workspace"},
		{"write_file", "/etc/passwd", "absolute paths must be under /workspace"},
		{"read_file", "../x", "must not contain .."},
		{"write_file", "/workspace/../etc/passwd", "must not contain .."},
		{"list_files", "/tmp", "absolute paths must be under /workspace"},
		{"read_file", "missing.txt", "not found"},
		{"read_file", "/workspace", "name a file"},
		{"write_file", "/workspace/", "name a file"},
		{"read_file", "rel", "directory"},
	} {
		args := map[string]any{"path": c.path}
		if c.tool == "write_file" {
			args["content"] = "x"
		}
		res, _ := call(t, cs, c.tool, args)
		if !res.IsError || !strings.Contains(text(res), c.want) || leaks(text(res)) {
			t.Errorf("%s %q: %v %s, want an error saying %q", c.tool, c.path, res.IsError, text(res), c.want)
		}
	}
	for _, id := range []string{"..", ".", "a/b", "nope"} {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"execute_code", map[string]any{"code": "1"}},
			{"read_file", map[string]any{"path": "x"}},
			{"list_files", map[string]any{}},
			{"close_session", map[string]any{}},
			{"list_tools", map[string]any{}},
		} {
			tool := c.tool
			c.args["session_id"] = id
			res, _ := call(t, cs, tool, c.args)
			if !res.IsError || leaks(text(res)) || !strings.Contains(text(res), "not found") && !strings.Contains(text(res), "no session") {
				t.Errorf("%s with session_id %q: %s", tool, id, text(res))
			}
		}
	}
}

// leaks reports whether a message shows a request of the MCP server's
// own: its URL, the API's routes, an address or a socket.
func leaks(s string) bool {
	for _, bad := range []string{"http://", "https://", "/v1/", "127.0.0.1", ".sock", "dial ", "airlock://"} {
		if strings.Contains(s, bad) {
			return true
		}
	}
	return false
}

// connectTo connects an MCP client to an MCP server in front of api.
func connectTo(t *testing.T, api *client.Client) *sdk.ClientSession {
	t.Helper()
	return connectWith(t, api, nil)
}

// connectWith is connectTo with a server that installs with installs.
func connectWith(t *testing.T, api *client.Client, installs []string) *sdk.ClientSession {
	t.Helper()
	srv := mcp.New(mcp.Options{Client: func(http.Header) *client.Client { return api }, Version: "test", Installs: installs,
		Languages: runtimes.Names(), Managers: runtimes.ManagerLanguages(), Log: slog.New(slog.DiscardHandler)})
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.SDK().Connect(context.Background(), st, nil)
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

// Whatever goes wrong between the MCP server and the API, no tool result
// or resource error shows the requests it made: not their URLs, not the
// socket, not an address. Each backend fails in another way.
func TestToolErrorsShowNoInternals(t *testing.T) {
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closed.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("not json"))
	}))
	defer garbage.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>upstream http://10.0.0.7:8080" + r.URL.String() + " failed</html>"))
	}))
	defer proxy.Close()
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer hangup.Close()
	backends := map[string]*client.Client{
		"refused":     client.New("http://" + closed.Addr().String()),
		"no socket":   client.Unix(filepath.Join(t.TempDir(), "airlock.sock")),
		"not json":    client.New(garbage.URL),
		"proxy error": client.New(proxy.URL),
		"hang up":     client.New(hangup.URL),
		"panics": client.InProcess(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("a bug at /v1/sessions")
		})),
	}
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"execute_code", map[string]any{"code": "1"}},
		{"execute_code", map[string]any{"code": "1", "session_id": "s1"}},
		{"run_command", map[string]any{"command": "true", "session_id": "s1"}},
		{"write_file", map[string]any{"path": "a.txt", "content": "x", "session_id": "s1"}},
		{"read_file", map[string]any{"path": "a.txt", "session_id": "s1"}},
		{"list_files", map[string]any{"session_id": "s1"}},
		{"create_session", map[string]any{}},
		{"close_session", map[string]any{"session_id": "s1"}},
	}
	for name, api := range backends {
		cs := connectTo(t, api)
		for _, c := range calls {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
			if err != nil {
				t.Errorf("%s: %s: a protocol error: %v", name, c.tool, err)
				continue
			}
			if name != "not json" && !res.IsError || leaks(text(res)) {
				t.Errorf("%s: %s: %v %q", name, c.tool, res.IsError, text(res))
			}
		}
		for _, uri := range []string{"airlock://sessions", "airlock://sessions/s1/files/a.txt"} {
			_, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: uri})
			if err == nil && name != "not json" || err != nil && leaks(strings.ReplaceAll(err.Error(), uri, "")) {
				t.Errorf("%s: read %s: %v", name, uri, err)
			}
		}
	}
}
