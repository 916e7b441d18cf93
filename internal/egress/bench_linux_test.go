package egress

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

var benchLimits = Limits{Shared: NewShared(1 << 20), DNSRate: 1 << 20, DNSBurst: 1 << 20}

// BenchmarkConnect compares one HTTP/1.1 request on a new TCP connection
// through the gate with the same request sent directly to the upstream.
// Both dial from a fresh locked thread in a namespace (the host's own for
// direct), so the helper's cost is the same on both sides; gate+dns also
// asks airlock's DNS first, as a client without a cached answer does.
// The gate runs with a server's limits: the server-wide connection cap
// and a DNS rate, both too high to refuse anything here, so that their
// cost is measured.
func BenchmarkConnect(b *testing.B) {
	for _, via := range []string{"direct", "gate", "gate+dns"} {
		b.Run(via, func(b *testing.B) {
			f := newFixture(b, []string{"a.test:PORT"}, benchLimits)
			self, err := os.Open("/proc/self/ns/net")
			if err != nil {
				b.Fatal(err)
			}
			defer self.Close()
			host := &netns{pidfd: int(self.Fd())}
			_, fake, err := f.ns.lookup("a.test")
			if err != nil {
				b.Fatal(err)
			}
			req := []byte("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var c net.Conn
				switch via {
				case "direct":
					c, err = host.dial(fmt.Sprintf("127.0.0.2:%d", f.port))
				case "gate":
					c, err = f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
				default:
					_, a, lerr := f.ns.lookup("a.test")
					if lerr != nil {
						b.Fatal(lerr)
					}
					c, err = f.ns.dial(fmt.Sprintf("%s:%d", a, f.port))
				}
				if err != nil {
					b.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Write(req)
				if _, err := io.ReadAll(c); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// BenchmarkDownload compares a 2 MiB download through the gate with the
// same download direct: the splice's throughput.
func BenchmarkDownload(b *testing.B) {
	for _, via := range []string{"direct", "gate"} {
		b.Run(via, func(b *testing.B) {
			f := newFixture(b, []string{"a.test:PORT"}, benchLimits)
			self, err := os.Open("/proc/self/ns/net")
			if err != nil {
				b.Fatal(err)
			}
			defer self.Close()
			host := &netns{pidfd: int(self.Fd())}
			_, fake, err := f.ns.lookup("a.test")
			if err != nil {
				b.Fatal(err)
			}
			req := []byte("GET /big HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
			b.SetBytes(2 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var c net.Conn
				if via == "direct" {
					c, err = host.dial(fmt.Sprintf("127.0.0.2:%d", f.port))
				} else {
					c, err = f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
				}
				if err != nil {
					b.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.Write(req)
				n, err := io.Copy(io.Discard, c)
				if err != nil || n < 2<<20 {
					b.Fatal(n, err)
				}
				c.Close()
			}
		})
	}
}
