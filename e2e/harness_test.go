// Package e2e owns the end-to-end tests: they build the real airlock
// binary, start a real server, and talk to it over real HTTP.
//
// They must never reach into the server's packages for what a client
// cannot do: what they check is what users get.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// airlockBinary builds cmd/airlock once per test run, with scripts/build.sh.
func airlockBinary(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "end-to-end test: needs root to build jails (CI runs as root)")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "airlock")
		// As it ships: with the sandbox init built into it
		// (TestDefaultBuildWithCgo runs a plain go build's).
		cmd := exec.Command("../scripts/build.sh", binPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("scripts/build.sh: %v\n%s", err, out)
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
	// c is the server's API client (package client).
	c *client.Client
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
	return startServerBin(t, "", overrides)
}

// startServerBin is startServer with the airlock binary bin (the one
// the tests build when empty).
func startServerBin(t testing.TB, bin string, overrides map[string]any) *server {
	t.Helper()
	name, cfg := serverConfig(overrides)
	return startServerNamedBin(t, bin, name, cfg)
}

// launchServer is startServer without waiting for warm pools: it returns
// as soon as the server listens.
func launchServer(t testing.TB, overrides map[string]any) *server {
	t.Helper()
	name, cfg := serverConfig(overrides)
	return launchServerNamed(t, "", name, cfg)
}

// serverConfig is the configuration of a new test server with its own
// name (state dir, cgroup parent) and host ids; overrides are merged in.
func serverConfig(overrides map[string]any) (string, map[string]any) {
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
		"data_dir":      "/run/" + name + "/data",
		// Tests that are not about keys run without them (loopback only);
		// those that are set "auth": "keys".
		"server": map[string]any{"listen": "127.0.0.1:0", "auth": "none"},
		"pool": map[string]any{
			"size": map[string]int{"python": 2, "bash": 1, "javascript": 1},
			// Grown by the tests' bursts, they stay small beside the others'.
			"max_size": map[string]int{"python": 4, "bash": 2, "javascript": 2},
			"zygote":   true,
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
	return name, cfg
}

// startServerNamed starts a server with exactly cfg; name is its state
// directory under /run and its cgroup parent.
func startServerNamed(t testing.TB, name string, cfg map[string]any) *server {
	t.Helper()
	return startServerNamedBin(t, "", name, cfg)
}

func startServerNamedBin(t testing.TB, bin, name string, cfg map[string]any) *server {
	t.Helper()
	s := launchServerNamed(t, bin, name, cfg)
	s.waitWarm()
	return s
}

// launchServerNamed starts a server with exactly cfg and returns once it
// listens.
func launchServerNamed(t testing.TB, bin, name string, cfg map[string]any) *server {
	t.Helper()
	if bin == "" {
		bin = airlockBinary(t)
	}
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
		s.c = client.New(s.URL, client.WithHTTPClient(&http.Client{Timeout: 5 * time.Minute, Transport: s.checked(http.DefaultTransport)}))
	case err := <-s.done:
		t.Fatalf("server exited: %v\n%s", err, s.stderr.String())
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("server did not start:\n%s", s.stderr.String())
	}
	return s
}

// waitWarm waits until /healthz reports full pools and a running template.
func (s *server) waitWarm() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.c.WaitWarm(ctx); err != nil {
		s.t.Logf("pools not warm after 60s (%v); continuing\n%s", err, s.stderr.String())
	}
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

// rawClient sends the requests of raw: it follows redirects, as clients
// such as curl -L and python-requests do.
var rawClient = &http.Client{Timeout: 5 * time.Minute}

// raw sends a request as it is, for requests the client package would not
// send (malformed bodies, odd paths and headers); body may be nil, []byte,
// string or a value to marshal as JSON.
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
		if k == "Host" {
			req.Host = v // a port's own host, say
		}
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		// Errorf, not Fatalf: callers run on other goroutines too, where
		// Fatalf would leave them hanging; status 0 fails their checks.
		s.t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		s.checkErrorBody(method+" "+path, data)
	}
	return resp.StatusCode, data
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Host internals: what an error sent to a client must never name. The
// server's state directory and cgroup parent carry its name; the init
// prefixes what it prints with airlock-init.
func (s *server) hostMarkers() []string {
	markers := []string{s.name, "/sys/fs/cgroup", "airlock-init", "goroutine "}
	if binPath != "" {
		markers = append(markers, filepath.Dir(binPath))
	}
	return markers
}

