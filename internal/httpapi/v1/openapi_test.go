package v1

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// apiRoutes are the routes api.New registers, as Go ServeMux patterns.
// Keep this table in step with New: TestOpenAPIRoutes checks it against
// both the server's mux and the OpenAPI document.
var apiRoutes = []string{
	"GET /healthz",
	"GET /readyz",
	"GET /v1/openapi.json",
	"POST /v1/sessions",
	"GET /v1/sessions",
	"GET /v1/sessions/{id}",
	"DELETE /v1/sessions/{id}",
	"POST /v1/sessions/{id}/pause",
	"POST /v1/sessions/{id}/resume",
	"PUT /v1/sessions/{id}/timeout",
	"POST /v1/sessions/{id}/fork",
	"POST /v1/sessions/{id}/execute",
	"POST /v1/sessions/{id}/interrupt",
	"POST /v1/sessions/{id}/contexts",
	"GET /v1/sessions/{id}/contexts",
	"GET /v1/sessions/{id}/contexts/{ctx}",
	"DELETE /v1/sessions/{id}/contexts/{ctx}",
	"POST /v1/sessions/{id}/contexts/{ctx}/restart",
	"GET /v1/sessions/{id}/network",
	"PUT /v1/sessions/{id}/network",
	"POST /v1/sessions/{id}/packages",
	"POST /v1/sessions/{id}/commands",
	"GET /v1/sessions/{id}/commands",
	"GET /v1/sessions/{id}/commands/{cid}",
	"POST /v1/sessions/{id}/commands/{cid}/signal",
	"POST /v1/sessions/{id}/commands/{cid}/stdin",
	"POST /v1/sessions/{id}/commands/{cid}/resize",
	"GET /v1/sessions/{id}/commands/{cid}/events",
	"GET /v1/sessions/{id}/commands/{cid}/ws",
	"GET /v1/sessions/{id}/files",
	"GET /v1/sessions/{id}/files/{path...}",
	"PUT /v1/sessions/{id}/files/{path...}",
	"DELETE /v1/sessions/{id}/files/{path...}",
	"POST /v1/execute",
	"POST /v1/run",
	"GET /v1/audit",
	"GET /v1/sessions/{id}/history",
	"GET /v1/sessions/{id}/notebook",
	"GET /v1/whoami",
	"GET /v1/sessions/{id}/ports",
	"POST /v1/sessions/{id}/ports/{port}",
	"GET /v1/sessions/{id}/ports/{port}",
	"DELETE /v1/sessions/{id}/ports/{port}",
	// Every method (the pattern has none): the document lists these.
	"* /v1/sessions/{id}/ports/{port}/{path...}",
	"GET /v1/templates",
	"GET /v1/templates/{name}",
	"GET /v1/tools",
	"GET /v1/sessions/{id}/tools",
	"GET /v1/secrets",
}

// anyMethods are the methods the document lists for a route of every
// method ("*").
var anyMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// httpMethods are the operation keys of an OpenAPI 3.0 path item.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// errorBodyExceptions lists error responses that legitimately are not the
// JSON Error body: net/http's ServeContent answers an unsatisfiable Range
// with a plain-text 416.
var errorBodyExceptions = map[string]bool{
	"GET /v1/sessions/{id}/files/{path} 416": true,
	// /readyz says why not ready in its own body, for operators and probes.
	"GET /readyz 503": true,
}

func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return doc
}

