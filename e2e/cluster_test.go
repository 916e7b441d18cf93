package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/cluster"
	"airlock/internal/errdefs"
)

// clusterPool is a small pool for the cluster tests: one warm python
// sandbox, no template (these tests are about ids and readiness).
var clusterPool = map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}, "zygote": false}

// Two servers of a cluster: ids carry their pod and boot epoch; an id of
// the other pod is 421 misdirected, one of this pod's earlier run 410
// session_lost (also after a real kill -9 and restart), any other 404; a
// server on its own keeps its plain ids.
func TestClusterSessionIDs(t *testing.T) {
	nameFile := filepath.Join(t.TempDir(), "name")
	os.WriteFile(nameFile, []byte("airlock-1\n"), 0o644)
	s0 := startServer(t, map[string]any{"cluster": map[string]any{"pod_name": "airlock-0"}, "pool": clusterPool})
	// airlock-1 can pause: its pause, resume and fork of airlock-0's
	// session are misdirected too (a paused session is restored only
	// where its image is).
	s1 := startServer(t, map[string]any{"cluster": map[string]any{"pod_name_file": nameFile}, "pool": clusterPool,
		"persistence": map[string]any{"enabled": true}})
	ctx := context.Background()

	idRE := regexp.MustCompile(`^(airlock-[01])\.([0-9a-z]{1,13})\.[0-9a-z]{24}$`)
	id0, id1 := s0.newSession("python", nil), s1.newSession("python", nil)
	for pod, id := range map[string]string{"airlock-0": id0, "airlock-1": id1} {
		if m := idRE.FindStringSubmatch(id); m == nil || m[1] != pod {
			t.Fatalf("%s made id %q", pod, id)
		}
	}
	if r := s0.exec(id0, "x = 41\nx + 1"); text(r, "result") != "42" {
		t.Fatalf("a clustered session does not run code: %+v", r)
	}
	p0, _ := cluster.Parse(id0)
	if now := time.Now().Unix(); p0.Epoch > now || p0.Epoch < now-300 {
		t.Errorf("boot epoch %d is not when the server started (now %d)", p0.Epoch, now)
	}
	if r, err := s0.c.Ready(ctx); err != nil || r.Pod != "airlock-0" {
		t.Errorf("readyz of airlock-0: %+v %v", r, err)
	}

	// Every session route of the other pod's server answers 421, as JSON
	// (raw checks the error body).
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sessions/" + id0},
		{"DELETE", "/v1/sessions/" + id0},
		{"POST", "/v1/sessions/" + id0 + "/execute"},
		{"POST", "/v1/sessions/" + id0 + "/interrupt"},
		{"GET", "/v1/sessions/" + id0 + "/files"},
		{"PUT", "/v1/sessions/" + id0 + "/files/a.txt"},
		{"GET", "/v1/sessions/" + id0 + "/commands"},
		{"POST", "/v1/sessions/" + id0 + "/pause"},
		{"POST", "/v1/sessions/" + id0 + "/resume"},
		{"POST", "/v1/sessions/" + id0 + "/fork"},
		{"PUT", "/v1/sessions/" + id0 + "/timeout"},
	} {
		code, body := s1.raw(c.method, c.path, nil, nil)
		if code != http.StatusMisdirectedRequest || !strings.Contains(string(body), `"code":"misdirected"`) || !strings.Contains(string(body), "airlock-0") {
			t.Errorf("%s %s on airlock-1: %d %s, want 421 misdirected naming airlock-0", c.method, c.path, code, body)
		}
	}
	_, err := s1.c.Execute(ctx, id0, apitype.ExecuteRequest{Code: "1"}, nil)
	if e := wantError(t, "execute airlock-0's session on airlock-1", err, 421, "misdirected"); !errors.Is(e, errdefs.ErrMisdirected) {
		t.Errorf("the client's error does not match ErrMisdirected")
	}
	// The session itself is untouched.
	if r := s0.exec(id0, "x"); text(r, "result") != "41" {
		t.Errorf("after the misdirected calls: %+v", r)
	}

	// An earlier run of airlock-1: lost; this run's unknown id, or a
	// plain one: not found.
	p1, _ := cluster.Parse(id1)
	earlier := "airlock-1." + strconv.FormatInt(p1.Epoch-1, 36) + ".abcdefghijklmnopqrstuv"
	_, err = s1.c.Session(ctx, earlier)
	wantError(t, "an earlier run's id", err, 410, "session_lost")
	_, err = s1.c.Session(ctx, "airlock-1."+strconv.FormatInt(p1.Epoch, 36)+".abcdefghijklmnopqrstuv")
	wantError(t, "this run's unknown id", err, 404, "not_found")
	_, err = s1.c.Session(ctx, "0123456789abcdef01234567")
	wantError(t, "a plain id", err, 404, "not_found")
	// A session of this run that ended says why, as before.
	if err := s1.c.DeleteSession(ctx, id1); err != nil {
		t.Fatal(err)
	}
	_, err = s1.c.Session(ctx, id1)
	wantError(t, "an ended session", err, 410, "session_ended")

	// kill -9 airlock-0 and start it again on the same state: its
	// sessions are lost, and say so on every route.
	cfg := s0.cfg
	if err := s0.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s0.done
	s0b := startServerNamed(t, s0.name, cfg)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sessions/" + id0},
		{"POST", "/v1/sessions/" + id0 + "/execute"},
		{"GET", "/v1/sessions/" + id0 + "/files/a.txt"},
	} {
		code, body := s0b.raw(c.method, c.path, nil, nil)
		if code != http.StatusGone || !strings.Contains(string(body), `"code":"session_lost"`) {
			t.Errorf("%s %s after the restart: %d %s, want 410 session_lost", c.method, c.path, code, body)
		}
	}
	_, err = s0b.c.Execute(ctx, id0, apitype.ExecuteRequest{Code: "x"}, nil)
	if e := wantError(t, "execute after the restart", err, 410, "session_lost"); !errors.Is(e, errdefs.ErrSessionLost) {
		t.Error("the client's error does not match ErrSessionLost")
	}
	id0b := s0b.newSession("python", nil)
	p0b, _ := cluster.Parse(id0b)
	if p0b.Pod != "airlock-0" || p0b.Epoch <= p0.Epoch {
		t.Errorf("after the restart: %q (epoch %d, before %d)", id0b, p0b.Epoch, p0.Epoch)
	}

	// A server on its own keeps its ids.
	alone := startServer(t, map[string]any{"pool": clusterPool})
	if id := alone.newSession("python", nil); !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(id) {
		t.Errorf("a server on its own made %q", id)
	}
	_, err = alone.c.Session(ctx, id0b)
	wantError(t, "a clustered id on a server on its own", err, 404, "not_found")
}

