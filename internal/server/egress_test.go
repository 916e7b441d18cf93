package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// mapResolver answers the egress layer's lookups from a table and counts
// them: no test traffic leaves loopback.
type mapResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
	asked map[string]int
}

func (r *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[host]++
	if a, ok := r.addrs[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// egressServer is a server whose egress reaches upstreams on 127.0.0.2
// (the test hook) and resolves names from a table.
func egressServer(t *testing.T, adjust ...func(*config.Config)) (*client.Client, *mapResolver, int) {
	c, res, port, _ := egressServerS(t, adjust...)
	return c, res, port
}

func egressServerS(t *testing.T, adjust ...func(*config.Config)) (*client.Client, *mapResolver, int, *Server) {
	s, _ := testServer(t, newRecorder(), adjust...)
	c, res, port := egressOf(t, s)
	return c, res, port, s
}

// kernels runs f on both isolations; the gVisor server's isolation is
// gVisor, with a pool of one Python sandbox booted with a network.
func kernels(t *testing.T, f func(t *testing.T, iso config.Isolation, withKernel func(*config.Config))) {
	for _, iso := range []config.Isolation{config.Native, config.GVisor} {
		t.Run(string(iso), func(t *testing.T) {
			with := func(*config.Config) {}
			if iso == config.GVisor {
				runsc := testenv.Runsc(t)
				with = func(c *config.Config) {
					c.Isolation = config.GVisor
					c.GVisor.Runsc = runsc
					// One Python sandbox booted with a network, pooled.
					c.Pool.NetworkSize = map[string]int{"python": 1}
				}
			}
			f(t, iso, with)
		})
	}
}

func egressOf(t *testing.T, s *Server) (*client.Client, *mapResolver, int) {
	eg := s.manager.Egress()
	eg.Dialer.Guard.SetTestHooks(netip.MustParsePrefix("127.0.0.2/32"))
	res := &mapResolver{asked: map[string]int{}, addrs: map[string][]netip.Addr{
		"files.a.test": {netip.MustParseAddr("127.0.0.2")},
		"meta.a.test":  {netip.MustParseAddr("169.254.169.254")},
		"pypi.a.test":  {netip.MustParseAddr("127.0.0.2")},
	}}
	eg.Dialer.Resolver = res
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return client.New("http://" + s.Addr().String()), res, l.Addr().(*net.TCPAddr).Port
}

// netnsFDs counts the server's descriptors of network namespaces other
// than its own: one on its own is a thread's way back from a sandbox's
// (the gate's, or a pool refill's new namespace), held while it is in
// there, which a claim's refill may be at any time.
func netnsFDs() int {
	own, _ := os.Readlink("/proc/self/ns/net")
	es, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range es {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "net:[") && l != own {
			n++
		}
	}
	return n
}

// poolsSettled waits until every warm pool is full and builds nothing:
// a claim starts a refill in the background, whose sandbox (under gVisor
// with a network, its namespace too) the server's descriptors count
// once it is made.
func poolsSettled(t *testing.T, s *Server) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		settled := true
		for _, v := range s.poolStats() {
			if p, ok := v.(apitype.PoolStats); ok && (p.Building > 0 || p.Ready < p.Target) {
				settled = false
			}
		}
		if settled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pools did not settle in a minute: %+v", s.poolStats())
		}
	}
}

// probe is Python that reports what the sandbox can reach, one line each.
const probe = `
import socket, urllib.request, time
def get(url):
    t = time.time()
    try:
        r = urllib.request.urlopen(url, timeout=10).read().decode()
        return "ok " + r
    except Exception as e:
        return "fail %s %.1fs" % (type(e).__name__, time.time() - t)
def resolve(name):
    try:
        return "resolved " + socket.gethostbyname(name)
    except OSError as e:
        return "unresolved"
`

func TestEgressPython(t *testing.T) {
	kernels(t, testEgressPython)
}

