// Package e2e holds the end-to-end tests: they build the real airlock
// binary, start a real server, and talk to it over real HTTP.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// airlockBinary builds cmd/airlock once per test run.
func airlockBinary(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end test: needs root to build jails (CI runs as root)")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "airlock")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/airlock")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// server is a running `airlock serve`.
type server struct {
	t      testing.TB
	cmd    *exec.Cmd
	URL    string
	name   string
	stderr *syncBuffer
	done   chan error
	cfg    map[string]any
	// cfgPath is the server's configuration file; a CLI given it finds
	// the server's socket.
	cfgPath string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var serverSeq int

// Each test server gets its own host ids, apart from those of any other
// airlock server on the machine and from each other, so that a leak check
// sees only the processes of the server it checks. A server's sandboxes
// use ids idBase+2*slot, slots from jail.ServerSlotBase (2^22) up, fewer
// than 2^20 of them: bases 2^22 apart never overlap.
const (
	e2eIDBase = 1_500_000_000
	e2eIDStep = 1 << 22
)

// idBases maps a server's name (its cgroup parent) to its id base.
var (
	idBasesMu sync.Mutex
	idBases   = map[string]int{}
)

// startServer starts a server with its own state dir and cgroup parent;
// overrides are merged into the config file. It waits until the pools are
// warm (if any).
func startServer(t testing.TB, overrides map[string]any) *server {
	t.Helper()
	serverSeq++
	name := fmt.Sprintf("airlock-e2e-%d-%d", os.Getpid(), serverSeq)
	base := e2eIDBase + serverSeq*e2eIDStep
	idBasesMu.Lock()
	idBases[name] = base
	idBasesMu.Unlock()
	cfg := map[string]any{
		"state_dir":     "/run/" + name,
		"cgroup_parent": name,
		"id_base":       base,
		"server":        map[string]any{"listen": "127.0.0.1:0"},
		"pool": map[string]any{
			"size":   map[string]int{"python": 2, "bash": 1, "javascript": 1},
			"zygote": true,
		},
	}
	for k, v := range overrides {
		if m, ok := v.(map[string]any); ok {
			if base, ok := cfg[k].(map[string]any); ok {
				for kk, vv := range m {
					base[kk] = vv
				}
				continue
			}
		}
		cfg[k] = v
	}
	return startServerNamed(t, name, cfg)
}

// startServerNamed starts a server with exactly cfg; name is its state
// directory under /run and its cgroup parent.
func startServerNamed(t testing.TB, name string, cfg map[string]any) *server {
	t.Helper()
	bin := airlockBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, name: name, stderr: &syncBuffer{}, done: make(chan error, 1), cfg: cfg, cfgPath: cfgPath}
	s.cmd = exec.Command(bin, "serve", "--config", cfgPath)
	pr, pw := io.Pipe()
	s.cmd.Stderr = io.MultiWriter(s.stderr, pw)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { s.stop() }) // also when it fails to start below
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case err := <-s.done:
		t.Fatalf("server exited: %v\n%s", err, s.stderr.String())
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("server did not start:\n%s", s.stderr.String())
	}
	s.waitWarm()
	return s
}

// waitWarm waits until /healthz reports full pools and a running template.
func (s *server) waitWarm() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var h struct {
			Pool map[string]json.RawMessage `json:"pool"`
		}
		if code := s.do("GET", "/healthz", nil, &h); code == 200 {
			warm := true
			for k, raw := range h.Pool {
				if k == "python_template" {
					if pool, _ := s.cfg["pool"].(map[string]any); pool["zygote"] == false {
						continue // none is started
					}
					var z struct{ Running bool }
					json.Unmarshal(raw, &z)
					if !z.Running {
						warm = false
					}
					continue
				}
				var q struct{ Ready, Target int }
				json.Unmarshal(raw, &q)
				if q.Ready < q.Target {
					warm = false
				}
			}
			if warm {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Logf("pools not warm after 60s; continuing\n%s", s.stderr.String())
}

// stop sends SIGTERM and waits; it fails the test if the server does not
// exit cleanly within 30s.
func (s *server) stop() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-s.done:
			if err != nil {
				s.t.Errorf("server exit: %v\n%s", err, s.stderr.String())
			}
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			s.t.Errorf("server did not stop after SIGTERM:\n%s", s.stderr.String())
		}
	}
	// The state directory is the test's (the server keeps its root
	// templates there for the next start); the cgroup parent the server
	// removes itself, which checkNothingLeft checks.
	os.RemoveAll(filepath.Join("/run", s.name))
}

var client = &http.Client{Timeout: 5 * time.Minute}

// do sends a JSON request and decodes a JSON answer into out (if not nil).
func (s *server) do(method, path string, body any, out any) int {
	s.t.Helper()
	code, data := s.raw(method, path, body, nil)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decoding %q: %v", method, path, truncate(string(data), 500), err)
		}
	}
	return code
}

// raw sends a request; body may be nil, []byte, string or a value to
// marshal as JSON.
func (s *server) raw(method, path string, body any, hdr map[string]string) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		// Errorf, not Fatalf: callers run on other goroutines too, where
		// Fatalf would leave them hanging; status 0 fails their checks.
		s.t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Session helpers.

type sessionInfo struct {
	ID        string `json:"id"`
	Language  string `json:"language"`
	State     string `json:"state"`
	EndReason string `json:"end_reason"`
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type execResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	Results         []struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	} `json:"results"`
	Error *struct {
		Name      string   `json:"name"`
		Value     string   `json:"value"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
	ExitCode        int     `json:"exit_code"`
	DurationMs      float64 `json:"duration_ms"`
	CPUMs           float64 `json:"cpu_ms"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	Killed          bool    `json:"killed"`
	KillReason      string  `json:"kill_reason"`
	SessionEnded    bool    `json:"session_ended"`
	EndReason       string  `json:"end_reason"`
	FilesChanged    []struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		Change string `json:"change"`
	} `json:"files_changed"`
	Files []struct {
		Path          string `json:"path"`
		Size          int64  `json:"size"`
		ContentBase64 string `json:"content_base64"`
	} `json:"files"`
}

// text returns the text/plain of the first result of type typ.
func (r execResult) text(typ string) string {
	for _, o := range r.Results {
		if o.Type == typ {
			var s string
			json.Unmarshal(o.Data["text/plain"], &s)
			return s
		}
	}
	return ""
}

func (s *server) newSession(lang string, extra map[string]any) string {
	s.t.Helper()
	body := map[string]any{"language": lang}
	for k, v := range extra {
		body[k] = v
	}
	var info sessionInfo
	if code := s.do("POST", "/v1/sessions", body, &info); code != 201 {
		s.t.Fatalf("create %s session: status %d", lang, code)
	}
	return info.ID
}

func (s *server) exec(id, code string) execResult {
	s.t.Helper()
	var res execResult
	status, data := s.raw("POST", "/v1/sessions/"+id+"/execute", map[string]any{"code": code}, nil)
	if status != 200 {
		s.t.Fatalf("execute %q: status %d: %s", truncate(code, 80), status, data)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		s.t.Fatal(err)
	}
	return res
}
