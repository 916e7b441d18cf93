package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/session"
)

// toolServer is a tool's upstream on the host's loopback: it records
// every request it gets.
type toolServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newToolServer(t *testing.T) *toolServer {
	ts := &toolServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.reqs = append(ts.reqs, r.Clone(context.Background()))
		ts.mu.Unlock()
		switch r.URL.Path {
		case "/search":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"q": r.URL.Query().Get("q"), "hits": []string{"a", "b"}})
		case "/echo":
			// A careless upstream that echoes the credential back.
			fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
		case "/big":
			w.Write(make([]byte, 256<<10))
		case "/hang":
			<-r.Context().Done()
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *toolServer) requests() []*http.Request {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]*http.Request(nil), ts.reqs...)
}

// toolsConfig declares tools against ts, their credential in a file.
func toolsConfig(t *testing.T, ts *toolServer, secret string) func(*config.Config) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := json.RawMessage(`{"type":"object","required":["q"],"additionalProperties":false,"properties":{"q":{"type":"string","maxLength":20}}}`)
	empty := json.RawMessage(`{"type":"object","additionalProperties":false}`)
	cred := &config.Credential{File: file}
	return func(c *config.Config) {
		c.Pool.Size = map[string]int{}
		c.Tools = map[string]config.Tool{
			"search":      {Description: "Search.", HTTP: &config.HTTPTool{URL: ts.URL + "/search?q={q}"}, Arguments: schema, Credential: cred},
			"echo":        {Description: "Echo.", HTTP: &config.HTTPTool{URL: ts.URL + "/echo"}, Arguments: empty, Credential: cred},
			"big":         {Description: "Big.", HTTP: &config.HTTPTool{URL: ts.URL + "/big"}, Arguments: empty, MaxResponse: 64 << 10},
			"hang":        {Description: "Hangs.", HTTP: &config.HTTPTool{URL: ts.URL + "/hang"}, Arguments: empty, Timeout: config.Duration(300e6)},
			"not_granted": {Description: "Not this session's.", HTTP: &config.HTTPTool{URL: ts.URL + "/search?q={q}"}, Arguments: schema, Credential: cred},
		}
	}
}

// scanForSecret is Python that looks everywhere the sandbox can read
// (its environment, /proc/*/environ and cmdline, files under the usual
// roots, and the EXTRA pairs of name and bytes) for a secret it knows
// only the SHA-256 of (SECRET_SHA256: the hash of a 32-hex-digit
// part), and prints what holds it.
const scanForSecret = `
import os, re, hashlib
WANT = os.environ["SECRET_SHA256"]
def has(data):
    for m in set(re.findall(rb"[0-9a-f]{32}", data)):
        if hashlib.sha256(m).hexdigest() == WANT:
            return True
    return False
found = [name for name, data in EXTRA if has(data)]
for k, v in os.environ.items():
    if has(v.encode()):
        found.append("env:" + k)
for root in ["/proc", "/opt", "/tmp", "/workspace", "/etc", "/run", "/var", "/home", "/root", "/dev/shm"]:
    n = 0
    for d, dirs, files in os.walk(root):
        if root == "/proc" and d.count("/") > 2:
            dirs[:] = []
        for f in files:
            p = os.path.join(d, f)
            if root == "/proc" and f not in ("environ", "cmdline"):
                continue
            n += 1
            if n > 20000:
                break
            try:
                with open(p, "rb") as fh:
                    if has(fh.read(1 << 20)):
                        found.append(p)
            except OSError:
                pass
print("found", found)
`

