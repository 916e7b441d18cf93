package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/testenv"
)

// dataMount mounts a small filesystem for a server's data_dir (tmpfs, or
// ext4 on a loop device with errors=remount-ro) and unmounts it when the
// test ends, after the server stopped (cleanups run last first).
func dataMount(t *testing.T, ext4 bool) (dir, dev string) {
	t.Helper()
	dir = filepath.Join("/run", fmt.Sprintf("airlock-e2e-data-%d-%s", os.Getpid(), t.Name()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"-t", "tmpfs", "-o", "size=4m", "tmpfs", dir}
	if ext4 {
		for _, tool := range []string{"mkfs.ext4", "losetup"} {
			if _, err := exec.LookPath(tool); err != nil {
				testenv.Skip(t, "read-only data_dir test: no %s (e2fsprogs, util-linux; scripts/install-deps.sh --tests)", tool)
			}
		}
		img := filepath.Join(t.TempDir(), "data.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 16<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
		args = []string{"-t", "ext4", "-o", "loop,errors=remount-ro", img, dir}
	}
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
		os.Remove(dir)
	})
	if ext4 {
		src, err := exec.Command("findmnt", "-no", "SOURCE", dir).Output()
		if err != nil {
			t.Fatal(err)
		}
		dev = filepath.Base(strings.TrimSpace(string(src)))
	}
	return dir, dev
}

// fill writes a file into dir until its filesystem has no room left.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

