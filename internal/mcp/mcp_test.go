package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/mcp"
	"airlock/internal/runtimes"
	"airlock/internal/server"
	"airlock/internal/testenv"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { jail.RunTests(m) }

// connect starts an embedded server and an MCP client session to an MCP
// server in front of it, over the SDK's in-memory transports. Its results
// carry every content block (mcp.content); connectContent picks them.
func connect(t *testing.T) (*sdk.ClientSession, *client.Client) {
	t.Helper()
	return connectContent(t, config.MCPContent)
}

// connectContent is connect with results that carry content.
func connectContent(t *testing.T, content []string) (*sdk.ClientSession, *client.Client) {
	t.Helper()
	cs, api, _ := connectOpts(t, mcp.Options{Content: content})
	return cs, api
}

// connectOpts is connect with the MCP server's options (its Client,
// Version and Log are the test's).
func connectOpts(t *testing.T, o mcp.Options) (*sdk.ClientSession, *client.Client, *mcp.Server) {
	t.Helper()
	srv, api := newServer(t, o)
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.SDK().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	return clientOn(t, ct), api, srv
}

// clientOn connects an MCP client over transport.
func clientOn(t *testing.T, transport sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// newServer starts an embedded airlock server and an MCP server in front
// of it (its Client, Version and Log are the test's).
func newServer(t *testing.T, o mcp.Options) (*mcp.Server, *client.Client) {
	t.Helper()
	testenv.RequireRoot(t, "the MCP tools run code in real sandboxes")
	cfg := config.Default()
	cfg.StateDir = "/run/airlock-mcp-test"
	cfg.CgroupParent = "airlock-mcp-test"
	cfg.IDBase = 1_120_000_000        // apart from any other server's on the host
	cfg.Server.Auth = config.AuthNone // the test's client is the operator
	cfg.DataDir = t.TempDir()
	cfg.Pool.Size = map[string]int{"python": 1, "bash": 1}
	cfg.Pool.Parallel = 1
	log := slog.New(slog.DiscardHandler)
	s, err := server.New(cfg, server.Options{Version: "test", Log: log, Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		os.RemoveAll(cfg.StateDir)
	})
	api := client.InProcess(s.Handler())
	o.Client, o.Version, o.Log = func(http.Header) *client.Client { return api }, "test", log
	o.Languages, o.Managers = runtimes.Names(), runtimes.ManagerLanguages()
	return mcp.New(o), api
}

func call(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: a protocol error: %v", tool, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
	}
	return res, out
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func TestTools(t *testing.T) {
	cs, api := connect(t)
	ctx := context.Background()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*sdk.Tool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = tool
	}
	for _, want := range []string{"execute_code", "run_command", "write_file", "read_file", "list_files", "create_session", "close_session", "list_tools", "list_secrets"} {
		if names[want] == nil {
			t.Fatalf("no tool %s: %v", want, names)
		}
	}
	schema, _ := json.Marshal(names["execute_code"].InputSchema)
	if !strings.Contains(string(schema), `"required":["code"]`) || !strings.Contains(string(schema), `"enum":["python","bash","javascript"]`) {
		t.Errorf("execute_code's input schema: %s", schema)
	}

	// State persists in the connection's default session.
	res, out := call(t, cs, "execute_code", map[string]any{"code": "x = 41"})
	if res.IsError {
		t.Fatalf("x = 41: %s", text(res))
	}
	sid := out["session_id"].(string)
	res, out = call(t, cs, "execute_code", map[string]any{"code": "x + 1"})
	if res.IsError || out["result"] != "42" || out["session_id"] != sid {
		t.Fatalf("x + 1: %s %v", text(res), out)
	}

	// A plot is an image block; a file written is a resource link whose
	// resource reads back.
	res, out = call(t, cs, "execute_code", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.savefig('p.png')\nopen('data.csv', 'w').write('a,b\\n1,2\\n')\nplt.show()"})
	var png []byte
	var links []*sdk.ResourceLink
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.ImageContent:
			png = c.Data
		case *sdk.ResourceLink:
			links = append(links, c)
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG image block: %s", text(res))
	}
	if len(links) != 2 {
		t.Fatalf("resource links %v: %s", links, text(res))
	}
	for _, l := range links {
		rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: l.URI})
		if err != nil {
			t.Fatalf("read %s: %v", l.URI, err)
		}
		c := rr.Contents[0]
		if strings.HasSuffix(l.URI, "data.csv") && c.Text != "a,b\n1,2\n" {
			t.Errorf("data.csv: %+v", c)
		}
		if strings.HasSuffix(l.URI, "p.png") && !bytes.HasPrefix(c.Blob, []byte("\x89PNG")) {
			t.Errorf("p.png: %d bytes", len(c.Blob))
		}
	}

	// An exception is a tool error with the traceback, not a protocol
	// error; so is a timeout, and a missing argument.
	res, out = call(t, cs, "execute_code", map[string]any{"code": "1/0"})
	if !res.IsError || !strings.Contains(text(res), "ZeroDivisionError") || out["error"] == nil {
		t.Errorf("exception: %v %s", res.IsError, text(res))
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "import time\ntime.sleep(10)", "timeout_s": 0.5})
	if !res.IsError || out["kill_reason"] != "timeout" {
		t.Errorf("timeout: %v %s", res.IsError, text(res))
	}
	res, _ = call(t, cs, "execute_code", map[string]any{})
	if !res.IsError {
		t.Errorf("missing code: %s", text(res))
	}
	// The state survived all of that.
	if _, out = call(t, cs, "execute_code", map[string]any{"code": "x"}); out["result"] != "41" {
		t.Errorf("state after errors: %v", out)
	}

	// Another language runs in the same sandbox: it reads the file
	// Python wrote, in the same session.
	res, out = call(t, cs, "execute_code", map[string]any{"code": "tail -n 1 data.csv", "language": "bash"})
	if res.IsError || out["stdout"] != "1,2\n" || out["session_id"] != sid {
		t.Errorf("bash beside python: %s %v", text(res), out)
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "require('fs').readFileSync('data.csv', 'utf8').length", "language": "javascript"})
	if res.IsError || out["result"] != "8" || out["session_id"] != sid {
		t.Errorf("javascript beside python: %s %v", text(res), out)
	}

	// Shell commands and files in the same sandbox.
	res, out = call(t, cs, "run_command", map[string]any{"command": "ls; echo $((6*7))"})
	if res.IsError || !strings.Contains(out["stdout"].(string), "data.csv") || !strings.Contains(out["stdout"].(string), "42") {
		t.Errorf("run_command: %s", text(res))
	}
	res, _ = call(t, cs, "run_command", map[string]any{"command": "exit 3"})
	if !res.IsError || !strings.Contains(text(res), "exit code 3") {
		t.Errorf("failing command: %s", text(res))
	}
	if res, _ = call(t, cs, "write_file", map[string]any{"path": "notes/hello.txt", "content": "hello"}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	if res, _ = call(t, cs, "read_file", map[string]any{"path": "notes/hello.txt"}); text(res) != "hello" {
		t.Errorf("read_file: %s", text(res))
	}
	res, _ = call(t, cs, "read_file", map[string]any{"path": "p.png"})
	if img, ok := res.Content[0].(*sdk.ImageContent); !ok || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("read_file of a PNG: %T", res.Content[0])
	}
	if res, _ = call(t, cs, "read_file", map[string]any{"path": "../etc/passwd"}); !res.IsError {
		t.Errorf("read_file outside /workspace: %s", text(res))
	}
	res, out = call(t, cs, "list_files", map[string]any{"recursive": true})
	if res.IsError || !strings.Contains(text(res), "notes/hello.txt") {
		t.Errorf("list_files: %s", text(res))
	}

	// Explicit sessions, of another language.
	res, out = call(t, cs, "create_session", map[string]any{"language": "bash", "limits": map[string]any{"memory": "256M"}})
	if res.IsError {
		t.Fatalf("create_session: %s", text(res))
	}
	bash := out["session_id"].(string)
	if _, out = call(t, cs, "execute_code", map[string]any{"code": "echo hi from $((40 + 2))", "session_id": bash}); out["stdout"] != "hi from 42\n" {
		t.Errorf("bash session: %v", out)
	}
	// A bash block's exit status is the result's: non-zero is an error.
	res, out = call(t, cs, "execute_code", map[string]any{"code": "echo partial; (exit 3)", "session_id": bash})
	if !res.IsError || out["exit_code"] != float64(3) || !strings.Contains(text(res), "exit code 3") || out["stdout"] != "partial\n" {
		t.Errorf("a failing bash block: %v %s %v", res.IsError, text(res), out)
	}
	if res, out = call(t, cs, "execute_code", map[string]any{"code": "true", "session_id": bash}); res.IsError || out["exit_code"] != float64(0) {
		t.Errorf("a bash block that succeeds: %v %s", res.IsError, text(res))
	}
	if res, _ = call(t, cs, "close_session", map[string]any{"session_id": bash}); res.IsError {
		t.Errorf("close_session: %s", text(res))
	}
	if res, _ = call(t, cs, "execute_code", map[string]any{"code": "echo hi", "session_id": bash}); !res.IsError {
		t.Errorf("a closed session: %s", text(res))
	}

	// The default session ends with the connection.
	cs.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := api.Session(ctx, sid)
		if client.StatusOf(err) == http.StatusGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default session outlived its connection: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A default session that ended (out of memory) is replaced, and the