// toolsCode runs inside the sandbox: every call, legitimate or an
// attack, prints one line; then it looks everywhere it can read for the
// credential (it knows only its hash).
const toolsCode = `
import json, os, hashlib, re, http.client
from airlock_tools import call, list_tools, ToolError

def attempt(label, f):
    try:
        print(label, "ok", json.dumps(f(), sort_keys=True))
    except ToolError as e:
        print(label, "refused", e.code, e.field or "-", e.rule or "-", "|", e.message)

def raw(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", 3129, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, json.loads(r.read())

print("list", sorted(t["name"] for t in list_tools()))
attempt("search", lambda: call("search", q="hello"))
attempt("echo", lambda: call("echo"))
attempt("too_long", lambda: call("search", q="x" * 100))
attempt("extra_arg", lambda: call("search", q="a", url="http://evil.test/"))
attempt("not_granted", lambda: call("not_granted", q="a"))
attempt("unknown", lambda: call("../search", q="a"))
attempt("inject", lambda: call("search", q="a\r\nX-Evil: 1"))
attempt("big", lambda: call("big"))
attempt("hang", lambda: call("hang"))
print("malformed", *raw("POST", "/v1/tools/search", b"{not json"))
print("array", *raw("POST", "/v1/tools/search", b"[1,2]"))
print("oversize", *raw("POST", "/v1/tools/search", json.dumps({"q": "y" * (200 << 10)}).encode()))
# A forged call naming another session, or carrying its own credential:
# the endpoint is the session's alone and ignores both.
print("forged", *raw("POST", "/v1/tools/not_granted?session=other", b'{"q":"a"}', {"X-Airlock-Session": "other", "Authorization": "Bearer mine"}))

EXTRA = [("list_tools", json.dumps(list_tools()).encode())]
` + scanForSecret

// Sandbox code calls its session's tools through airlock: the tool gets
// the credential, the sandbox never does (its environment, every file it
// can read, the answers: an upstream that echoes it is scrubbed); every
// attack from inside is refused with a reason (an argument over its
// schema, a tool not granted, a forged call, malformed and oversize
// bodies, header injection, a huge answer, a hang); each call is in the
// execution's tool_calls, its stream and the audit observers.
func TestToolsFromSandbox(t *testing.T) {
	kernels(t, testToolsFromSandbox)
}

func testToolsFromSandbox(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	ts := newToolServer(t)
	var b [16]byte
	rand.Read(b[:])
	secretPart := hex.EncodeToString(b[:])
	secret := "tok-" + secretPart
	rec := newRecorder()
	s, _ := testServer(t, rec, with, toolsConfig(t, ts, secret))
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()

	if _, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Tools: []string{"nope"}}); err == nil ||
		!strings.Contains(err.Error(), "the tools you may use are: big, echo, hang, not_granted, search") {
		t.Fatalf("unknown tool: %v", err)
	}
	sum := sha256.Sum256([]byte(secretPart))
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso,
		Tools: []string{"search", "echo", "big", "hang"}, Env: map[string]string{"SECRET_SHA256": hex.EncodeToString(sum[:])}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sess.Tools, ",") != "big,echo,hang,search" {
		t.Errorf("session tools %q", sess.Tools)
	}
	var streamed int
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: toolsCode}, func(e apitype.Event) {
		if e.Type == apitype.EventToolCall {
			streamed++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] = v
	}
	want := map[string]string{
		"list":        `['big', 'echo', 'hang', 'search']`,
		"search":      `ok {"hits": ["a", "b"], "q": "hello"}`,
		"echo":        `ok "you sent Bearer [REDACTED:credential]"`,
		"too_long":    "refused invalid_argument q maxLength",
		"extra_arg":   "refused invalid_argument url additionalProperties",
		"not_granted": "refused not_found - tool",
		"unknown":     "refused not_found - tool",
		"inject":      "refused invalid_argument q control_characters",
		"big":         "refused too_large - max_response",
		"hang":        "refused timeout - timeout",
		"malformed":   "400",
		"array":       "400",
		"oversize":    "413",
		"forged":      "404",
		"found":       "[]",
	}
	for k, w := range want {
		if !strings.HasPrefix(lines[k], w) {
			t.Errorf("%s: %q, want it to start with %q", k, lines[k], w)
		}
	}
	if strings.Contains(r.Stdout+r.Stderr, secret) {
		t.Error("the credential reached the sandbox's output")
	}
	// The tool got the credential; nothing from inside chose a header.
	var authed int
	for _, q := range ts.requests() {
		if q.Header.Get("Authorization") == "Bearer "+secret {
			authed++
		}
		if q.Header.Get("X-Evil") != "" || q.Header.Get("X-Airlock-Session") != "" {
			t.Errorf("an argument became a header: %v", q.Header)
		}
	}
	if authed != 2 { // search, echo
		t.Errorf("%d requests carried the credential, want 2", authed)
	}
	// Every call is in the result, the stream and the observers, none
	// with the credential.
	if len(r.ToolCalls) != 13 || streamed != 13 {
		t.Errorf("%d tool calls in the result, %d streamed, want 13", len(r.ToolCalls), streamed)
	}
	var observed int
	rec.mu.Lock()
	events := append([]any(nil), rec.events...)
	rec.mu.Unlock()
	for _, e := range events {
		if tc, ok := e.(session.ToolCallEvent); ok {
			observed++
			if tc.Session != sess.ID || tc.Execution == "" {
				t.Errorf("tool call event %+v", tc)
			}
		}
	}
	if observed != 13 {
		t.Errorf("%d tool calls observed, want 13", observed)
	}
	doc, _ := json.Marshal(r.ToolCalls)
	if strings.Contains(string(doc), secretPart) {
		t.Error("a tool call record holds the credential")
	}
	tools, err := c.SessionTools(ctx, sess.ID)
	if err != nil || len(tools.Tools) != 4 {
		t.Errorf("session tools: %+v, %v", tools, err)
	}
	if err := c.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
}

