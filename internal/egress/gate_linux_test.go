package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"airlock/internal/testenv"
)

// netns is a loopback-only network namespace like a sandbox's, held by a
// sleeping child.
type netns struct {
	pidfd int
}

func newNetns(t testing.TB) *netns {
	t.Helper()
	testenv.RequireRoot(t, "entering a network namespace")
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pidfd) })
	n := &netns{pidfd: pidfd}
	if err := inNetns(pidfd, loUp); err != nil {
		t.Fatal(err)
	}
	return n
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, _ := unix.NewIfreq("lo")
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dial connects from inside the namespace, as sandbox code would.
func (n *netns) dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(n.pidfd, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// lookup asks the namespace's 127.0.0.1:53 for name's A record.
func (n *netns) lookup(name string) (dnsmessage.RCode, netip.Addr, error) {
	var c net.Conn
	if err := inNetns(n.pidfd, func() (err error) {
		c, err = net.Dial("udp", "127.0.0.1:53")
		return err
	}); err != nil {
		return 0, netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	if _, err := c.Write(q); err != nil {
		return 0, netip.Addr{}, err
	}
	buf := make([]byte, 1500)
	m, err := c.Read(buf)
	if err != nil {
		return 0, netip.Addr{}, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:m])
	if err != nil {
		return 0, netip.Addr{}, err
	}
	p.SkipAllQuestions()
	as, _ := p.AllAnswers()
	if len(as) == 1 {
		return h.RCode, netip.AddrFrom4(as[0].Body.(*dnsmessage.AResource).A), nil
	}
	return h.RCode, netip.Addr{}, nil
}

// client is an HTTP client whose connections start inside the namespace
// and resolve names through airlock's DNS there, like sandbox code.
func (n *netns) client(tlsConf *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsConf,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			rc, a, err := n.lookup(host)
			if err != nil {
				return nil, err
			}
			if rc != dnsmessage.RCodeSuccess {
				return nil, fmt.Errorf("lookup %s: %v", host, rc)
			}
			return n.dial(net.JoinHostPort(a.String(), port))
		},
	}}
}

// fakeResolver answers names from a table and counts what it was asked.
type fakeResolver struct {
	mu    sync.Mutex
	addrs map[string][][]netip.Addr // successive answers; the last repeats
	asked map[string]int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[host]++
	answers := r.addrs[host]
	if len(answers) == 0 {
		return nil, errors.New("no such host")
	}
	i := min(r.asked[host], len(answers)) - 1
	return answers[i], nil
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[host]
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

// lines returns the egress log lines as maps.
func (l *logBuf) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "egress" {
			out = append(out, m)
		}
	}
	return out
}

// countListener counts the connections it accepts, and the bytes they
// read.
type countListener struct {
	net.Listener
	n, read *atomic.Int64
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
		c = countConn{c, l.read}
	}
	return c, err
}

type countConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// upstream is an HTTP server on a 127.0.0.x address and a fixed port,
// counting the connections it accepts and the bytes they read.
func upstream(t testing.TB, ip string, port int, h http.Handler, tlsOn bool, accepted, read *atomic.Int64) *httptest.Server {
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener = countListener{l, accepted, read}
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// freePort returns a port free on 127.0.0.2.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type fixture struct {
	ns      *netns
	gate    *Gate
	res     *fakeResolver
	log     *logBuf
	port    int // plain HTTP upstream on 127.0.0.2
	tlsPort int // HTTPS upstream on 127.0.0.2 (certificate for example.com)
	tlsConf *tls.Config
	trap    net.Listener // 127.0.0.3: must never see a connection
	// accepted counts the connections the upstreams accepted, read the
	// bytes they received.
	accepted, read atomic.Int64
}

var (
	upstreamAddr = netip.MustParseAddr("127.0.0.2")
	trapAddr     = netip.MustParseAddr("127.0.0.3")
)

func newFixture(t testing.TB, allow []string, lim Limits) *fixture {
	return newFixtureProxy(t, allow, lim, false)
}

func newFixtureProxy(t testing.TB, allow []string, lim Limits, proxy bool) *fixture {
	return newFixtureWith(t, allow, lim, Options{Proxy: proxy}, nil)
}

// newFixtureWith is newFixture with the gate's options o (Proxy,
// Secrets) and more handlers on the upstreams' mux.
func newFixtureWith(t testing.TB, allow []string, lim Limits, o Options, more func(*http.ServeMux)) *fixture {
	f := &fixture{ns: newNetns(t), log: &logBuf{}}
	f.port, f.tlsPort = freePort(t), freePort(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.Host) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 2<<20)) })
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := make([]byte, 1<<20)
		for ; n > 0; n -= len(chunk) {
			if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	if more != nil {
		more(mux)
	}
	upstream(t, "127.0.0.2", f.port, mux, false, &f.accepted, &f.read)
	ts := upstream(t, "127.0.0.2", f.tlsPort, mux, true, &f.accepted, &f.read)
	f.tlsConf = ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	trap, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trap.Close() })
	f.trap = trap
	up := []netip.Addr{upstreamAddr}
	f.res = &fakeResolver{asked: map[string]int{}, addrs: map[string][][]netip.Addr{
		"a.test": {up}, "x.a.test": {up}, "example.com": {up}, "b.test": {up},
		"rebind.test": {{trapAddr}},
		"flip.test":   {up, {trapAddr}},
		"mixed.test":  {{trapAddr, upstreamAddr}},
		"meta.test":   {{netip.MustParseAddr("169.254.169.254")}},
	}}
	guard := NewGuard(nil, Policy{})
	guard.SetTestHooks(netip.PrefixFrom(upstreamAddr, 32))
	var entries []string
	for _, a := range allow {
		entries = append(entries, strings.NewReplacer("PORT", fmt.Sprint(f.port), "TLS", fmt.Sprint(f.tlsPort)).Replace(a))
	}
	p, err := ParsePolicy(entries)
	if err != nil {
		t.Fatal(err)
	}
	if lim.ConnectTimeout == 0 {
		lim.ConnectTimeout = 5 * time.Second
	}
	o.Session, o.Policy, o.Limits = "s1", p, lim
	o.Dialer = &Dialer{Guard: guard, Resolver: f.res, Timeout: lim.ConnectTimeout}
	o.Log = slog.New(slog.NewJSONHandler(f.log, nil))
	g, err := Attach(f.ns.pidfd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	f.gate = g
	return f
}