// waitAuditStatus waits until /healthz reports the audit log's status.
func (s *server) waitAuditStatus(want string) *apitype.Health {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := s.c.Health(context.Background())
		if err != nil {
			s.t.Fatal(err)
		}
		if h.Audit == nil {
			s.t.Fatalf("/healthz has no audit: %+v", h)
		}
		if h.Audit.Status == want {
			return h
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("audit status %q after 30s, want %q (%+v)\n%s", h.Audit.Status, want, h.Audit, s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workRefused checks that every kind of work is answered 503
// audit_unavailable with Retry-After, over HTTP and over MCP, while
// what only reads state is answered.
func (s *server) workRefused(sid string) {
	s.t.Helper()
	sp := "/v1/sessions/" + sid
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/sessions", map[string]any{"language": "python"}},
		{"POST", sp + "/execute", map[string]any{"code": "1"}},
		{"POST", sp + "/commands", map[string]any{"command": "true"}},
		{"POST", sp + "/commands/c1/stdin", map[string]any{"data": "x"}},
		{"POST", sp + "/packages", map[string]any{"manager": "pip", "packages": []string{"x"}}},
		{"PUT", sp + "/network", map[string]any{"allow": []string{"example.com"}}},
		{"PUT", sp + "/files/in.txt", "x"},
		{"GET", sp + "/files/in.txt", nil},
		{"DELETE", sp + "/files/in.txt", nil},
		{"POST", "/v1/execute", map[string]any{"language": "python", "code": "1"}},
		{"POST", "/v1/run", map[string]any{"language": "python", "code": "1"}},
	} {
		code, body := s.raw(r.method, r.path, r.body, nil)
		var e apitype.ErrorBody
		json.Unmarshal(body, &e)
		if code != 503 || e.Error.Code != "audit_unavailable" || !strings.Contains(e.Error.Message, "audit log") {
			s.t.Errorf("%s %s while the audit log cannot write: %d %s", r.method, r.path, code, truncate(string(body), 300))
		}
	}
	for _, path := range []string{sp, "/v1/sessions", sp + "/files", "/v1/audit?limit=1"} {
		if code, body := s.raw("GET", path, nil, nil); code != 200 {
			s.t.Errorf("GET %s (a read) while the audit log cannot write: %d %s", path, code, truncate(string(body), 300))
		}
	}
	if code, body := s.raw("GET", "/readyz", nil, nil); code != 503 || !strings.Contains(string(body), "audit") {
		s.t.Errorf("/readyz: %d %s, want not ready naming the audit log", code, body)
	}
	if text := s.mcpCall("execute_code", map[string]any{"code": "1"}); !strings.Contains(text, "audit log unavailable") {
		s.t.Errorf("MCP execute_code while the audit log cannot write: %s", truncate(text, 500))
	}
}

// mcpCall calls one MCP tool over the server's streamable HTTP endpoint
// (a new MCP session) and returns the response body as text.
func (s *server) mcpCall(tool string, args map[string]any) string {
	s.t.Helper()
	post := func(sid string, msg map[string]any) (*http.Response, string) {
		b, _ := json.Marshal(msg)
		req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := rawClient.Do(req)
		if err != nil {
			s.t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, string(data)
	}
	resp, body := post("", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "e2e", "version": "1"}}})
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		s.t.Fatalf("MCP initialize: %d %s", resp.StatusCode, body)
	}
	defer func() {
		req, _ := http.NewRequest("DELETE", s.URL+"/mcp", nil)
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := rawClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	post(sid, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	_, body = post(sid, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	return body
}

// The audit log fails closed. With data_dir on a real filesystem that
// fills up, the execution whose record no longer fits still runs (the
// log learns of it by its commit), and from then on every route that
// does work, MCP's tools too, is refused with 503 audit_unavailable
// while /healthz says degraded with the counts, /readyz not ready and
// /metrics airlock_audit_writable 0; reads go on. When space comes back
// the held record is written (nothing was lost) and work is accepted
// again. (Review: with data_dir full, executions ran, sessions were
// created and nothing was recorded but a log line.)
func TestAuditRefusesWorkWhenDataDirFull(t *testing.T) {
	dir, _ := dataMount(t, false)
	s := startServer(t, map[string]any{"data_dir": dir, "audit": map[string]any{"code": "full"},
		"pool": map[string]any{"size": map[string]int{"python": 1}}})
	sid := s.newSession("python", nil)
	s.exec(sid, "x = 1")
	s.waitAuditStatus("ok")

	filler := fill(t, dir)
	// A record larger than anything the log's files have room for.
	big := "x = 2\n#" + strings.Repeat("a", 512<<10)
	if r := s.exec(sid, big); r.Error != nil {
		t.Fatalf("the execution before the log knew: %+v", r.Error)
	}
	h := s.waitAuditStatus("failing")
	if h.Status != "degraded" || h.Audit.OnFailure != "refuse" || h.Audit.FailedWrites == 0 || h.Audit.Held == 0 {
		t.Errorf("/healthz %+v (audit %+v), want degraded with failed writes and held records", h, h.Audit)
	}
	s.workRefused(sid)
	if code, body := s.raw("GET", "/metrics", nil, nil); code != 200 || !strings.Contains(string(body), "airlock_audit_writable 0") ||
		strings.Contains(string(body), "airlock_audit_write_failures_total 0\n") {
		t.Errorf("/metrics %d: want airlock_audit_writable 0 and failures counted:\n%s", code, grepLines(string(body), "airlock_audit_"))
	}

	// Room again: the held record is written, work is accepted.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h = s.waitAuditStatus("ok")
	if h.Status != "ok" || h.Audit.Held != 0 || h.Audit.Dropped != 0 {
		t.Errorf("/healthz after recovery: %+v %+v", h, h.Audit)
	}
	s.exec(sid, "x = 3")
	recs := s.waitAudit("", url.Values{"kind": {apitype.AuditExecution}, "session": {sid}}, 3)
	found := false
	for _, r := range recs {
		found = found || r.CodeSize == len(big)
	}
	if !found {
		t.Errorf("the record of the execution run while the disk was full is missing: %d records", len(recs))
	}
	if code, _ := s.raw("POST", "/v1/sessions", map[string]any{"language": "python"}, nil); code != 201 {
		t.Errorf("create after recovery: %d", code)
	}
}

// The same when data_dir goes read-only under a running server (ext4
// remounts itself read-only on an error, errors=remount-ro): work is
// refused from the first failed commit on, and continues to be.
func TestAuditRefusesWorkWhenDataDirReadOnly(t *testing.T) {
	dir, dev := dataMount(t, true)
	s := startServer(t, map[string]any{"data_dir": dir, "pool": map[string]any{"size": map[string]int{"python": 1}}})
	sid := s.newSession("python", nil)
	s.exec(sid, "x = 1")
	s.waitAuditStatus("ok")
	if err := os.WriteFile("/sys/fs/ext4/"+dev+"/trigger_fs_error", []byte("airlock e2e: read-only data_dir"), 0); err != nil {
		testenv.Skip(t, "cannot make ext4 fail (%v)", err)
	}
	s.exec(sid, "x = 2")
	h := s.waitAuditStatus("failing")
	if h.Status != "degraded" || h.Audit.FailedWrites == 0 {
		t.Errorf("/healthz %+v %+v", h, h.Audit)
	}
	s.workRefused(sid)
}

// grepLines are the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