// result says so.
func TestDefaultSessionReplaced(t *testing.T) {
	cs, _ := connect(t)
	_, out := call(t, cs, "create_session", nil) // not the default one
	_ = out
	res, out := call(t, cs, "execute_code", map[string]any{"code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"})
	if !res.IsError || out["session_ended"] != true {
		t.Fatalf("the interpreter killed itself: %s", text(res))
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "print('fresh')"})
	if res.IsError || !strings.Contains(out["note"].(string), "ended") || out["stdout"] != "fresh\n" {
		t.Fatalf("after the default session ended: %s %v", text(res), out)
	}
}

// running waits until code in session id has written the file marker:
// it is running (a session is busy a little before its runtime has the
// code, and the runtime ignores an interrupt until it has).
func running(t *testing.T, api *client.Client, id, marker string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rc, err := api.Download(context.Background(), id, marker)
		if err == nil {
			rc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the code in session %s never started: %v", id, err)
		}
	}
}

// Agents call tools in parallel (the OpenAI Agents SDK does): calls on
// the connection's default session take turns instead of failing with
// "already executing".
func TestParallelCalls(t *testing.T) {
	cs, _ := connect(t)
	call(t, cs, "execute_code", map[string]any{"code": "n = 0"})
	const calls = 6
	errs := make(chan string, calls)
	for range calls {
		go func() {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "execute_code", Arguments: map[string]any{
				"code": "import time\nm = n\ntime.sleep(0.05)\nn = m + 1"}})
			switch {
			case err != nil:
				errs <- err.Error()
			case res.IsError:
				errs <- text(res)
			default:
				errs <- ""
			}
		}()
	}
	for range calls {
		if e := <-errs; e != "" {
			t.Errorf("a parallel call failed: %s", e)
		}
	}
	// One at a time: no increment was lost.
	if _, out := call(t, cs, "execute_code", map[string]any{"code": "n"}); out["result"] != "6" {
		t.Errorf("after %d parallel calls: %v", calls, out)
	}
}