// checkErrorBody fails the test when an error body or a failed event
// names host internals. Every error the suite sees passes here (the
// client's responses through checked, raw's directly).
func (s *server) checkErrorBody(where string, body []byte) {
	for _, m := range s.hostMarkers() {
		if bytes.Contains(body, []byte(m)) {
			s.t.Errorf("%s: an error sent to the client names host internals (%q): %s", where, m, truncate(string(body), 500))
		}
	}
}

// checked wraps the client's transport: error responses, and the failed
// events of streams, go through checkErrorBody.
func (s *server) checked(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		where := req.Method + " " + req.URL.Path
		if resp.StatusCode >= 400 {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s.checkErrorBody(where, data)
			resp.Body = io.NopCloser(bytes.NewReader(data))
		} else if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
			resp.Body = &eventChecker{ReadCloser: resp.Body, check: func(line []byte) { s.checkErrorBody(where, line) }}
		}
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// eventChecker hands every failed event of an NDJSON stream to check.
type eventChecker struct {
	io.ReadCloser
	check   func([]byte)
	pending []byte
}

func (e *eventChecker) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	e.pending = append(e.pending, p[:n]...)
	for {
		line, rest, ok := bytes.Cut(e.pending, []byte("\n"))
		if !ok {
			break
		}
		if bytes.Contains(line, []byte(`"type":"failed"`)) {
			e.check(line)
		}
		e.pending = rest
	}
	if len(e.pending) > 64<<10 {
		e.pending = nil // a long line of output, never a failed event
	}
	return n, err
}

// Session helpers, on the client package.

// newSession creates a session; extra holds more fields of the request,
// as JSON would.
func (s *server) newSession(lang string, extra map[string]any) string {
	s.t.Helper()
	body := map[string]any{"language": lang}
	for k, v := range extra {
		body[k] = v
	}
	var req apitype.CreateSessionRequest
	b, _ := json.Marshal(body)
	if err := json.Unmarshal(b, &req); err != nil {
		s.t.Fatalf("create %s session: %v", lang, err)
	}
	info, err := s.c.CreateSession(context.Background(), req)
	if err != nil {
		s.t.Fatalf("create %s session: %v", lang, err)
	}
	return info.ID
}

// execute runs req in a session.
func (s *server) execute(id string, req apitype.ExecuteRequest) (*apitype.Result, error) {
	return s.c.Execute(context.Background(), id, req, nil)
}

// exec runs code in a session; an error response fails the test.
func (s *server) exec(id, code string) *apitype.Result {
	s.t.Helper()
	res, err := s.execute(id, apitype.ExecuteRequest{Code: code})
	if err != nil {
		s.t.Fatalf("execute %q: %v", truncate(code, 80), err)
	}
	return res
}

// text returns the text/plain of the first result of type typ.
func text(r *apitype.Result, typ string) string {
	if r == nil {
		return ""
	}
	for _, o := range r.Results {
		if o.Type == typ {
			var s string
			json.Unmarshal(o.Data["text/plain"], &s)
			return s
		}
	}
	return ""
}

// apiError returns err as the server's error, or nil if it is not one.
func apiError(err error) *client.Error {
	var e *client.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// wantError fails the test unless err is the server's error of status and
// code; it returns the error.
func wantError(t testing.TB, what string, err error, status int, code string) *client.Error {
	t.Helper()
	e := apiError(err)
	if e == nil || e.Status != status || e.Code != code {
		t.Fatalf("%s: %v (%+v), want %d %s", what, err, e, status, code)
	}
	return e
}

// limits parses limits as a request would give them ("memory": "128M").
func limits(t testing.TB, kv map[string]any) config.Limits {
	t.Helper()
	var l config.Limits
	b, _ := json.Marshal(kv)
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("limits %v: %v", kv, err)
	}
	return l
}

// duration parses a duration as a request would give it.
func duration(t testing.TB, s string) config.Duration {
	t.Helper()
	d, err := config.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
