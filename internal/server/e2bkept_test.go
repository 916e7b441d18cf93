package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/session"
	"airlock/internal/testenv"
)

// onShutdownEnd is an observer that, as a shutdown ends a session (the
// session's end is being recorded: the server serves still), calls
// while: what a request in flight at that moment meets.
type onShutdownEnd struct {
	*recorder
	while func(id string)
}

func (o onShutdownEnd) SessionEnded(e session.SessionEvent) {
	if e.End.Code == apitype.EndShutdown && o.while != nil {
		o.while(e.Session)
	}
}

// e2bCall is an E2B control-plane call of h (no key: the tests' servers
// authenticate nobody).
func e2bCall(h http.Handler, method, path string, body any) (int, []byte) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	r := httptest.NewRequest(method, path, bytes.NewReader(b))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// listedIDs are the sandbox ids of an E2B listing, with their states.
func listedIDs(t *testing.T, body []byte) map[string]string {
	t.Helper()
	var l []struct{ SandboxID, State string }
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("the E2B listing %s: %v", body, err)
	}
	out := map[string]string{}
	for _, b := range l {
		out[b.SandboxID] = b.State
	}
	return out
}

// TestE2BSandboxKeptAtShutdown: an E2B sandbox whose session the
// shutdown ends without pausing it (its workspace over
// persistence.max_image_bytes), its recovery point kept, is not dropped
// by an E2B call in flight at that moment: the listing leaves it out, as
// v1's does, and a call naming it (its control plane's, its data
// plane's) answers 503 (as v1's delete), never 404, and its record stays, so that after the restart E2B lists it
// paused, as v1 does. checked against a mutant: find and list forgetting
// it as gone (as before) removed its record, and the restarted server's
// E2B listing did not have it while v1's listed it paused.
func TestE2BSandboxKeptAtShutdown(t *testing.T) {
	testenv.RequireRoot(t, "privileged test: builds jails")
	cfg := testConfig(t)
	cfg.Pool.Size = map[string]int{"bash": 0, "python": 0, "javascript": 0}
	cfg.Pool.Zygote = false
	cfg.Persistence.Enabled = true
	cfg.Persistence.MaxImageBytes = 1 << 20
	type seen struct {
		listCode, getCode int
		listed            map[string]string
		v1                []string
		getBody           string
		dataCode          int
		dataBody          string
	}
	var (
		mu    sync.Mutex
		h     http.Handler
		token string
		saw   = map[string]seen{}
		errs  []string
	)
	obs := onShutdownEnd{recorder: newRecorder(), while: func(id string) {
		code, body := e2bCall(h, "GET", "/sandboxes", nil)
		var l []struct{ SandboxID string }
		listed := map[string]string{}
		if code == http.StatusOK && json.Unmarshal(body, &l) == nil {
			for _, b := range l {
				listed[b.SandboxID] = "listed"
			}
		}
		gcode, gbody := e2bCall(h, "GET", "/sandboxes/"+id, nil)
		// Its data plane (envd's files), as its SDK calls it.
		r := httptest.NewRequest("GET", "/files?path=/home/user/notes.txt", nil)
		r.Header.Set("E2b-Sandbox-Id", id)
		r.Header.Set("E2b-Sandbox-Port", "49999")
		mu.Lock()
		r.Header.Set("X-Access-Token", token)
		mu.Unlock()
		dw := httptest.NewRecorder()
		h.ServeHTTP(dw, r)
		var v1 []string
		if l, err := client.InProcess(h).Sessions(context.Background()); err == nil {
			for _, s := range l {
				v1 = append(v1, s.ID)
			}
		} else {
			mu.Lock()
			errs = append(errs, "v1 listing: "+err.Error())
			mu.Unlock()
		}
		mu.Lock()
		saw[id] = seen{listCode: code, listed: listed, getCode: gcode, getBody: string(gbody), v1: v1, dataCode: dw.Code, dataBody: dw.Body.String()}
		mu.Unlock()
	}}
	start := func() *Server {
		s, err := New(cfg, Options{Version: "test", Log: slog.New(slog.DiscardHandler), Observers: []session.Observer{obs}})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s.Shutdown(ctx)
		})
		return s
	}
	t.Cleanup(func() { os.RemoveAll(cfg.StateDir) })
	s := start()
	mu.Lock()
	h = s.Handler()
	mu.Unlock()
	api := client.InProcess(s.Handler())
	ctx := context.Background()

	code, body := e2bCall(h, "POST", "/sandboxes", map[string]any{"templateID": "base"})
	var box struct{ SandboxID, EnvdAccessToken string }
	if code != http.StatusCreated || json.Unmarshal(body, &box) != nil || box.SandboxID == "" {
		t.Fatalf("creating a sandbox: %d %s", code, body)
	}
	id := box.SandboxID
	mu.Lock()
	token = box.EnvdAccessToken
	mu.Unlock()
	if _, err := api.Upload(ctx, id, "notes.txt", strings.NewReader("kept"), 4); err != nil {
		t.Fatal(err)
	}
	// Its recovery point sealed with notes.txt, then over
	// max_image_bytes: the shutdown cannot pause it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := api.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.RecoveryPointAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox's recovery point was never sealed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	big := bytes.Repeat([]byte("x"), 2<<20)
	if _, err := api.Upload(ctx, id, "big.bin", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	s.Shutdown(sctx)
	cancel()

	mu.Lock()
	got, ok := saw[id]
	for _, e := range errs {
		t.Error(e)
	}
	mu.Unlock()
	if !ok {
		t.Fatal("the shutdown did not end the session (was it paused?)")
	}
	if got.listCode != http.StatusOK || got.listed[id] != "" {
		t.Errorf("E2B's listing as the shutdown ended the sandbox: %d, listed %v (want it left out)", got.listCode, got.listed)
	}
	for _, v := range got.v1 {
		if v == id {
			t.Errorf("v1's listing as the shutdown ended the session has it: %v", got.v1)
		}
	}
	if got.getCode != http.StatusServiceUnavailable || !strings.Contains(got.getBody, "next start") {
		t.Errorf("E2B's get as the shutdown ended the sandbox: %d %s (want 503 saying it is kept)", got.getCode, got.getBody)
	}

	if got.dataCode != http.StatusServiceUnavailable {
		t.Errorf("E2B's data plane as the shutdown ended the sandbox: %d %s (want 503)", got.dataCode, got.dataBody)
	}

	// The restart: listed paused by both APIs, its files as sealed.
	s2 := start()
	h2 := s2.Handler()
	var v1State string
	if l, err := client.InProcess(h2).Sessions(ctx); err == nil {
		for _, x := range l {
			if x.ID == id {
				v1State = x.State
			}
		}
	}
	code, body = e2bCall(h2, "GET", "/sandboxes", nil)
	if code != http.StatusOK {
		t.Fatalf("E2B's listing after the restart: %d %s", code, body)
	}
	if e2b := listedIDs(t, body)[id]; v1State != apitype.StatePaused || e2b != "paused" {
		t.Errorf("after the restart: v1 lists it %q, E2B %q (want both paused)", v1State, e2b)
	}
	if code, body = e2bCall(h2, "GET", "/sandboxes/"+id, nil); code != http.StatusOK {
		t.Errorf("E2B's get after the restart: %d %s", code, body)
	}
}
