package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/httpapi/v1"
)

// Every error body the API answers, over every operation of its OpenAPI
// document with unknown, live and ended sessions, malformed bodies and
// hostile paths, and a runtime whose start fails on the host (its detail
// names a host path and the init's error), carries a code, a message and
// the request id, and nothing of the host: no state directory, cgroup,
// binary path, init output or Go stack.
func TestErrorBodiesKeepHostInternals(t *testing.T) {
	const missing = "/usr/bin/python3-airlock-server-test-missing"
	s, cfg := testServer(t, newRecorder(), func(c *config.Config) {
		c.Runtimes.Python = missing
		c.CodeRules = []config.CodeRule{{Name: "no-rm", Pattern: `\brm -rf /`, Action: "deny"}}
	})
	base := "http://" + s.Addr().String()
	c := client.New(base)
	ctx := context.Background()
	live, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, dead.ID); err != nil {
		t.Fatal(err)
	}

	self, _ := os.Executable()
	markers := []string{cfg.StateDir, cfg.CgroupParent, "/sys/fs/cgroup", "airlock-init", "goroutine ", filepath.Dir(self), missing, cfg.DataDir}
	n := 0
	check := func(method, path string, body []byte, status int, got []byte) {
		t.Helper()
		if status < 400 {
			return
		}
		n++
		var e apitype.ErrorBody
		probe := path == "/readyz" // a readiness probe's 503 is its own report
		if err := json.Unmarshal(got, &e); !probe && (err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.RequestID == "") {
			t.Errorf("%s %s (%q): %d %s: not an error body with a code, message and request id", method, path, body, status, got)
		}
		for _, m := range markers {
			if bytes.Contains(got, []byte(m)) {
				t.Errorf("%s %s (%q): %d: the body names %q: %s", method, path, body, status, m, got)
			}
		}
	}
	do := func(method, path string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check(method, path, body, resp.StatusCode, got)
		// Streamed requests end in a failed event instead.
		if strings.HasSuffix(path, "/execute") || strings.HasSuffix(path, "/run") || strings.HasSuffix(path, "/commands") {
			req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
			req.Header.Set("Accept", "application/x-ndjson")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status := resp.StatusCode
				if bytes.Contains(got, []byte(`"failed"`)) {
					status = 500 // a failed event is an error too
					got = got[bytes.LastIndex(got, []byte(`{"type":"failed"`)):]
					for _, m := range markers {
						if bytes.Contains(got, []byte(m)) {
							t.Errorf("%s %s streamed: the failed event names %q: %s", method, path, m, got)
						}
					}
					return
				}
				check(method, path+" (stream)", body, status, got)
			}
		}
	}

	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(v1.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{nil, []byte("{"), []byte(`{"unknown": 1}`), []byte(`{"code": "rm -rf /", "language": "bash", "command": "rm -rf /"}`),
		[]byte(`{"language": "python", "code": "print(1)"}`), []byte(`{"limits": {"memory": "1T"}, "timeout": "1ms"}`)}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			for _, id := range []string{"s-nope", live.ID, dead.ID} {
				for _, file := range []string{"nope.txt", "../../etc/passwd", "a/../../../proc/1/environ"} {
					p := strings.NewReplacer("{id}", id, "{cid}", "c99", "{path}", file).Replace(path)
					for _, b := range bodies {
						do(strings.ToUpper(method), p, b)
					}
				}
			}
		}
	}
	// The host's own failure: a runtime that cannot start.
	do("POST", "/v1/sessions", []byte(`{"language": "python"}`))
	do("POST", "/v1/execute", []byte(`{"language": "python", "code": "1"}`))
	if n < 100 {
		t.Errorf("only %d error bodies checked", n)
	}
	t.Logf("%d error bodies checked", n)
}
