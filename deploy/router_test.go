package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The router test runs the chart's nginx configuration, as the chart
// renders it, with Debian's nginx on loopback. dnsmasq stands in for the
// cluster's DNS and answers the pods' names with loopback addresses where
// small Go servers stand in for the pods and the airlock Service; each
// says which one it is, so that every routing case (smuggling attempts,
// unbuffered streams both ways, pods that are gone) is checked exactly.
// TestRouterWithAirlock (router_airlock_test.go) runs the same router in
// front of two real airlock servers.
//
//	airlock-0.airlock-pods.ns.svc.cluster.local → 127.0.0.2  pod 0
//	airlock-1.airlock-pods.ns.svc.cluster.local → 127.0.0.3  pod 1
//	airlock-2...                                 NXDOMAIN     a pod that is gone
//	airlock-3.airlock-pods.ns.svc.cluster.local → 127.0.0.5  a pod whose node died (refused)
//	airlock.ns.svc.cluster.local                → 127.0.0.4  the airlock Service

const routerNS = "ns"

var standIns = map[string]string{
	"airlock-0": "127.0.0.2",
	"airlock-1": "127.0.0.3",
	"service":   "127.0.0.4",
}

func dnsName(who string) string {
	if who == "service" {
		return "airlock." + routerNS + ".svc.cluster.local"
	}
	return who + ".airlock-pods." + routerNS + ".svc.cluster.local"
}

// hit is what a stand-in saw.
type hit struct {
	Backend string `json:"backend"`
	Method  string `json:"method"`
	URI     string `json:"uri"`
	Body    string `json:"body"`
}

type standIn struct {
	name string
	srv  *http.Server
	hits chan hit
	// For the streaming cases: the test's turn and the stand-in's.
	step, ack chan struct{}
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("Upgrade") == "websocket":
		// An upgrade that reached the pod: it echoes what follows.
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(brw, buf); err == nil {
			c.Write(buf)
		}
		return
	case strings.HasSuffix(r.Host, ".ports.test"):
		// A port's own host: the pod must get it as it was sent.
		body, _ := io.ReadAll(r.Body)
		h := hit{s.name, r.Method, r.Host + " " + r.RequestURI, string(body)}
		s.hits <- h
		json.NewEncoder(w).Encode(h)
		return
	case strings.HasSuffix(r.URL.Path, "/stream"):
		// Two NDJSON events; the second only after the client has the
		// first, which it cannot if anything buffers the response.
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"stdout","text":"first\n"}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-s.step:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"type":"end"}`+"\n")
		return
	case strings.HasSuffix(r.URL.Path, "/upload"):
		// The first part of the body arrives before the client sends
		// the rest, which it cannot if anything buffers the request.
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		s.ack <- struct{}{}
		rest, _ := io.ReadAll(r.Body)
		s.hits <- hit{s.name, r.Method, r.RequestURI, string(buf) + string(rest)}
		w.WriteHeader(201)
		return
	case strings.Contains(r.URL.Path, "lost"):
		// airlock's own answers pass through unchanged.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(410)
		io.WriteString(w, `{"error":{"code":"session_lost","message":"from `+s.name+`"}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	h := hit{s.name, r.Method, r.RequestURI, string(body)}
	s.hits <- h
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h)
}

// listenStandIns starts the stand-ins on one port of their addresses.
func listenStandIns(t *testing.T) (map[string]*standIn, int) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", standIns["airlock-0"]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		ls := map[string]net.Listener{"airlock-0": first}
		ok := true
		for name, ip := range standIns {
			if name == "airlock-0" {
				continue
			}
			l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
			if err != nil {
				ok = false
				break
			}
			ls[name] = l
		}
		if !ok {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		out := map[string]*standIn{}
		for name, l := range ls {
			s := &standIn{name: name, hits: make(chan hit, 100), step: make(chan struct{}), ack: make(chan struct{})}
			s.srv = &http.Server{Handler: s}
			go s.srv.Serve(l)
			t.Cleanup(func() { s.srv.Close() })
			out[name] = s
		}
		return out, port
	}
	t.Fatal("no port free on all stand-in addresses")
	return nil, 0
}

