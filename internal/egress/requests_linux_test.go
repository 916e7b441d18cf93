package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// rawUpstream is an HTTP/1.1 server on 127.0.0.2 that answers every
// request of a connection, pipelined or not, and ignores "Connection:
// close" (as servers and CDNs that keep reading do): it records the Host
// of every request it reads. /ws?accept=1 switches to an echo after 101;
// /ws without it declines the upgrade and stays HTTP.
type rawUpstream struct {
	port  int
	mu    sync.Mutex
	hosts []string
}

func newRawUpstream(t *testing.T) *rawUpstream {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	u := &rawUpstream{port: l.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.hosts = append(u.hosts, req.Host)
		u.mu.Unlock()
		io.Copy(io.Discard, req.Body)
		if req.Header.Get("Upgrade") == "websocket" && req.URL.RawQuery == "accept=1" {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			io.Copy(c, br)
			return
		}
		body := "hello " + req.Host
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
}

func (u *rawUpstream) saw(host string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.ContainsFunc(u.hosts, func(h string) bool { return strings.HasPrefix(h, host) })
}

// answers reads responses until the connection ends and returns their
// bodies.
func answers(t *testing.T, c net.Conn, br *bufio.Reader) []string {
	t.Helper()
	var out []string
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer and no end after %q", out)
			}
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		out = append(out, string(b))
	}
}

// Every request of a plain HTTP connection must name the host behind its
// address, not only the first: a keep-alive or pipelined request for
// another host (one the same upstream would serve: domain fronting
// inside one connection) is never forwarded, and the connection is cut
// with a reason. Bodies, fixed or chunked, pass unparsed even when they
// look like a request; a declined Upgrade keeps the check, an accepted
// one (101) carries the new protocol.
func TestGateEveryRequestChecked(t *testing.T) {
	u := newRawUpstream(t)
	f := newFixture(t, []string{fmt.Sprintf("a.test:%d", u.port), fmt.Sprintf("b.test:%d", u.port)}, Limits{})
	_, fake, _ := f.ns.lookup("a.test")
	a := fmt.Sprintf("GET / HTTP/1.1\r\nHost: a.test:%d\r\n\r\n", u.port)
	b := "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"
	helloA := fmt.Sprintf("hello a.test:%d", u.port)
	for _, tc := range []struct {
		name   string
		writes []string // each written once the answers before it came
		want   []string // the answers, then the end
	}{
		{"keep-alive", []string{a, b}, []string{helloA}},
		{"pipelined", []string{a + b}, nil},
		{"after a Content-Length body", []string{fmt.Sprintf("POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n\r\n%s", len(b), b), b}, []string{"hello a.test"}},
		{"after a chunked body", []string{fmt.Sprintf("POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(b), b), a, b}, []string{"hello a.test", helloA}},
		{"after a declined upgrade", []string{"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", b}, []string{"hello a.test"}},
		{"a smuggled length", []string{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + b}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, u.port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			var got []string
			for i, w := range tc.writes {
				if _, err := io.WriteString(c, w); err != nil {
					break
				}
				if i < len(tc.writes)-1 {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						break
					}
					body, _ := io.ReadAll(resp.Body)
					got = append(got, string(body))
				}
			}
			got = append(got, answers(t, c, br)...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("answers %q, want %q", got, tc.want)
			}
		})
	}
	if u.saw("b.test") {
		t.Errorf("the upstream read a request for b.test: %q", u.hosts)
	}
	waitFor(t, func() bool {
		return strings.Contains(fmt.Sprint(f.log.lines()), `allowed, then cut: HTTP request 2 on the connection Host "b.test" does not match a.test`)
	})

	// An accepted upgrade: after 101 the bytes are the new protocol's,
	// whatever they look like.
	c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, u.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws?accept=1 HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v", err)
	}
	io.WriteString(c, b)
	echo := make([]byte, len(b))
	if _, err := io.ReadFull(br, echo); err != nil || string(echo) != b {
		t.Errorf("after 101: echo %q, %v", echo, err)
	}
}