// An agent sees over MCP what its code may call: list_tools (the
// caller's, then a session's), create_session with tools, and
// execute_code's result naming each call and airlock's decision.
func TestToolsOverMCP(t *testing.T) {
	ts := newToolServer(t)
	s, _ := testServer(t, newRecorder(), toolsConfig(t, ts, "tok-0123456789abcdef0123"))
	cs := mcpClient(t, s)
	text, isErr, out := mcpCall(t, cs, "list_tools", nil)
	if isErr || !strings.Contains(text, "search (http): Search.") || len(out["tools"].([]any)) != 5 {
		t.Fatalf("list_tools: %v %q %v", isErr, text, out)
	}
	text, isErr, out = mcpCall(t, cs, "create_session", map[string]any{"tools": []string{"search"}})
	if isErr || !strings.Contains(text, "its code may call the tools search") {
		t.Fatalf("create_session: %v %q", isErr, text)
	}
	id := out["session_id"].(string)
	text, isErr, out = mcpCall(t, cs, "list_tools", map[string]any{"session_id": id})
	if isErr || len(out["tools"].([]any)) != 1 || strings.Contains(text, "echo") {
		t.Fatalf("list_tools of the session: %v %q", isErr, text)
	}
	text, _, out = mcpCall(t, cs, "execute_code", map[string]any{"session_id": id, "code": `
from airlock_tools import call, ToolError
print(call("search", q="mcp")["q"])
try:
    call("search", q="z" * 50)
except ToolError as e:
    print(e.code)
`})
	if !strings.Contains(text, "tool call search: ok, status 200") ||
		!strings.Contains(text, "tool call search: refused (maxLength), argument q: must be at most 20 characters") ||
		len(out["tool_calls"].([]any)) != 2 {
		t.Fatalf("execute_code: %q", text)
	}
	if text, isErr, _ = mcpCall(t, cs, "create_session", map[string]any{"tools": []string{"nope"}}); !isErr || !strings.Contains(text, "no tool \"nope\"") {
		t.Fatalf("an unknown tool: %v %q", isErr, text)
	}
}