// trapUntouched fails t if anything connected to the trap listener.
func (f *fixture) trapUntouched(t *testing.T) {
	t.Helper()
	f.trap.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := f.trap.Accept(); err == nil {
		c.Close()
		t.Fatal("a forbidden address was connected to")
	}
}

// proxyClient is an HTTP client using the gate's proxy from inside the
// namespace, as a proxy-aware client in the sandbox would.
func (f *fixture) proxyClient(tlsConf *tls.Config) *http.Client {
	proxyURL, _ := url.Parse("http://" + ProxyAddr)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: tlsConf,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return f.ns.dial(addr) },
	}}
}

func (f *fixture) url(scheme, host string) string {
	port := f.port
	if scheme == "https" {
		port = f.tlsPort
	}
	return fmt.Sprintf("%s://%s:%d/", scheme, host, port)
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// fetch GETs url with c and returns the response and its body.
func fetch(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// expectReset: the connection was accepted (AnyIP) and reset at once.
func expectReset(t *testing.T, c net.Conn, err error, what string) {
	t.Helper()
	if errors.Is(err, syscall.ECONNRESET) {
		return // reset before connect returned
	}
	if err != nil {
		t.Fatalf("%s: connect: %v", what, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) && err != io.EOF {
		t.Fatalf("%s: read = %v, want a reset", what, err)
	}
}

func TestGateHTTPAndHTTPS(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT", "*.a.test:PORT", "example.com:TLS"}, Limits{})
	c := f.ns.client(f.tlsConf)
	for _, host := range []string{"a.test", "x.a.test"} {
		if body, err := get(c, f.url("http", host)); err != nil || body != fmt.Sprintf("hello %s:%d", host, f.port) {
			t.Errorf("GET %s = %q, %v", host, body, err)
		}
	}
	if body, err := get(c, f.url("https", "example.com")); err != nil || !strings.HasPrefix(body, "hello example.com") {
		t.Errorf("GET https://example.com = %q, %v", body, err)
	}
	// The same name's fake address is stable.
	_, a1, _ := f.ns.lookup("a.test")
	_, a2, _ := f.ns.lookup("A.TEST")
	_, a3, _ := f.ns.lookup("x.a.test")
	if a1 != a2 || a1 == a3 || !netip.MustParsePrefix("127.1.0.0/16").Contains(a1) {
		t.Errorf("fake addresses %v %v %v", a1, a2, a3)
	}
	// An allowed name on a port not allowed is refused by the kernel.
	if c, err := f.ns.dial(net.JoinHostPort(a1.String(), "9")); err == nil {
		c.Close()
		t.Error("port 9 reached something")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("port 9: %v, want ECONNREFUSED", err)
	}
	// example.com is allowed on the TLS port only: plain HTTP there is
	// a name:port outside the policy.
	if _, err := get(c, fmt.Sprintf("http://example.com:%d/", f.port)); err == nil {
		t.Error("example.com on the plain port was reached")
	}
	c.CloseIdleConnections()
	allowedLines := func() (n int) {
		for _, l := range f.log.lines() {
			if l["kind"] == "connect" && l["allowed"] == true {
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool { return allowedLines() == 3 })
	var allowed int
	for _, l := range f.log.lines() {
		if l["kind"] == "connect" && l["allowed"] == true {
			allowed++
			if l["address"] != "127.0.0.2" || l["session"] != "s1" || l["bytes_down"].(float64) <= 0 {
				t.Errorf("log line %v", l)
			}
		}
	}
	if allowed != 3 {
		t.Errorf("%d allowed connect lines, want 3: %v", allowed, f.log.lines())
	}
}

func TestGateDeniedNameNeverResolved(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT"}, Limits{})
	for _, name := range []string{"b.test", "evil.test", "a.test.evil.test", "evila.test"} {
		rc, _, err := f.ns.lookup(name)
		if err != nil || rc != dnsmessage.RCodeNameError {
			t.Errorf("lookup %s = %v, %v; want NXDOMAIN", name, rc, err)
		}
		if n := f.res.count(name); n != 0 {
			t.Errorf("%s was asked upstream %d times", name, n)
		}
	}
	var denied int
	for _, l := range f.log.lines() {
		if l["kind"] == "dns" && l["allowed"] == false && strings.Contains(l["reason"].(string), "not in the allowlist") {
			denied++
		}
	}
	if denied != 4 {
		t.Errorf("%d denied DNS lines, want 4", denied)
	}
}

func TestGateIPLiteralsRefused(t *testing.T) {
	f := newFixture(t, []string{"a.test"}, Limits{})
	for _, dst := range []string{"127.0.0.1:80", "10.0.0.1:80", "172.16.0.1:443", "192.168.1.1:80", "100.64.0.1:80",
		"169.254.169.254:80", "0.0.0.0:80", "8.8.8.8:443", "127.0.0.2:80"} {
		c, err := f.ns.dial(dst)
		expectReset(t, c, err, dst)
	}
	// IPv6 literals (when the namespace has IPv6): refused the same way.
	for _, dst := range []string{"[::1]:80", "[fd00:ec2::254]:80", "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80"} {
		c, err := f.ns.dial(dst)
		if err != nil {
			continue // no IPv6 route at all: nothing reached
		}
		expectReset(t, c, nil, dst)
	}
	f.trapUntouched(t)
	for _, l := range f.log.lines() {
		if l["kind"] == "connect" && (l["allowed"] != false || !strings.Contains(l["reason"].(string), "IP address")) {
			t.Errorf("log line %v", l)
		}
	}
	if n := len(f.log.lines()); n < 9 {
		t.Errorf("%d log lines, want one per literal", n)
	}
}

func TestGateRebindingRefused(t *testing.T) {
	f := newFixture(t, []string{"rebind.test:PORT", "flip.test:PORT", "mixed.test:PORT", "meta.test:PORT"}, Limits{})
	c := f.ns.client(nil)
	if _, err := get(c, f.url("http", "rebind.test")); err == nil {
		t.Error("rebind.test (127.0.0.3) was reached")
	}
	if _, err := get(c, f.url("http", "meta.test")); err == nil {
		t.Error("meta.test (169.254.169.254) was reached")
	}
	if body, err := get(c, f.url("http", "flip.test")); err != nil || !strings.HasPrefix(body, "hello") {
		t.Errorf("flip.test first = %q, %v", body, err)
	}
	c.CloseIdleConnections()
	if _, err := get(c, f.url("http", "flip.test")); err == nil {
		t.Error("flip.test after flipping to 127.0.0.3 was reached")
	}
	c.CloseIdleConnections()
	if body, err := get(c, f.url("http", "mixed.test")); err != nil || !strings.HasPrefix(body, "hello") {
		t.Errorf("mixed.test = %q, %v", body, err)
	}
	f.trapUntouched(t)
	var reasons []string
	for _, l := range f.log.lines() {
		if l["kind"] == "connect" && l["allowed"] == false {
			reasons = append(reasons, l["reason"].(string))
		}
	}
	if len(reasons) != 3 || !strings.Contains(strings.Join(reasons, "|"), "forbidden address") {
		t.Errorf("denials %q", reasons)
	}
}

func TestGateNameMismatch(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT", "b.test:PORT", "example.com:TLS", "a.test:TLS"}, Limits{})
	_, a, _ := f.ns.lookup("a.test")
	// HTTP to a.test's address with Host: b.test (allowed too, but not
	// the name behind this address).
	c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := c.Read(make([]byte, 100)); err == nil {
		t.Errorf("Host mismatch answered (%d bytes)", n)
	}
	c.Close()
	// TLS to a.test's address with SNI example.com.
	c, err = f.ns.dial(fmt.Sprintf("%s:%d", a, f.tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	conf := f.tlsConf.Clone()
	conf.ServerName = "example.com"
	tc := tls.Client(c, conf)
	tc.SetDeadline(time.Now().Add(3 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("SNI mismatch completed a handshake")
	}
	tc.Close()
	var reasons []string
	for _, l := range f.log.lines() {
		if l["kind"] == "connect" {
			reasons = append(reasons, l["reason"].(string))
		}
	}
	j := strings.Join(reasons, "|")
	if !strings.Contains(j, `HTTP Host "b.test" does not match a.test`) || !strings.Contains(j, `TLS SNI "example.com" does not match a.test`) {
		t.Errorf("reasons %q", reasons)
	}
}

func TestGateLimits(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		f := newFixture(t, []string{"a.test:PORT"}, Limits{Bytes: 1 << 20})
		body, _ := get(f.ns.client(nil), f.url("http", "a.test")+"big")
		if len(body) >= 1<<20 {
			t.Errorf("got %d bytes through a 1 MiB budget", len(body))
		}
		if s := f.gate.Stats(); s.BytesUsed < 1<<20 || s.BytesBudget != 1<<20 {
			t.Errorf("stats %+v", s)
		}
		waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f.log.lines()), "byte budget") })
		// Used up: the next connection is refused.
		if _, err := get(f.ns.client(nil), f.url("http", "a.test")); err == nil {
			t.Error("a connection after the budget was used up went through")
		}
	})
	// The budget is exact: two downloads racing for it forward, both ways
	// together, exactly the budget and no byte more, and every counter
	// (the gate's, each decision's) says so.
	t.Run("bytes exact", func(t *testing.T) {
		const budget = 100_003
		f := newFixture(t, []string{"a.test:PORT"}, Limits{Bytes: budget})
		_, a, _ := f.ns.lookup("a.test")
		req := "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n"
		got := make(chan int64, 2)
		for range 2 {
			c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go func() {
				c.Write([]byte(req))
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				got <- n
			}()
		}
		down := <-got + <-got
		// (a request that came after the budget was spent is not sent;
		// the upstream may read the last bytes of one cut in the middle
		// after the client saw its end)
		for end := time.Now().Add(30 * time.Second); f.read.Load()+down < budget && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if up := f.read.Load(); down+up != budget {
			t.Errorf("%d bytes forwarded (%d down, %d up), want exactly the budget %d", down+up, down, up, budget)
		}
		if s := f.gate.Stats(); s.BytesUsed != budget {
			t.Errorf("bytes_used %d, want exactly the budget %d", s.BytesUsed, budget)
		}
		waitFor(t, func() bool { return strings.Count(fmt.Sprint(f.log.lines()), "byte budget") == 2 })
		var sum int64
		for _, r := range f.gate.Records("") {
			sum += r.BytesUp + r.BytesDown
		}
		if sum != budget {
			t.Errorf("decisions count %d bytes, want %d", sum, budget)
		}
	})
	t.Run("idle", func(t *testing.T) {
		f := newFixture(t, []string{"a.test:PORT"}, Limits{IdleTimeout: 200 * time.Millisecond})
		start := time.Now()
		get(f.ns.client(nil), f.url("http", "a.test")+"hang")
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("an idle connection lasted %v", d)
		}
		waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f.log.lines()), "idle for 200ms") })
	})
	t.Run("connections", func(t *testing.T) {
		f := newFixture(t, []string{"a.test:PORT"}, Limits{MaxConnections: 1})
		_, a, _ := f.ns.lookup("a.test")
		c1, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		c1.Write([]byte("GET /hang HTTP/1.1\r\nHost: a.test\r\n\r\n"))
		c1.Read(make([]byte, 10)) // the upstream is connected
		c2, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
		expectReset(t, c2, err, "second connection")
		if !strings.Contains(fmt.Sprint(f.log.lines()), "connection cap (1)") {
			t.Errorf("log %v", f.log.lines())
		}
	})
}

