package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// TestE2BWire holds what E2B's Python SDK (which cannot be installed
// here) relies on, and what no SDK shows: creation answers 201 with
// clientID, envdVersion and an access token (POST /sandboxes, the
// Python SDK's path, and /v2/sandboxes); the key it is given has the
// form its regex checks; a sandbox's data plane refuses a request
// without its token, or with another sandbox's; another tenant's key
// neither sees nor kills it; a second kill is 404 with {"code":404};
// bad input gets E2B's error shape, never a 500.
func TestE2BWire(t *testing.T) {
	s := keysServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}}})
	defer s.stop()
	keyA := "e2b_" + strings.TrimPrefix(s.newKey("team-a"), "alk_")
	keyB := "e2b_" + strings.TrimPrefix(s.newKey("team-b"), "alk_")
	if !regexp.MustCompile(`\Ae2b_[0-9a-f]+\z`).MatchString(keyA) {
		t.Fatalf("the E2B form of a key %q fails the Python SDK's check", keyA)
	}
	api := func(key string) map[string]string { return map[string]string{"X-API-KEY": key} }
	type created struct {
		SandboxID, ClientID, EnvdVersion, EnvdAccessToken, TemplateID string
	}
	create := func(path, key string, body any) (int, created, []byte) {
		status, raw := s.raw("POST", path, body, api(key))
		var c created
		json.Unmarshal(raw, &c)
		return status, c, raw
	}
	// The Python SDK's body, as e2b 2.45.1 sends it.
	pyBody := map[string]any{"templateID": "code-interpreter-v1", "timeout": 300, "metadata": map[string]string{}, "envVars": map[string]string{},
		"secure": true, "allow_internet_access": true}
	status, a, raw := create("/sandboxes", keyA, pyBody)
	if status != 201 || a.SandboxID == "" || a.ClientID == "" || a.EnvdVersion < "0.1.0" || a.EnvdAccessToken == "" || a.TemplateID != "code-interpreter-v1" {
		t.Fatalf("POST /sandboxes: %d %s", status, raw)
	}
	status, b, raw := create("/v2/sandboxes", keyA, map[string]any{"templateID": "base"})
	if status != 201 || b.EnvdAccessToken == "" || b.EnvdAccessToken == a.EnvdAccessToken {
		t.Fatalf("POST /v2/sandboxes: %d %s", status, raw)
	}

	exec := func(id string, hdr map[string]string) (int, string) {
		h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999"}
		for k, v := range hdr {
			h[k] = v
		}
		status, raw := s.raw("POST", "/execute", map[string]any{"code": "print(6*7)"}, h)
		return status, string(raw)
	}
	if status, body := exec(a.SandboxID, map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != 200 || !strings.Contains(body, `"text":"42\n"`) || strings.Contains(body, "\n\n") {
		t.Fatalf("execute with the token: %d %s", status, body)
	}
	for name, hdr := range map[string]map[string]string{
		"no token":              nil,
		"another sandbox's":     {"X-Access-Token": b.EnvdAccessToken},
		"the API key":           {"X-Access-Token": keyA, "X-API-KEY": keyA},
		"a traffic token guess": {"E2B-Traffic-Access-Token": a.EnvdAccessToken + "x"},
	} {
		if status, body := exec(a.SandboxID, hdr); status != 401 || strings.Contains(body, "42") {
			t.Errorf("execute with %s: %d %s", name, status, body)
		}
	}
	// envd's RPCs and files check it too.
	for _, c := range []struct{ method, path string }{{"POST", "/filesystem.Filesystem/ListDir"}, {"GET", "/files?path=/home/user/x"}, {"POST", "/process.Process/List"}} {
		status, body := s.raw(c.method, c.path, map[string]any{"path": "/home/user"}, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": b.EnvdAccessToken})
		if status != 401 {
			t.Errorf("%s %s with another sandbox's token: %d %s", c.method, c.path, status, body)
		}
	}

	// Another tenant: not found, and its kill does nothing.
	if status, raw := s.raw("GET", "/sandboxes/"+a.SandboxID, nil, api(keyB)); status != 404 {
		t.Errorf("another tenant's GET: %d %s", status, raw)
	}
	if status, raw := s.raw("DELETE", "/sandboxes/"+a.SandboxID, nil, api(keyB)); status != 404 {
		t.Errorf("another tenant's kill: %d %s", status, raw)
	}
	if status, raw := s.raw("GET", "/v2/sandboxes", nil, api(keyB)); status != 200 || string(raw) != "[]\n" {
		t.Errorf("another tenant's list: %d %s", status, raw)
	}
	if status, raw := s.raw("GET", "/v2/sandboxes", nil, api("e2b_00")); status != 401 {
		t.Errorf("an unknown key: %d %s", status, raw)
	}

	// Bad input: E2B's error shape, never a 500.
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", "/v2/sandboxes", `{"templateID":`, 400},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": -5}, 400},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": "base", "mcp": map[string]any{"x": 1}}, 400},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": "no-such-template"}, 400},
		{"POST", "/sandboxes/" + a.SandboxID + "/timeout", map[string]any{"timeout": "soon"}, 400},
		{"POST", "/sandboxes/" + a.SandboxID + "/pause", nil, 501},
		// Pausing needs persistence.enabled, which this server has not.
		{"POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true}, 400},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": "base", "lifecycle": map[string]any{"onTimeout": "pause"}}, 400},
		{"GET", "/v2/sandboxes?metadata=%ZZ", nil, 400},
	} {
		status, raw := s.raw(c.method, c.path, c.body, api(keyA))
		var e struct {
			Code    int
			Message string
		}
		if err := json.Unmarshal(raw, &e); status != c.status || e.Code != c.status || e.Message == "" || err != nil {
			t.Errorf("%s %s %v: %d %s, want %d with {code, message}", c.method, c.path, c.body, status, raw, c.status)
		}
		s.checkErrorBody(fmt.Sprint(c.path), raw)
	}

	for _, id := range []string{a.SandboxID, b.SandboxID} {
		if status, raw := s.raw("DELETE", "/sandboxes/"+id, nil, api(keyA)); status != 204 {
			t.Fatalf("kill: %d %s", status, raw)
		}
	}
	status, raw = s.raw("DELETE", "/sandboxes/"+a.SandboxID, nil, api(keyA))
	var gone struct{ Code int }
	if json.Unmarshal(raw, &gone); status != 404 || gone.Code != 404 {
		t.Errorf("the second kill: %d %s, want 404 {\"code\":404}", status, raw)
	}
	if status, body := exec(a.SandboxID, map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != 404 {
		t.Errorf("execute in a killed sandbox: %d %s", status, body)
	}
}

