package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/secrets"
)

const testSecret = "s3cr3t-T0KEN-abcdef0123456789"

// received is what the tool server was sent.
type received struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
}

// toolServer is a tool on loopback that records every request; its
// routes answer in the ways a tool can (echo, slow, huge, redirect).
type toolServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
	hang chan struct{}
}

func newToolServer(t *testing.T) *toolServer {
	ts := &toolServer{hang: make(chan struct{})}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ts.mu.Lock()
		ts.reqs = append(ts.reqs, received{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(b)})
		ts.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/echo"):
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"path": r.URL.EscapedPath(), "query": r.URL.RawQuery, "auth": r.Header.Get("Authorization"), "body": string(b)})
		case r.URL.Path == "/hang":
			select {
			case <-ts.hang:
			case <-r.Context().Done():
			}
		case r.URL.Path == "/huge":
			chunk := bytes.Repeat([]byte("x"), 1<<16)
			for i := 0; i < 1<<14; i++ { // a gigabyte, unless the reader stops
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "http://example.invalid/steal", http.StatusFound)
		case r.URL.Path == "/text":
			io.WriteString(w, "plain text, credential "+r.Header.Get("Authorization"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(ts.hang); ts.Close() })
	return ts
}

func (ts *toolServer) last(t *testing.T) received {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.reqs) == 0 {
		t.Fatal("the tool server received nothing")
	}
	return ts.reqs[len(ts.reqs)-1]
}

func (ts *toolServer) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.reqs)
}

const searchSchema = `{"type": "object",
	"properties": {
		"q": {"type": "string", "maxLength": 32},
		"kind": {"type": "string", "enum": ["web", "news"]},
		"n": {"type": "integer", "minimum": 1, "maximum": 10},
		"id": {"type": "string", "pattern": "^[a-z0-9 ./-]{1,40}$", "maxLength": 40},
		"note": {"type": "string", "maxLength": 100}
	},
	"required": ["id"]}`