// waitFor waits for cond, which a working gate meets in milliseconds; the
// deadline is for a loaded host, and for a broken gate that never does.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 30s")
}

func TestGatePolicyChangeAndClose(t *testing.T) {
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	f := newFixture(t, []string{"a.test:PORT"}, Limits{})
	_, a, _ := f.ns.lookup("a.test")
	c1, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
	if err != nil {
		t.Fatal(err)
	}
	// Decided and spliced before the change (a connection only queued in
	// the listener is decided, under the policy of the moment, when its
	// request arrives).
	c1.Write([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	c1.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c1), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("open connection before a policy change: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	p, _ := ParsePolicy([]string{fmt.Sprintf("b.test:%d", f.port+1)})
	if err := f.gate.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	// ... it still works after it.
	c1.Write([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	c1.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c1.Read(make([]byte, 100)); err != nil || n == 0 {
		t.Errorf("open connection after a policy change: %v", err)
	}
	// New ones follow the new policy: NXDOMAIN, and the old port closed.
	if rc, _, _ := f.ns.lookup("a.test"); rc != dnsmessage.RCodeNameError {
		t.Errorf("a.test after the change: %v", rc)
	}
	if c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port)); err == nil {
		c.Close()
		t.Error("the old port still listens")
	}
	// A literal is reset by airlock (listening), not refused by the kernel.
	if c, err := f.ns.dial(fmt.Sprintf("127.0.0.1:%d", f.port+1)); errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the new port does not listen: %v", err)
	} else if err == nil {
		c.Close()
	}
	c1.Close()
	if err := f.gate.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.ns.lookup("b.test"); err == nil {
		t.Error("DNS answers after Close")
	}
	if c, err := f.ns.dial(fmt.Sprintf("127.0.0.1:%d", f.port+1)); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("after Close: %v, want ECONNREFUSED", err)
	}
	// Upstream servers and the namespace child hold fds of their own:
	// compare once they are gone too.
	f.trap.Close()
	if after := fds(); after > before+8 {
		t.Errorf("%d fds before, %d after Close", before, after)
	}
}