// Through the forward proxy one request is carried per connection:
// nothing the client sends after its request's body reaches the upstream,
// even one that keeps reading after "Connection: close"; a CONNECT tunnel
// carrying plain HTTP is checked request by request like a transparent
// connection.
func TestGateProxyEveryRequestChecked(t *testing.T) {
	u := newRawUpstream(t)
	f := newFixtureProxy(t, []string{fmt.Sprintf("a.test:%d", u.port), fmt.Sprintf("b.test:%d", u.port)}, Limits{}, true)
	forward := func(host, body string) string {
		return fmt.Sprintf("POST http://%s:%d/ HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n\r\n%s", host, u.port, host, u.port, len(body), body)
	}
	b := fmt.Sprintf("GET http://b.test:%d/ HTTP/1.1\r\nHost: b.test:%d\r\n\r\n", u.port, u.port)
	for _, w := range []string{forward("a.test", "x") + b, forward("a.test", b) + b} {
		c, err := f.ns.dial(ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, w)
		got := answers(t, c, bufio.NewReader(c))
		c.Close()
		if want := fmt.Sprintf("hello a.test:%d", u.port); len(got) != 1 || got[0] != want {
			t.Errorf("answers %q, want only %q", got, want)
		}
	}
	c, err := f.ns.dial(ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT a.test:%d HTTP/1.1\r\nHost: a.test:%d\r\n\r\n", u.port, u.port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatalf("first request in the tunnel: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n")
	if got := answers(t, c, br); len(got) != 0 {
		t.Errorf("second request in the tunnel answered: %q", got)
	}
	if u.saw("b.test") {
		t.Errorf("the upstream read a request for b.test: %q", u.hosts)
	}
}

// serverFirst is a TCP upstream on 127.0.0.2 that speaks first (an SMTP
// greeting), then echoes.
func serverFirst(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "220 smtp.test ready\r\n")
				io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// On a port other than 80 and 443 nothing is dialled until the client's
// first bytes name the name behind the address (a TLS ClientHello or an
// HTTP request): a client that waits before sending another Host, one
// that sends nothing, and one speaking another protocol are refused.
// Only an entry marked opaque carries such a port unchecked — a protocol
// where the server speaks first works there, directly and through a
// CONNECT tunnel.
func TestGateOpaqueOnlyWhenSaid(t *testing.T) {
	defer func(d time.Duration) { peekTimeout = d }(peekTimeout)
	peekTimeout = time.Second
	u := newRawUpstream(t)
	smtp := serverFirst(t)
	f := newFixtureProxy(t, []string{fmt.Sprintf("a.test:%d", u.port), fmt.Sprintf("b.test:%d", u.port),
		fmt.Sprintf("mail.test:%d/opaque", smtp), fmt.Sprintf("a.test:%d", smtp)}, Limits{}, true)
	f.res.addrs["mail.test"] = [][]netip.Addr{{upstreamAddr}}
	_, fakeA, _ := f.ns.lookup("a.test")
	_, fakeMail, _ := f.ns.lookup("mail.test")

	// The old bypass: wait past the first bytes' window, then send a
	// request for another host to a.test's address.
	c, err := f.ns.dial(fmt.Sprintf("%s:%d", fakeA, u.port))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // longer than the window the old gate gave
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n")
	if got := answers(t, c, bufio.NewReader(c)); len(got) != 0 {
		t.Errorf("a late request for b.test was answered: %q", got)
	}
	c.Close()
	// Silent on a port that is not opaque: refused once the window ends,
	// and never dialled (the greeting never comes).
	c, err = f.ns.dial(fmt.Sprintf("%s:%d", fakeA, smtp))
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 64)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a silent client on a checked port: read %d bytes, %v; want it refused", n, err)
	}
	c.Close()
	// Another protocol (an SSH banner) on a port that is not opaque.
	c, err = f.ns.dial(fmt.Sprintf("%s:%d", fakeA, smtp))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 64)); err == nil {
		t.Error("an SSH banner on a checked port was carried")
	}
	c.Close()
	if u.saw("b.test") {
		t.Errorf("the upstream read a request for b.test: %q", u.hosts)
	}
	waitFor(t, func() bool {
		l := fmt.Sprint(f.log.lines())
		return strings.Contains(l, "nothing sent within 1s") && strings.Contains(l, "neither a TLS ClientHello nor an HTTP request") &&
			strings.Contains(l, `HTTP Host "b.test" does not match a.test`)
	})

	// The opaque entry: the server's greeting arrives with the client
	// silent, directly and through the proxy.
	greet := func(c net.Conn, br *bufio.Reader) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if line, err := br.ReadString('\n'); err != nil || line != "220 smtp.test ready\r\n" {
			t.Fatalf("greeting %q, %v", line, err)
		}
		io.WriteString(c, "EHLO x\r\n")
		if line, err := br.ReadString('\n'); err != nil || line != "EHLO x\r\n" {
			t.Errorf("echo %q, %v", line, err)
		}
	}
	c, err = f.ns.dial(fmt.Sprintf("%s:%d", fakeMail, smtp))
	if err != nil {
		t.Fatal(err)
	}
	greet(c, bufio.NewReader(c))
	c.Close()
	pc, err := f.ns.dial(ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	fmt.Fprintf(pc, "CONNECT mail.test:%d HTTP/1.1\r\nHost: mail.test:%d\r\n\r\n", smtp, smtp)
	br := bufio.NewReader(pc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT to the opaque entry: %v", err)
	}
	greet(pc, br)
	// A tunnel to a checked port stays checked.
	pc2, err := f.ns.dial(ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc2.Close()
	fmt.Fprintf(pc2, "CONNECT a.test:%d HTTP/1.1\r\nHost: a.test:%d\r\n\r\n", smtp, smtp)
	br2 := bufio.NewReader(pc2)
	if resp, err := http.ReadResponse(br2, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT to a checked port: %v", err)
	}
	pc2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br2.ReadString('\n'); err == nil {
		t.Errorf("a silent tunnel to a checked port got %q", line)
	}
}

// A bulk transfer moves through a 1 MiB buffer, not the 32 KiB reads that
// ran a download at a third of a direct one; the large buffers are
// bounded server-wide (maxBulk): a download whose client stops reading
// holds one, downloads past the bound keep their small buffer, every
// download arrives whole and exact either way, and no large buffer
// outlives its transfer.
func TestGateBulkBuffers(t *testing.T) {
	defer func(n int64) { maxBulk = n }(maxBulk)
	maxBulk = 2
	f := newFixture(t, []string{"a.test:PORT"}, Limits{})
	_, fake, _ := f.ns.lookup("a.test")
	waitFor(t, func() bool { return bulkInUse.Load() == 0 }) // earlier tests' connections
	const size = 32 << 20
	var conns []net.Conn
	for range 4 {
		c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /bytes?n=%d HTTP/1.1\r\nHost: a.test\r\n\r\n", size)
		conns = append(conns, c)
	}
	// The clients read nothing yet: the movers block holding their
	// buffers, two large ones at most.
	waitFor(t, func() bool { return bulkInUse.Load() == 2 })
	for range 20 {
		if n := bulkInUse.Load(); n > 2 {
			t.Fatalf("%d large buffers in use with a bound of 2", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range conns {
		readDownload(t, c, size)
		c.Close()
	}
	waitFor(t, func() bool { return bulkInUse.Load() == 0 })
	if s := f.gate.Stats(); s.BytesUsed < 4*size {
		t.Errorf("bytes used %d, want at least %d", s.BytesUsed, 4*size)
	}
}

// A bulk download between two TCP sockets is spliced, arrives whole and
// in order, and a byte budget that ends in the middle of it forwards
// exactly the budget, every counter agreeing.
func TestGateSplice(t *testing.T) {
	pattern := func(i int) byte { return byte(i*7 + i>>12) }
	more := func(mux *http.ServeMux) {
		mux.HandleFunc("/pattern", func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			b := make([]byte, n)
			for i := range b {
				b[i] = pattern(i)
			}
			w.Write(b)
		})
	}
	const size = 16<<20 + 5
	t.Run("whole", func(t *testing.T) {
		f := newFixtureWith(t, []string{"a.test:PORT"}, Limits{}, Options{}, more)
		_, fake, _ := f.ns.lookup("a.test")
		c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		before := spliced.Load()
		fmt.Fprintf(c, "GET /pattern?n=%d HTTP/1.1\r\nHost: a.test\r\n\r\n", size)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if len(body) != size || err != nil {
			t.Fatalf("downloaded %d bytes, %v; want %d", len(body), err, size)
		}
		for i, b := range body {
			if b != pattern(i) {
				t.Fatalf("byte %d is %d, want %d", i, b, pattern(i))
			}
		}
		if n := spliced.Load() - before; n < size/2 {
			t.Errorf("%d bytes spliced of %d", n, size)
		}
	})
	t.Run("budget", func(t *testing.T) {
		const budget = 3<<20 + 7
		f := newFixtureWith(t, []string{"a.test:PORT"}, Limits{Bytes: budget}, Options{}, more)
		_, fake, _ := f.ns.lookup("a.test")
		c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		before := spliced.Load()
		fmt.Fprintf(c, "GET /pattern?n=%d HTTP/1.1\r\nHost: a.test\r\n\r\n", size)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		down, _ := io.Copy(io.Discard, c)
		waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f.log.lines()), "byte budget") })
		if up := f.read.Load(); down+up != budget {
			t.Errorf("%d bytes forwarded (%d down, %d up), want exactly the budget %d", down+up, down, up, budget)
		}
		if s := f.gate.Stats(); s.BytesUsed != budget {
			t.Errorf("bytes_used %d, want exactly the budget %d", s.BytesUsed, budget)
		}
		var sum int64
		for _, r := range f.gate.Records("") {
			sum += r.BytesUp + r.BytesDown
		}
		if sum != budget {
			t.Errorf("the decision counts %d bytes, want %d", sum, budget)
		}
		if spliced.Load() == before {
			t.Error("nothing was spliced")
		}
	})
}

