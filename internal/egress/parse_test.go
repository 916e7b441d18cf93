package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// clientHello returns the first flight a Go TLS client sends for sni: its
// TLS records up to the end of the ClientHello they carry, however many
// writes that takes (one with post-quantum shares may take several).
func clientHello(t testing.TB, sni string) []byte {
	c, s := net.Pipe()
	go func() {
		tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""}).Handshake()
		c.Close()
	}()
	defer s.Close()
	s.SetReadDeadline(time.Now().Add(30 * time.Second))
	var flight, msg []byte
	for len(msg) < 4 || len(msg) < 4+int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(s, hdr); err != nil {
			t.Fatalf("the client's record header: %v", err)
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(s, body); err != nil {
			t.Fatalf("the client's record: %v", err)
		}
		flight = append(append(flight, hdr...), body...)
		msg = append(msg, body...)
	}
	return flight
}

func TestClientHelloSNI(t *testing.T) {
	hello := clientHello(t, "files.a.test")
	sni, complete, err := ClientHelloSNI(hello)
	if err != nil || !complete || sni != "files.a.test" {
		t.Fatalf("ClientHelloSNI = %q, %v, %v", sni, complete, err)
	}
	for _, n := range []int{1, 5, 40, len(hello) - 1} {
		if _, complete, err := ClientHelloSNI(hello[:n]); complete || err != nil {
			t.Errorf("prefix of %d bytes: complete=%v err=%v, want incomplete", n, complete, err)
		}
	}
	if _, complete, err := ClientHelloSNI(clientHello(t, "")); !complete || err == nil {
		t.Errorf("hello without SNI: complete=%v err=%v, want an error", complete, err)
	}
	if _, complete, err := ClientHelloSNI([]byte("\x16\x03\x01\x00\x05hello world")); !complete || err == nil {
		t.Errorf("garbage record: complete=%v err=%v", complete, err)
	}
}

func query(t testing.TB, name string, typ dnsmessage.Type) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDNSAnswer(t *testing.T) {
	fake := func(n string) (netip.Addr, bool) {
		if n == "a.test" {
			return netip.MustParseAddr("127.1.0.1"), true
		}
		return netip.Addr{}, false
	}
	for _, tc := range []struct {
		name    string
		typ     dnsmessage.Type
		rcode   dnsmessage.RCode
		answers int
	}{
		{"a.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"A.TEST.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"a.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0},
		{"a.test.", dnsmessage.TypeHTTPS, dnsmessage.RCodeSuccess, 0},
		{"a.test.", dnsmessage.TypeSVCB, dnsmessage.RCodeSuccess, 0},
		{"b.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
		{"b.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeNameError, 0},
		{"x.a.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
	} {
		reply, _, _, _ := dnsAnswer(query(t, tc.name, tc.typ), fake)
		var p dnsmessage.Parser
		h, err := p.Start(reply)
		if err != nil {
			t.Fatal(err)
		}
		p.SkipAllQuestions()
		as, _ := p.AllAnswers()
		if h.ID != 7 || !h.Response || h.RCode != tc.rcode || len(as) != tc.answers {
			t.Errorf("%s %v: rcode %v, %d answers", tc.name, tc.typ, h.RCode, len(as))
		}
		if len(as) == 1 {
			a := as[0].Body.(*dnsmessage.AResource).A
			if netip.AddrFrom4(a).String() != "127.1.0.1" || as[0].Header.TTL != fakeTTL {
				t.Errorf("answer %v ttl %d", a, as[0].Header.TTL)
			}
		}
	}
	if r, _, _, _ := dnsAnswer([]byte{1, 2, 3}, fake); r != nil {
		t.Error("answered a truncated message")
	}
}

func FuzzClientHelloSNI(f *testing.F) {
	f.Add(clientHello(f, "a.test"))
	f.Add([]byte("\x16\x03\x01\x00\x10"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sni, complete, err := ClientHelloSNI(data)
		if sni != "" && (err != nil || !complete) {
			t.Fatalf("sni %q with complete=%v err=%v", sni, complete, err)
		}
	})
}

func FuzzDNSAnswer(f *testing.F) {
	f.Add(query(f, "a.test.", dnsmessage.TypeA))
	f.Add(query(f, "b.test.", dnsmessage.TypeAAAA))
	f.Fuzz(func(t *testing.T, data []byte) {
		reply, name, _, allowed := dnsAnswer(data, func(n string) (netip.Addr, bool) {
			return netip.MustParseAddr("127.1.0.1"), n == "a.test"
		})
		if allowed && name != "a.test" {
			t.Fatalf("allowed %q", name)
		}
		if reply != nil {
			var p dnsmessage.Parser
			if _, err := p.Start(reply); err != nil {
				t.Fatalf("unparsable reply: %v", err)
			}
		}
		// The answer over a session's DNS rate parses the same input.
		if reply, _ := dnsRefused(data); reply != nil {
			var p dnsmessage.Parser
			if h, err := p.Start(reply); err != nil || h.RCode != dnsmessage.RCodeRefused || !h.Response {
				t.Fatalf("REFUSED reply %v, %v", h, err)
			}
		}
	})
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"a.test", "*.a.test:443", "bücher.example", "0x7f.1", "[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %q does not parse back: %v", s, r, err)
		}
		if !r.Wildcard && !(Policy{Rules: []Rule{r}}).AllowsName(r.Name) {
			t.Fatalf("rule %q does not match its own name", r)
		}
	})
}