// resolvePointer follows a local JSON reference such as
// "#/components/schemas/Error".
func resolvePointer(doc map[string]any, ref string) (any, bool) {
	frag, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	var cur any = doc
	for _, tok := range strings.Split(frag, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// deref resolves v if it is a {"$ref": ...} object.
func deref(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	for i := 0; m != nil && i < 8; i++ {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		target, ok := resolvePointer(doc, ref)
		if !ok {
			t.Fatalf("unresolvable $ref %q", ref)
		}
		m, _ = target.(map[string]any)
	}
	return m
}

// operations returns every operation of the document as "METHOD /path".
func operations(doc map[string]any) map[string]map[string]any {
	ops := map[string]map[string]any{}
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		im, _ := item.(map[string]any)
		for _, m := range httpMethods {
			if op, ok := im[m].(map[string]any); ok {
				ops[strings.ToUpper(m)+" "+p] = op
			}
		}
	}
	return ops
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	if v := doc["openapi"]; v != "3.0.3" {
		t.Errorf("openapi = %v, want 3.0.3", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info needs a title and a version: %v", info)
	}
	if _, ok := doc["paths"].(map[string]any); !ok {
		t.Fatal("no paths")
	}
	comps, _ := doc["components"].(map[string]any)
	if _, ok := comps["schemas"].(map[string]any)["Error"]; !ok {
		t.Fatal("no Error schema")
	}

	// Every $ref must name an existing component.
	refs := 0
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"]; ok {
				refs++
				s, ok := ref.(string)
				if !ok || !strings.HasPrefix(s, "#/components/") {
					t.Errorf("%s: $ref %v is not a local component reference", at, ref)
				} else if _, ok := resolvePointer(doc, s); !ok {
					t.Errorf("%s: $ref %q does not resolve", at, s)
				}
			}
			for k, c := range v {
				walk(c, at+"/"+k)
			}
		case []any:
			for i, c := range v {
				walk(c, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	if refs == 0 {
		t.Error("the document uses no $ref; shared types belong in components")
	}

	// Security: a bearer scheme, and /healthz always open.
	schemes, _ := comps["securitySchemes"].(map[string]any)
	bearer, _ := schemes["bearerAuth"].(map[string]any)
	if bearer["type"] != "http" || bearer["scheme"] != "bearer" {
		t.Errorf("securitySchemes.bearerAuth = %v, want an http bearer scheme", bearer)
	}
	// The operations served without a key are those with security: [],
	// and the other way round.
	s := New(nil, config.Default(), slog.New(slog.DiscardHandler), "test")
	for k, op := range operations(doc) {
		_, p, _ := strings.Cut(k, " ")
		sec, ok := op["security"].([]any)
		if open := ok && len(sec) == 0; open != s.public[p] {
			t.Errorf("%s: security %v in the document, but served without a key: %v", k, op["security"], s.public[p])
		}
	}
}

// openAPIPath turns a ServeMux pattern's path into an OpenAPI path
// template: "{path...}" becomes "{path}".
func openAPIPath(pattern string) string {
	return strings.ReplaceAll(pattern, "...}", "}")
}

// concretePath fills a pattern's wildcards with sample values.
func concretePath(pattern string) string {
	r := strings.NewReplacer("{id}", "0123456789abcdef01234567", "{path...}", "dir/file.txt", "{path}", "dir/file.txt", "{port}", "8080")
	return r.Replace(pattern)
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	ops := operations(doc)

	want := map[string]bool{}
	anyPaths := map[string]bool{}
	for _, route := range apiRoutes {
		method, pattern, _ := strings.Cut(route, " ")
		if method == "*" {
			anyPaths[openAPIPath(pattern)] = true
			for _, m := range anyMethods {
				want[m+" "+openAPIPath(pattern)] = true
			}
			continue
		}
		want[method+" "+openAPIPath(pattern)] = true
	}
	for _, k := range sortedKeys(want) {
		if ops[k] == nil {
			t.Errorf("route %s is not documented", k)
		}
	}
	for _, k := range sortedKeys(ops) {
		if !want[k] {
			t.Errorf("documented operation %s is not a route of the server", k)
		}
	}

	// The table must be what New registers. Looking handlers up in the
	// mux, and calling only the handlers that never touch the session
	// manager (405, 404, the document itself), is safe with a nil manager.
	cfg := config.Default()
	cfg.Server.Auth = config.AuthNone // routing, not authentication
	s := New(nil, cfg, slog.New(slog.DiscardHandler), "test")
	for _, route := range apiRoutes {
		method, pattern, _ := strings.Cut(route, " ")
		if method == "*" {
			method, route = "PATCH", pattern
		}
		req := httptest.NewRequest(method, concretePath(pattern), nil)
		if _, got := s.mux.Handler(req); got != route {
			t.Errorf("%s %s is handled by pattern %q, want %q", method, req.URL.Path, got, route)
		}
	}

	// Every documented path answers other methods with 405 and an Allow
	// header that lists exactly the documented methods.
	docMethods := map[string][]string{}
	for k := range ops {
		method, p, _ := strings.Cut(k, " ")
		docMethods[p] = append(docMethods[p], method)
	}
	for _, p := range sortedKeys(docMethods) {
		if anyPaths[p] {
			continue
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("PATCH", concretePath(p), nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("PATCH %s: status %d, want 405", p, rec.Code)
			continue
		}
		var allow []string
		for _, m := range strings.Split(rec.Header().Get("Allow"), ",") {
			allow = append(allow, strings.TrimSpace(m))
		}
		documented := docMethods[p]
		slices.Sort(allow)
		slices.Sort(documented)
		if !slices.Equal(allow, documented) {
			t.Errorf("%s: Allow %v, but the document has %v", p, allow, documented)
		}
	}

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/no-such-thing", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /v1/no-such-thing: status %d, want 404", rec.Code)
	}

	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != string(OpenAPI()) {
		t.Errorf("GET /v1/openapi.json: status %d, Content-Type %q; want 200 application/json with the embedded document",
			rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestOpenAPIResponses(t *testing.T) {
	doc := loadOpenAPI(t)
	const errorRef = "#/components/schemas/Error"
	ids := map[string]string{}
	paths := doc["paths"].(map[string]any)
	for _, k := range sortedKeys(operations(doc)) {
		op := operations(doc)[k]
		_, p, _ := strings.Cut(k, " ")

		for _, field := range []string{"summary", "description", "operationId"} {
			if s, _ := op[field].(string); s == "" {
				t.Errorf("%s: no %s", k, field)
			}
		}
		if id, _ := op["operationId"].(string); id != "" {
			if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q is also used by %s", k, id, other)
			}
			ids[id] = k
		}

		// Every path template variable is declared as a path parameter.
		declared := map[string]bool{}
		var params []any
		if ps, ok := paths[p].(map[string]any)["parameters"].([]any); ok {
			params = append(params, ps...)
		}
		if ps, ok := op["parameters"].([]any); ok {
			params = append(params, ps...)
		}
		for _, prm := range params {
			pm := deref(t, doc, prm)
			if pm["in"] == "path" {
				declared[pm["name"].(string)] = true
				if pm["required"] != true {
					t.Errorf("%s: path parameter %v is not required", k, pm["name"])
				}
			}
		}
		for rest := p; ; {
			_, after, ok := strings.Cut(rest, "{")
			if !ok {
				break
			}
			name, tail, _ := strings.Cut(after, "}")
			if !declared[name] {
				t.Errorf("%s: path parameter {%s} is not declared", k, name)
			}
			rest = tail
		}

		responses, _ := op["responses"].(map[string]any)
		if len(responses) == 0 {
			t.Errorf("%s: no responses", k)
		}
		hasSuccess := false
		for _, status := range sortedKeys(responses) {
			r := deref(t, doc, responses[status])
			where := k + " " + status
			if d, _ := r["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("%s: response has no description", where)
			}
			code, err := strconv.Atoi(status)
			if err != nil {
				t.Errorf("%s: response key is not a status code", where)
				continue
			}
			if code < 400 {
				hasSuccess = hasSuccess || code < 300
				continue
			}
			if errorBodyExceptions[where] {
				continue
			}
			content, _ := r["content"].(map[string]any)
			media, _ := content["application/json"].(map[string]any)
			schema, _ := media["schema"].(map[string]any)
			if schema["$ref"] != errorRef || len(content) != 1 {
				t.Errorf("%s: an error response must have only application/json content with schema %s", where, errorRef)
			}
		}
		if !hasSuccess {
			t.Errorf("%s: no 2xx response", k)
		}
	}

	// Shared responses follow the same rules.
	comps := doc["components"].(map[string]any)
	shared, _ := comps["responses"].(map[string]any)
	for _, name := range sortedKeys(shared) {
		r := shared[name].(map[string]any)
		if d, _ := r["description"].(string); d == "" {
			t.Errorf("components/responses/%s: no description", name)
		}
		content, _ := r["content"].(map[string]any)
		media, _ := content["application/json"].(map[string]any)
		schema, _ := media["schema"].(map[string]any)
		if schema["$ref"] != errorRef {
			t.Errorf("components/responses/%s: schema is not %s", name, errorRef)
		}
	}
}

// TestOpenAPIErrorCodes checks that the Error schema lists every code the
// server can put in an error body.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	errSchema, _ := resolvePointer(doc, "#/components/schemas/Error")
	code, _ := resolvePointer(map[string]any{"s": errSchema}, "#/s/properties/error/properties/code")
	enum, _ := code.(map[string]any)["enum"].([]any)
	documented := map[string]bool{}
	for _, c := range enum {
		documented[c.(string)] = true
	}
	codes := []string{
		"unauthorized", "method_not_allowed", "not_found", // written by api.go itself
		errdefs.Code(errors.New("anything else")), // internal
	}
	for _, e := range errdefs.Sentinels() {
		codes = append(codes, errdefs.Code(e))
	}
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("error code %q is not in the Error schema's enum", c)
		}
	}
	if len(documented) != len(uniq(codes)) {
		t.Errorf("the Error schema lists %d codes, the server has %d: %v", len(documented), len(uniq(codes)), sortedKeys(documented))
	}

	// Each error status an operation documents must be one the server can
	// produce for some code.
	statuses := map[string]bool{"401": true, "405": true, "416": true, "500": true}
	for _, e := range errdefs.Sentinels() {
		statuses[strconv.Itoa(errdefs.HTTPStatus(e))] = true
	}
	for k, op := range operations(doc) {
		for status := range op["responses"].(map[string]any) {
			if status >= "400" && !statuses[status] {
				t.Errorf("%s documents status %s, which no error code maps to", k, status)
			}
		}
	}
}

func uniq(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
