package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/client"
)

// bearerTransport adds an API key to every request.
type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpHTTP connects an MCP client to the server's /mcp with key (none if
// empty) over transport (http.DefaultTransport if nil).
func (s *server) mcpHTTP(key string, transport http.RoundTripper) *sdk.ClientSession {
	s.t.Helper()
	if transport == nil {
		transport = http.DefaultTransport
	}
	if key != "" {
		transport = bearerTransport{key, transport}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.URL + "/mcp", HTTPClient: &http.Client{Transport: transport}}, nil)
	if err != nil {
		s.t.Fatalf("MCP connect: %v", err)
	}
	return cs
}

// mcpCall calls a tool and returns its structured result; a protocol
// error or a tool error fails the test.
func mcpCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError {
		t.Fatalf("%s: a tool error: %s", tool, b)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// waitEnded waits until session id has ended (410) or is unknown (404)
// for c (the server's own client if nil).
func (s *server) waitEnded(c *client.Client, id string, within time.Duration) {
	s.t.Helper()
	if c == nil {
		c = s.c
	}
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		_, err := c.Session(context.Background(), id)
		if st := client.StatusOf(err); st == http.StatusGone || st == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("session %s is still there after %s: %v", id, within, err)
		}
	}
}

// ended reports whether session id has ended now, without waiting.
func (s *server) ended(id string) bool {
	_, err := s.c.Session(context.Background(), id)
	st := client.StatusOf(err)
	return st == http.StatusGone || st == http.StatusNotFound
}