func testEgressPython(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	c, res, port, srv := egressServerS(t, with)
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso,
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("files.a.test:%d", port), fmt.Sprintf("meta.a.test:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Network == nil || len(sess.Network.Allow) != 2 {
		t.Fatalf("session network %+v", sess.Network)
	}
	code := probe + fmt.Sprintf(`
P = %d
print(get("http://files.a.test:%%d/" %% P))
print(resolve("evil.test"))
print(get("http://meta.a.test:%%d/" %% P))
for dst in ["127.0.0.1", "10.0.0.1", "169.254.169.254", "2130706433", "0x7f.1", "127.0.0.2"]:
    print(dst, get("http://%%s:%%d/" %% (dst, P)))
print(get("http://files.a.test:%%d/" %% (P + 1)))
`, port)
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	if len(lines) != 10 {
		t.Fatalf("%d lines", len(lines))
	}
	if want := fmt.Sprintf("ok hello from files.a.test:%d", port); lines[0] != want {
		t.Errorf("allowed name: %q, want %q", lines[0], want)
	}
	if lines[1] != "unresolved" {
		t.Errorf("denied name: %q", lines[1])
	}
	for _, l := range lines[2:] {
		if !strings.Contains(l, "fail") {
			t.Errorf("forbidden destination reached: %q", l)
		}
		// Fast: refused or reset, never a hang.
		var secs float64
		fmt.Sscanf(l[strings.LastIndex(l, " ")+1:], "%fs", &secs)
		if secs > 2 {
			t.Errorf("slow failure: %q", l)
		}
	}
	if res.asked["evil.test"] != 0 {
		t.Error("a denied name was resolved upstream")
	}
	// The same literal three ways (127.0.0.1, 2130706433, 0x7f.1) is one
	// entry counting three.
	var denied, allowed []string
	var deniedCount int64
	for _, d := range r.Egress {
		if d.Kind != "connect" {
			continue
		}
		if d.Allowed {
			allowed = append(allowed, d.Host)
		} else {
			denied = append(denied, d.Reason)
			deniedCount += max(d.Count, 1)
		}
	}
	if len(allowed) != 1 || allowed[0] != "files.a.test" || len(denied) != 5 || deniedCount != 7 || r.EgressSummarized < 2 {
		t.Errorf("egress: allowed %q, denied %q (%d, %d summarised)", allowed, denied, deniedCount, r.EgressSummarized)
	}
	if !strings.Contains(strings.Join(denied, "|"), "forbidden address") {
		t.Errorf("meta.a.test's denial does not say why: %q", denied)
	}
	var dnsDenied bool
	for _, d := range r.Egress {
		dnsDenied = dnsDenied || (d.Kind == "dns" && d.Host == "evil.test" && !d.Allowed)
	}
	if !dnsDenied {
		t.Errorf("no denied DNS decision for evil.test in %+v", r.Egress)
	}

	// The policy changes live: files.a.test goes, new lookups fail.
	if _, err := c.SetNetwork(ctx, sess.ID, []string{"other.test"}); err != nil {
		t.Fatal(err)
	}
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: probe + `print(resolve("files.a.test"))`}, nil)
	if err != nil || strings.TrimSpace(r.Stdout) != "unresolved" {
		t.Errorf("after the policy change: %q, %v", r.Stdout, err)
	}
	st, err := c.Network(ctx, sess.ID)
	if err != nil || st.Connections < 8 || st.Denied < 8 || st.BytesUsed == 0 {
		t.Errorf("network state %+v, %v", st, err)
	}

	// No bypass: raw and packet sockets, route and address changes,
	// and signals to airlock fail inside the sandbox.
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `
import socket, subprocess, os
def try_(f):
    try:
        f(); return "ok"
    except Exception as e:
        return type(e).__name__
print(try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)))
print(try_(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)))
for args in (["ip", "route", "del", "local", "0.0.0.0/0", "dev", "lo", "table", "local"], ["ip", "addr", "add", "10.9.9.9/32", "dev", "lo"], ["ip", "link", "add", "v0", "type", "veth"]):
    p = subprocess.run(args, capture_output=True, text=True)
    print(p.returncode != 0)
print(try_(lambda: os.kill(1, 9)))
`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Stdout, "ok") || strings.Count(r.Stdout, "True") != 3 {
		t.Errorf("bypass attempts: %q %q", r.Stdout, r.Stderr)
	}
	if r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "print(6*7)"}, nil); err != nil || r.Stdout != "42\n" {
		t.Errorf("after the bypass attempts: %+v, %v", r, err)
	}

	// Session end closes every egress socket: the server's descriptors
	// come back to what they were (the namespace handle among them).
	// Counted with the pools settled: the claim below starts a refill.
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	poolsSettled(t, srv)
	before, nsBefore := fds(), netnsFDs()
	s2, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso,
		Network: &apitype.NetworkPolicy{Allow: []string{"files.a.test:" + strconv.Itoa(port)}}})
	if err != nil {
		t.Fatal(err)
	}
	poolsSettled(t, srv)
	if during := fds(); during < before+5 {
		t.Errorf("%d fds with a policy session, %d before: the gate's sockets are not counted?", during, before)
	}
	// The gate's handle, and on gVisor the namespace airlock made for
	// the sandbox that replaced the claimed one in the pool.
	handles := map[config.Isolation]int{config.Native: 1, config.GVisor: 2}[iso]
	if n := netnsFDs(); n != nsBefore+handles {
		t.Errorf("the server holds %d network namespace handles during a policy session, %d before, want %d more", n, nsBefore, handles)
	}
	if err := c.DeleteSession(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	// Ending the session closed the gate, handle included, at once.
	if n := netnsFDs(); n != nsBefore {
		t.Errorf("the server holds %d network namespace handles after the session ended, %d before", n, nsBefore)
	}
	deadline := time.Now().Add(30 * time.Second)
	for fds() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := fds(); after > before {
		t.Errorf("%d fds before the session, %d after its end", before, after)
	}
}