func TestGateProxy(t *testing.T) {
	f := newFixtureProxy(t, []string{"a.test:PORT", "example.com:TLS", "meta.test:PORT"}, Limits{}, true)
	conf := f.tlsConf.Clone()
	c := f.proxyClient(conf)
	if body, err := get(c, f.url("http", "a.test")); err != nil || !strings.HasPrefix(body, "hello a.test") {
		t.Errorf("GET through the proxy = %q, %v", body, err)
	}
	if body, err := get(c, f.url("https", "example.com")); err != nil || !strings.HasPrefix(body, "hello example.com") {
		t.Errorf("HTTPS through the proxy = %q, %v", body, err)
	}
	for _, tc := range []struct{ url, reason string }{
		{f.url("http", "evil.test"), "evil.test:%d is not in the allowlist"},
		{f.url("http", "169.254.169.254"), "169.254.169.254 is an IP address"},
		{f.url("http", "2130706433"), "2130706433 is an IP address"},
		{f.url("http", "meta.test"), "resolves to a forbidden address"},
	} {
		resp, err := c.Get(tc.url)
		if err != nil {
			t.Errorf("GET %s: %v", tc.url, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := tc.reason
		if strings.Contains(want, "%d") {
			want = fmt.Sprintf(want, f.port)
		}
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %d %q, want 403 naming %q", tc.url, resp.StatusCode, b, want)
		}
	}
	// CONNECT to an allowed name, then a ClientHello for another name:
	// refused before anything is dialled, as on the transparent path
	// (red team: the upstream saw a connection for each such tunnel).
	c.CloseIdleConnections()
	before := f.accepted.Load()
	pc, err := f.ns.dial(ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(pc, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com:%d\r\n\r\n", f.tlsPort, f.tlsPort)
	br := bufio.NewReader(pc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	conf.ServerName = "a.test"
	tc := tls.Client(pc, conf)
	tc.SetDeadline(time.Now().Add(3 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("a tunnel opened for example.com carried a handshake for a.test")
	}
	pc.Close()
	f.trapUntouched(t)
	waitFor(t, func() bool {
		return strings.Contains(fmt.Sprint(f.log.lines()), "TLS SNI \"a.test\" does not match example.com")
	})
	if n := f.accepted.Load() - before; n != 0 {
		t.Errorf("a tunnel whose SNI did not match made %d upstream connections", n)
	}
}

// DNS over TCP answers like UDP (resolvers retry over TCP on truncation).
func TestGateDNSOverTCP(t *testing.T) {
	f := newFixture(t, []string{"a.test"}, Limits{})
	c, err := f.ns.dial("127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, tc := range []struct {
		name  string
		rcode dnsmessage.RCode
	}{{"a.test.", dnsmessage.RCodeSuccess}, {"b.test.", dnsmessage.RCodeNameError}} {
		q := query(t, tc.name, dnsmessage.TypeA)
		c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...))
		var lb [2]byte
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, int(lb[0])<<8|int(lb[1]))
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatal(err)
		}
		var p dnsmessage.Parser
		h, err := p.Start(reply)
		if err != nil || h.RCode != tc.rcode {
			t.Errorf("%s over TCP: %v, %v", tc.name, h.RCode, err)
		}
	}
}

// tcpQuery sends one query over a DNS-over-TCP connection and reads the
// reply's rcode.
func tcpQuery(t *testing.T, c net.Conn, name string) (dnsmessage.RCode, error) {
	t.Helper()
	q := query(t, name, dnsmessage.TypeA)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)); err != nil {
		return 0, err
	}
	var lb [2]byte
	if _, err := io.ReadFull(c, lb[:]); err != nil {
		return 0, err
	}
	reply := make([]byte, int(lb[0])<<8|int(lb[1]))
	if _, err := io.ReadFull(c, reply); err != nil {
		return 0, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	return h.RCode, err
}