// An MCP session id acts only for the key that opened it. Another
// tenant's key, and another key of the same tenant, get for every method
// of /mcp (a tool call, the GET stream, DELETE) exactly what an id that
// never existed gets; the owner's MCP session, default sandbox session
// and state are intact afterwards.
func TestMCPSessionBoundToKey(t *testing.T) {
	s := keysServer(t, nil)
	owner, other, sibling := s.newKey("team-a"), s.newKey("team-b"), s.newKey("team-a")
	cs := s.mcpHTTP(owner, nil)
	defer cs.Close()
	sid := mcpCall(t, cs, "execute_code", map[string]any{"code": "x = 41"})["session_id"].(string)
	mcpID := cs.ID()
	if mcpID == "" {
		t.Fatal("no Mcp-Session-Id")
	}

	// Every method, with an id as a client sends it.
	type answer struct {
		status      int
		contentType string
		body        string
	}
	send := func(method, id, key string) answer {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"x = 0"}}}`)
		}
		req, _ := http.NewRequest(method, s.URL+"/mcp", body)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s /mcp: %v", method, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
	var raw [12]byte
	rand.Read(raw[:])
	unknown := strings.ToUpper(hex.EncodeToString(raw[:])) // the SDK's form
	for _, method := range []string{"POST", "GET", "DELETE"} {
		want := send(method, unknown, other)
		if want.status != http.StatusNotFound {
			t.Fatalf("%s with an unknown id: %+v", method, want)
		}
		for who, key := range map[string]string{"another tenant": other, "another key of the tenant": sibling} {
			if got := send(method, mcpID, key); got != want {
				t.Errorf("%s of the owner's MCP session by %s: %+v, want what an unknown id gets: %+v", method, who, got, want)
			}
		}
	}

	// Nothing happened to the owner's session: the same default session,
	// with its state.
	out := mcpCall(t, cs, "execute_code", map[string]any{"code": "x + 1"})
	if out["session_id"] != sid || out["result"] != "42" || out["note"] != nil {
		t.Errorf("the owner's session afterwards: %v", out)
	}
	// The owner's own DELETE ends it, and its sandbox session with it.
	if got := send("DELETE", mcpID, owner); got.status != http.StatusNoContent {
		t.Errorf("the owner's DELETE: %+v", got)
	}
	s.waitEnded(s.as(owner), sid, 30*time.Second)
}

// dropper is an HTTP transport whose connections can all be cut at once,
// like a client process that is killed.
type dropper struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
	http.Transport
}

func newDropper() *dropper {
	d := &dropper{}
	d.Transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.dead {
			return nil, errors.New("the client is gone")
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			d.conns = append(d.conns, c)
		}
		return c, err
	}
	return d
}

func (d *dropper) vanish() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
}

// An HTTP MCP client that goes away without DELETE leaves nothing behind
// for long: once it has no request in flight and no stream open, its MCP
// session ends after mcp.idle_timeout, with every session it opened. A
// client that keeps its stream open keeps its session past that.
func TestMCPHTTPClientGone(t *testing.T) {
	s := startServer(t, map[string]any{"mcp": map[string]any{"idle_timeout": "1s"}})
	d := newDropper()
	cs := s.mcpHTTP("", d)
	def := mcpCall(t, cs, "execute_code", map[string]any{"code": "x = 1"})["session_id"].(string)
	made := mcpCall(t, cs, "create_session", map[string]any{"language": "bash"})["session_id"].(string)

	// The SDK's client holds a GET stream open: its session outlives
	// that of a client that came after it and went away. Each idle clock
	// starts at its session's last request, so without the stream this
	// session's would have ended first: the test waits for that other
	// end (an event), not for a time a loaded host may stretch.
	gone := newDropper()
	other := mcpCall(t, s.mcpHTTP("", gone), "execute_code", map[string]any{"code": "y = 2"})["session_id"].(string)
	gone.vanish()
	s.waitEnded(nil, other, 30*time.Second)
	if out := mcpCall(t, cs, "execute_code", map[string]any{"code": "x"}); out["session_id"] != def || out["result"] != "1" {
		t.Fatalf("a client with its stream open lost its session: %v", out)
	}

	d.vanish()
	s.waitEnded(nil, def, 30*time.Second)
	s.waitEnded(nil, made, 30*time.Second)
}

// `airlock mcp` on stdio against a running server ends every session its
// client opened before it exits: when its input ends, and on SIGTERM (how
// clients stop stdio servers), which is a clean exit (0) with no error
// logged.
func TestMCPStdioExit(t *testing.T) {
	s := startServer(t, nil)
	for _, how := range []string{"end of input", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(airlockBinary(t), "mcp", "--config", s.cfgPath)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr syncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
			cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
			if err != nil {
				t.Fatal(err)
			}
			def := mcpCall(t, cs, "execute_code", map[string]any{"code": "x = 1"})["session_id"].(string)
			made := mcpCall(t, cs, "create_session", map[string]any{"language": "bash"})["session_id"].(string)
			if how == "SIGTERM" {
				cmd.Process.Signal(syscall.SIGTERM)
			} else {
				stdin.Close()
			}
			err = cmd.Wait()
			cs.Close()
			if err != nil {
				t.Errorf("airlock mcp after %s: %v\n%s", how, err, stderr.String())
			}
			if strings.Contains(stderr.String(), "ERROR") {
				t.Errorf("airlock mcp logged an error after %s:\n%s", how, stderr.String())
			}
			// Gone by the time it exited: no waiting.
			for _, id := range []string{def, made} {
				if !s.ended(id) {
					t.Errorf("session %s outlived `airlock mcp` (%s)", id, how)
				}
			}
		})
	}
}

// A key revoked while its MCP client is connected leaves nothing behind:
// the client can no longer end its MCP session (DELETE is refused), so
// the session ends after mcp.idle_timeout, and the sandbox sessions it
// opened end with it — by the server itself, not with the revoked key.
func TestMCPRevokedKeyCleanup(t *testing.T) {
	s := keysServer(t, map[string]any{"mcp": map[string]any{"idle_timeout": "1s"}})
	key, admin := s.newKey("team-r"), s.newKey("ops", "--admin")
	cs := s.mcpHTTP(key, nil)
	def := mcpCall(t, cs, "execute_code", map[string]any{"code": "x = 1"})["session_id"].(string)
	made := mcpCall(t, cs, "create_session", map[string]any{"language": "bash"})["session_id"].(string)
	if _, err := s.airlockCLI("keys", "revoke", s.keyID("team-r")); err != nil {
		t.Fatal(err)
	}
	cs.Close() // its DELETE gets a 401
	s.waitEnded(s.as(admin), def, 30*time.Second)
	s.waitEnded(s.as(admin), made, 30*time.Second)
}
