package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// statusRecorder keeps every (method, route template, status) a server
// answered, the route template being the OpenAPI document's path of the
// operation the request reached.
type statusRecorder struct {
	doc map[string]map[string]map[string]any // path -> method -> operation
	mux *http.ServeMux                       // resolves a request to its operation
	mu  sync.Mutex
	// seen maps "METHOD /template" to the statuses answered, and those to
	// an example request.
	seen map[string]map[int]string
}

func newStatusRecorder(t *testing.T, doc []byte) *statusRecorder {
	t.Helper()
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	r := &statusRecorder{doc: map[string]map[string]map[string]any{}, mux: http.NewServeMux(), seen: map[string]map[int]string{}}
	for path, ops := range d.Paths {
		r.doc[path] = map[string]map[string]any{}
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op map[string]any
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			method = strings.ToUpper(method)
			r.doc[path][method] = op
			// A file's path is the rest of the URL path.
			pattern := method + " " + strings.ReplaceAll(path, "{path}", "{path...}")
			r.mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
		}
	}
	return r
}

// record notes the status of a request. Requests that reach no documented
// operation (a method the path does not have, a path that is none of the
// API's, a path with . or .. segments, refused before routing) are not
// any operation's answers, and are left out.
func (r *statusRecorder) record(method, path string, status int) {
	req, err := http.NewRequest(method, "http://airlock"+path, nil)
	if err != nil {
		return
	}
	_, pattern := r.mux.Handler(req)
	if pattern == "" || !canonicalPath(req.URL.Path) {
		return
	}
	key := strings.ReplaceAll(pattern, "{path...}", "{path}")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[key] == nil {
		r.seen[key] = map[int]string{}
	}
	if _, ok := r.seen[key][status]; !ok {
		r.seen[key][status] = method + " " + path
	}
}

