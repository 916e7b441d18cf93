package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRouterWithAirlock runs the chart's router (nginx and dnsmasq on
// loopback, as TestRouter does) in front of two REAL airlock servers, each
// started with the configuration the chart renders (its pod name from a
// file, its token from a file) as pods airlock-0 and airlock-1, and a
// small stand-in for the airlock Service that, like kube-proxy with
// readiness probes, sends each connection to a pod whose /readyz is 200:
//
//	airlock-0.airlock-pods.ns.svc.cluster.local → 127.0.0.2  airlock serve, max_sessions 1
//	airlock-1.airlock-pods.ns.svc.cluster.local → 127.0.0.3  airlock serve
//	airlock.ns.svc.cluster.local                → 127.0.0.4  the Service: a ready pod
//
// Sessions made through the router land on a pod with room, carry its
// name, and every later request reaches that pod; a pod asked about the
// other's session answers 421; a killed pod's sessions get the router's
// JSON 503 node_unavailable, and once it is back, 410 session_lost.
func TestRouterWithAirlock(t *testing.T) {
	nginx, dnsmasq := lookPath("nginx"), lookPath("dnsmasq")
	require(t, nginx != "" && dnsmasq != "", "the router test needs nginx and dnsmasq from Debian (scripts/install-deps.sh installs them)")
	require(t, os.Geteuid() == 0, "real airlock servers need root to build jails")
	tools(t)
	bin := buildAirlock(t)
	const token = "router-test-token"

	port := commonPort(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	dnsPort := freePort(t, "udp")
	routerPort, healthPort := freePort(t, "tcp"), freePort(t, "tcp")
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "run"), 0o755)
	objs := objects(t, render(t, routerNS,
		"--set", "auth.token="+token,
		"--set", fmt.Sprintf("service.port=%d", port),
		"--set", "router.listenAddress=127.0.0.1",
		"--set", fmt.Sprintf("router.port=%d", routerPort),
		"--set", fmt.Sprintf("router.healthPort=%d", healthPort),
		"--set", fmt.Sprintf("router.resolver=127.0.0.1:%d", dnsPort),
		"--set", "router.resolverValid=1s",
		"--set", "router.workerProcesses=1",
		"--set", "router.runDir="+dir+"/run"))

	// The pods: the chart's config.json, with this host's paths.
	var chartCfg map[string]any
	if err := json.Unmarshal([]byte(get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)), &chartCfg); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "token")
	os.WriteFile(secret, []byte(token+"\n"), 0o400)
	pods := map[string]*podServer{}
	for i, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		name := fmt.Sprintf("airlock-%d", i)
		podDir := filepath.Join(dir, name)
		os.Mkdir(podDir, 0o755)
		os.WriteFile(filepath.Join(podDir, "name"), []byte(name), 0o644)
		var cfg map[string]any
		b, _ := json.Marshal(chartCfg)
		json.Unmarshal(b, &cfg)
		if get(cfg, "cluster", "pod_name_file") != "/etc/airlock/pod/name" || get(cfg, "server", "token_file") != "/etc/airlock/secret/token" {
			t.Fatalf("the chart's configuration: %v", cfg)
		}
		state := fmt.Sprintf("/run/airlock-router-test-%d-%d", os.Getpid(), i)
		maxSessions := 4
		if i == 0 {
			maxSessions = 1 // full after one session: not ready
		}
		merge(cfg, map[string]any{
			"state_dir":     state,
			"data_dir":      state + "/data",
			"cgroup_parent": fmt.Sprintf("airlock-router-test-%d-%d", os.Getpid(), i),
			"id_base":       1_340_000_000 + i*20_000_000,
			"cluster":       map[string]any{"pod_name_file": filepath.Join(podDir, "name")},
			"server":        map[string]any{"listen": fmt.Sprintf("%s:%d", ip, port), "token_file": secret, "max_sessions": maxSessions},
			"pool":          map[string]any{"size": map[string]any{"python": 1, "bash": 0, "javascript": 0}, "zygote": false},
		})
		cfgPath := filepath.Join(podDir, "config.json")
		b, _ = json.MarshalIndent(cfg, "", "  ")
		os.WriteFile(cfgPath, b, 0o644)
		p := &podServer{name: name, url: fmt.Sprintf("http://%s:%d", ip, port), bin: bin, cfg: cfgPath, state: state, token: token}
		p.start(t)
		t.Cleanup(func() { p.stop(t); os.RemoveAll(state) })
		pods[name] = p
	}
	for _, p := range pods {
		p.waitReady(t, true)
	}
	svc := startService(t, fmt.Sprintf("127.0.0.4:%d", port), pods["airlock-0"], pods["airlock-1"])

	conf, _ := get(find(t, objs, "ConfigMap", "airlock-router"), "data", "nginx.conf").(string)
	confPath := filepath.Join(dir, "nginx.conf")
	os.WriteFile(confPath, []byte(conf), 0o644)
	dargs := []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
		"--pid-file=", "--listen-address=127.0.0.1", "--bind-interfaces", fmt.Sprintf("--port=%d", dnsPort),
		"--local=/cluster.local/", "--log-facility=-", "--cache-size=0",
		"--host-record=" + dnsName("airlock-0") + ",127.0.0.2",
		"--host-record=" + dnsName("airlock-1") + ",127.0.0.3",
		"--host-record=" + dnsName("service") + ",127.0.0.4"}
	dns := start(t, dnsmasq, dargs...)
	dns.waitLine(t, regexp.MustCompile(`started, version`))
	router := start(t, nginx, "-e", "stderr", "-p", dir, "-c", confPath, "-g", "daemon off;")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort), router)
	via := &apiClient{base: fmt.Sprintf("http://127.0.0.1:%d", routerPort), token: token}

	// Creations go to the Service: the first to airlock-0, which is then
	// full (not ready), so the second to airlock-1.
	var a, b struct{ ID string }
	if code, body := via.do(t, "POST", "/v1/sessions", `{"language":"python"}`, &a); code != 201 && code != 200 {
		t.Fatalf("create through the router: %d %s", code, body)
	}
	pods["airlock-0"].waitReady(t, false)
	if code, body := via.do(t, "POST", "/v1/sessions", `{"language":"python"}`, &b); code != 201 && code != 200 {
		t.Fatalf("second create through the router: %d %s", code, body)
	}
	if !strings.HasPrefix(a.ID, "airlock-0.") || !strings.HasPrefix(b.ID, "airlock-1.") {
		t.Fatalf("sessions %q and %q: want one on each pod (the Service sends creations to ready pods only)", a.ID, b.ID)
	}
	if got := svc.picked(); strings.Join(got, ",") != "airlock-0,airlock-1" {
		t.Errorf("the Service sent creations to %v", got)
	}

	// Every later request reaches the session's pod: state kept per
	// session, streamed events, files.
	for id, val := range map[string]string{a.ID: "A", b.ID: "B"} {
		execute(t, via, id, fmt.Sprintf("x = %q", val), "")
	}
	for id, val := range map[string]string{a.ID: "A", b.ID: "B"} {
		execute(t, via, id, "print(x)", val+"\n")
		streamed(t, via, id, "import sys\nprint(x); sys.stdout.flush()", val+"\n")
	}
	if code, body := via.do(t, "PUT", "/v1/sessions/"+b.ID+"/files/data/in.csv", "a,b\n1,2\n", nil); code != 201 {
		t.Errorf("upload through the router: %d %s", code, body)
	}
	if code, body := via.do(t, "GET", "/v1/sessions/"+b.ID+"/files/data/in.csv", "", nil); code != 200 || body != "a,b\n1,2\n" {
		t.Errorf("download through the router: %d %q", code, body)
	}
	execute(t, via, b.ID, "print(open('data/in.csv').read(), end='')", "a,b\n1,2\n")
	if svc.count() != 2 {
		t.Errorf("session requests went through the Service: %v", svc.picked())
	}

	// What the router costs: an execution's round trip through it and
	// straight to the pod (a figure for docs/explanation/performance.md, not a bound).
	t.Logf("execute round trip, median of 20: through the router %v, straight to the pod %v",
		medianExec(t, via, b.ID), medianExec(t, &apiClient{base: pods["airlock-1"].url, token: token}, b.ID))

	// Asked directly about the other pod's session, a pod answers 421
	// (the router never asks it).
	direct := &apiClient{base: pods["airlock-0"].url, token: token}
	if code, body := direct.do(t, "POST", "/v1/sessions/"+b.ID+"/execute", `{"code":"x"}`, nil); code != 421 || !strings.Contains(body, `"code":"misdirected"`) {
		t.Errorf("airlock-0 asked about airlock-1's session: %d %s", code, body)
	}
	// An MCP session's id names its pod too, so that the router sends
	// its requests back there (TestRouter checks that rule). Asked
	// directly: over the router nginx's Host would meet the MCP SDK's
	// DNS-rebinding guard, which these loopback pods keep on (pods on a
	// pod network do not trip it).
	req, _ := http.NewRequest("POST", pods["airlock-1"].url+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"router-test","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		resp.Body.Close()
		if sid := resp.Header.Get("Mcp-Session-Id"); resp.StatusCode != 200 || !regexp.MustCompile(`^airlock-1\.[0-9a-z]+\.[0-9a-z]{24}$`).MatchString(sid) {
			t.Errorf("MCP initialize on airlock-1: %d, Mcp-Session-Id %q", resp.StatusCode, sid)
		}
	}

	// Without the token, the router passes airlock's own 401 on.
	if code, _ := (&apiClient{base: via.base}).do(t, "GET", "/v1/sessions/"+a.ID, "", nil); code != 401 {
		t.Errorf("no token through the router: %d", code)
	}

	// airlock-1 dies with its node: its session's requests get the
	// router's JSON 503 node_unavailable.
	pods["airlock-1"].kill(t)
	for _, path := range []string{"/v1/sessions/" + b.ID, "/v1/sessions/" + b.ID + "/execute"} {
		method, body := "GET", ""
		if strings.HasSuffix(path, "execute") {
			method, body = "POST", `{"code":"x"}`
		}
		resp, text := via.raw(t, method, path, body)
		if resp.StatusCode != 503 || !strings.Contains(text, `"code":"node_unavailable"`) ||
			resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s %s with its pod gone: %d %v %s", method, path, resp.StatusCode, resp.Header, text)
		}
	}
	// airlock-0's session goes on.
	execute(t, via, a.ID, "print(x)", "A\n")

	// The pod comes back (same name, same state): the session is lost,
	// and says so; new sessions work.
	pods["airlock-1"].start(t)
	pods["airlock-1"].waitReady(t, true)
	deadline := time.Now().Add(10 * time.Second) // the router's resolver caches for 1s
	for {
		resp, text := via.raw(t, "POST", "/v1/sessions/"+b.ID+"/execute", `{"code":"x"}`)
		if resp.StatusCode == 410 && strings.Contains(text, `"code":"session_lost"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d %s, want 410 session_lost", resp.StatusCode, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var c struct{ ID string }
	if code, body := via.do(t, "POST", "/v1/sessions", `{"language":"python"}`, &c); code != 201 || !strings.HasPrefix(c.ID, "airlock-1.") || c.ID[:strings.LastIndex(c.ID, ".")] == b.ID[:strings.LastIndex(b.ID, ".")] {
		t.Errorf("a session after the restart: %d %s (%q; before %q)", code, body, c.ID, b.ID)
	}
	execute(t, via, c.ID, "print(1 + 1)", "2\n")
	router.stop(t)
	dns.stop(t)
}

func medianExec(t *testing.T, c *apiClient, id string) time.Duration {
	t.Helper()
	var d []time.Duration
	for i := 0; i < 20; i++ {
		start := time.Now()
		if code, body := c.do(t, "POST", "/v1/sessions/"+id+"/execute", `{"code":"1"}`, nil); code != 200 {
			t.Fatalf("execute: %d %s", code, body)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[len(d)/2].Round(10 * time.Microsecond)
}

// buildAirlock builds cmd/airlock into the test's temporary directory.
func buildAirlock(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "airlock")
	if o, err := run(repoRoot(t), []string{"CGO_ENABLED=0"}, "go", "build", "-o", out, "./cmd/airlock"); err != nil {
		t.Fatalf("go build: %v\n%s", err, o)
	}
	return out
}

// commonPort finds a TCP port free on every address.
func commonPort(t *testing.T, ips ...string) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		port := freePort(t, "tcp")
		ok := true
		for _, ip := range ips {
			l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

func waitHTTP(t *testing.T, url string, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v\n%s", url, err, d.out)
		}
		select {
		case err := <-d.done:
			t.Fatalf("%s exited: %v\n%s", d.cmd.Path, err, d.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// podServer is one airlock server playing a pod.
type podServer struct {
	name, url, bin, cfg, state, token string
	cmd                               *exec.Cmd
	out                               *lockedBuffer
	done                              chan error
}

func (p *podServer) start(t *testing.T) {
	t.Helper()
	p.out = &lockedBuffer{lines: make(chan string, 1000)}
	p.done = make(chan error, 1)
	p.cmd = exec.Command(p.bin, "serve", "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
}

// waitReady waits for /readyz to say ready (or not).
func (p *podServer) waitReady(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if (resp.StatusCode == 200) == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz never said ready=%v (%v)\n%s", p.name, want, err, p.out)
		}
		select {
		case err := <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, err, p.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill is a node's death: SIGKILL, no clean-up by the server itself.
func (p *podServer) kill(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *podServer) stop(t *testing.T) {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on SIGTERM:\n%s", p.name, p.out)
	}
}

// service stands in for the airlock Service: each request goes to the
// next pod, in turn, whose /readyz answers 200 (kube-proxy sends only to
// ready endpoints); with none ready the connection is dropped, as a
// Service without endpoints refuses it.
type service struct {
	pods []*podServer
	mu   sync.Mutex
	next int
	log  []string
}

func startService(t *testing.T, addr string, pods ...*podServer) *service {
	t.Helper()
	s := &service{pods: pods}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.pods {
		p := s.pods[(s.next+i)%len(s.pods)]
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			continue
		}
		s.next = (s.next + i + 1) % len(s.pods)
		s.log = append(s.log, p.name)
		u, _ := url.Parse(p.url)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		rp.ServeHTTP(w, r)
		return
	}
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
	}
}

func (s *service) picked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

func (s *service) count() int { return len(s.picked()) }

// apiClient sends API requests with the token, if any.
type apiClient struct{ base, token string }

func (c *apiClient) raw(t *testing.T, method, path, body string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// do sends a request and decodes a 2xx JSON answer into out.
func (c *apiClient) do(t *testing.T, method, path, body string, out any) (int, string) {
	t.Helper()
	resp, text := c.raw(t, method, path, body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, text)
		}
	}
	return resp.StatusCode, text
}

// execute runs code in a session through c and checks its stdout.
func execute(t *testing.T, c *apiClient, id, code, stdout string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	var r struct {
		Stdout string
		Error  any
	}
	if status, text := c.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), &r); status != 200 || r.Stdout != stdout || r.Error != nil {
		t.Errorf("execute %q in %s: %d %s, want stdout %q", code, id, status, text, stdout)
	}
}

// streamed runs code with NDJSON streaming through c: the stdout event
// and the end arrive.
func streamed(t *testing.T, c *apiClient, id, code, stdout string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest("POST", c.base+"/v1/sessions/"+id+"/execute", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("streamed execute: %d %v", resp.StatusCode, resp.Header)
	}
	var got strings.Builder
	sawEnd := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct{ Type, Text string }
		json.Unmarshal(sc.Bytes(), &ev)
		switch ev.Type {
		case "stdout":
			got.WriteString(ev.Text)
		case "end":
			sawEnd = true
		}
	}
	if got.String() != stdout || !sawEnd {
		t.Errorf("streamed execute in %s: stdout %q end %v, want %q", id, got.String(), sawEnd, stdout)
	}
}