// DNS over TCP holds connections like any other: under the session's
// connection cap (red team: one session's DNS connections could take the
// whole server-wide cap), refused and recorded over it, and its place
// given back when it closes.
func TestGateDNSOverTCPSessionCap(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT"}, Limits{MaxConnections: 2})
	var held []net.Conn
	for i := range 2 {
		c, err := f.ns.dial("127.0.0.1:53")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if rc, err := tcpQuery(t, c, "a.test."); err != nil || rc != dnsmessage.RCodeSuccess {
			t.Fatalf("DNS connection %d under the cap: %v, %v", i, rc, err)
		}
		held = append(held, c)
	}
	if s := f.gate.Stats(); s.Open != 2 {
		t.Errorf("stats %+v, want the 2 DNS connections open", s)
	}
	c3, err := f.ns.dial("127.0.0.1:53")
	expectReset(t, c3, err, "a third DNS connection over the session's cap")
	_, a, _ := f.ns.lookup("a.test")
	c4, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
	expectReset(t, c4, err, "a connection while DNS holds the session's cap")
	waitFor(t, func() bool {
		return strings.Contains(fmt.Sprint(f.log.lines()), "connection cap (2) is reached (DNS over TCP)")
	})
	held[0].Close()
	waitFor(t, func() bool { return f.gate.Stats().Open == 1 })
	if body, err := get(f.ns.client(nil), f.url("http", "a.test")); err != nil || !strings.HasPrefix(body, "hello a.test") {
		t.Errorf("a connection once a DNS connection closed = %q, %v", body, err)
	}
}

// The server-wide cap holds across sessions: with room for two open
// connections on the whole server, two sessions' connections fill it, a
// third (transparent or through the proxy, in either session) is refused
// like any other denial, and one is accepted again once one closes.
func TestGateServerConnectionCap(t *testing.T) {
	shared := NewShared(2)
	f1 := newFixture(t, []string{"a.test:PORT"}, Limits{Shared: shared})
	f2 := newFixtureProxy(t, []string{"a.test:PORT"}, Limits{Shared: shared}, true)
	// hang opens a connection carried upstream and left open.
	hang := func(f *fixture) net.Conn {
		t.Helper()
		_, a, err := f.ns.lookup("a.test")
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET /hang HTTP/1.1\r\nHost: a.test\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(bufio.NewReader(c), make([]byte, 1)); err != nil {
			t.Fatalf("an allowed connection under the cap: %v", err)
		}
		return c
	}
	c1 := hang(f1)
	defer c1.Close()
	c2 := hang(f2)
	defer c2.Close()
	if s := shared.Stats(); s.Open != 2 || s.Max != 2 {
		t.Fatalf("shared stats %+v, want 2 open of 2", s)
	}
	// Over the cap: reset, with a decision naming the server's cap.
	_, a1, _ := f1.ns.lookup("a.test")
	c3, err := f1.ns.dial(fmt.Sprintf("%s:%d", a1, f1.port))
	expectReset(t, c3, err, "a third connection (session 1)")
	waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f1.log.lines()), "server connection cap (2 ") })
	if s := f1.gate.Stats(); s.Denied != 1 {
		t.Errorf("session 1 stats %+v, want 1 denied", s)
	}
	// DNS over TCP holds a descriptor too: reset at the cap.
	dc, err := f1.ns.dial("127.0.0.1:53")
	expectReset(t, dc, err, "DNS over TCP at the cap")
	// Through the proxy of the other session: reset too (no descriptor
	// held to write a 503), and the decision says why.
	pc, err := f2.ns.dial(ProxyAddr)
	if err == nil {
		fmt.Fprintf(pc, "GET %s HTTP/1.1\r\nHost: a.test\r\n\r\n", f2.url("http", "a.test"))
	}
	expectReset(t, pc, err, "a third connection (session 2, proxy)")
	waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f2.log.lines()), "server connection cap (2 ") })
	if s := shared.Stats(); s.Open != 2 || s.CapRefused != 3 {
		t.Errorf("shared stats %+v, want 2 open, 3 refused", s)
	}
	// One closes: the next connection, in the other session, goes through.
	c1.Close()
	waitFor(t, func() bool { return shared.Stats().Open == 1 })
	cl := f2.ns.client(nil)
	if body, err := get(cl, f2.url("http", "a.test")); err != nil || !strings.HasPrefix(body, "hello a.test") {
		t.Errorf("a connection after one closed = %q, %v", body, err)
	}
	cl.CloseIdleConnections()
	c2.Close()
	waitFor(t, func() bool { return shared.Stats().Open == 0 })
	// Under the cap DNS over TCP answers, and gives its place back.
	dc, err = f1.ns.dial("127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, "a.test.", dnsmessage.TypeA)
	dc.SetDeadline(time.Now().Add(5 * time.Second))
	dc.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...))
	if _, err := io.ReadFull(dc, make([]byte, 2)); err != nil {
		t.Fatalf("DNS over TCP under the cap: %v", err)
	}
	if n := shared.Stats().Open; n != 1 {
		t.Errorf("%d open with one DNS connection", n)
	}
	dc.Close()
	waitFor(t, func() bool { return shared.Stats().Open == 0 })
}

