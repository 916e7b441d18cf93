package jail

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener accepts and counts connections until closed.
type countingListener struct {
	l        net.Listener
	accepted atomic.Int32
	done     sync.WaitGroup
}

func listen(t *testing.T, network, addr string) *countingListener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	c := &countingListener{l: l}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		c.done.Wait()
	})
	return c
}

// netProbe connects to every address it is given, sends a datagram to
// each UDP address and the abstract socket, then proves that loopback
// inside the sandbox works.
const netProbe = `
import json, socket, sys, threading
tcp, udp, abstract = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]

for host, port in tcp:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        print("CONNECTED", host, port)
    except OSError as e:
        print("refused", host, port, e.errno)
    finally:
        s.close()
for host, port in udp:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        s.sendto(b"airlock-probe", (host, port))
        print("sent", host, port)
    except OSError as e:
        print("refused udp", host, port, e.errno)
    finally:
        s.close()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + abstract)
    print("CONNECTED abstract", abstract)
except OSError as e:
    print("refused abstract", e.errno)
s.close()
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 80))
except OSError as e:
    print("refused dns", e)

def echo(fam, addr):
    srv = socket.socket(fam, socket.SOCK_STREAM)
    srv.bind((addr, 0))
    srv.listen(1)
    def serve():
        c, _ = srv.accept()
        c.sendall(c.recv(100).upper())
        c.close()
    th = threading.Thread(target=serve)
    th.start()
    cl = socket.create_connection((addr, srv.getsockname()[1]), timeout=3)
    cl.sendall(b"ping")
    got = cl.recv(100)
    cl.close()
    th.join()
    srv.close()
    return got
print("loopback4", echo(socket.AF_INET, "127.0.0.1"))
print("loopback6", echo(socket.AF_INET6, "::1"))
print("DONE")
`

func TestEscapeNetwork(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		lo := listen(t, "tcp4", "127.0.0.1:0")
		all := listen(t, "tcp", ":0") // every address of the host, v4 and v6
		loPort := lo.l.Addr().(*net.TCPAddr).Port
		allPort := all.l.Addr().(*net.TCPAddr).Port

		// The host's own addresses, loopback and not.
		targets := [][]any{{"127.0.0.1", loPort}, {"127.0.0.1", allPort}, {"::1", allPort}, {"127.0.1.1", allPort}}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		nonLoopback := 0
		for _, a := range addrs {
			ip, _, _ := net.ParseCIDR(a.String())
			if ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			targets = append(targets, []any{ip.String(), allPort})
			nonLoopback++
		}
		if nonLoopback == 0 {
			t.Log("the host has no non-loopback address; only loopback is tried")
		}

		udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { udp.Close() })
		udpPort := udp.LocalAddr().(*net.UDPAddr).Port
		abstract := "airlock-test-" + randomToken(t)
		ab := listen(t, "unix", "@"+abstract)

		res := p.pythonArgs(t, h, testLimits(), netProbe,
			jsonArg(t, targets), jsonArg(t, [][]any{{"127.0.0.1", udpPort}}), abstract)
		mustFinish(t, res)
		if c := linesWith(res.Stdout, "CONNECTED"); len(c) > 0 {
			t.Errorf("connected out of the sandbox:\n%s", strings.Join(c, "\n"))
		}
		if r := linesWith(res.Stdout, "RESOLVED"); len(r) > 0 {
			t.Errorf("name resolution worked: %v", r)
		}
		if got := len(linesWith(res.Stdout, "refused ")); got < len(targets)+1 {
			t.Errorf("%d refusals, want %d: %s", got, len(targets)+1, describe(res))
		}
		if !bytes.Contains(res.Stdout, []byte("loopback4 b'PING'")) || !bytes.Contains(res.Stdout, []byte("loopback6 b'PING'")) {
			t.Errorf("loopback inside the sandbox does not work: %s", describe(res))
		}

		// Nothing reached the host...
		udp.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, from, err := udp.ReadFrom(make([]byte, 100)); err == nil {
			t.Errorf("the host received %d bytes of UDP from %v", n, from)
		}
		for name, l := range map[string]*countingListener{"loopback": lo, "all addresses": all, "abstract": ab} {
			if n := l.accepted.Load(); n != 0 {
				t.Errorf("the %s listener accepted %d connections from the sandbox", name, n)
			}
		}
		// ...and the listeners did work: the host can reach them.
		for _, l := range []*countingListener{lo, all, ab} {
			c, err := net.Dial(l.l.Addr().Network(), l.l.Addr().String())
			if err != nil {
				t.Fatalf("the host cannot reach its own listener %v: %v", l.l.Addr(), err)
			}
			c.Close()
		}
		deadline := time.Now().Add(30 * time.Second) // the accept loops run when the host lets them
		for lo.accepted.Load()+all.accepted.Load()+ab.accepted.Load() != 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := lo.accepted.Load() + all.accepted.Load() + ab.accepted.Load(); n != 3 {
			t.Errorf("the listeners counted %d of the host's 3 connections", n)
		}
	})
}
