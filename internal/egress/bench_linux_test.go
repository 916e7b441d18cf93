package egress

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
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
			f, fake := benchFixture(b)
			req := []byte("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if via == "gate+dns" {
					_, a, err := f.ns.lookup("a.test")
					if err != nil {
						b.Fatal(err)
					}
					fake = a
				}
				c := benchDial(b, f, fake, via)
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

// BenchmarkDownload compares a download through the gate with the same
// download direct (2 MiB and 100 MB): the carrying's throughput, and the
// CPU the whole process (client, upstream and gate together) spends per
// download (cpu-ms/op), which a machine busy with other work measures
// more steadily than the throughput. The client reads in 256 KiB pieces
// on both sides.
func BenchmarkDownload(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"2MiB", 2 << 20}, {"100MB", 100e6}} {
		for _, via := range []string{"direct", "gate"} {
			b.Run(size.name+"/"+via, func(b *testing.B) {
				f, fake := benchFixture(b)
				req := []byte(fmt.Sprintf("GET /bytes?n=%d HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", size.n))
				buf := make([]byte, 256<<10)
				b.SetBytes(int64(size.n))
				cpu0 := processCPU()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					c := benchDial(b, f, fake, via)
					c.SetDeadline(time.Now().Add(60 * time.Second))
					c.Write(req)
					n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{c}, buf)
					if err != nil || n < int64(size.n) {
						b.Fatal(n, err)
					}
					c.Close()
				}
				b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchFixture is a gate allowing a.test, and a.test's fake address.
func benchFixture(b *testing.B) (*fixture, netip.Addr) {
	f := newFixture(b, []string{"a.test:PORT"}, benchLimits)
	_, fake, err := f.ns.lookup("a.test")
	if err != nil {
		b.Fatal(err)
	}
	return f, fake
}

// benchDial connects to the upstream: direct from a fresh locked thread
// that stays in the server's namespace (a sandbox's dial enters the
// sandbox's: the same helper, one setns apart), or through the gate at
// fake.
func benchDial(b *testing.B, f *fixture, fake netip.Addr, via string) net.Conn {
	var c net.Conn
	var err error
	if via == "direct" {
		err = onNetnsThread(func(int) error { return nil }, func() (err error) {
			c, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", f.port), 5*time.Second)
			return err
		})
	} else {
		c, err = f.ns.dial(fmt.Sprintf("%s:%d", fake, f.port))
	}
	if err != nil {
		b.Fatal(err)
	}
	return c
}