// A cancelled call (notifications/cancelled) interrupts its execution,
// and a retry sent at once waits for it instead of finding the session
// still executing; the session's state survives.
func TestCancelThenRetry(t *testing.T) {
	cs, api := connect(t)
	_, out := call(t, cs, "execute_code", map[string]any{"code": "x = 1"})
	sid := out["session_id"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "execute_code", Arguments: map[string]any{
			"code": "import time\nopen('started', 'w').close()\ntry:\n    time.sleep(120)\nexcept KeyboardInterrupt:\n    time.sleep(0.3)\n    x = 2\n    raise"}})
		gone <- err
	}()
	running(t, api, sid, "started")
	cancel()
	if err := <-gone; err == nil {
		t.Error("the cancelled call returned a result")
	}
	res, out := call(t, cs, "execute_code", map[string]any{"code": "x"})
	if res.IsError || out["result"] != "2" {
		t.Fatalf("the retry after a cancel: %s", text(res))
	}
}

// The calls waiting for a session are bounded: one more is refused with
// a tool error that says why, the waiting ones run once it is free.
func TestQueueFull(t *testing.T) {
	cs, api, _ := connectOpts(t, mcp.Options{MaxQueued: 1})
	_, out := call(t, cs, "execute_code", map[string]any{"code": "x = 1"})
	sid := out["session_id"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "import time\nopen('started', 'w').close()\ntime.sleep(120)"}})
		long <- err
	}()
	running(t, api, sid, "started")
	results := make(chan *sdk.CallToolResult, 2)
	for range 2 {
		go func() {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x + 1"}})
			if err != nil {
				res = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
			}
			results <- res
		}()
	}
	// The session is held until cancel: the first answer is the refusal.
	if res := <-results; !res.IsError || !strings.Contains(text(res), "too many calls wait for session "+sid) {
		t.Errorf("the call over the bound: %v %s", res.IsError, text(res))
	}
	cancel()
	<-long
	if res := <-results; res.IsError || !strings.Contains(text(res), "2") {
		t.Errorf("the queued call: %s", text(res))
	}
}