// The other clients: airlock-tool in a bash session (and its exit
// statuses: 0, 2 for a refusal), require('airlock_tools') in a
// JavaScript one.
func TestToolsCLIAndJS(t *testing.T) {
	ts := newToolServer(t)
	s, _ := testServer(t, newRecorder(), toolsConfig(t, ts, "tok-0123456789abcdef0123"))
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()
	for _, tc := range []struct{ lang, code, want string }{
		{"bash", `airlock-tool --list; airlock-tool search q=cli; echo "exit $?"; airlock-tool search --json '{"q": "` + strings.Repeat("x", 30) + `"}' 2>&1; echo "exit $?"`,
			"search\thttp\tSearch.\n{\n  \"hits\": [\n    \"a\",\n    \"b\"\n  ],\n  \"q\": \"cli\"\n}\nexit 0\nairlock-tool: search: invalid_argument: must be at most 20 characters (argument 'q', rule maxLength)\nexit 2\n"},
		{"javascript", `const t = require('airlock_tools');
console.log((await t.call('search', {q: 'js'})).q);
try { await t.call('search', {q: 'y'.repeat(30)}); } catch (e) { console.log(e.code, e.field, e.rule); }`, "js\ninvalid_argument q maxLength\n"},
	} {
		sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: tc.lang, Tools: []string{"search"}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: tc.code}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != tc.want {
			t.Errorf("%s: stdout %q, stderr %q, error %+v; want %q", tc.lang, r.Stdout, r.Stderr, r.Error, tc.want)
		}
		if len(r.ToolCalls) == 0 {
			t.Errorf("%s: no tool calls in the result", tc.lang)
		}
		c.DeleteSession(ctx, sess.ID)
	}
}

// Two contexts execute at once and each calls a tool while the other
// runs: each call goes to its own context's execution (tool_calls,
// context), not to the audit log only.
func TestToolsPerContext(t *testing.T) {
	ts := newToolServer(t)
	s, _ := testServer(t, newRecorder(), toolsConfig(t, ts, "tok-0123456789abcdef0123"))
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Tools: []string{"search"}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.CreateContext(ctx, sess.ID, apitype.CreateContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Each marks that it runs, waits for the other, calls, and waits
	// for the other's call before it ends.
	code := func(me, other string) string {
		return fmt.Sprintf(`import os, time
from airlock_tools import call
def wait(p):
    while not os.path.exists(p):
        time.sleep(0.01)
open("/workspace/%[1]s", "w").close()
wait("/workspace/%[2]s")
print(call("search", q="from-%[1]s")["q"])
open("/workspace/%[1]s.done", "w").close()
wait("/workspace/%[2]s.done")
`, me, other)
	}
	results := make([]*apitype.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, cx := range []string{"", second.ID} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me, other := "a", "b"
			if i == 1 {
				me, other = other, me
			}
			results[i], errs[i] = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code(me, other), Context: cx}, nil)
		}()
	}
	wg.Wait()
	for i, want := range []struct{ q, ctx string }{{"from-a", "python"}, {"from-b", second.ID}} {
		r := results[i]
		if errs[i] != nil || r.Error != nil {
			t.Fatalf("context %d: %v %+v %s", i, errs[i], r.Error, r.Stderr)
		}
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].Context != want.ctx || !strings.Contains(string(r.ToolCalls[0].Arguments), want.q) {
			t.Errorf("context %d: tool calls %+v, want one from %s with %s", i, r.ToolCalls, want.ctx, want.q)
		}
	}
}

// One-shot runs (POST /v1/execute, POST /v1/run) take tools as
// sessions do; their calls are in the run's result.
func TestToolsOneShot(t *testing.T) {
	ts := newToolServer(t)
	s, _ := testServer(t, newRecorder(), toolsConfig(t, ts, "tok-0123456789abcdef0123"))
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()
	code := "from airlock_tools import call\nprint(call('search', q='once')['q'])\n"
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Tools: []string{"search"}, Code: code}, nil)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := c.RunProgram(ctx, apitype.ProgramRequest{Language: "python", Tools: []string{"search"}, Code: code}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]*apitype.OneShotResult{"execute": one, "run": prog} {
		if r.Stdout != "once\n" || len(r.ToolCalls) != 1 || r.ToolCalls[0].Decision != apitype.ToolOK {
			t.Errorf("%s: stdout %q stderr %q tool calls %+v", what, r.Stdout, r.Stderr, r.ToolCalls)
		}
	}
	if _, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Tools: []string{"not_a_tool"}, Code: code}, nil); err == nil {
		t.Error("a one-shot run took a tool its tenant does not have")
	}
}