// TestE2BPauseWire holds the shapes of E2B's pause on a server with
// persistence: create's lifecycle (and its bad values), pause 204 then
// 409, a paused sandbox's state in get and list, its data plane and
// timeout refused (409) until connect resumes it, kill while paused.
func TestE2BPauseWire(t *testing.T) {
	s := keysServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
		"persistence": map[string]any{"enabled": true}})
	defer s.stop()
	key := "e2b_" + strings.TrimPrefix(s.newKey("team-a"), "alk_")
	api := map[string]string{"X-API-KEY": key}
	for _, body := range []map[string]any{
		{"templateID": "base", "lifecycle": map[string]any{"onTimeout": "sleep"}},
		{"templateID": "base", "autoResume": map[string]any{"enabled": true}},
		{"templateID": "base", "autoPause": true, "autoPauseMemory": true},
		{"templateID": "base", "autoPauseMemory": true},
		{"templateID": "base", "autoPause": true, "autoResume": "yes"},
	} {
		if status, raw := s.raw("POST", "/v2/sandboxes", body, api); status != 400 {
			t.Errorf("create %v: %d %s", body, status, raw)
		} else if body["autoPause"] == true && body["autoPauseMemory"] == true && !strings.Contains(string(raw), "natively") {
			t.Errorf("create %v on a native server does not say why: %s", body, raw)
		}
	}
	var box struct {
		SandboxID, EnvdAccessToken, State string
		Lifecycle                         struct {
			OnTimeout  string
			AutoResume bool
		}
	}
	status, raw := s.raw("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoResume": map[string]any{"enabled": false}}, api)
	if json.Unmarshal(raw, &box); status != 201 || box.Lifecycle.OnTimeout != "pause" || box.Lifecycle.AutoResume || box.State != "running" {
		t.Fatalf("create with autoPause: %d %s", status, raw)
	}
	id := box.SandboxID
	state := func() string {
		_, raw := s.raw("GET", "/sandboxes/"+id, nil, api)
		var b struct{ State string }
		json.Unmarshal(raw, &b)
		return b.State
	}
	if status, raw := s.raw("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": true}, api); status != 400 || !strings.Contains(string(raw), "natively") {
		t.Errorf("pause with memory: %d %s", status, raw)
	}
	if status, raw := s.raw("POST", "/sandboxes/"+id+"/pause", nil, api); status != 204 || state() != "paused" {
		t.Fatalf("pause: %d %s, state %q", status, raw, state())
	}
	if status, raw := s.raw("POST", "/sandboxes/"+id+"/pause", nil, api); status != 409 {
		t.Errorf("second pause: %d %s, want 409 (the SDK's false)", status, raw)
	}
	if status, raw := s.raw("GET", "/v2/sandboxes?state=paused", nil, api); status != 200 || !strings.Contains(string(raw), id) {
		t.Errorf("list paused: %d %s", status, raw)
	}
	if status, raw := s.raw("GET", "/v2/sandboxes?state=running", nil, api); status != 200 || string(raw) != "[]\n" {
		t.Errorf("list running: %d %s", status, raw)
	}
	if status, raw := s.raw("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 60}, api); status != 409 {
		t.Errorf("set_timeout while paused: %d %s", status, raw)
	}
	hdr := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "X-Access-Token": box.EnvdAccessToken}
	if status, raw := s.raw("POST", "/execute", map[string]any{"code": "print(6*7)"}, hdr); status != 409 {
		t.Errorf("execute while paused without autoResume: %d %s", status, raw)
	}
	if status, raw := s.raw("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}, api); status != 200 || state() != "running" {
		t.Fatalf("connect: %d %s, state %q", status, raw, state())
	}
	if status, raw := s.raw("POST", "/execute", map[string]any{"code": "print(6*7)"}, hdr); status != 200 || !strings.Contains(string(raw), "42") {
		t.Errorf("execute after connect: %d %s", status, raw)
	}
	s.raw("POST", "/sandboxes/"+id+"/pause", nil, api)
	if status, raw := s.raw("DELETE", "/sandboxes/"+id, nil, api); status != 204 {
		t.Errorf("kill while paused: %d %s", status, raw)
	}
	if status, raw := s.raw("POST", "/v2/sandboxes/"+id+"/connect", nil, api); status != 404 {
		t.Errorf("connect after kill: %d %s", status, raw)
	}
}