// /readyz is capacity: ready with a warm sandbox and room for a session,
// 503 with the reason at server.max_sessions, ready again when one ends;
// it and /healthz need no token while the API does (server.token_file).
func TestReadiness(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("s3cret-token\n"), 0o400)
	s := startServer(t, map[string]any{
		"server": map[string]any{"auth": "keys", "token_file": tokFile, "max_sessions": 1},
		"pool":   clusterPool,
	})
	ctx := context.Background()
	anon := client.New(s.URL)
	authed := client.New(s.URL, client.WithToken("s3cret-token"))

	waitReady := func(want bool) *apitype.Readiness {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r, err := anon.Ready(ctx)
			if err != nil {
				t.Fatalf("readyz: %v", err)
			}
			if r.Ready == want || time.Now().After(deadline) {
				if r.Ready != want {
					t.Fatalf("readyz never became %v: %+v", want, r)
				}
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	r := waitReady(true)
	if len(r.Reasons) != 0 || r.MaxSessions != 1 || r.Warm["python"] < 1 {
		t.Errorf("ready: %+v", r)
	}
	// The raw answers: 200 and 503, JSON, no token.
	code, _ := s.raw("GET", "/readyz", nil, nil)
	if code != 200 {
		t.Errorf("GET /readyz without a token: %d", code)
	}
	if _, err := anon.Sessions(ctx); client.StatusOf(err) != 401 {
		t.Errorf("the API without the token: %v, want 401", err)
	}
	info, err := authed.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatalf("with the token of server.token_file: %v", err)
	}
	r = waitReady(false)
	if len(r.Reasons) == 0 || !strings.Contains(strings.Join(r.Reasons, "; "), "server.max_sessions") || r.Sessions != 1 {
		t.Errorf("full: %+v", r)
	}
	code, body := s.raw("GET", "/readyz", nil, nil)
	if code != 503 || !strings.Contains(string(body), `"ready":false`) {
		t.Errorf("GET /readyz when full: %d %s", code, body)
	}
	// Not ready is about new sessions only: the one open works.
	if _, err := authed.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "1"}, nil); err != nil {
		t.Errorf("the open session while not ready: %v", err)
	}
	if err := authed.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	waitReady(true)
}

// Pod mode: with id_count the server's sandboxes take host ids inside the
// small range a user-namespaced pod maps (here 30000 to 34095), from the
// server's part of it (above the CLI runs' eighth).
func TestPodModeIDs(t *testing.T) {
	const base, count = 30000, 4096
	s := startServer(t, map[string]any{"id_base": base, "id_count": count, "pool": clusterPool,
		"cluster": map[string]any{"pod_name": "airlock-0"}})
	id := s.newSession("python", nil)
	if r := s.exec(id, "import os\nprint(os.getuid())"); strings.TrimSpace(r.Stdout) != "1000" {
		t.Fatalf("in the sandbox: %+v", r)
	}
	lo, hi := base+count/8*2, base+count
	found := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				if uid, _ := strconv.Atoi(f[1]); uid >= base && uid < base+count {
					if uid < lo || uid >= hi {
						t.Errorf("pid %s has host uid %d, in the CLI runs' part of the range", e.Name(), uid)
					}
					found++
				}
			}
		}
	}
	if found == 0 {
		t.Errorf("no process with a host uid in [%d, %d): the sandboxes are not in pod mode's range", base, base+count)
	}
}