// A sandbox flooding its DNS responder gets REFUSED over its rate, at
// once, with every refusal in the records (one summarised entry: a
// count) and at most one log line a second; its queries are answered
// again as tokens come back.
func TestGateDNSRateLimit(t *testing.T) {
	shared := NewShared(16)
	f := newFixture(t, []string{"a.test:PORT"}, Limits{DNSRate: 50, DNSBurst: 20, Shared: shared})
	var c net.Conn
	if err := inNetns(f.ns.pidfd, func() (err error) {
		c, err = net.Dial("udp", "127.0.0.1:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Back to back, each query as soon as the last is answered (not all
	// at once: UDP would drop some in the socket's queue).
	const n = 300
	codes := map[dnsmessage.RCode]int{}
	buf := make([]byte, 1500)
	for i := range n {
		q := query(t, "a.test.", dnsmessage.TypeA)
		q[0], q[1] = byte(i>>8), byte(i)
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %v replies: %v", codes, err)
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:m])
		if err != nil {
			t.Fatal(err)
		}
		// The question is echoed: resolvers match it to their query.
		if q, err := p.Question(); err != nil || q.Name.String() != "a.test." {
			t.Fatalf("reply's question %v, %v", q, err)
		}
		codes[h.RCode]++
	}
	ok, refused := codes[dnsmessage.RCodeSuccess], codes[dnsmessage.RCodeRefused]
	if ok < 20 || ok > 60 || refused < n-60 || ok+refused != n {
		t.Errorf("replies %v: want the burst (20) answered and most of the rest REFUSED", codes)
	}
	if s := f.gate.Stats(); s.Denied != int64(refused) {
		t.Errorf("denied %d, want the %d refused", s.Denied, refused)
	}
	if s := shared.Stats(); s.DNSRefused != int64(refused) {
		t.Errorf("shared DNS refusals %d, want %d", s.DNSRefused, refused)
	}
	// One entry, counting every refusal, from the first to the last.
	var recs []Record
	for _, r := range f.gate.Records("") {
		if strings.Contains(r.Reason, "DNS query rate") {
			recs = append(recs, r)
		}
	}
	if len(recs) != 1 || recs[0].Count != int64(refused) || recs[0].Name != "a.test" || !recs[0].Last.After(recs[0].First) {
		t.Errorf("refusal records %+v, want one counting the %d refusals", recs, refused)
	}
	if n := Summarized(f.gate.Records("")); n < int64(refused)-1 {
		t.Errorf("%d decisions summarised, want at least %d", n, refused-1)
	}
	// Tokens come back: the session's lookups are answered again.
	waitFor(t, func() bool {
		rc, a, err := f.ns.lookup("a.test")
		return err == nil && rc == dnsmessage.RCodeSuccess && a.IsValid()
	})
	// The log: at most a line a second, the rest when the gate closes:
	// together, every refusal.
	total := 0
	f.gate.Close()
	f.log.mu.Lock()
	for _, line := range strings.Split(f.log.b.String(), "\n") {
		var m struct {
			Msg   string `json:"msg"`
			Count int    `json:"count"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m.Msg, "egress DNS queries refused") {
			total += m.Count
		}
	}
	f.log.mu.Unlock()
	// (the lookups waiting for tokens may have been refused too)
	if d := f.gate.Stats().Denied; int64(total) != d || shared.Stats().DNSRefused != d {
		t.Errorf("the log lines account for %d refusals, want %d (%+v)", total, d, shared.Stats())
	}
}

// Nothing allowed drops out of the record: past the old 256-decision ring
// and a flood of denials, an execution's record keeps every allowed
// connection whole and logged, and the denials and lookups summarised
// (one entry per destination and reason with a count, then one entry
// past maxSummaries distinct ones), saying how many were folded.
func TestGateRecordKeepsAllowedConnections(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT"}, Limits{})
	f.gate.SetExecution("e1")
	_, a, _ := f.ns.lookup("a.test")
	const allowed, literals, names = 300, 500, maxSummaries + 100
	for i := 0; i < allowed || i < literals; i++ {
		if i < literals {
			c, err := f.ns.dial(fmt.Sprintf("10.0.0.1:%d", f.port))
			expectReset(t, c, err, "a literal")
		}
		if i < allowed {
			c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if b, err := io.ReadAll(c); err != nil || !bytes.Contains(b, []byte("hello a.test")) {
				t.Fatalf("allowed connection %d: %q, %v", i, b, err)
			}
			c.Close()
		}
	}
	for i := range names {
		if rc, _, err := f.ns.lookup(fmt.Sprintf("n%d.evil.test", i)); err != nil || rc != dnsmessage.RCodeNameError {
			t.Fatalf("lookup: %v, %v", rc, err)
		}
	}
	// Every allowed connection logged, however many denials came between.
	waitFor(t, func() bool {
		n := 0
		for _, l := range f.log.lines() {
			if l["kind"] == "connect" && l["allowed"] == true {
				n++
			}
		}
		return n == allowed
	})
	f.gate.SetExecution("")
	recs := f.gate.Take("e1")
	var conns, literalCount, nameCount, nameEntries int64
	for _, r := range recs {
		switch {
		case r.Kind == "connect" && r.Allowed:
			conns++
			if r.Count != 0 || r.BytesDown <= 0 || r.Address != "127.0.0.2" {
				t.Errorf("allowed record %+v", r)
			}
		case r.Kind == "connect" && r.Dest == fmt.Sprintf("10.0.0.1:%d", f.port):
			literalCount += r.Count
		case r.Kind == "dns" && !r.Allowed:
			nameEntries++
			nameCount += max(r.Count, 1)
		}
	}
	if conns != allowed {
		t.Errorf("%d allowed connections in the record, want all %d", conns, allowed)
	}
	if literalCount != literals {
		t.Errorf("the literal's entry counts %d, want %d", literalCount, literals)
	}
	if nameCount != names || nameEntries > maxSummaries+1 {
		t.Errorf("%d denied lookups in %d entries, want %d in at most %d", nameCount, nameEntries, names, maxSummaries+1)
	}
	if n, want := Summarized(recs), int64(allowed+literals+names+1-len(recs)); n != want {
		t.Errorf("%d summarised, want %d (%d decisions in %d entries)", n, want, allowed+literals+names+1, len(recs))
	}
	if again := f.gate.Take("e1"); again != nil {
		t.Errorf("taken twice: %d records", len(again))
	}
}

// The connection budget bounds what a record holds: past it a connection
// is refused (reset, or 429 through the proxy), and one refused for
// another reason does not spend it.
func TestGateConnectionBudget(t *testing.T) {
	f := newFixtureProxy(t, []string{"a.test:PORT", "rebind.test:PORT"}, Limits{Connections: 2}, true)
	c := f.ns.client(nil)
	if _, err := get(c, f.url("http", "rebind.test")); err == nil {
		t.Error("rebind.test was reached")
	}
	for i := range 2 {
		if body, err := get(c, f.url("http", "a.test")); err != nil || !strings.HasPrefix(body, "hello") {
			t.Fatalf("connection %d within the budget: %q, %v", i, body, err)
		}
		c.CloseIdleConnections()
	}
	if _, err := get(c, f.url("http", "a.test")); err == nil {
		t.Error("a connection past the budget went through")
	}
	pc := f.proxyClient(nil)
	resp, b := fetch(t, pc, f.url("http", "a.test"))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "connection budget (2 connections") {
		t.Errorf("through the proxy past the budget: %d %q", resp.StatusCode, b)
	}
	if s := f.gate.Stats(); s.Allowed != 2 || s.ConnectionBudget != 2 {
		t.Errorf("stats %+v, want 2 of 2 allowed", s)
	}
}

// A wildcard gives a session at most Limits.WildcardNames distinct names
// (each one airlock looks up upstream, chosen by the sandbox: red team, a
// DNS channel of ~340 names a second): past it a new name is NXDOMAIN, or
// 403 through the proxy, and never looked up upstream; names used before
// keep working, exact entries are not counted, and a policy change does
// not reset the count.
func TestGateWildcardNamesCapped(t *testing.T) {
	f := newFixtureProxy(t, []string{"*.a.test:PORT", "x.a.test:PORT"}, Limits{WildcardNames: 3}, true)
	for _, n := range []string{"n1.a.test", "n2.a.test", "x.a.test", "n3.a.test", "n1.a.test"} {
		if rc, _, err := f.ns.lookup(n); err != nil || rc != dnsmessage.RCodeSuccess {
			t.Errorf("%s within the cap: %v, %v", n, rc, err)
		}
	}
	if rc, _, err := f.ns.lookup("n4.a.test"); err != nil || rc != dnsmessage.RCodeNameError {
		t.Errorf("n4.a.test past the cap: %v, %v; want NXDOMAIN", rc, err)
	}
	pc := f.proxyClient(nil)
	resp, b := fetch(t, pc, f.url("http", "n5.a.test"))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "*.a.test has given this session its 3 distinct names") {
		t.Errorf("n5.a.test through the proxy: %d %q", resp.StatusCode, b)
	}
	if err := f.gate.SetPolicy(f.gate.Policy()); err != nil {
		t.Fatal(err)
	}
	if rc, _, _ := f.ns.lookup("n6.a.test"); rc != dnsmessage.RCodeNameError {
		t.Errorf("n6.a.test after a policy change: %v, want NXDOMAIN", rc)
	}
	for _, n := range []string{"n4.a.test", "n5.a.test", "n6.a.test"} {
		if k := f.res.count(n); k != 0 {
			t.Errorf("%s looked up upstream %d times", n, k)
		}
	}
	if !strings.Contains(fmt.Sprint(f.gate.Records("")), "distinct names (network.max_wildcard_names)") {
		t.Errorf("no record says why: %v", f.gate.Records(""))
	}
}

// airlock's own upstream lookups of names the sandbox chose take tokens
// of the session's DNS rate: through the proxy (no query of the sandbox's
// first) a burst of requests makes at most the bucket's lookups, and the
// rest are refused with a 429 naming the rate.
func TestGateUpstreamLookupsInDNSRate(t *testing.T) {
	f := newFixtureProxy(t, []string{"a.test:PORT"}, Limits{DNSRate: 1, DNSBurst: 4}, true)
	pc := f.proxyClient(nil)
	pc.Transport.(*http.Transport).DisableKeepAlives = true
	start := time.Now()
	ok := 0
	var refusal string
	for i := 0; i < 100 && refusal == ""; i++ {
		resp, b := fetch(t, pc, f.url("http", "a.test"))
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refusal = string(b)
		default:
			t.Fatalf("status %d %q", resp.StatusCode, b)
		}
	}
	// The bucket's burst plus what it refilled meanwhile, whatever the
	// machine's speed.
	bound := 4 + int(time.Since(start).Seconds()) + 1
	if refusal == "" || ok > bound || !strings.Contains(refusal, "DNS query rate (1 a second, burst 4) is exceeded (airlock's lookup of a.test upstream") {
		t.Errorf("%d requests went through (bound %d), refusal %q", ok, bound, refusal)
	}
	if n := f.res.count("a.test"); n != ok {
		t.Errorf("%d upstream lookups for %d requests carried", n, ok)
	}
}

// An allowed name whose upstream lookup fails, or whose address refuses
// the connection, is not a denial: the decision is allowed, and says what
// failed upstream; through the proxy it is a 502, not a 403. A forbidden
// address stays a denial.
func TestGateUpstreamFailureIsNotADenial(t *testing.T) {
	closed := freePort(t)
	f := newFixtureProxy(t, []string{"gone.test:PORT", fmt.Sprintf("a.test:%d", closed), "meta.test:PORT"}, Limits{}, true)
	f.gate.SetExecution("e1")
	c := f.ns.client(nil)
	for _, u := range []string{f.url("http", "gone.test"), fmt.Sprintf("http://a.test:%d/", closed), f.url("http", "meta.test")} {
		if _, err := get(c, u); err == nil {
			t.Errorf("%s answered", u)
		}
	}
	pc := f.proxyClient(nil)
	resp, b := fetch(t, pc, f.url("http", "gone.test"))
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Airlock-Egress") != "failed" || !strings.Contains(string(b), "upstream DNS failure: cannot resolve gone.test") {
		t.Errorf("through the proxy: %d %s %q, want 502, failed and the upstream DNS failure", resp.StatusCode, resp.Header.Get("X-Airlock-Egress"), b)
	}
	want := map[string]struct {
		allowed bool
		reason  string
	}{
		"gone.test": {true, "upstream DNS failure: cannot resolve gone.test"},
		"a.test":    {true, "upstream connection failed: connect to a.test: "},
		"meta.test": {false, "denied: meta.test resolves to a forbidden address"},
	}
	seen := map[string]int{}
	waitFor(t, func() bool { return len(f.gate.Records("e1")) >= 4 })
	for _, r := range f.gate.Records("e1") {
		if r.Kind == "dns" {
			continue
		}
		w, ok := want[r.Name]
		if !ok || r.Allowed != w.allowed || !strings.HasPrefix(r.Reason, w.reason) {
			t.Errorf("%s %s: allowed %v, %q; want %v, %q", r.Kind, r.Name, r.Allowed, r.Reason, w.allowed, w.reason)
		}
		seen[r.Name]++
	}
	if seen["gone.test"] != 2 || seen["a.test"] != 1 || seen["meta.test"] != 1 {
		t.Errorf("decisions %v", seen)
	}
	if st := f.gate.Stats(); st.Denied != 1 {
		t.Errorf("%d denied, want 1 (the forbidden address)", st.Denied)
	}
	f.trapUntouched(t)
}

// An allowed name whose upstream fails carried nothing: its attempts are
// summarised like denials (one entry, counted), so that a sandbox
// hammering a dead name holds no more than one entry, and the connection
// budget gets each attempt back.
func TestGateUpstreamFailuresSummarised(t *testing.T) {
	f := newFixture(t, []string{"gone.test:PORT"}, Limits{Connections: 5})
	_, a, _ := f.ns.lookup("gone.test")
	const n = 20
	for range n {
		c, err := f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: gone.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
	}
	var entries, count int64
	waitFor(t, func() bool {
		entries, count = 0, 0
		for _, r := range f.gate.Records("") {
			if r.Kind == "connect" {
				entries++
				count += max(r.Count, 1)
				if !r.Allowed || !strings.Contains(r.Reason, "upstream DNS failure") {
					t.Fatalf("record %+v", r)
				}
			}
		}
		return count == n
	})
	if entries != 1 {
		t.Errorf("%d attempts in %d entries, want one", count, entries)
	}
	if s := f.gate.Stats(); s.Allowed != 0 {
		t.Errorf("stats %+v: failed attempts spent the connection budget", s)
	}
}
