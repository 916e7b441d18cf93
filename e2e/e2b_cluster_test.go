package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// E2B's API on two servers sharing one PostgreSQL: a sandbox's id is
// its session's host label, carrying its pod (so getHost's host is one
// DNS label the router routes); the other server answers every call
// naming it, control plane, data plane and port host alike, with 421
// in E2B's error shape naming the pod that holds it, and never runs it;
// its own server serves it.
func TestE2BCluster(t *testing.T) {
	_, servers := sharedCluster(t, 2, func(cfg map[string]any) {
		cfg["ports"] = map[string]any{"domain": "ports.test", "scheme": "http"}
		withPersistence(cfg)
	})
	s0, s1 := servers[0], servers[1]
	key := "e2b_" + strings.TrimPrefix(s0.newKey("team-e2b"), "alk_")

	code, body := s0.raw("POST", "/sandboxes", map[string]any{"templateID": "python", "metadata": map[string]string{"suite": "cluster"}}, map[string]string{"X-API-KEY": key})
	var box struct {
		SandboxID, EnvdAccessToken, TrafficAccessToken string
		Domain                                         *string
	}
	if code != 201 || json.Unmarshal(body, &box) != nil {
		t.Fatalf("create on airlock-0: %d %s", code, body)
	}
	if !strings.HasPrefix(box.SandboxID, "airlock-0-") || strings.Contains(box.SandboxID, ".") || len(box.SandboxID) > 63 {
		t.Fatalf("sandbox id %q is not a host label naming airlock-0", box.SandboxID)
	}
	if box.Domain == nil || *box.Domain != "ports.test" {
		t.Errorf("domain %v", box.Domain)
	}
	data := map[string]string{"E2b-Sandbox-Id": box.SandboxID, "E2b-Sandbox-Port": "49999", "X-Access-Token": box.EnvdAccessToken}
	run := func(s *server) (int, string) {
		code, body := s.raw("POST", "/execute", map[string]any{"code": "print(6*7)"}, data)
		return code, string(body)
	}
	if code, body := run(s0); code != 200 || !strings.Contains(body, "42") {
		t.Fatalf("execute on its own server: %d %s", code, body)
	}

	// The other server: 421 naming airlock-0, in E2B's shape, for every
	// form of the id.
	misdirected := func(what string, code int, body []byte) {
		t.Helper()
		var e struct {
			Code    int
			Message string
		}
		if code != 421 || json.Unmarshal(body, &e) != nil || e.Code != 421 || !strings.Contains(e.Message, "airlock-0") {
			t.Errorf("%s on airlock-1: %d %s, want 421 {code: 421} naming airlock-0", what, code, body)
		}
	}
	ctl := map[string]string{"X-API-KEY": key}
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + box.SandboxID},
		{"POST", "/sandboxes/" + box.SandboxID + "/timeout"},
		{"POST", "/v2/sandboxes/" + box.SandboxID + "/connect"},
		{"POST", "/sandboxes/" + box.SandboxID + "/pause"},
		{"DELETE", "/sandboxes/" + box.SandboxID},
	} {
		code, body := s1.raw(c.method, c.path, map[string]any{"timeout": 60}, ctl)
		misdirected(c.method+" "+c.path, code, body)
	}
	code, b := s1.raw("POST", "/execute", map[string]any{"code": "print(1)"}, data)
	misdirected("the data plane", code, b)
	code, b = s1.raw("GET", "/", nil, map[string]string{"Host": "8000-" + box.SandboxID + ".ports.test", "E2B-Traffic-Access-Token": box.TrafficAccessToken})
	misdirected("a port host", code, b)
	code, b = s1.raw("GET", "/", nil, map[string]string{"Host": "49983-" + box.SandboxID + ".ports.test", "X-Access-Token": box.EnvdAccessToken})
	misdirected("envd's port host", code, b)

	// Sandbox.list on either server lists it, with its metadata; paused
	// on airlock-0, airlock-1 lists it paused (waited for: the directory
	// carries it).
	listed := func(s *server, query string) map[string]string {
		t.Helper()
		code, body := s.raw("GET", "/v2/sandboxes?"+query, nil, ctl)
		var l []struct {
			SandboxID, State string
			Metadata         map[string]string
		}
		if code != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list on %s: %d %s", s.name, code, body)
		}
		out := map[string]string{}
		for _, x := range l {
			out[x.SandboxID] = x.State + "/" + x.Metadata["suite"]
		}
		return out
	}
	for _, s := range servers {
		if got := listed(s, "metadata=suite%3Dcluster"); got[box.SandboxID] != "running/cluster" || len(got) != 1 {
			t.Errorf("Sandbox.list on %s: %v", s.name, got)
		}
	}
	if got := listed(s1, "metadata=suite%3Dother"); len(got) != 0 {
		t.Errorf("Sandbox.list on airlock-1 with another suite: %v", got)
	}
	if code, body := s0.raw("POST", "/sandboxes/"+box.SandboxID+"/pause", nil, ctl); code != 204 {
		t.Fatalf("pause on airlock-0: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for listed(s1, "state=paused")[box.SandboxID] != "paused/cluster" {
		if time.Now().After(deadline) {
			t.Fatalf("airlock-1 does not list the paused sandbox: %v", listed(s1, ""))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := s0.raw("POST", "/sandboxes/"+box.SandboxID+"/connect", map[string]any{"timeout": 60}, ctl); code != 200 {
		t.Fatalf("connect on airlock-0: %d %s", code, body)
	}

	// Untouched, and its own server ends it.
	if code, body := run(s0); code != 200 || !strings.Contains(body, "42") {
		t.Fatalf("after the misdirected calls: %d %s", code, body)
	}
	if code, body := s0.raw("DELETE", "/sandboxes/"+box.SandboxID, nil, ctl); code != 204 {
		t.Errorf("kill on airlock-0: %d %s", code, body)
	}
}