func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// daemon is nginx or dnsmasq, stopped with SIGTERM at the end.
type daemon struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// lines gets every complete line written, for waiting on one.
	lines chan string
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if strings.HasSuffix(line, "\n") {
			select {
			case l.lines <- strings.TrimSpace(line):
			default:
			}
		}
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(name, args...), out: &lockedBuffer{lines: make(chan string, 1000)}, done: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	if d.cmd.ProcessState != nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("%s did not stop on SIGTERM:\n%s", d.cmd.Path, d.out)
	}
}

// waitLine waits for a line of the daemon's output matching re.
func (d *daemon) waitLine(t *testing.T, re *regexp.Regexp) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l := <-d.out.lines:
			if re.MatchString(l) {
				return
			}
		case err := <-d.done:
			t.Fatalf("%s exited: %v\n%s", d.cmd.Path, err, d.out)
		case <-timeout:
			t.Fatalf("%s: no line matching %s:\n%s", d.cmd.Path, re, d.out)
		}
	}
}

// rawRequest sends exactly the request line given (no client library
// cleaning the path) and returns the answer.
func rawRequest(t *testing.T, addr, method, uri, body string) (*http.Response, string) {
	t.Helper()
	return rawRequestHeader(t, addr, method, uri, body, "")
}

// rawRequestHeader is rawRequest with one more header line ("" for none).
func rawRequestHeader(t *testing.T, addr, method, uri, body, header string) (*http.Response, string) {
	t.Helper()
	host := "Host: airlock.example\r\n"
	if strings.HasPrefix(header, "Host:") {
		host = ""
	}
	if header != "" {
		header += "\r\n"
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\n%sConnection: close\r\n%sContent-Length: %d\r\n\r\n%s", method, uri, host, header, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, uri, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestRouter(t *testing.T) {
	nginx, dnsmasq := lookPath("nginx"), lookPath("dnsmasq")
	require(t, nginx != "" && dnsmasq != "", "the router test needs nginx and dnsmasq from Debian (scripts/install-deps.sh installs them)")
	tools(t)

	backends, backendPort := listenStandIns(t)
	dnsPort := freePort(t, "udp")
	routerPort, healthPort := freePort(t, "tcp"), freePort(t, "tcp")
	dir := t.TempDir()
	// The chart mounts an emptyDir there.
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}

	// The configuration exactly as the chart renders it, with loopback
	// addresses and ports.
	objs := objects(t, render(t, routerNS,
		"--set", "auth.token=x",
		"--set", fmt.Sprintf("service.port=%d", backendPort),
		"--set", "router.listenAddress=127.0.0.1",
		"--set", fmt.Sprintf("router.port=%d", routerPort),
		"--set", fmt.Sprintf("router.healthPort=%d", healthPort),
		"--set", fmt.Sprintf("router.resolver=127.0.0.1:%d", dnsPort),
		"--set", "router.resolverValid=1s",
		"--set", "router.workerProcesses=1",
		"--set", "router.runDir="+dir+"/run",
		"--set", "config.ports.domain=ports.test"))
	conf, _ := get(find(t, objs, "ConfigMap", "airlock-router"), "data", "nginx.conf").(string)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	nginxArgs := []string{"-e", "stderr", "-p", dir, "-c", confPath}

	// Nothing is resolved when nginx loads: the configuration is good
	// while no DNS server runs at all.
	if out, err := run(dir, nil, nginx, append(nginxArgs, "-t")...); err != nil {
		t.Fatalf("nginx -t without DNS: %v\n%s", err, out)
	}

	dargs := []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
		"--pid-file=", "--listen-address=127.0.0.1", "--bind-interfaces", fmt.Sprintf("--port=%d", dnsPort),
		"--local=/cluster.local/", "--log-queries", "--log-facility=-", "--cache-size=0"}
	for name, ip := range standIns {
		dargs = append(dargs, "--host-record="+dnsName(name)+","+ip)
	}
	dargs = append(dargs, "--host-record="+dnsName("airlock-3")+",127.0.0.5")
	dns := start(t, dnsmasq, dargs...)
	dns.waitLine(t, regexp.MustCompile(`started, version`))

	router := start(t, nginx, append(nginxArgs, "-g", "daemon off;")...)
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(health)
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router does not answer on its health port: %v\n%s", err, router.out)
		}
		select {
		case err := <-router.done:
			t.Fatalf("nginx exited: %v\n%s", err, router.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", routerPort)

	// expectHit checks which stand-in got the request, and that the
	// others got nothing.
	expectHit := func(t *testing.T, who string, want hit) {
		t.Helper()
		for name, b := range backends {
			select {
			case h := <-b.hits:
				if name != who {
					t.Errorf("%s got %+v, meant for %s", name, h, who)
				} else if h != want {
					t.Errorf("%s saw %+v, want %+v", name, h, want)
				}
			default:
				if name == who {
					t.Errorf("%s got nothing", who)
				}
			}
		}
	}

	// expectNowhere: the router answers itself, with a JSON error, and
	// no stand-in sees the request.
	expectNowhere := func(t *testing.T, uri string, status int, code string) {
		t.Helper()
		resp, body := rawRequest(t, addr, "GET", uri, "")
		var e struct{ Error struct{ Code string } }
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != status || e.Error.Code != code || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s, want the router's own %d %s", uri, resp.StatusCode, body, status, code)
		}
		expectHit(t, "", hit{})
	}

	const id0, id1 = "airlock-0.k2f9x1.Q7xAbc9Zt3", "airlock-1.k2f9x2.Zz01aBcDeF"
	t.Run("routes", func(t *testing.T) {
		for _, c := range []struct{ method, uri, body, to string }{
			{"POST", "/v1/sessions", `{"language":"python"}`, "service"},
			{"GET", "/v1/sessions", "", "service"},
			{"GET", "/v1/sessions?state=running", "", "service"},
			{"POST", "/v1/execute", `{"code":"1"}`, "service"},
			{"POST", "/v1/run", `{"code":"1"}`, "service"},
			{"GET", "/healthz", "", "service"},
			{"GET", "/v1/openapi.json", "", "service"},
			{"POST", "/v1/sessions/" + id0 + "/execute", `{"code":"x = 1"}`, "airlock-0"},
			{"GET", "/v1/sessions/" + id0, "", "airlock-0"},
			{"DELETE", "/v1/sessions/" + id0, "", "airlock-0"},
			{"POST", "/v1/sessions/" + id1 + "/interrupt", "", "airlock-1"},
			{"GET", "/v1/sessions/" + id1 + "?verbose=1", "", "airlock-1"},
			// The rest of the path goes as the client sent it, encoded.
			{"PUT", "/v1/sessions/" + id1 + "/files/data/a%20b%2Fc.csv", "a,b\n1,2\n", "airlock-1"},
			{"GET", "/v1/sessions/" + id1 + "/files?path=data&recursive=true", "", "airlock-1"},
			{"DELETE", "/v1/sessions/" + id1 + "/files/data?recursive=true", "", "airlock-1"},
			// A ".." after a well-formed id still goes to that id's pod
			// (whose API refuses it), never to another host.
			{"GET", "/v1/sessions/" + id1 + "/../../sessions/" + id0, "", "airlock-1"},
			// Outside /v1/sessions/ nothing names a pod: the Service.
			{"GET", "/v1/%73essions/" + id1, "", "service"},
			{"GET", "/v1/x/../sessions/" + id1, "", "service"},
			{"GET", "//v1/sessions/" + id1, "", "service"},
		} {
			resp, body := rawRequest(t, addr, c.method, c.uri, c.body)
			if resp.StatusCode != 200 {
				t.Errorf("%s %s: %d %s", c.method, c.uri, resp.StatusCode, body)
				continue
			}
			expectHit(t, c.to, hit{c.to, c.method, c.uri, c.body})
		}
	})

	// A session's port on its own host (config.ports.domain): the host
	// names the pod, whatever the path, and the pod gets the Host as it
	// was sent; other hosts under the domain go nowhere; a WebSocket
	// upgrade passes through.
	t.Run("ports' hosts go to their pod", func(t *testing.T) {
		const host = "8080-airlock-1-k2f9x2-zz01abcdef.ports.test"
		for _, uri := range []string{"/", "/v1/sessions/" + id0 + "/execute", "/a/../b?x=1"} {
			resp, body := rawRequestHeader(t, addr, "GET", uri, "", "Host: "+host)
			if resp.StatusCode != 200 {
				t.Errorf("%s %s: %d %s", host, uri, resp.StatusCode, body)
			}
			expectHit(t, "airlock-1", hit{"airlock-1", "GET", host + " " + uri, ""})
		}
		for _, h := range []string{"x.ports.test", "8080-other-0-k2f9x2-abc.ports.test", "8080-airlock-1.ports.test", "0-airlock-1-k2f9x2-abc.ports.test", "8080-airlock-1-k2f9x2-ABC.ports.test.x.ports.test"} {
			resp, body := rawRequestHeader(t, addr, "GET", "/", "", "Host: "+h)
			if resp.StatusCode != 404 || !strings.Contains(body, "not_found") {
				t.Errorf("%s: %d %s", h, resp.StatusCode, body)
			}
			expectHit(t, "", hit{})
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		c.Write([]byte("ping"))
		got := make([]byte, 4)
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
			t.Errorf("through the upgrade: %q %v", got, err)
		}
	})

	t.Run("smuggling goes nowhere", func(t *testing.T) {
		for _, uri := range []string{
			"/v1/sessions/evil.example/execute",
			"/v1/sessions/evil.example",
			"/v1/sessions/airlock-0.evil.example.com/execute",
			"/v1/sessions/airlock-0.k2f9.Q7x.evil.example/execute",
			"/v1/sessions/airlock-0.k2f9.Q7x.evil.example",
			"/v1/sessions/airlock-0.evil.example:80/x",
			"/v1/sessions/airlock-0.k2f9.Q7x:80@evil.example/x",
			"/v1/sessions/airlock-0.k2f9.Q7x@evil.example",
			"/v1/sessions/airlock-0.k2f9.Q7x%2F..%2F..%2Fevil.example",
			"/v1/sessions/airlock-0%2Eevil.example/execute",
			"/v1/sessions/airlock-0%2ek2f9.Q7x/execute",
			"/v1/sessions/airlock-0.k2f9%2EQ7x/execute",
			"/v1/sessions/%61irlock-0.k2f9.Q7x/execute",
			"/v1/sessions/airlock-0..k2f9.Q7x/execute",
			"/v1/sessions/airlock-0.k2f9..Q7x/execute",
			"/v1/sessions/airlock-0.k2f9.Q7x./execute",
			"/v1/sessions/.airlock-0.k2f9.Q7x/execute",
			"/v1/sessions/../../evil.example/x",
			"/v1/sessions/..%2F..%2Fevil.example/x",
			"/v1/sessions/airlock-00.k2f9.Q7x/execute",
			"/v1/sessions/airlock-01.k2f9.Q7x/execute",
			"/v1/sessions/airlock-12345.k2f9.Q7x/execute",
			"/v1/sessions/airlock-99999999999999999999.k2f9.Q7x",
			"/v1/sessions/airlock--1.k2f9.Q7x",
			"/v1/sessions/airlock-1a.k2f9.Q7x",
			"/v1/sessions/other-0.k2f9.Q7x/execute",
			"/v1/sessions/airlock-other-0.k2f9.Q7x",
			"/v1/sessions/airlock-0.k2f9.Q7x-y/execute",
			"/v1/sessions/airlock-0.K2F9.Q7x/execute",
			"/v1/sessions/airlock-0.k2f9.12345678901234567890123456789012345678901234567890123456789012345",
			"/v1/sessions/airlock-0.12345678901234.Q7x",
			"/v1/sessions//airlock-0.k2f9.Q7x",
			"/v1/sessions/",
		} {
			expectNowhere(t, uri, 404, "not_found")
		}
		// nginx refuses these itself (its own 400 page) before routing.
		for _, uri := range []string{
			"/v1/sessions/airlock-0%00.k2f9.Q7x/execute",
			"/v1/sessions/airlock-0.k2f9.Q7x%00/execute",
		} {
			if resp, body := rawRequest(t, addr, "GET", uri, ""); resp.StatusCode != 400 {
				t.Errorf("GET %s: %d %s, want nginx's 400", uri, resp.StatusCode, body)
			}
			expectHit(t, "", hit{})
		}
	})

	t.Run("missing pods give 503 node_unavailable", func(t *testing.T) {
		for _, uri := range []string{
			"/v1/sessions/airlock-2.k2f9.Q7x/execute", // no such name: NXDOMAIN
			"/v1/sessions/airlock-3.k2f9.Q7x/execute", // its node died: refused
			"/v1/sessions/airlock-9999.k2f9.Q7x",
		} {
			resp, body := rawRequest(t, addr, "POST", uri, `{"code":"1"}`)
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != 503 || e.Error.Code != "node_unavailable" ||
				resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Retry-After") != "1" {
				t.Errorf("POST %s: %d %v %q, want a JSON 503 node_unavailable with Retry-After", uri, resp.StatusCode, resp.Header, body)
			}
			expectHit(t, "", hit{})
		}
	})

	t.Run("MCP sessions stay on their pod", func(t *testing.T) {
		for _, c := range []struct{ uri, header, to string }{
			{"/mcp", "", "service"}, // initialize: any pod
			{"/mcp", "Mcp-Session-Id: " + id1, "airlock-1"},
			{"/mcp?x=1", "Mcp-Session-Id: " + id0, "airlock-0"},
			// Not a pod of this release, or not /mcp: the Service.
			{"/mcp", "Mcp-Session-Id: evil.example", "service"},
			{"/mcp", "Mcp-Session-Id: airlock-1.k2f9.Q7x.evil.example", "service"},
			{"/mcp", "Mcp-Session-Id: airlock-01.k2f9.Q7x", "service"},
			{"/mcp", "Mcp-Session-Id: 3f9c2a7d81b04e6f9a1c5d20", "service"},
			{"/mcpx", "Mcp-Session-Id: " + id1, "service"},
			{"/v1/sessions", "Mcp-Session-Id: " + id1, "service"},
			{"/v1/execute", "Mcp-Session-Id: " + id1, "service"},
			// A session's own route is the id's pod, whatever the header.
			{"/v1/sessions/" + id0 + "/execute", "Mcp-Session-Id: " + id1, "airlock-0"},
		} {
			resp, body := rawRequestHeader(t, addr, "POST", c.uri, `{}`, c.header)
			if resp.StatusCode != 200 {
				t.Errorf("POST %s [%s]: %d %s", c.uri, c.header, resp.StatusCode, body)
				continue
			}
			expectHit(t, c.to, hit{c.to, "POST", c.uri, `{}`})
		}
		// The MCP session's pod is gone: node_unavailable, as for a
		// session.
		resp, body := rawRequestHeader(t, addr, "POST", "/mcp", `{}`, "Mcp-Session-Id: airlock-3.k2f9.Q7x")
		if resp.StatusCode != 503 || !strings.Contains(body, `"node_unavailable"`) {
			t.Errorf("MCP session on a dead pod: %d %s", resp.StatusCode, body)
		}
		expectHit(t, "", hit{})
	})

	t.Run("E2B sandboxes stay on their pod", func(t *testing.T) {
		// E2B's ids are host labels: the clustered id with dashes.
		const e0, e1 = "airlock-0-k2f9x1-q7xabc9zt3", "airlock-1-k2f9x2-zz01abcdef"
		for _, c := range []struct{ method, uri, header, to string }{
			{"POST", "/sandboxes", "", "service"}, // create: any pod with room
			{"GET", "/v2/sandboxes?metadata=a%3Db", "", "service"},
			{"GET", "/sandboxes/" + e1, "", "airlock-1"},
			{"POST", "/sandboxes/" + e0 + "/timeout", "", "airlock-0"},
			{"POST", "/v2/sandboxes/" + e1 + "/connect", "", "airlock-1"},
			{"DELETE", "/sandboxes/" + e0 + "?x=1", "", "airlock-0"},
			// The data plane: the header names the pod, whatever the path.
			{"POST", "/execute", "E2b-Sandbox-Id: " + e1, "airlock-1"},
			{"GET", "/files?path=/home/user/a", "E2b-Sandbox-Id: " + e0, "airlock-0"},
			{"POST", "/process.Process/Start", "E2b-Sandbox-Id: " + e1, "airlock-1"},
			// The path's sandbox wins over a header's.
			{"GET", "/sandboxes/" + e0, "E2b-Sandbox-Id: " + e1, "airlock-0"},
			// Not a sandbox of this release's pods: the Service (whose
			// airlock answers 404), never another host.
			{"POST", "/execute", "E2b-Sandbox-Id: evil.example", "service"},
			{"POST", "/execute", "E2b-Sandbox-Id: airlock-1-k2f9-q7x.evil.example", "service"},
			{"POST", "/execute", "E2b-Sandbox-Id: airlock-01-k2f9-q7x", "service"},
			{"POST", "/execute", "E2b-Sandbox-Id: 3f9c2a7d81b04e6f9a1c5d20", "service"},
			{"GET", "/sandboxes/airlock-1-k2f9-q7x.evil.example", "", "service"},
			{"GET", "/sandboxes/airlock-10000-k2f9-q7x", "", "service"},
			{"GET", "/xsandboxes/" + e1, "", "service"},
		} {
			resp, body := rawRequestHeader(t, addr, c.method, c.uri, `{}`, c.header)
			if resp.StatusCode != 200 {
				t.Errorf("%s %s [%s]: %d %s", c.method, c.uri, c.header, resp.StatusCode, body)
				continue
			}
			expectHit(t, c.to, hit{c.to, c.method, c.uri, `{}`})
		}
		resp, body := rawRequestHeader(t, addr, "POST", "/execute", `{}`, "E2b-Sandbox-Id: airlock-3-k2f9-q7x")
		if resp.StatusCode != 503 || !strings.Contains(body, `"node_unavailable"`) {
			t.Errorf("a sandbox on a dead pod: %d %s", resp.StatusCode, body)
		}
		expectHit(t, "", hit{})
	})

	t.Run("airlock's own answers pass through", func(t *testing.T) {
		resp, body := rawRequest(t, addr, "GET", "/v1/sessions/airlock-1.k2f9.lost", "")
		if resp.StatusCode != 410 || body != `{"error":{"code":"session_lost","message":"from airlock-1"}}` {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
	})

	t.Run("streamed output is not buffered", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/sessions/"+id0+"/stream", strings.NewReader(`{"code":"print(1)"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		first, err := r.ReadString('\n')
		if err != nil || !strings.Contains(first, "first") {
			t.Fatalf("first event: %q %v (buffered by the router?)", first, err)
		}
		backends["airlock-0"].step <- struct{}{}
		rest, _ := io.ReadAll(r)
		if string(rest) != `{"type":"end"}`+"\n" {
			t.Fatalf("the rest: %q", rest)
		}
	})

	t.Run("uploads are not buffered", func(t *testing.T) {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		uri := "/v1/sessions/" + id1 + "/upload"
		req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+addr+uri, pr)
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 201 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			done <- err
		}()
		pw.Write([]byte("first"))
		select {
		case <-backends["airlock-1"].ack:
		case <-ctx.Done():
			t.Fatal("the first part of the upload never reached the pod (buffered by the router?)")
		}
		pw.Write([]byte(" and the rest"))
		pw.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		expectHit(t, "airlock-1", hit{"airlock-1", "PUT", uri, "first and the rest"})
	})

	t.Run("no Service endpoint gives 503 unavailable", func(t *testing.T) {
		backends["service"].srv.Close()
		resp, body := rawRequest(t, addr, "POST", "/v1/sessions", `{"language":"python"}`)
		var e struct{ Error struct{ Code string } }
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 503 || e.Error.Code != "unavailable" || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("got %d %v %q", resp.StatusCode, resp.Header, body)
		}
	})

	// The router asked the resolver for this release's names only: no id
	// made it look up another host.
	router.stop(t)
	dns.stop(t)
	queried := map[string]bool{}
	for _, m := range regexp.MustCompile(`query\[[A-Z]+\] (\S+) from`).FindAllStringSubmatch(dns.out.String(), -1) {
		queried[m[1]] = true
	}
	allowed := map[string]bool{dnsName("service"): true}
	for _, n := range []string{"airlock-0", "airlock-1", "airlock-2", "airlock-3", "airlock-9999"} {
		allowed[dnsName(n)] = true
	}
	var names []string
	for n := range queried {
		names = append(names, n)
		if !allowed[n] {
			t.Errorf("the router looked up %q", n)
		}
	}
	sort.Strings(names)
	for n := range allowed {
		if !queried[n] {
			t.Errorf("the router never looked up %s (queries: %v)", n, names)
		}
	}
}