// CloseAll (what `airlock mcp` runs before it exits) returns once every
// session the connections opened has ended: the default ones and
// create_session's.
func TestCloseAllEndsSessions(t *testing.T) {
	cs, api, srv := connectOpts(t, mcp.Options{})
	_, out := call(t, cs, "execute_code", map[string]any{"code": "1"})
	def := out["session_id"].(string)
	_, out = call(t, cs, "create_session", map[string]any{"language": "bash"})
	made := out["session_id"].(string)
	srv.CloseAll()
	for _, id := range []string{def, made} {
		if _, err := api.Session(context.Background(), id); client.StatusOf(err) != http.StatusGone {
			t.Errorf("session %s after CloseAll: %v", id, err)
		}
	}
	// And nothing new is opened after it.
	if res, _ := call(t, cs, "create_session", nil); !res.IsError || !strings.Contains(text(res), "closing") {
		t.Errorf("create_session after CloseAll: %s", text(res))
	}
}

// The stdio bridge (`airlock mcp --url`) relays a client to /mcp; when the
// server has ended its MCP session (mcp.session_timeout), the next call
// opens a new one with the client's initialize instead of failing, and
// its result tells the model that its sandboxes' state is gone.
func TestBridgeReopens(t *testing.T) {
	srv, _ := newServer(t, mcp.Options{})
	hs := httptest.NewServer(srv.HTTPHandler(mcp.HTTPOptions{Idle: time.Minute, MaxQuiet: time.Hour}))
	t.Cleanup(hs.Close)
	toBridge, clientOut := io.Pipe()
	clientIn, fromBridge := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mcp.Bridge(ctx, mcp.BridgeOptions{URL: hs.URL, In: toBridge, Out: fromBridge, Log: slog.New(slog.DiscardHandler)})
	}()
	t.Cleanup(func() {
		cancel()
		clientOut.Close()
		if err := <-done; err != nil {
			t.Errorf("Bridge: %v", err)
		}
	})
	cs := clientOn(t, &sdk.IOTransport{Reader: clientIn, Writer: clientOut})
	// As clients do, it lists the tools first (the bridge learns which
	// results have a note).
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, out := call(t, cs, "execute_code", map[string]any{"code": "x = 1"}); out["session_id"] == nil {
		t.Fatalf("through the bridge: %v", out)
	}
	endAll := func() {
		for ss := range srv.SDK().Sessions() {
			ss.Close() // as the server's timeout does
		}
	}
	endAll()
	res, out := call(t, cs, "execute_code", map[string]any{"code": "print('again')"})
	if res.IsError || out["stdout"] != "again\n" {
		t.Fatalf("after the server ended the session: %s", text(res))
	}
	// The model is told that its state is gone, in the text it reads and
	// in the structured result; once.
	note, _ := out["note"].(string)
	if !strings.HasPrefix(text(res), "note: the airlock server had ended this MCP session") || !strings.Contains(note, "are gone") {
		t.Errorf("the first result after a reopen does not say the state is gone: note %q, text %q", note, text(res))
	}
	res, out = call(t, cs, "execute_code", map[string]any{"code": "print('then')"})
	if out["note"] != nil || strings.Contains(text(res), "had ended") {
		t.Errorf("the next result says it again: %s", text(res))
	}
	// A tool whose result has no note in its schema gets the text only:
	// its structured result stays valid for its schema.
	endAll()
	res, out = call(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "a"})
	if res.IsError || !strings.HasPrefix(text(res), "note: the airlock server had ended") || out["note"] != nil || out["session_id"] == nil {
		t.Errorf("write_file after a reopen: %s %v", text(res), out)
	}
}