// operations lists the document's operations, "METHOD /template".
func (r *statusRecorder) operations() []string {
	var ops []string
	for path, methods := range r.doc {
		for method := range methods {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// canonicalPath reports whether p has no empty, . or .. segment (the
// server refuses those before routing).
func canonicalPath(p string) bool {
	for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// check fails t for every status answered that the operation does not
// document, and returns the statuses seen at all.
func (r *statusRecorder) check(t *testing.T) map[int]bool {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	all := map[int]bool{}
	var keys []string
	for k := range r.seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		method, path, _ := strings.Cut(k, " ")
		op := r.doc[path][method]
		responses, _ := op["responses"].(map[string]any)
		var got []string
		for status, example := range r.seen[k] {
			all[status] = true
			got = append(got, strconv.Itoa(status))
			if _, ok := responses[strconv.Itoa(status)]; !ok && responses["default"] == nil {
				t.Errorf("%s answered %d, which its OpenAPI operation does not document (e.g. %s)", k, status, example)
			}
		}
		slices.Sort(got)
		t.Logf("%-48s %s", k, strings.Join(got, " "))
	}
	return all
}

// Every status the server answers is documented for its operation in the
// OpenAPI document: a representative set of requests over real HTTP, the
// error cases included (bad requests, no or a wrong key, another tenant's
// things, conflicts, ended sessions, bodies too large, quotas, features
// that are off), records what each operation answered.
func TestOpenAPIStatusesAnswered(t *testing.T) {
	s := keysServer(t, map[string]any{
		"server": map[string]any{"token": "admin-token", "max_body_bytes": 4096, "max_file_bytes": 8192},
		"pool":   map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	// The document is served without a key: it holds no secrets.
	code, doc := s.raw("GET", "/v1/openapi.json", nil, nil)
	if code != 200 {
		t.Fatalf("GET /v1/openapi.json without a key: %d %s", code, truncate(string(doc), 200))
	}
	rec := newStatusRecorder(t, doc)
	rec.record("GET", "/v1/openapi.json", code)

	key, other := s.newKey("team-a"), s.newKey("team-b")
	quota := s.newKey("quota", "--max-sessions", "1", "--executions-per-minute", "2")
	noNet := s.newKey("nonet", "--egress", "deny")
	type req struct {
		method, path string
		body         any
		key          string            // "" sends none
		hdr          map[string]string // more headers
	}
	do := func(r req) (int, []byte) {
		t.Helper()
		hdr := map[string]string{}
		if r.key != "" {
			hdr["Authorization"] = "Bearer " + r.key
		}
		for k, v := range r.hdr {
			hdr[k] = v
		}
		code, body := s.raw(r.method, r.path, r.body, hdr)
		rec.record(r.method, r.path, code)
		return code, body
	}
	// create makes a session of tenant key and returns its id.
	create := func(key string, body any) string {
		t.Helper()
		code, b := do(req{"POST", "/v1/sessions", body, key, nil})
		var info struct{ ID string }
		if json.Unmarshal(b, &info); code != 201 || info.ID == "" {
			t.Fatalf("create: %d %s", code, truncate(string(b), 300))
		}
		return info.ID
	}
	big := strings.Repeat("x", 8192)
	const missing = "0123456789abcdef01234567"

	// The server and its sessions.
	for _, r := range []req{
		{"GET", "/healthz", nil, "", nil},
		{"GET", "/readyz", nil, "", nil},
		{"GET", "/v1/openapi.json", nil, key, nil},
		{"GET", "/v1/sessions", nil, "", nil},
		{"GET", "/v1/sessions", nil, "alk_" + strings.Repeat("0", 64), nil},
		{"GET", "/v1/sessions", nil, key, nil},
		{"POST", "/v1/sessions", map[string]any{"language": "cobol"}, key, nil},
		{"POST", "/v1/sessions", "{not json", key, nil},
		{"POST", "/v1/sessions", map[string]any{"language": "python", "env": map[string]string{"X": big}}, key, nil},
		{"POST", "/v1/sessions", map[string]any{"language": "python", "network": map[string]any{"allow": []string{"pypi.org"}}}, noNet, nil},
		{"POST", "/v1/sessions", nil, "", nil},
		{"GET", "/v1/sessions/" + missing, nil, key, nil},
		{"DELETE", "/v1/sessions/" + missing, nil, key, nil},
		{"GET", "/v1/audit", nil, key, nil},
		{"GET", "/v1/audit?since=yesterday", nil, key, nil},
	} {
		do(r)
	}
	id := create(key, map[string]any{"language": "python"})
	sp := "/v1/sessions/" + id
	create(quota, map[string]any{"language": "python"})
	do(req{"POST", "/v1/sessions", map[string]any{"language": "python"}, quota, nil}) // over max_sessions

	// Executions.
	for _, r := range []req{
		{"GET", sp, nil, key, nil},
		{"GET", sp, nil, other, nil},
		{"POST", sp + "/execute", map[string]any{"code": "x = 1\nx"}, key, nil},
		{"POST", sp + "/execute", map[string]any{"code": "print(x)"}, key, map[string]string{"Accept": "application/x-ndjson"}},
		{"POST", sp + "/execute", map[string]any{"code": 5}, key, nil},
		{"POST", sp + "/execute", map[string]any{"code": big}, key, nil},
		{"POST", sp + "/execute", map[string]any{"code": "1"}, other, nil},
		{"POST", sp + "/interrupt", nil, key, nil},
		{"POST", "/v1/sessions/" + missing + "/interrupt", nil, key, nil},
		{"GET", sp + "/network", nil, key, nil},
		{"PUT", sp + "/network", map[string]any{"allow": []string{"example.com"}}, key, nil},
		{"PUT", sp + "/network", map[string]any{"allow": []string{"exa mple"}}, key, nil},
		{"PUT", sp + "/network", "{", key, nil},
		{"POST", sp + "/packages", map[string]any{"manager": "pip", "packages": []string{"six"}}, key, nil},
		{"POST", sp + "/packages", map[string]any{"manager": "cargo", "packages": []string{"six"}}, key, nil},
		{"POST", sp + "/packages", "{", key, nil},
	} {
		do(r)
	}
	// A second execution while one runs.
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(req{"POST", sp + "/execute", map[string]any{"code": "import time\nfor _ in range(100): time.sleep(0.1)"}, key,
			map[string]string{"Accept": "application/x-ndjson"}})
	}()
	go func() {
		defer close(started)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			_, b := s.raw("GET", sp, nil, bearer(key))
			if strings.Contains(string(b), `"state":"busy"`) {
				return
			}
		}
	}()
	<-started
	do(req{"POST", sp + "/execute", map[string]any{"code": "1"}, key, nil})
	do(req{"POST", sp + "/interrupt", nil, key, nil})
	<-done

	// Commands.
	code, b := do(req{"POST", sp + "/commands", map[string]any{"command": "sleep 60", "background": true}, key, nil})
	var cmd struct{ ID string }
	if json.Unmarshal(b, &cmd); code != 201 || cmd.ID == "" {
		t.Fatalf("a background command: %d %s", code, b)
	}
	cp := sp + "/commands/" + cmd.ID
	for _, r := range []req{
		{"POST", sp + "/commands", map[string]any{"command": "echo hi"}, key, nil},
		{"POST", sp + "/commands", map[string]any{"command": "echo hi"}, key, map[string]string{"Accept": "application/x-ndjson"}},
		{"POST", sp + "/commands", map[string]any{"command": ""}, key, nil},
		{"POST", sp + "/commands", map[string]any{"command": big}, key, nil},
		{"GET", sp + "/commands", nil, key, nil},
		{"GET", cp, nil, key, nil},
		{"GET", cp + "?wait=forever", nil, key, nil},
		{"GET", sp + "/commands/cmd_nope", nil, key, nil},
		{"POST", cp + "/stdin", map[string]any{"data": "x\n"}, key, nil},
		{"POST", cp + "/stdin", "{", key, nil},
		{"POST", cp + "/signal", map[string]any{"signal": "SIGNOPE"}, key, nil},
		{"POST", cp + "/signal", map[string]any{"signal": "KILL"}, key, nil},
		{"GET", cp + "?wait=10s", nil, key, nil},
		{"POST", cp + "/signal", map[string]any{"signal": "KILL"}, key, nil},
		{"POST", cp + "/stdin", map[string]any{"data": "x\n"}, key, nil},
		{"POST", sp + "/commands/cmd_nope/signal", map[string]any{"signal": "KILL"}, key, nil},
	} {
		do(r)
	}

	// Files.
	for _, r := range []req{
		{"PUT", sp + "/files/data/a.txt", "hello, world", key, nil},
		{"PUT", sp + "/files/big.bin", big + big, key, nil},
		{"PUT", sp + "/files/" + strings.Repeat("n", 300), "x", key, nil},
		{"GET", sp + "/files/data/a.txt", nil, key, nil},
		{"GET", sp + "/files/data/a.txt", nil, key, map[string]string{"Range": "bytes=0-4"}},
		{"GET", sp + "/files/data/a.txt", nil, key, map[string]string{"Range": "bytes=100-200"}},
		{"GET", sp + "/files/nope.txt", nil, key, nil},
		{"GET", sp + "/files/data/a.txt", nil, other, nil},
		{"GET", sp + "/files?path=data", nil, key, nil},
		{"GET", sp + "/files?path=data&recursive=maybe", nil, key, nil},
		{"GET", sp + "/files?path=nope", nil, key, nil},
		{"DELETE", sp + "/files/data", nil, key, nil},
		{"DELETE", sp + "/files/nope.txt", nil, key, nil},
		{"DELETE", sp + "/files/data/a.txt", nil, key, nil},
	} {
		do(r)
	}

	// One-shot and program runs.
	for _, r := range []req{
		{"POST", "/v1/execute", map[string]any{"code": "print(1)"}, key, nil},
		{"POST", "/v1/execute", map[string]any{"code": "print(1)"}, key, map[string]string{"Accept": "application/x-ndjson"}},
		{"POST", "/v1/execute", map[string]any{"language": "cobol", "code": "1"}, key, nil},
		{"POST", "/v1/execute", map[string]any{"code": big}, key, nil},
		{"POST", "/v1/execute", map[string]any{"code": "1", "network": map[string]any{"allow": []string{"pypi.org"}}}, noNet, nil},
		{"POST", "/v1/execute", map[string]any{"code": "1", "isolation": "gvisor"}, key, nil},
		{"POST", "/v1/run", map[string]any{"code": "import sys\nprint(sys.argv)", "args": []string{"a"}}, key, nil},
		{"POST", "/v1/run", map[string]any{"code": "1", "filename": "../x.py"}, key, nil},
		{"POST", "/v1/run", map[string]any{"code": big}, key, nil},
	} {
		do(r)
	}
	// A tenant's quota of executions per minute (2).
	for i := 0; i < 3; i++ {
		do(req{"POST", "/v1/execute", map[string]any{"code": "1"}, quota, nil})
		do(req{"POST", "/v1/run", map[string]any{"code": "1"}, quota, nil})
	}

	// Every operation: without a key; as another tenant (whose session
	// this is not); with a body that is not JSON.
	fill := strings.NewReplacer("{id}", id, "{cid}", cmd.ID, "{path}", "data/b.txt")
	for _, op := range rec.operations() {
		method, path, _ := strings.Cut(op, " ")
		path = fill.Replace(path)
		do(req{method, path, nil, "", nil})
		if strings.Contains(op, "{id}") {
			do(req{method, path, nil, other, nil})
		}
		if (method == "POST" || method == "PUT") && !strings.Contains(op, "/files/") {
			do(req{method, path, "{", key, nil})
		}
	}

	// An ended session. Deleting is idempotent: a session that ended
	// answers 204 again, to its tenant only.
	for i, want := range []int{204, 204} {
		if code, b := do(req{"DELETE", sp, nil, key, nil}); code != want {
			t.Errorf("DELETE %d of a session: %d %s, want %d", i+1, code, truncate(string(b), 200), want)
		}
	}
	if code, _ := do(req{"DELETE", sp, nil, other, nil}); code != 404 {
		t.Errorf("another tenant's DELETE of an ended session: %d, want 404", code)
	}
	// A running background command has no exit status yet.
	code, b = do(req{"POST", "/v1/sessions/" + create(key, nil) + "/commands", map[string]any{"command": "sleep 60", "background": true}, key, nil})
	if code != 201 || !strings.Contains(string(b), `"exit_code":null`) {
		t.Errorf("a running command: %d %s, want exit_code null", code, b)
	}
	for _, r := range []req{
		{"GET", sp, nil, key, nil},
		{"POST", sp + "/execute", map[string]any{"code": "1"}, key, nil},
		{"POST", sp + "/interrupt", nil, key, nil},
		{"GET", sp + "/network", nil, key, nil},
		{"PUT", sp + "/network", map[string]any{"allow": []string{}}, key, nil},
		{"POST", sp + "/packages", map[string]any{"manager": "pip", "packages": []string{"six"}}, key, nil},
		{"POST", sp + "/commands", map[string]any{"command": "true"}, key, nil},
		{"GET", sp + "/commands", nil, key, nil},
		{"GET", cp, nil, key, nil},
		{"POST", cp + "/signal", map[string]any{"signal": "KILL"}, key, nil},
		{"POST", cp + "/stdin", map[string]any{"data": "x"}, key, nil},
		{"GET", sp + "/files", nil, key, nil},
		{"GET", sp + "/files/a.txt", nil, key, nil},
		{"PUT", sp + "/files/a.txt", "x", key, nil},
		{"DELETE", sp + "/files/a.txt", nil, key, nil},
	} {
		do(r)
	}

	// A server without authentication (loopback only) refuses, on every
	// operation, what a web page could have sent it.
	open := sharedServer(t)
	for _, op := range rec.operations() {
		method, path, _ := strings.Cut(op, " ")
		path = strings.NewReplacer("{id}", missing, "{cid}", "cmd_1", "{path}", "a.txt").Replace(path)
		code, _ := open.raw(method, path, nil, map[string]string{"Origin": "http://evil.example"})
		rec.record(method, path, code)
	}

	seen := rec.check(t)
	// The set stays representative: every error status reachable on one
	// server was reached.
	for _, status := range []int{200, 201, 204, 206, 400, 401, 403, 404, 409, 410, 413, 416, 429, 501} {
		if !seen[status] {
			t.Errorf("no request was answered %d: the set of requests no longer reaches it", status)
		}
	}
}