// TestE2BKeepMemoryRefusedFilesOnly: on a gVisor server whose pauses keep
// files only (gvisor.checkpoint false), keepMemory is refused with a 400
// that says why, at create (no sandbox is left) and at pause (the
// sandbox runs on, and pauses without it); so is the v1 API's restores
// "memory".
func TestE2BKeepMemoryRefusedFilesOnly(t *testing.T) {
	s := keysServer(t, map[string]any{"isolation": "gvisor", "gvisor": map[string]any{"runsc": testenv.Runsc(t), "checkpoint": false},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}, "zygote": false},
		"persistence": map[string]any{"enabled": true}})
	defer s.stop()
	tok := s.newKey("team-a")
	key := "e2b_" + strings.TrimPrefix(tok, "alk_")
	api := map[string]string{"X-API-KEY": key}
	status, raw := s.raw("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": true}, api)
	if status != 400 || !strings.Contains(string(raw), "gvisor.checkpoint: false") {
		t.Errorf("create with autoPauseMemory: %d %s", status, raw)
	}
	if l, err := s.as(tok).Sessions(context.Background()); err != nil || len(l) != 0 {
		t.Errorf("a refused create left sessions: %v %v", l, err)
	}
	var box struct{ SandboxID string }
	status, raw = s.raw("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true}, api)
	if json.Unmarshal(raw, &box); status != 201 {
		t.Fatalf("create: %d %s", status, raw)
	}
	if status, raw := s.raw("POST", "/sandboxes/"+box.SandboxID+"/pause", map[string]any{"memory": true}, api); status != 400 || !strings.Contains(string(raw), "gvisor.checkpoint: false") {
		t.Errorf("pause with memory: %d %s", status, raw)
	}
	// The v1 API's restores: "memory" refused (the session runs on),
	// "files" taken.
	if _, err := s.as(tok).PauseSessionWith(context.Background(), box.SandboxID, apitype.PauseRequest{Restores: apitype.RestoreMemory}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "gvisor.checkpoint: false") {
		t.Errorf("a v1 pause with restores memory: %v", err)
	}
	if status, raw := s.raw("POST", "/sandboxes/"+box.SandboxID+"/pause", map[string]any{"memory": false}, api); status != 204 {
		t.Errorf("pause without memory: %d %s", status, raw)
	}
	if status, raw := s.raw("DELETE", "/sandboxes/"+box.SandboxID, nil, api); status != 204 {
		t.Errorf("kill: %d %s", status, raw)
	}
}