// The gate's leg of every connection, the sandbox's lo, carries packets
// of up to loPacket (BIG TCP), which a kernel whose lo takes them must
// get: with 64 KiB packets a download through the gate costs about a
// third more CPU per byte.
func TestGateBigLoopback(t *testing.T) {
	f := newFixture(t, []string{"a.test:PORT"}, Limits{})
	var lo netlink.Link
	if err := inNetns(f.ns.pidfd, func() (err error) { lo, err = netlink.LinkByName("lo"); return err }); err != nil {
		t.Fatal(err)
	}
	a := lo.Attrs()
	if a.TSOMaxSize < loPacket {
		t.Logf("this kernel's lo takes packets of %d bytes at most: it keeps 64 KiB", a.TSOMaxSize)
		return
	}
	if a.GSOMaxSize != loPacket || a.GSOIPv4MaxSize != loPacket || a.GROIPv4MaxSize != loPacket {
		t.Errorf("the sandbox's lo: GSO %d, GSO IPv4 %d, GRO IPv4 %d; want %d", a.GSOMaxSize, a.GSOIPv4MaxSize, a.GROIPv4MaxSize, loPacket)
	}
	_, fake, _ := f.ns.lookup("a.test")
	c, err := f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 8 << 20
	fmt.Fprintf(c, "GET /bytes?n=%d HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", size)
	readDownload(t, c, size)
}

// readDownload reads an answer of /bytes from c and checks it is size
// bytes, whole.
func readDownload(t *testing.T, c net.Conn, size int64) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, resp.Body); n != size || err != nil {
		t.Errorf("downloaded %d bytes, %v; want %d", n, err, size)
	}
}