// TestGateLogBounded: a sandbox looping over denied lookups gets a bounded
// number of log lines, not one per lookup (red team: 140 MB of host log
// in 5 seconds); every decision still counts, and the lines not written
// are reported.
func TestGateLogBounded(t *testing.T) {
	var buf bytes.Buffer
	g := &Gate{session: "s1", log: slog.New(slog.NewTextHandler(&buf, nil)),
		fakes: map[string]netip.Addr{}, names: map[netip.Addr]string{}, conns: map[net.Conn]struct{}{}}
	g.policy, _ = ParsePolicy([]string{"a.test"})
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("evil.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	const n = 20000
	for i := 0; i < n; i++ {
		if g.dnsQuery(q) == nil {
			t.Fatal("no answer")
		}
	}
	g.Close()
	lines := strings.Count(buf.String(), "msg=egress ")
	if lines > logBurst+logRate {
		t.Errorf("%d denied lookups wrote %d decision lines, want at most %d", n, lines, logBurst+logRate)
	}
	if lines < logBurst {
		t.Errorf("only %d decision lines, want the burst (%d)", lines, logBurst)
	}
	if !strings.Contains(buf.String(), "egress decisions not logged") {
		t.Error("the unlogged decisions are not reported")
	}
	if got := g.Stats().Denied; got != n {
		t.Errorf("denied = %d, want %d", got, n)
	}
}

// A forward-proxy request keeps its body's framing upstream: a chunked
// body stays chunked (net/http moves Transfer-Encoding out of the header
// map), so its bytes are never read upstream as another request.
func TestProxyHeadKeepsFraming(t *testing.T) {
	for _, tc := range []struct{ raw, want, not string }{
		{"POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n", ""},
		{"POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello", "Content-Length: 5\r\n", "Transfer-Encoding"},
		{"GET http://a.test/x HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: x\r\n\r\n", "Host: a.test\r\n", "evil.test"},
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
		if err != nil {
			t.Fatal(err)
		}
		head := string(proxyHead(req))
		if !strings.Contains(head, tc.want) || (tc.not != "" && strings.Contains(head, tc.not)) || strings.Contains(head, "Proxy-Authorization") || !strings.HasSuffix(head, "Connection: close\r\n\r\n") {
			t.Errorf("proxyHead(%q) = %q", tc.raw, head)
		}
	}
}

// The proxy reads at most maxPeek bytes of a request head: a client
// streaming one endless header line is refused with 400, not buffered
// (red team: 300 MB of header grew the server by 1.3 GB).
func TestProxyHeadBounded(t *testing.T) {
	g := &Gate{session: "s1", log: slog.New(slog.DiscardHandler),
		fakes: map[string]netip.Addr{}, names: map[netip.Addr]string{}, conns: map[net.Conn]struct{}{}}
	g.policy, _ = ParsePolicy([]string{"a.test"})
	client, server := net.Pipe()
	var sent int
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		io.WriteString(client, "GET http://a.test/ HTTP/1.1\r\nX-A: ")
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for sent < 64<<20 {
			n, err := client.Write(chunk)
			sent += n
			if err != nil {
				return
			}
		}
	}()
	resp := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(client)
		resp <- string(b)
	}()
	done := make(chan struct{})
	go func() { g.handleProxy(server); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy is still reading the head")
	}
	client.Close()
	<-wrote
	if sent > maxPeek+(64<<10) {
		t.Errorf("the proxy read %d bytes of head, want at most about %d", sent, maxPeek)
	}
	if r := <-resp; !strings.HasPrefix(r, "HTTP/1.1 400") || !strings.Contains(r, "larger than") {
		t.Errorf("response %q, want a 400 saying the head is too large", r)
	}
}

// What a reason repeats of the sandbox's own bytes is bounded: a 16 KiB
// Host makes a reason of a few hundred bytes, not 16 KiB.
func TestReasonEchoBounded(t *testing.T) {
	g := &Gate{session: "s1", log: slog.New(slog.DiscardHandler)}
	client, server := net.Pipe()
	go func() {
		io.WriteString(client, "GET / HTTP/1.1\r\nHost: "+strings.Repeat("h", 15000)+"\r\n\r\n")
	}()
	_, _, err := g.peek(server, "a.test")
	client.Close()
	if err == nil || !strings.Contains(err.Error(), "does not match") || len(err.Error()) > 2*maxEcho+100 {
		t.Errorf("peek = %d bytes of reason: %.120q", len(fmt.Sprint(err)), fmt.Sprint(err))
	}
}