func TestEgressNoPolicyIsLoopbackOnly(t *testing.T) {
	kernels(t, testEgressNoPolicyIsLoopbackOnly)
}

func testEgressNoPolicyIsLoopbackOnly(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	c, _, port := egressServer(t, with)
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Network != nil {
		t.Errorf("a session without policy has network %+v", sess.Network)
	}
	// Nothing of airlock listens in the sandbox: no socket in LISTEN
	// state, no DNS responder; a lookup fails at once.
	code := probe + fmt.Sprintf(`
import socket
listening = []
for f in ["/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp"]:
    try:
        for line in open(f).readlines()[1:]:
            parts = line.split()
            if parts[3] in ("0A", "07"):
                listening.append(f + " " + parts[1])
    except OSError as e:
        listening.append("unreadable " + f)
print("listening", listening)
t = time.time()
print(resolve("files.a.test"), "%%.1f" %% (time.time() - t))
print(get("http://127.0.0.2:%d/"))
print([i[1] for i in socket.if_nameindex()])
`, port)
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 4 || lines[0] != "listening []" || !strings.HasPrefix(lines[1], "unresolved 0.") ||
		!strings.HasPrefix(lines[2], "fail") || lines[3] != "['lo']" {
		t.Errorf("no-policy sandbox: %q", lines)
	}
	if len(r.Egress) != 0 {
		t.Errorf("egress records without a policy: %+v", r.Egress)
	}
	// Given a policy later, it gets network; on gVisor, whose network
	// is fixed when the sandbox boots, only a session created with one
	// (an empty allowlist is enough) can.
	allow := []string{fmt.Sprintf("files.a.test:%d", port)}
	if iso == config.GVisor {
		_, err := c.SetNetwork(ctx, sess.ID, allow)
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "created without a network") {
			t.Errorf("a policy for a gVisor session created without network: %v", err)
		}
		// Such a session comes from the pool of sandboxes booted with a
		// network (pool.network_size).
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := c.WaitWarm(wctx); err != nil {
			t.Fatal(err)
		}
		if sess, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Network: &apitype.NetworkPolicy{}}); err != nil {
			t.Fatal(err)
		}
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var st apitype.PoolStats
		if err := json.Unmarshal(h.Pool["python"+apitype.NetworkPoolSuffix], &st); err != nil || st.Hits != 1 || st.Target != 1 {
			t.Errorf("the network pool: %+v, %v (health %s)", st, err, h.Pool)
		}
		if r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: probe + fmt.Sprintf(`print(get("http://files.a.test:%d/"))`, port)}, nil); err != nil || !strings.HasPrefix(r.Stdout, "fail") {
			t.Errorf("an empty allowlist reached files.a.test: %q, %v", r.Stdout, err)
		}
	}
	if _, err := c.SetNetwork(ctx, sess.ID, allow); err != nil {
		t.Fatal(err)
	}
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: probe + fmt.Sprintf(`print(get("http://files.a.test:%d/"))`, port)}, nil)
	if err != nil || !strings.HasPrefix(r.Stdout, "ok hello") {
		t.Errorf("after PUT network: %q %q, %v", r.Stdout, r.Stderr, err)
	}
	// Requests the server refuses: literals, over max_allow.
	if _, err := c.SetNetwork(ctx, sess.ID, []string{"127.0.0.1"}); err == nil || !strings.Contains(err.Error(), "not IP addresses") {
		t.Errorf("an IP entry: %v", err)
	}
	// One-shots take a policy too.
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Isolation: iso, Code: probe + fmt.Sprintf(`print(get("http://files.a.test:%d/"))`, port),
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("files.a.test:%d", port)}}}, nil)
	if err != nil || !strings.HasPrefix(one.Stdout, "ok hello") || len(one.Egress) == 0 {
		t.Errorf("one-shot with network: %+v, %v", one, err)
	}
	_ = time.Second
}