// testConfig declares the tools the tests call.
func testConfig(t *testing.T, base string) config.Config {
	t.Helper()
	dir := t.TempDir()
	secretFile := dir + "/token"
	if err := os.WriteFile(secretFile, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	cred := &config.Credential{File: secretFile}
	c.Tools = map[string]config.Tool{
		"search": {Description: "searches", Arguments: json.RawMessage(searchSchema), Credential: cred,
			HTTP: &config.HTTPTool{URL: base + "/echo/{id}/items?q={q}&kind={kind}&n={n}"}},
		"post": {Description: "writes", Writable: true, Arguments: json.RawMessage(searchSchema), Credential: cred,
			HTTP: &config.HTTPTool{Method: "POST", URL: base + "/echo/{id}"}, RedactArguments: []string{"note"}},
		"hang": {Arguments: json.RawMessage(`{"type":"object"}`), Credential: cred, Timeout: config.Duration(200 * time.Millisecond),
			HTTP: &config.HTTPTool{URL: base + "/hang"}},
		"huge":     {Arguments: json.RawMessage(`{"type":"object"}`), Credential: cred, HTTP: &config.HTTPTool{URL: base + "/huge"}, MaxResponse: 1 << 20},
		"redirect": {Arguments: json.RawMessage(`{"type":"object"}`), Credential: cred, HTTP: &config.HTTPTool{URL: base + "/redirect"}},
		"text":     {Arguments: json.RawMessage(`{"type":"object"}`), Credential: cred, HTTP: &config.HTTPTool{URL: base + "/text"}},
		"rated": {Arguments: json.RawMessage(`{"type":"object"}`), HTTP: &config.HTTPTool{URL: base + "/echo/r"},
			RatePerMinute: 1, Burst: 2, DailyPerSession: 1000},
		"budget": {Arguments: json.RawMessage(`{"type":"object"}`), HTTP: &config.HTTPTool{URL: base + "/echo/b"},
			RatePerMinute: 1000, Burst: 100, DailyPerSession: 2, DailyPerTenant: 3},
	}
	c.Tenants = map[string]config.Tenant{"acme": {Tools: map[string]config.Tool{
		"own": {Arguments: json.RawMessage(`{"type":"object"}`), HTTP: &config.HTTPTool{URL: base + "/echo/own"}},
	}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// harness is a broker with a log, and every record and answer it gave.
type harness struct {
	b    *Broker
	log  bytes.Buffer
	mu   sync.Mutex
	recs []apitype.ToolCall
}

func newHarness(t *testing.T, c config.Config) *harness {
	t.Helper()
	h := &harness{}
	b, err := New(c, Options{Log: slog.New(slog.NewTextHandler(&syncWriter{w: &h.log, mu: &h.mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	return h
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (h *harness) session(tenant string, tools ...string) *Session {
	return h.b.NewSession(SessionOptions{ID: "s1", Tenant: tenant, Tools: tools, Report: func(c apitype.ToolCall) {
		h.mu.Lock()
		h.recs = append(h.recs, c)
		h.mu.Unlock()
	}})
}

// noSecret fails if the credential appears in anything the harness saw:
// its log, its records, and what the test adds (answers, errors).
func (h *harness) noSecret(t *testing.T, more ...any) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	all := []any{h.log.String(), h.recs}
	for _, v := range append(all, more...) {
		b, _ := json.Marshal(v)
		if s, ok := v.(string); ok {
			b = []byte(s)
		}
		for _, f := range secrets.Forms(testSecret) {
			if bytes.Contains(b, []byte(f)) {
				t.Fatalf("the credential (as %q) leaked into %s", f, clip(string(b), 400))
			}
		}
	}
}

func call(t *testing.T, s *Session, name string, args string) (*Result, *Refusal, apitype.ToolCall) {
	t.Helper()
	return s.Call(context.Background(), name, []byte(args))
}

func TestHTTPToolCall(t *testing.T) {
	ts := newToolServer(t)
	h := newHarness(t, testConfig(t, ts.URL))
	s := h.session("", "search", "post", "text")

	res, ref, rec := call(t, s, "search", `{"id": "a b/c", "q": "x&y=z", "kind": "news", "n": 3}`)
	if ref != nil {
		t.Fatal(ref)
	}
	got := ts.last(t)
	if got.Method != "GET" || got.Path != "/echo/a%20b%2Fc/items" || got.RawQuery != "q=x%26y%3Dz&kind=news&n=3" {
		t.Fatalf("the tool got %s %s?%s", got.Method, got.Path, got.RawQuery)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+testSecret {
		t.Fatalf("the tool got Authorization %q, want the credential", a)
	}
	if res.Status != 200 || res.JSON == nil || res.Kind != apitype.ToolHTTP {
		t.Fatalf("result %+v", res)
	}
	// The echo of the credential comes back scrubbed.
	if !bytes.Contains(res.JSON, []byte(redacted)) {
		t.Fatalf("the answer's echo of the credential is not scrubbed: %s", res.JSON)
	}
	if rec.Decision != apitype.ToolOK || rec.Status == nil || *rec.Status != 200 || rec.BytesOut == 0 || rec.Tool != "search" {
		t.Fatalf("record %+v", rec)
	}

	// An optional query argument left out drops its parameter.
	if _, ref, _ := call(t, s, "search", `{"id": "x"}`); ref != nil {
		t.Fatal(ref)
	}
	if got := ts.last(t); got.RawQuery != "" {
		t.Fatalf("query %q, want none", got.RawQuery)
	}

	// A writable tool sends the arguments the URL does not use as JSON;
	// the record hides redact_arguments.
	_, ref, rec = call(t, s, "post", `{"id": "u1", "note": "private words", "n": 2}`)
	if ref != nil {
		t.Fatal(ref)
	}
	if got := ts.last(t); got.Method != "POST" || got.Body != `{"n":2,"note":"private words"}` || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the tool got %s body %q", got.Method, got.Body)
	}
	if bytes.Contains(rec.Arguments, []byte("private words")) || !bytes.Contains(rec.Arguments, []byte(`"note":"[REDACTED]"`)) {
		t.Fatalf("recorded arguments %s", rec.Arguments)
	}

	res, ref, _ = call(t, s, "text", `{}`)
	if ref != nil || res.Text == nil || strings.Contains(*res.Text, testSecret) || !strings.Contains(*res.Text, redacted) {
		t.Fatalf("text answer %+v %v", res, ref)
	}
	h.noSecret(t, res)
}

func TestRefusals(t *testing.T) {
	ts := newToolServer(t)
	h := newHarness(t, testConfig(t, ts.URL))
	for _, tc := range []struct {
		name, tool, args  string
		kind              error
		field, rule, want string
	}{
		{"unknown tool", "nope", `{}`, errdefs.ErrNotFound, "", "tool", "no tool \"nope\""},
		{"tool not opted in", "budget", `{}`, errdefs.ErrNotFound, "", "tool", "its tools are: search"},
		{"not json", "search", `{"id":`, errdefs.ErrInvalidArgument, "", "json", "not JSON"},
		{"not an object", "search", `["x"]`, errdefs.ErrInvalidArgument, "", "type", "JSON object"},
		{"two values", "search", `{"id":"a"} {}`, errdefs.ErrInvalidArgument, "", "json", "more than one"},
		{"missing", "search", `{}`, errdefs.ErrInvalidArgument, "id", "required", "required"},
		{"unknown argument", "search", `{"id":"a","x":1}`, errdefs.ErrInvalidArgument, "x", "additionalProperties", "takes: q, kind, n, id, note"},
		{"too long", "search", `{"id":"a","q":"` + strings.Repeat("a", 33) + `"}`, errdefs.ErrInvalidArgument, "q", "maxLength", "at most 32 characters"},
		{"not in enum", "search", `{"id":"a","kind":"images"}`, errdefs.ErrInvalidArgument, "kind", "enum", `one of: "web", "news"`},
		{"over maximum", "search", `{"id":"a","n":11}`, errdefs.ErrInvalidArgument, "n", "maximum", "at most 10"},
		{"not an integer", "search", `{"id":"a","n":1.5}`, errdefs.ErrInvalidArgument, "n", "type", "an integer"},
		{"wrong type", "search", `{"id":7}`, errdefs.ErrInvalidArgument, "id", "type", "a string"},
		{"pattern", "search", `{"id":"A!"}`, errdefs.ErrInvalidArgument, "id", "pattern", "match the pattern"},
		{"CRLF in a query value", "search", `{"id":"a","q":"x\r\nX-Evil: 1"}`, errdefs.ErrInvalidArgument, "q", "control_characters", "control character"},
		{"NUL", "search", `{"id":"a","q":"x\u0000y"}`, errdefs.ErrInvalidArgument, "q", "control_characters", "control character"},
		{"dot dot segment", "search", `{"id":".."}`, errdefs.ErrInvalidArgument, "id", "path_segment", `".."`},
		{"dot segment", "search", `{"id":"."}`, errdefs.ErrInvalidArgument, "id", "path_segment", `"."`},
		{"oversized arguments", "search", `{"id":"a","q":"` + strings.Repeat("a", 70<<10) + `"}`, errdefs.ErrTooLarge, "", "max_argument_bytes", "more than the 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.count()
			s := h.session("", "search")
			res, ref, rec := call(t, s, tc.tool, tc.args)
			if ref == nil {
				t.Fatalf("called: %+v", res)
			}
			if !errors.Is(ref, tc.kind) || ref.Field != tc.field || ref.Rule != tc.rule || !strings.Contains(ref.Msg, tc.want) {
				t.Fatalf("refusal %v %q %q %q, want %v %q %q ~%q", ref.Kind, ref.Field, ref.Rule, ref.Msg, tc.kind, tc.field, tc.rule, tc.want)
			}
			if rec.Decision != apitype.ToolRefused || rec.Code != errdefs.Code(tc.kind) || rec.Field != tc.field || rec.Rule != tc.rule {
				t.Fatalf("record %+v", rec)
			}
			if len(rec.Arguments) > maxRecordedArgs || !json.Valid(rec.Arguments) && rec.Arguments != nil {
				t.Fatalf("recorded arguments are %d bytes, valid JSON %v", len(rec.Arguments), json.Valid(rec.Arguments))
			}
			if ts.count() != before {
				t.Fatal("a refused call reached the tool")
			}
		})
	}
	h.noSecret(t)
}

func TestFailures(t *testing.T) {
	ts := newToolServer(t)
	h := newHarness(t, testConfig(t, ts.URL))
	s := h.session("", "hang", "huge", "redirect")

	// A tool that hangs is cut off at its timeout.
	_, ref, rec := call(t, s, "hang", `{}`)
	if !errors.Is(ref, errdefs.ErrTimeout) || ref.Rule != "timeout" || rec.Decision != apitype.ToolFailed {
		t.Fatalf("hang: %v %+v", ref, rec)
	}
	// An upstream answering a gigabyte is refused at the cap, without
	// reading it all.
	start := time.Now()
	_, ref, rec = call(t, s, "huge", `{}`)
	if !errors.Is(ref, errdefs.ErrTooLarge) || ref.Rule != "max_response" || rec.Decision != apitype.ToolFailed {
		t.Fatalf("huge: %v %+v", ref, rec)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the huge answer took %s: read whole?", d)
	}
	// A redirect is an answer, not followed: the credential never goes
	// to where it points.
	res, ref, _ := call(t, s, "redirect", `{}`)
	if ref != nil || res.Status != http.StatusFound {
		t.Fatalf("redirect: %+v %v", res, ref)
	}
	// The server's going away is a failure naming the kind only.
	ts.CloseClientConnections()
	h.noSecret(t, ref, res)
}

func TestRatesAndBudgets(t *testing.T) {
	ts := newToolServer(t)
	now := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	c := testConfig(t, ts.URL)
	h := newHarness(t, c)
	h.b.now = func() time.Time { return now }

	s := h.session("", "rated")
	for i := 0; i < 2; i++ { // the burst
		if _, ref, _ := call(t, s, "rated", `{}`); ref != nil {
			t.Fatal(ref)
		}
	}
	_, ref, _ := call(t, s, "rated", `{}`)
	if !errors.Is(ref, errdefs.ErrQuota) || ref.Rule != "rate_per_minute" || ref.RetryAfter <= 0 || ref.RetryAfter > time.Minute {
		t.Fatalf("over the rate: %v (retry %s)", ref, ref.RetryAfter)
	}
	now = now.Add(time.Minute) // one token a minute
	if _, ref, _ := call(t, s, "rated", `{}`); ref != nil {
		t.Fatal(ref)
	}

	// Two calls a session a day, three a tenant.
	now = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	a, b := h.session("t", "budget"), h.session("t", "budget")
	for _, s := range []*Session{a, a, b} {
		if _, ref, _ := call(t, s, "budget", `{}`); ref != nil {
			t.Fatal(ref)
		}
	}
	if _, ref, _ := call(t, a, "budget", `{}`); !errors.Is(ref, errdefs.ErrQuota) || ref.Rule != "daily_per_session" {
		t.Fatalf("session budget: %v", ref)
	}
	_, ref, _ = call(t, b, "budget", `{}`)
	if !errors.Is(ref, errdefs.ErrQuota) || ref.Rule != "daily_per_tenant" || ref.RetryAfter != 12*time.Hour {
		t.Fatalf("tenant budget: %v", ref)
	}
	// Another tenant's budget is its own; the next day starts afresh.
	if _, ref, _ := call(t, h.session("u", "budget"), "budget", `{}`); ref != nil {
		t.Fatal(ref)
	}
	now = now.Add(12 * time.Hour)
	if _, ref, _ := call(t, b, "budget", `{}`); ref != nil {
		t.Fatal(ref)
	}
}

func TestConcurrency(t *testing.T) {
	ts := newToolServer(t)
	c := testConfig(t, ts.URL)
	c.Broker.SessionConcurrency, c.Broker.ServerConcurrency = 1, 2
	hang := c.Tools["hang"]
	hang.Timeout = config.Duration(time.Minute)
	c.Tools["hang"] = hang
	h := newHarness(t, c)
	s1, s2, s3 := h.session("", "hang", "search"), h.session("", "hang"), h.session("", "search")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range []*Session{s1, s2} {
		wg.Add(1)
		go func() { defer wg.Done(); s.Call(ctx, "hang", []byte(`{}`)) }()
	}
	for ts.count() < 2 { // both calls reached the tool
		time.Sleep(time.Millisecond)
	}
	if _, ref, _ := call(t, s1, "search", `{"id":"a"}`); !errors.Is(ref, errdefs.ErrLimit) || ref.Rule != "session_concurrency" {
		t.Fatalf("session: %v", ref)
	}
	if _, ref, _ := call(t, s3, "search", `{"id":"a"}`); !errors.Is(ref, errdefs.ErrLimit) || ref.Rule != "server_concurrency" {
		t.Fatalf("server: %v", ref)
	}
	cancel()
	wg.Wait()
	if _, ref, _ := call(t, s3, "search", `{"id":"a"}`); ref != nil {
		t.Fatalf("after: %v", ref)
	}
}

func TestResolve(t *testing.T) {
	ts := newToolServer(t)
	h := newHarness(t, testConfig(t, ts.URL))
	got, err := h.b.Resolve("acme", []string{"search", "own", "search"})
	if err != nil || fmt.Sprint(got) != "[own search]" {
		t.Fatalf("%v %v", got, err)
	}
	_, err = h.b.Resolve("other", []string{"own", "nope"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `no tool "own", "nope"`) || !strings.Contains(err.Error(), "you may use are: budget, hang") {
		t.Fatalf("%v", err)
	}
	var none *Broker
	if _, err := none.Resolve("", []string{"x"}); !strings.Contains(fmt.Sprint(err), "declares no tools") {
		t.Fatal(err)
	}
	infos := h.b.Describe("acme", []string{"own", "post"})
	if len(infos) != 2 || infos[0].Name != "own" || infos[1].Kind != apitype.ToolHTTP || !infos[1].Writable || !json.Valid(infos[1].Arguments) {
		t.Fatalf("%+v", infos)
	}
}

// TestEndpoint serves a session's tools on a listener, as inside a
// sandbox, and calls them over HTTP.
func TestEndpoint(t *testing.T) {
	ts := newToolServer(t)
	c := testConfig(t, ts.URL)
	hang := c.Tools["hang"]
	hang.Timeout = config.Duration(time.Minute)
	c.Tools["hang"] = hang
	h := newHarness(t, c)
	s := h.session("", "search", "hang")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(ln, slog.Default())
	base := "http://" + ln.Addr().String()

	resp, err := http.Get(base + "/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	var list apitype.ToolList
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Tools) != 2 || list.Tools[0].Name != "search" {
		t.Fatalf("%+v", list)
	}
	post := func(name, body string) (int, Answer, http.Header) {
		resp, err := http.Post(base+"/v1/tools/"+name, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a Answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, a, resp.Header
	}
	code, a, _ := post("search", `{"id":"x"}`)
	if code != 200 || !a.OK || a.Result.Status != 200 {
		t.Fatalf("%d %+v", code, a)
	}
	code, a, _ = post("search", `{"id":"x","n":99}`)
	if code != 400 || a.OK || a.Error.Field != "n" || a.Error.Rule != "maximum" || a.Error.Code != "invalid_argument" {
		t.Fatalf("%d %+v", code, a.Error)
	}
	code, a, _ = post("search", `{"id":"`+strings.Repeat("a", 70<<10)+`"}`)
	if code != 413 || a.Error.Rule != "max_argument_bytes" {
		t.Fatalf("%d %+v", code, a.Error)
	}

	// Close cancels a call in flight and waits for it: its record is
	// made when Close returns.
	go http.Post(base+"/v1/tools/hang", "application/json", strings.NewReader(`{}`))
	for ts.count() < 2 {
		time.Sleep(time.Millisecond)
	}
	s.Close()
	h.mu.Lock()
	last := h.recs[len(h.recs)-1]
	h.mu.Unlock()
	if last.Tool != "hang" || last.Decision != apitype.ToolFailed || last.Rule != "canceled" {
		t.Fatalf("the call in flight at Close: %+v", last)
	}
	if _, err := http.Get(base + "/v1/tools"); err == nil {
		t.Fatal("the endpoint answers after Close")
	}
	h.noSecret(t)
}

// TestNoEnvironmentProxyUnlessSaid: the server's HTTP(S)_PROXY carries
// no tool call (with its credential) unless broker.proxy_from_environment.
func TestNoEnvironmentProxyUnlessSaid(t *testing.T) {
	for _, on := range []bool{false, true} {
		c := config.Default()
		c.Broker.ProxyFromEnvironment = on
		b, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := b.client.Transport.(*http.Transport).Proxy != nil; got != on {
			t.Errorf("proxy_from_environment %v: the client has a proxy: %v", on, got)
		}
	}
}
