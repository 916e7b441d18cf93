package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// keysServer starts a server that authenticates with API keys.
func keysServer(t *testing.T, extra map[string]any) *server {
	t.Helper()
	o := map[string]any{"server": map[string]any{"auth": "keys"}}
	for k, v := range extra {
		if m, ok := v.(map[string]any); ok && k == "server" {
			for kk, vv := range m {
				o["server"].(map[string]any)[kk] = vv
			}
			continue
		}
		o[k] = v
	}
	return startServer(t, o)
}

// airlockCLI runs the airlock command with the server's configuration.
func (s *server) airlockCLI(args ...string) (string, error) {
	s.t.Helper()
	at := 1 // after the command, or after keys' subcommand
	if args[0] == "keys" {
		at = 2
	}
	full := append(append(append([]string{}, args[:at]...), "--config", s.cfgPath), args[at:]...)
	cmd := exec.Command(airlockBinary(s.t), full...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		s.t.Logf("airlock %v: %s", args, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

// newKey creates a key with `airlock keys create` and returns its secret.
func (s *server) newKey(tenant string, flags ...string) string {
	s.t.Helper()
	out, err := s.airlockCLI(append([]string{"keys", "create", "--tenant", tenant}, flags...)...)
	if err != nil {
		s.t.Fatalf("keys create: %v", err)
	}
	if !strings.HasPrefix(out, "alk_") || len(out) != 4+64 {
		s.t.Fatalf("keys create printed %q, want alk_ and 64 hex digits", out)
	}
	return out
}

// keyID finds the id of the newest key of tenant in `keys list --json`.
func (s *server) keyID(tenant string) string {
	s.t.Helper()
	out, err := s.airlockCLI("keys", "list", "--json")
	if err != nil {
		s.t.Fatal(err)
	}
	var l struct {
		Keys []struct{ ID, Tenant string }
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		s.t.Fatalf("keys list --json: %v: %s", err, out)
	}
	id := ""
	for _, k := range l.Keys {
		if k.Tenant == tenant {
			id = k.ID
		}
	}
	if id == "" {
		s.t.Fatalf("no key of %s in %s", tenant, out)
	}
	if strings.Contains(out, "alk_") {
		s.t.Errorf("keys list shows a secret: %s", out)
	}
	return id
}

func (s *server) as(key string) *client.Client {
	return client.New(s.URL, client.WithToken(key), client.WithHTTPClient(&http.Client{Timeout: 5 * time.Minute, Transport: s.checked(http.DefaultTransport)}))
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

// Tenant B cannot reach tenant A's session through any route of the API:
// the table is the OpenAPI document's every operation on a session, and
// every answer is 404 (not 403: the session does not exist for B). A's
// session, command and file are intact afterwards; an admin sees them.
func TestTenantIsolationEveryRoute(t *testing.T) {
	s := keysServer(t, map[string]any{"server": map[string]any{"token": "admin-token"}})
	ctx := context.Background()
	keyA, keyB := s.newKey("team-a"), s.newKey("team-b")
	a, b := s.as(keyA), s.as(keyB)

	sa, err := a.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if sa.Tenant != "team-a" {
		t.Errorf("session tenant %q, want team-a", sa.Tenant)
	}
	if _, err := a.Upload(ctx, sa.ID, "f.txt", strings.NewReader("secret of a"), 11); err != nil {
		t.Fatal(err)
	}
	cmd, err := a.RunCommand(ctx, sa.ID, apitype.CommandRequest{Command: "sleep 600", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Every documented operation whose path names a session.
	code, body := s.raw("GET", "/v1/openapi.json", nil, bearer(keyB))
	if code != 200 {
		t.Fatalf("openapi: %d", code)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	json.Unmarshal(body, &doc)
	// Every other placeholder gets a well-formed value, so only ownership decides.
	r := strings.NewReplacer("{id}", sa.ID, "{cid}", cmd.ID, "{path}", "f.txt", "{port}", "8000", "{ctx}", "default", "{name}", "x")
	n := 0
	for path, ops := range doc.Paths {
		if !strings.Contains(path, "{id}") {
			continue
		}
		for method := range ops {
			if method == "parameters" {
				continue // shared path parameters, not an operation
			}
			method = strings.ToUpper(method)
			var reqBody any
			switch method {
			case "POST":
				reqBody = map[string]any{}
				if strings.HasSuffix(path, "/execute") {
					reqBody = map[string]any{"code": "print(1)"}
				}
				if strings.HasSuffix(path, "/commands") {
					reqBody = map[string]any{"command": "true"}
				}
			case "PUT":
				reqBody = map[string]any{} // well-formed, so only ownership decides
				if strings.Contains(path, "/files/") {
					reqBody = "overwritten by b"
				}
			}
			code, body := s.raw(method, r.Replace(path), reqBody, bearer(keyB))
			n++
			if code != http.StatusNotFound || !strings.Contains(string(body), `"not_found"`) {
				t.Errorf("tenant B: %s %s: %d %s, want 404 not_found", method, path, code, truncate(string(body), 200))
			}
		}
	}
	if n < 13 {
		t.Errorf("only %d operations on a session in the document", n)
	}
	// Lists and the audit log do not show A's things to B.
	if l, err := b.Sessions(ctx); err != nil || len(l) != 0 {
		t.Errorf("B lists %v, %v; want nothing", l, err)
	}
	// (A's records are committed by now: the admin reads them.)
	if recs := s.waitAudit("admin-token", url.Values{"tenant": {"team-a"}}, 2); len(recs) < 2 {
		t.Errorf("admin audit of team-a: %+v", recs)
	}
	for _, q := range []url.Values{{"session": {sa.ID}}, {"tenant": {"team-a"}}, {}} {
		l, err := b.Audit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range l.Records {
			if rec.Tenant != "team-b" || rec.Session == sa.ID {
				t.Errorf("B's audit (%v) shows %+v", q, rec)
			}
		}
	}

	// A's things are intact; the admin (server.token) sees them.
	rc, err := a.Download(ctx, sa.ID, "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	k, _ := rc.Read(buf)
	rc.Close()
	if string(buf[:k]) != "secret of a" {
		t.Errorf("A's file is %q after B's attempts", buf[:k])
	}
	admin := s.as("admin-token")
	if l, err := admin.Sessions(ctx); err != nil || len(l) != 1 || l[0].ID != sa.ID {
		t.Errorf("admin lists %v, %v", l, err)
	}
	// An admin key of another tenant sees and reaches A's session too.
	ops := s.as(s.newKey("ops", "--admin"))
	if l, err := ops.Sessions(ctx); err != nil || len(l) != 1 || l[0].Tenant != "team-a" {
		t.Errorf("an admin key lists %v, %v", l, err)
	}
	if res, err := ops.Execute(ctx, sa.ID, apitype.ExecuteRequest{Code: "1 + 1"}, nil); err != nil || res.ExitCode != 0 {
		t.Errorf("an admin key executing in A's session: %v", err)
	}
	if recs := s.waitAudit("admin-token", url.Values{"tenant": {"team-a"}}, 2); len(recs) < 2 {
		t.Errorf("admin audit of team-a: %+v", recs)
	}

	// Revoking A's key holds from its next request, for its open session too.
	if _, err := s.airlockCLI("keys", "revoke", s.keyID("team-a")); err != nil {
		t.Fatal(err)
	}
	_, err = a.Session(ctx, sa.ID)
	wantError(t, "a revoked key", err, 401, "unauthorized")
	_, err = a.Execute(ctx, sa.ID, apitype.ExecuteRequest{Code: "1"}, nil)
	wantError(t, "a revoked key executing", err, 401, "unauthorized")
	if _, err := admin.Session(ctx, sa.ID); err != nil {
		t.Errorf("the admin lost the session: %v", err)
	}
	// No key, a wrong key, a key-shaped guess: 401.
	for _, h := range []map[string]string{nil, bearer("nope"), bearer("alk_" + strings.Repeat("0", 64))} {
		if code, _ := s.raw("GET", "/v1/sessions", nil, h); code != 401 {
			t.Errorf("%v: %d, want 401", h, code)
		}
	}
	if code, _ := s.raw("GET", "/healthz", nil, nil); code != 200 {
		t.Errorf("healthz without a key: %d", code)
	}
}

// quotaRefused checks a 429 quota_exceeded naming quota, with Retry-After.
func quotaRefused(t *testing.T, what string, code int, body []byte, hdr http.Header, quota string) int {
	t.Helper()
	if code != 429 || !strings.Contains(string(body), `"quota_exceeded"`) || !strings.Contains(string(body), quota) {
		t.Errorf("%s: %d %s, want 429 quota_exceeded naming %s", what, code, truncate(string(body), 300), quota)
	}
	ra, err := strconv.Atoi(hdr.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("%s: Retry-After %q", what, hdr.Get("Retry-After"))
	}
	return ra
}

// rawH is raw that also returns the response's headers.
func (s *server) rawH(method, path string, body string, key string) (int, []byte, http.Header) {
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := rawClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String()), resp.Header
}

// Each quota answers 429 with Retry-After and a message naming it, and
// admits again once what it counts is given back; a ceiling on limits is a
// 400 naming it, and defaults above it are lowered to it.
func TestTenantQuotas(t *testing.T) {
	s := keysServer(t, nil)
	ctx := context.Background()
	key := s.newKey("q", "--max-sessions", "1", "--executions-per-minute", "3", "--max-memory", "256M")
	c := s.as(key)

	s1, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Limits.Memory > 256<<20 {
		t.Errorf("memory %d above the tenant's ceiling 256M", s1.Limits.Memory)
	}
	code, body, hdr := s.rawH("POST", "/v1/sessions", `{"language":"python"}`, key)
	quotaRefused(t, "a second session", code, body, hdr, "max_sessions")
	if err := c.DeleteSession(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	// The end gives the place back (the end is observed as it happens).
	s2, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
	code, body, _ = s.rawH("POST", "/v1/sessions", `{"language":"python","limits":{"memory":"1G"}}`, key)
	if code != 400 || !strings.Contains(string(body), "max_limits") {
		t.Errorf("memory above the ceiling: %d %s", code, body)
	}

	// Executions per minute: the 1st was none of these; three pass, the
	// fourth waits for the window.
	for i := 0; i < 3; i++ {
		if _, err := c.Execute(ctx, s2.ID, apitype.ExecuteRequest{Code: "1"}, nil); err != nil {
			t.Fatalf("execution %d: %v", i, err)
		}
	}
	code, body, hdr = s.rawH("POST", "/v1/sessions/"+s2.ID+"/execute", `{"code":"1"}`, key)
	if ra := quotaRefused(t, "a fourth execution", code, body, hdr, "executions_per_minute"); ra > 60 {
		t.Errorf("Retry-After %d beyond the minute", ra)
	}
	code, body, hdr = s.rawH("POST", "/v1/execute", `{"code":"1"}`, key)
	quotaRefused(t, "a one-shot", code, body, hdr, "executions_per_minute")

	// CPU-seconds per day: the execution that crosses it finishes, the
	// next is refused until midnight UTC.
	cpuKey := s.newKey("cpu", "--cpu-seconds-per-day", "1")
	cc := s.as(cpuKey)
	res, err := cc.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Code: "import time\nt=time.process_time()\nwhile time.process_time()-t < 1.2: pass"}, nil)
	if err != nil || res.CPUMs < 1000 {
		t.Fatalf("burning a CPU-second: %v %+v", err, res)
	}
	code, body, hdr = s.rawH("POST", "/v1/execute", `{"code":"1"}`, cpuKey)
	ra := quotaRefused(t, "past the day's CPU", code, body, hdr, "cpu_seconds_per_day")
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if d := time.Until(midnight).Seconds(); float64(ra) < d-5 || float64(ra) > d+5 {
		t.Errorf("Retry-After %d, want the %0.f s to midnight UTC", ra, d)
	}
	// Egress: a tenant denied it cannot ask for any network; one limited
	// to names may ask only for those.
	noNet := s.newKey("nonet", "--egress", "deny")
	code, body, _ = s.rawH("POST", "/v1/sessions", `{"language":"python","network":{"allow":["pypi.org"]}}`, noNet)
	if code != 403 || !strings.Contains(string(body), "egress") {
		t.Errorf("network for a tenant denied egress: %d %s", code, body)
	}
	code, body, _ = s.rawH("POST", "/v1/execute", `{"code":"1","network":{"allow":["pypi.org"]}}`, noNet)
	if code != 403 {
		t.Errorf("a one-shot with network for a tenant denied egress: %d %s", code, body)
	}
	onlyPypi := s.newKey("pypi", "--egress-allow", "pypi.org")
	code, body, _ = s.rawH("POST", "/v1/sessions", `{"language":"python","network":{"allow":["example.com"]}}`, onlyPypi)
	if code != 403 || !strings.Contains(string(body), "egress_allow") {
		t.Errorf("a name outside the tenant's egress_allow: %d %s", code, body)
	}
	// A change the quota refuses is in the audit log too, with who tried.
	code, body, _ = s.rawH("POST", "/v1/sessions", `{"language":"bash","network":{"allow":["pypi.org"]}}`, onlyPypi)
	var created apitype.Session
	if code != 201 || json.Unmarshal(body, &created) != nil {
		t.Fatalf("a session within the tenant's egress_allow: %d %s", code, body)
	}
	if code, body, _ = s.rawH("PUT", "/v1/sessions/"+created.ID+"/network", `{"allow":["example.com"]}`, onlyPypi); code != 403 {
		t.Errorf("a change outside the tenant's egress_allow: %d %s", code, body)
	}
	var recs *apitype.AuditList
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		// (the audit log commits records every 50 ms; a loaded host may
		// take seconds)
		if recs, err = s.as(onlyPypi).Audit(ctx, url.Values{"session": {created.ID}, "kind": {"session.network"}}); err != nil || len(recs.Records) > 0 {
			break
		}
	}
	if err != nil || len(recs.Records) != 1 {
		t.Fatalf("the refused change's records: %+v, %v", recs, err)
	}
	if r := recs.Records[0]; r.Outcome != "failed" || r.Error != "permission_denied" || r.KeyID == "" || r.Network == nil ||
		fmt.Sprint(r.Network.Allow, r.Network.Previous) != "[example.com] [pypi.org]" {
		t.Errorf("the refused change's record %+v (network %+v)", r, r.Network)
	}

	// Other tenants are not affected.
	if _, err := s.as(s.newKey("other")).RunOnce(ctx, apitype.OneShotRequest{Code: "1"}, nil); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}

// The token can come from a file (a mounted secret): the server takes it
// as an admin key; `airlock config print` shows the effective
// configuration, environment overrides included, with the secret masked.
func TestTokenFileAndConfigPrint(t *testing.T) {
	dir := t.TempDir()
	tok := dir + "/token"
	if err := os.WriteFile(tok, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := keysServer(t, map[string]any{"server": map[string]any{"token_file": tok}})
	if strings.Contains(s.stderr.String(), "authentication is OFF") {
		t.Error("a server with keys says authentication is off")
	}
	// Without authentication (loopback only), the server says so at start.
	if open := startServer(t, nil); !strings.Contains(open.stderr.String(), "authentication is OFF") {
		t.Errorf("a server without authentication does not say so:\n%s", open.stderr.String())
	}
	if code, _ := s.raw("GET", "/v1/sessions", nil, bearer("from-a-file")); code != 200 {
		t.Errorf("the token from token_file: %d", code)
	}
	if code, _ := s.raw("GET", "/v1/sessions", nil, bearer("from-a-fil")); code != 401 {
		t.Errorf("a prefix of the token: %d", code)
	}
	cmd := exec.Command(airlockBinary(t), "config", "print", "--config", s.cfgPath)
	cmd.Env = append(os.Environ(), "AIRLOCK_SERVER_MAX_SESSIONS=3", "AIRLOCK_QUOTAS_EXECUTIONS_PER_MINUTE=60")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int
		Server  struct {
			Token       string `json:"token"`
			TokenFile   string `json:"token_file"`
			MaxSessions int    `json:"max_sessions"`
		}
		Quotas struct {
			ExecutionsPerMinute int `json:"executions_per_minute"`
		}
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if cfg.Version != 1 || cfg.Server.Token != "***" || cfg.Server.TokenFile != tok || cfg.Server.MaxSessions != 3 || cfg.Quotas.ExecutionsPerMinute != 60 || strings.Contains(string(out), "from-a-file") {
		t.Errorf("config print: %s", out)
	}
}

// max_concurrent_executions bounds a tenant's executions in flight, of
// every kind: with its two places taken (a session execution and a
// background command), its next one-shot, program, command and execution
// are refused with 429 naming the quota, while a tenant on the server's
// default is not affected; once they end (events: the execution's answer,
// the command's exited state) it runs again. A client that leaves gives
// its place back too.
func TestTenantConcurrencyCap(t *testing.T) {
	s := keysServer(t, map[string]any{"quotas": map[string]any{"max_concurrent_executions": 1}})
	ctx := context.Background()
	busyKey := s.newKey("busy", "--max-concurrent-executions", "2")
	busy, calm := s.as(busyKey), s.as(s.newKey("calm"))
	s1, err := busy.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := busy.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(file string) string {
		return "import os, time\nprint('running', flush=True)\nwhile not os.path.exists('/workspace/" + file + "'): time.sleep(0.02)\n"
	}
	// running starts a streaming execution and returns once it runs.
	running := func(ctx context.Context, id, code string) <-chan error {
		started, done := make(chan struct{}), make(chan error, 1)
		var once sync.Once
		go func() {
			_, err := busy.Execute(ctx, id, apitype.ExecuteRequest{Code: code}, func(ev apitype.Event) {
				if ev.Type == apitype.EventStdout {
					once.Do(func() { close(started) })
				}
			})
			once.Do(func() { close(started) })
			done <- err
		}()
		<-started
		return done
	}
	exec1 := running(ctx, s1.ID, waitFor("go"))
	bg, err := busy.RunCommand(ctx, s1.ID, apitype.CommandRequest{Command: "while [ ! -e /workspace/go ]; do sleep 0.02; done", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, r := range []struct{ what, method, path, body string }{
		{"a one-shot", "POST", "/v1/execute", `{"code":"1"}`},
		{"a program run", "POST", "/v1/run", `{"code":"print(1)"}`},
		{"a command", "POST", "/v1/sessions/" + s2.ID + "/commands", `{"command":"true"}`},
		{"an execution in another session", "POST", "/v1/sessions/" + s2.ID + "/execute", `{"code":"1"}`},
	} {
		code, body, hdr := s.rawH(r.method, r.path, r.body, busyKey)
		quotaRefused(t, r.what+" beyond 2 in flight", code, body, hdr, "max_concurrent_executions")
	}
	if _, err := calm.RunOnce(ctx, apitype.OneShotRequest{Code: "1"}, nil); err != nil {
		t.Errorf("another tenant, while the first is at its cap: %v", err)
	}

	// Both end when /workspace/go appears.
	if _, err := busy.Upload(ctx, s1.ID, "go", strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-exec1; err != nil {
		t.Fatalf("the first execution: %v", err)
	}
	if res, err := busy.Command(ctx, s1.ID, bg.ID, time.Minute); err != nil || res.State != apitype.CommandExited {
		t.Fatalf("the background command: %v %+v", err, res)
	}
	for i, run := range []func() error{
		func() error { _, err := busy.RunOnce(ctx, apitype.OneShotRequest{Code: "1"}, nil); return err },
		func() error {
			_, err := busy.RunProgram(ctx, apitype.ProgramRequest{Code: "print(1)"}, nil)
			return err
		},
		func() error {
			_, err := busy.RunCommand(ctx, s2.ID, apitype.CommandRequest{Command: "true"}, nil)
			return err
		},
	} {
		if err := run(); err != nil {
			t.Errorf("run %d after the first two ended: %v", i, err)
		}
	}

	// A client that leaves: its execution is stopped and its place given
	// back (the server's Retry-After is a second; allow ten).
	exec2 := running(ctx, s1.ID, waitFor("go2"))
	leaving, leave := context.WithCancel(ctx)
	gone := running(leaving, s2.ID, waitFor("never"))
	code, body, hdr := s.rawH("POST", "/v1/execute", `{"code":"1"}`, busyKey)
	quotaRefused(t, "a one-shot at the cap again", code, body, hdr, "max_concurrent_executions")
	leave()
	<-gone
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := s.rawH("POST", "/v1/execute", `{"code":"1"}`, busyKey)
		if code == 200 {
			break
		}
		if code != 429 || time.Now().After(deadline) {
			t.Fatalf("after a client left: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := busy.Upload(ctx, s1.ID, "go2", strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-exec2; err != nil {
		t.Fatal(err)
	}
}