// With network.proxy, proxy-aware clients get a 403 that says why.
func TestEgressProxy(t *testing.T) {
	kernels(t, testEgressProxy)
}

func testEgressProxy(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	c, _, port := egressServer(t, with, func(cfg *config.Config) { cfg.Network.Proxy = true })
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso,
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("files.a.test:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: fmt.Sprintf(`
import os, urllib.request, urllib.error
print(os.environ.get("HTTP_PROXY"))
print(urllib.request.urlopen("http://files.a.test:%[1]d/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://evil.test:%[1]d/", timeout=10)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, port)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("http://127.0.0.1:3128\nhello from files.a.test:%d\n403 airlock egress: evil.test:%d is not in the allowlist\n", port, port)
	if r.Stdout != want {
		t.Errorf("through the proxy: %q (stderr %q), want %q", r.Stdout, r.Stderr, want)
	}
	var kinds []string
	for _, d := range r.Egress {
		kinds = append(kinds, d.Kind)
	}
	if !strings.Contains(strings.Join(kinds, ","), "proxy") {
		t.Errorf("egress kinds %v", kinds)
	}
}

// An entry marked opaque carries a protocol where the server speaks first
// (SMTP's greeting) from sandboxed code; an opaque entry on 80 or 443 is a
// client error that says why.
func TestEgressOpaqueEntry(t *testing.T) {
	c, res, _ := egressServer(t)
	res.addrs["mail.a.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				fmt.Fprint(conn, "220 mail.a.test ESMTP\r\n")
				buf := make([]byte, 64)
				n, _ := conn.Read(buf)
				conn.Write(buf[:n])
			}()
		}
	}()
	smtp := l.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	entry := fmt.Sprintf("mail.a.test:%d/opaque", smtp)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Network: &apitype.NetworkPolicy{Allow: []string{entry}}})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Network == nil || len(sess.Network.Allow) != 1 || sess.Network.Allow[0] != entry {
		t.Errorf("session network %+v, want %q", sess.Network, entry)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: fmt.Sprintf(`
import socket
s = socket.create_connection(("mail.a.test", %d), timeout=10)
print(s.recv(64).decode().strip())
s.sendall(b"EHLO sandbox\r\n")
print(s.recv(64).decode().strip())
`, smtp)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "220 mail.a.test ESMTP\nEHLO sandbox\n" {
		t.Errorf("through the opaque entry: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Network: &apitype.NetworkPolicy{Allow: []string{"mail.a.test:443/opaque"}}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "other than 80 and 443") {
		t.Errorf("an opaque entry on 443: %v, want a 400 saying why", err)
	}
}

// The server-wide cap on open egress connections comes from the network
// section: over it a sandbox's connection is refused like any denial,
// with the decision in the execution's result and the refusal in the
// metrics; once a connection closes there is room again.
func TestEgressServerCap(t *testing.T) {
	c, _, port, s := egressServerS(t, func(cfg *config.Config) { cfg.Network.MaxOpenConnections = 1 })
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python",
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("files.a.test:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: probe + fmt.Sprintf(`
P = %d
def conn():
    s = socket.create_connection(("files.a.test", P), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: files.a.test\r\n\r\n")
    return s, s.recv(4096)
s1, got = conn()
print(b"hello" in got)
try:
    s2, got2 = conn()
    print("second", got2)
except OSError as e:
    print("second refused")
s1.close()
for i in range(100):
    r = get("http://files.a.test:%%d/" %% P)
    if r.startswith("ok"):
        break
    time.sleep(0.05)
print(r)
`, port)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("True\nsecond refused\nok hello from files.a.test:%d\n", port)
	if r.Stdout != want {
		t.Errorf("stdout %q (stderr %q), want %q", r.Stdout, r.Stderr, want)
	}
	var reasons []string
	for _, d := range r.Egress {
		if d.Kind == "connect" && !d.Allowed {
			reasons = append(reasons, d.Reason)
		}
	}
	if len(reasons) < 1 || !strings.Contains(reasons[0], "server connection cap (1 ") {
		t.Errorf("denials %q, want the server's cap", reasons)
	}
	// The retries above may be refused too while the first connection's
	// place is given back: the metric counts every refusal the result lists.
	capped := 0
	for _, r := range reasons {
		if strings.Contains(r, "server connection cap") {
			capped++
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, m := range []string{"airlock_egress_open_connections_limit 1\n", fmt.Sprintf(`airlock_egress_refusals_total{limit="server_cap"} %d`+"\n", capped)} {
		if !strings.Contains(rec.Body.String(), m) {
			t.Errorf("metrics without %q", m)
		}
	}
}

// An explicit cap the process's RLIMIT_NOFILE cannot hold stops the
// server at start, saying which limit to raise.
func TestEgressServerCapOverRlimit(t *testing.T) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Max > 2<<20 {
		testenv.Skip(t, "RLIMIT_NOFILE holds any valid network.max_open_connections")
	}
	testenv.RequireRoot(t, "building a server")
	cfg := testConfig(t)
	cfg.Pool.Size = map[string]int{}
	cfg.Network.MaxOpenConnections = int(l.Max/2) + 1
	s, err := New(cfg, Options{Version: "test", Log: slog.New(slog.DiscardHandler)})
	if err == nil {
		s.Shutdown(context.Background())
		t.Fatal("a server started with a cap its RLIMIT_NOFILE cannot hold")
	}
	os.RemoveAll(cfg.StateDir)
	if !strings.Contains(err.Error(), "network.max_open_connections") || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Errorf("error %q does not say which limit", err)
	}
}

// A sandbox's lookups over its DNS rate fail at once (REFUSED: the
// resolver gives up without waiting out a timeout), are recorded, and
// succeed again once the rate allows.
func TestEgressDNSRate(t *testing.T) {
	c, _, port := egressServer(t, func(cfg *config.Config) { cfg.Network.DNSQueriesPerSecond, cfg.Network.DNSBurst = 20, 10 })
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python",
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("files.a.test:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: probe + `
t = time.time()
res = [resolve("files.a.test") for i in range(200)]
print(sum(x.startswith("resolved") for x in res), sum(x == "unresolved" for x in res), time.time() - t < 3)
for i in range(100):
    r = resolve("files.a.test")
    if r.startswith("resolved"):
        break
    time.sleep(0.05)
print(r.split()[0])
`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ok, refused int
	var fast bool
	var last string
	if _, err := fmt.Sscanf(r.Stdout, "%d %d %t\n%s", &ok, &refused, &fast, &last); err != nil {
		t.Fatalf("stdout %q (stderr %q): %v", r.Stdout, r.Stderr, err)
	}
	if ok < 5 || refused < 100 || !fast || last != "resolved" {
		t.Errorf("stdout %q: want about the burst resolved, the rest refused at once, then resolved again", r.Stdout)
	}
	var recorded bool
	for _, d := range r.Egress {
		recorded = recorded || (d.Kind == "dns" && !d.Allowed && strings.Contains(d.Reason, "DNS query rate (20 a second, burst 10)"))
	}
	if !recorded {
		t.Errorf("no rate decision among the %d of the result", len(r.Egress))
	}
}

// Code that listens on a port before the gate needs it: a session created
// with an empty allowlist, then given a policy. It cannot take the
// gate's privileged ports (DNS, 80, 443) on either kernel (under gVisor
// the Sentry's host capabilities would grant them: runsc starts without
// them), nor force socket buffers; a policy whose port the sandbox holds
// is a 409 naming the port that leaves the policy as it was (never a
// policy whose names resolve to a port the sandbox's own listener
// answers), on IPv6 only too.
func TestEgressPortsHeldBySandbox(t *testing.T) {
	kernels(t, testEgressPortsHeldBySandbox)
}

func testEgressPortsHeldBySandbox(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	c, _, port := egressServer(t, with)
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Network: &apitype.NetworkPolicy{}})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(code string) string {
		t.Helper()
		r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stderr != "" {
			t.Logf("stderr: %s", r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	out := exec(`
import socket
held = {}
def bind(name, fam, typ, addr, v6only=False):
    s = socket.socket(fam, typ)
    try:
        if v6only:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(addr)
        if typ == socket.SOCK_STREAM:
            s.listen(8)
    except OSError as e:
        s.close()
        return "%s:%s" % (name, type(e).__name__)
    held[name] = s
    return "%s:%d" % (name, s.getsockname()[1])
out = [bind("udp53", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 53)),
       bind("tcp53", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 53)),
       bind("tcp443", socket.AF_INET6, socket.SOCK_STREAM, ("::", 443)),
       bind("tcp80", socket.AF_INET, socket.SOCK_STREAM, ("0.0.0.0", 80))]
try:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, 33, 1 << 29)  # SO_RCVBUFFORCE
    out.append("rcvbufforce:%d" % s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
except OSError as e:
    out.append("rcvbufforce:" + type(e).__name__)
out.append(bind("v4", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)))
out.append(bind("v6", socket.AF_INET6, socket.SOCK_STREAM, ("::", 0), v6only=True))
print(" ".join(out))
`)
	t.Logf("binds: %s", out)
	f := strings.Fields(out)
	if len(f) != 7 {
		t.Fatalf("binds: %q", out)
	}
	for _, w := range f[:5] {
		if !strings.HasSuffix(w, ":PermissionError") {
			t.Errorf("sandbox code took what the gate needs, or forced a socket buffer: %s", w)
		}
	}
	v4, err1 := strconv.Atoi(strings.TrimPrefix(f[5], "v4:"))
	v6, err2 := strconv.Atoi(strings.TrimPrefix(f[6], "v6:"))
	if err1 != nil || err2 != nil {
		t.Fatalf("the sandbox could not listen on ports of its own: %q", out)
	}
	allow := func(ports ...int) []string {
		var a []string
		for _, p := range ports {
			a = append(a, fmt.Sprintf("files.a.test:%d", p))
		}
		return a
	}
	held := func(err error, p int) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("port %d is in use inside the sandbox", p)) {
			t.Errorf("a policy on port %d the sandbox listens on: %v", p, err)
		}
	}
	resolves := func() bool {
		return strings.HasPrefix(exec(probe+`print(resolve("files.a.test"))`), "resolved")
	}

	// The first policy: no gate is left behind, nothing resolves.
	_, err = c.SetNetwork(ctx, sess.ID, allow(v4))
	held(err, v4)
	if st, err := c.Network(ctx, sess.ID); err != nil || (st != nil && len(st.Allow) != 0) {
		t.Errorf("after the refused policy: %+v, %v", st, err)
	}
	if resolves() {
		t.Error("a refused first policy resolves its names")
	}

	// A gate, then a change adding a held port (IPv4, or IPv6 only): the
	// policy stays what it was.
	if _, err := c.SetNetwork(ctx, sess.ID, allow(port)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{v4, v6} {
		_, err = c.SetNetwork(ctx, sess.ID, []string{fmt.Sprintf("files.a.test:%d", port), fmt.Sprintf("pypi.a.test:%d", p)})
		held(err, p)
		if st, err := c.Network(ctx, sess.ID); err != nil || st == nil || len(st.Allow) != 1 {
			t.Errorf("after the refused change to port %d: %+v, %v", p, st, err)
		}
		if got := exec(probe + `print(resolve("pypi.a.test"))`); got != "unresolved" {
			t.Errorf("a refused change to port %d is in force: pypi.a.test %s", p, got)
		}
	}
	if got := exec(probe + fmt.Sprintf(`print(get("http://files.a.test:%d/"))`, port)); !strings.HasPrefix(got, "ok hello") {
		t.Errorf("the policy in force after refused changes: %q", got)
	}

	// Once the program lets go of its ports, the same policies apply.
	exec(`[s.close() for s in held.values()]`)
	if _, err := c.SetNetwork(ctx, sess.ID, append(allow(port, v4), fmt.Sprintf("pypi.a.test:%d", v6))); err != nil {
		t.Fatal(err)
	}
	if !resolves() {
		t.Error("files.a.test does not resolve after the ports were freed")
	}
}

// Every egress policy is in the audit log: the one a session was created
// with, each change with who made it and the policy it replaced, a
// refused change with why, and a one-shot's.
func TestEgressPolicyAudited(t *testing.T) {
	c, _, port, s := egressServerS(t, func(cfg *config.Config) { cfg.Network.MaxAllow = 2 })
	ctx := context.Background()
	first := fmt.Sprintf("files.a.test:%d", port)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash", Network: &apitype.NetworkPolicy{Allow: []string{first, fmt.Sprintf("FILES.a.test.:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetNetwork(ctx, sess.ID, []string{"pypi.a.test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetNetwork(ctx, sess.ID, []string{"a.test", "b.test", "evil\ntest"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("more entries than max_allow: %v, want invalid_argument", err)
	}
	if _, err := c.SetNetwork(ctx, plain.ID, []string{first}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "bash", Code: "true", Network: &apitype.NetworkPolicy{Allow: []string{first}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	records := func(q url.Values) []apitype.AuditRecord {
		t.Helper()
		l, err := c.Audit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return l.Records
	}
	type rec struct {
		Kind, Outcome, Error string
		Allow, Previous      string
	}
	summary := func(rs []apitype.AuditRecord) (out []rec) {
		for _, r := range rs {
			if r.Kind != apitype.AuditSessionCreate && r.Kind != apitype.AuditSessionNetwork && r.Kind != apitype.AuditOneShot {
				continue
			}
			x := rec{Kind: r.Kind, Outcome: r.Outcome, Error: r.Error}
			if r.Network != nil {
				x.Allow, x.Previous = "["+strings.Join(r.Network.Allow, " ")+"]", strings.Join(r.Network.Previous, " ")
			}
			if r.Kind == apitype.AuditSessionNetwork && r.RequestID == "" {
				t.Errorf("a change without the request that made it: %+v", r)
			}
			out = append(out, x)
		}
		return out
	}
	got := summary(records(url.Values{"session": {sess.ID}}))
	want := []rec{
		{Kind: "session.create", Outcome: "ok", Allow: "[" + first + "]"},
		{Kind: "session.network", Outcome: "ok", Allow: "[pypi.a.test]", Previous: first},
		{Kind: "session.network", Outcome: "failed", Error: "invalid_argument", Allow: "[a.test b.test evil\ntest]", Previous: "pypi.a.test"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("session records\n%+v\nwant\n%+v", got, want)
	}
	got = summary(records(url.Values{"session": {plain.ID}}))
	want = []rec{
		{Kind: "session.create", Outcome: "ok"}, // no network
		{Kind: "session.network", Outcome: "ok", Allow: "[" + first + "]"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a session given a network later:\n%+v\nwant\n%+v", got, want)
	}
	got = summary(records(url.Values{"kind": {"oneshot"}}))
	want = []rec{{Kind: "oneshot", Outcome: "ok", Allow: "[" + first + "]"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("one-shot records %+v, want %+v", got, want)
	}
}

// A network given later (PUT .../network) brings the proxy settings a
// session created with it would have had: the runtime has them from its
// next execution on (its libraries and the processes it starts use the
// proxy), commands from then on too; a variable the client set is kept.
func TestEgressProxyForLaterNetwork(t *testing.T) {
	kernels(t, testEgressProxyForLaterNetwork)
}

func testEgressProxyForLaterNetwork(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	c, _, port := egressServer(t, with, func(cfg *config.Config) { cfg.Network.Proxy = true })
	ctx := context.Background()
	allow := []string{fmt.Sprintf("files.a.test:%d", port)}
	type lang struct{ name, before, after string }
	langs := []lang{{"python", `import os; print(os.environ.get("HTTP_PROXY"))`, fmt.Sprintf(`
import os, subprocess, urllib.request, urllib.error
print(os.environ.get("HTTP_PROXY"), os.environ.get("NO_PROXY"))
print(subprocess.run(["sh", "-c", "echo $https_proxy"], capture_output=True, text=True).stdout.strip())
print(urllib.request.urlopen("http://files.a.test:%[1]d/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://evil.test:%[1]d/", timeout=10)
except urllib.error.HTTPError as e:
    print(e.code)
`, port)}}
	if iso == config.Native {
		langs = append(langs, lang{"bash", `echo "${HTTP_PROXY-None}"`, `echo "$HTTP_PROXY $NO_PROXY"`},
			lang{"javascript", `console.log(process.env.HTTP_PROXY ?? "None")`, `console.log(process.env.HTTP_PROXY + " " + process.env.NO_PROXY)`})
	}
	for _, l := range langs {
		sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: l.name, Isolation: iso,
			Network: &apitype.NetworkPolicy{Allow: []string{}}, Env: map[string]string{"NO_PROXY": "mine"}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: l.before}, nil)
		if err != nil || strings.TrimSpace(r.Stdout) != "None" {
			t.Fatalf("%s before the network: %+v, %v", l.name, r, err)
		}
		if _, err := c.SetNetwork(ctx, sess.ID, allow); err != nil {
			t.Fatal(err)
		}
		r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: l.after}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := "http://127.0.0.1:3128 mine"
		if l.name == "python" {
			want = fmt.Sprintf("http://127.0.0.1:3128 mine\nhttp://127.0.0.1:3128\nhello from files.a.test:%d\n403", port)
		}
		if got := strings.TrimSpace(r.Stdout); got != want {
			t.Errorf("%s after the network: %q (stderr %q), want %q", l.name, got, r.Stderr, want)
		}
		cmd, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: `echo "$http_proxy $NO_PROXY"`}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(cmd.Stdout); got != "http://127.0.0.1:3128 mine" {
			t.Errorf("%s: a command after the network: %q", l.name, got)
		}
	}
}
