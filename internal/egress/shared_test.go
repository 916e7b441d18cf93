package egress

import (
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestOpenConnectionsCap(t *testing.T) {
	for _, tc := range []struct {
		configured int
		nofile     uint64
		want       int
		err        bool
	}{
		{0, 1024, 256, false},
		{0, 20000, 5000, false},
		{0, 1 << 30, 1 << 20, false},
		{0, 2, 1, false},
		{192, 1024, 192, false}, // 512 kept, 128 for the bulk pipes
		{193, 1024, 0, true},
		{9680, 20000, 9680, false},
		{9681, 20000, 0, true},
		{1, 100, 0, true}, // nothing left for egress under the reserve
	} {
		got, err := OpenConnectionsCap(tc.configured, tc.nofile)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("OpenConnectionsCap(%d, %d) = %d, %v; want %d, error %v", tc.configured, tc.nofile, got, err, tc.want, tc.err)
		}
	}
}

// Concurrent takers never hold more than the cap, and every refusal is
// counted.
func TestSharedCap(t *testing.T) {
	s := NewShared(3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held, peak, got := 0, 0, 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if !s.acquire() {
					continue
				}
				mu.Lock()
				held++
				got++
				peak = max(peak, held)
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				s.release()
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	if peak > 3 || st.Open != 0 || int64(got)+st.CapRefused != 6400 {
		t.Errorf("peak %d, stats %+v, %d taken", peak, st, got)
	}
	var none *Shared // no cap: always room, nothing counted
	if !none.acquire() || none.Stats() != (SharedStats{}) {
		t.Error("a nil Shared refused or counted")
	}
	none.release()
	none.dnsRefusal()
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b bucket
	takes := func(now time.Time, n int) (ok int) {
		for range n {
			if b.take(now, 10, 5) {
				ok++
			}
		}
		return ok
	}
	for _, step := range []struct {
		at   time.Duration
		n    int
		want int
	}{
		{0, 8, 5},                       // the burst
		{50 * time.Millisecond, 3, 0},   // half a token
		{100 * time.Millisecond, 3, 1},  // one token a tenth of a second
		{time.Hour, 20, 5},              // refills to the burst, no more
		{time.Hour - time.Second, 1, 0}, // the clock going back gives nothing
		{time.Hour + 300*time.Millisecond, 5, 3},
	} {
		if got := takes(t0.Add(step.at), step.n); got != step.want {
			t.Errorf("at %v: %d of %d taken, want %d", step.at, got, step.n, step.want)
		}
	}
}

// BenchmarkDNSQuery is one query through the responder's logic (no
// sockets), without and with a DNS rate too high to refuse: the
// limiter's own cost. refused is a query over the rate.
func BenchmarkDNSQuery(b *testing.B) {
	for _, tc := range []struct {
		name string
		lim  Limits
	}{{"off", Limits{}}, {"limit", Limits{DNSRate: 1 << 30, DNSBurst: 1 << 30}}, {"refused", Limits{DNSRate: 1, DNSBurst: 1}}} {
		b.Run(tc.name, func(b *testing.B) {
			g := &Gate{session: "s1", log: slog.New(slog.DiscardHandler), limits: tc.lim,
				fakes: map[string]netip.Addr{}, names: map[netip.Addr]string{}}
			g.policy, _ = ParsePolicy([]string{"a.test"})
			q := query(b, "a.test.", dnsmessage.TypeA)
			g.dnsQuery(q)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if g.dnsQuery(q) == nil {
					b.Fatal("no reply")
				}
			}
		})
	}
}
