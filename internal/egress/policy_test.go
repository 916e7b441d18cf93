package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rule
		err  string
	}{
		{in: "pypi.org", want: Rule{Name: "pypi.org"}},
		{in: "PyPI.Org.", want: Rule{Name: "pypi.org"}},
		{in: "api.example.com:8443", want: Rule{Name: "api.example.com", Port: 8443}},
		{in: "*.githubusercontent.com", want: Rule{Name: "githubusercontent.com", Wildcard: true}},
		{in: "*.a.test:81", want: Rule{Name: "a.test", Wildcard: true, Port: 81}},
		{in: "bücher.example", want: Rule{Name: "xn--bcher-kva.example"}},
		{in: "xn--bcher-kva.example", want: Rule{Name: "xn--bcher-kva.example"}},
		{in: "", err: "empty"},
		{in: "*.com", err: "two labels"},
		{in: "a.test:0", err: "port"},
		{in: "a.test:65536", err: "port"},
		{in: "a.test:http", err: "port"},
		{in: "127.0.0.1", err: "not IP"},
		{in: "2130706433", err: "not IP"},
		{in: "0x7f.1", err: "not IP"},
		{in: "[::1]:80", err: ""},
		{in: "a_b.test", err: "valid"},
		{in: "a..test", err: ""},
		{in: "-a.test", err: "valid"},
		{in: "a.test/x", err: "valid"},
		{in: "a.*.test", err: "valid"},
		{in: strings.Repeat("a", 64) + ".test", err: "valid"},
		{in: "git.a.test:22/opaque", want: Rule{Name: "git.a.test", Port: 22, Opaque: true}},
		{in: "*.a.test:25/opaque", want: Rule{Name: "a.test", Wildcard: true, Port: 25, Opaque: true}},
		{in: "a.test/opaque", err: "needs a port"},
		{in: "a.test:443/opaque", err: "other than 80 and 443"},
		{in: "a.test:80/opaque", err: "other than 80 and 443"},
		{in: "a.test:22/OPAQUE", err: "port"},
		{in: "a.test:22/opaque/opaque", err: "port"},
		{in: "a.test:22/raw", err: "port"},
	} {
		got, err := ParseRule(tc.in)
		if tc.want == (Rule{}) {
			if err == nil {
				t.Errorf("ParseRule(%q) = %+v, want an error", tc.in, got)
			} else if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRule(%q) error %q, want it to mention %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	p, err := ParsePolicy([]string{"*.a.test", "b.test", "c.test:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port uint16
		want bool
	}{
		{"x.a.test", 443, true},
		{"y.x.a.test", 80, true},
		{"a.test", 443, false},
		{"xa.test", 443, false},
		{"evila.test", 443, false},
		{"x.a.test", 8080, false},
		{"b.test", 80, true},
		{"b.test", 443, true},
		{"b.test", 22, false},
		{"x.b.test", 443, false},
		{"c.test", 8443, true},
		{"c.test", 443, false},
		{"d.test", 443, false},
		{"test", 443, false},
	} {
		if got := p.Allows(tc.name, tc.port); got != tc.want {
			t.Errorf("Allows(%s, %d) = %v, want %v", tc.name, tc.port, got, tc.want)
		}
	}
	if got := p.Ports(); len(got) != 3 || got[0] != 80 || got[1] != 443 || got[2] != 8443 {
		t.Errorf("Ports() = %v", got)
	}
}

// Only an opaque rule makes a port opaque, for its own port; the
// operator's allow_only must say opaque too for a client's opaque entry.
func TestOpaque(t *testing.T) {
	p, err := ParsePolicy([]string{"git.a.test:22/opaque", "git.a.test:2222", "*.m.test:25/opaque"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		port        uint16
		allow, opaq bool
	}{
		{"git.a.test", 22, true, true},
		{"git.a.test", 2222, true, false},
		{"git.a.test", 443, false, false},
		{"x.m.test", 25, true, true},
		{"m.test", 25, false, false},
	} {
		if a, o := p.Allows(tc.name, tc.port), p.Opaque(tc.name, tc.port); a != tc.allow || o != tc.opaq {
			t.Errorf("%s:%d allowed %v opaque %v, want %v %v", tc.name, tc.port, a, o, tc.allow, tc.opaq)
		}
	}
	if got := strings.Join(p.Entries(), " "); got != "git.a.test:22/opaque git.a.test:2222 *.m.test:25/opaque" {
		t.Errorf("entries %q", got)
	}
	only, _ := ParsePolicy([]string{"*.a.test:22", "*.b.test:22/opaque"})
	for _, tc := range []struct {
		entry string
		ok    bool
	}{
		{"git.a.test:22", true},
		{"git.a.test:22/opaque", false},
		{"git.b.test:22/opaque", true},
		{"git.b.test:22", true},
	} {
		q, _ := ParsePolicy([]string{tc.entry})
		if err := q.Limit(8, only); (err == nil) != tc.ok {
			t.Errorf("Limit(%s) = %v, want ok %v", tc.entry, err, tc.ok)
		}
	}
}

func TestLimit(t *testing.T) {
	only, _ := ParsePolicy([]string{"*.corp.test", "pypi.org", "files.pythonhosted.org:443"})
	for _, tc := range []struct {
		entries []string
		ok      bool
	}{
		{[]string{"pypi.org"}, true},
		{[]string{"pypi.org:443"}, true},
		{[]string{"pypi.org:8443"}, false},
		{[]string{"files.pythonhosted.org"}, false}, // 80 is not inside
		{[]string{"files.pythonhosted.org:443"}, true},
		{[]string{"x.corp.test"}, true},
		{[]string{"*.x.corp.test"}, true},
		{[]string{"*.corp.test"}, true},
		{[]string{"corp.test"}, false},
		{[]string{"evil.test"}, false},
		{[]string{"pypi.org", "evil.test"}, false},
	} {
		p, err := ParsePolicy(tc.entries)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Limit(10, only); (err == nil) != tc.ok {
			t.Errorf("Limit(%v) = %v, want ok=%v", tc.entries, err, tc.ok)
		}
	}
	p, _ := ParsePolicy([]string{"a.test", "b.test", "c.test"})
	if err := p.Limit(2, Policy{}); err == nil || !strings.Contains(err.Error(), "max_allow") {
		t.Errorf("Limit over max = %v", err)
	}
}

func TestGuard(t *testing.T) {
	internal, _ := ParsePolicy([]string{"mirror.lan"})
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("198.18.5.0/24")}, internal)
	for _, tc := range []struct {
		addr, name string
		ok         bool
	}{
		{"127.0.0.1", "", false},
		{"127.0.0.2", "", false},
		{"127.1.0.1", "", false},
		{"10.1.2.3", "", false},
		{"172.16.0.1", "", false},
		{"172.31.255.255", "", false},
		{"192.168.1.1", "", false},
		{"100.64.0.1", "", false},
		{"169.254.169.254", "", false},
		{"169.254.1.1", "", false},
		{"0.0.0.0", "", false},
		{"224.0.0.1", "", false},
		{"240.0.0.1", "", false},
		{"255.255.255.255", "", false},
		{"198.18.0.1", "", false},
		{"192.0.0.170", "", false},
		{"::", "", false},
		{"::1", "", false},
		{"fd00:ec2::254", "", false},
		{"fe80::1", "", false},
		{"ff02::1", "", false},
		{"::ffff:169.254.169.254", "", false},
		{"::ffff:127.0.0.1", "", false},
		{"::169.254.169.254", "", false}, // IPv4-compatible
		{"64:ff9b::a9fe:a9fe", "", false},
		{"64:ff9b::7f00:1", "", false},
		{"2002:a9fe:a9fe::1", "", false},
		{"2002:0a00:0001::1", "", false},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "", false}, // Teredo
		{"2001:db8::1", "", false},
		{"100::1", "", false},
		{"93.184.215.14", "", true},
		{"8.8.8.8", "", true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", "", true},
		{"64:ff9b::5db8:d70e", "", true}, // NAT64 of a public address
		{"2002:5db8:d70e::1", "", true},
		// Operator CIDRs open to the operator's internal names only
		// (red team: to every allowed name, whose DNS a client controls).
		{"10.9.3.4", "mirror.lan", true},
		{"198.18.5.1", "mirror.lan", true},
		{"10.9.3.4", "", false},
		{"10.9.3.4", "files.example.com", false},
		{"198.18.5.1", "files.example.com", false},
		{"198.18.6.1", "mirror.lan", false},
		{"10.1.2.3", "mirror.lan", true}, // operator internal name, private range
		{"fd00:ec2::254", "mirror.lan", false},
		{"127.0.0.1", "mirror.lan", false},
		{"169.254.169.254", "mirror.lan", false},
		{"10.1.2.3", "x.mirror.lan", false},
	} {
		err := g.Check(tc.name, netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q, %s) = %v, want ok=%v", tc.name, tc.addr, err, tc.ok)
		}
	}
}

// TestGuardOpenCIDRKeepsHostClosed: an operator CIDR wide enough to hold
// the host's own address, loopback or the metadata address opens none of
// them (red team: internal_cidrs ["10.0.0.0/8"] on a host at 10.0.0.5
// exposed the host's API and every other service on it).
func TestGuardOpenCIDRKeepsHostClosed(t *testing.T) {
	internal, _ := ParsePolicy([]string{"mirror.lan"})
	g := NewGuard(nil, internal)
	var host netip.Addr
	for _, h := range g.hostAddrs() {
		if !h.IsLoopback() && !h.IsLinkLocalUnicast() {
			host = h
			break
		}
	}
	if !host.IsValid() {
		t.Skip("the host has no address but loopback and link-local")
	}
	g.Open = []netip.Prefix{netip.PrefixFrom(host, host.BitLen()-8).Masked(), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for _, a := range []string{host.String(), "127.0.0.1", "169.254.169.254", "fd00:ec2::254", "fe80::1", "::1", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "0.0.0.0", "224.0.0.1"} {
		if err := g.Check("mirror.lan", netip.MustParseAddr(a)); err == nil {
			t.Errorf("an open CIDR opens %s", a)
		}
	}
	if err := g.Check("mirror.lan", netip.MustParseAddr("10.1.2.3")); err != nil && host != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("an open CIDR does not open 10.1.2.3: %v", err)
	}
}

// TestGuardDefaultRefusesLoopback: the test hook is the only way to dial
// 127/8, and a fresh guard has it off.
func TestGuardDefaultRefusesLoopback(t *testing.T) {
	g := NewGuard(nil, Policy{})
	for _, a := range []string{"127.0.0.1", "127.0.0.2", "127.255.255.254", "::1"} {
		if err := g.Check("a.test", netip.MustParseAddr(a)); err == nil {
			t.Errorf("default guard allows %s", a)
		}
	}
	g.SetTestHooks(netip.MustParsePrefix("127.0.0.2/32"))
	if err := g.Check("a.test", netip.MustParseAddr("127.0.0.2")); err != nil {
		t.Errorf("hooked guard refuses 127.0.0.2: %v", err)
	}
	if err := g.Check("a.test", netip.MustParseAddr("127.0.0.3")); err == nil {
		t.Error("hooked guard allows 127.0.0.3")
	}
	defer func() {
		if recover() == nil {
			t.Error("SetTestHooks opened a non-loopback prefix")
		}
	}()
	g.SetTestHooks(netip.MustParsePrefix("10.0.0.0/8"))
}

type fixedResolver []netip.Addr

func (f fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return f, nil
}

// The reason a sandbox's client sees for a name that resolves only to
// forbidden addresses does not name them (red team: an allowed
// "*.corp.example" made airlock an oracle for the operator's internal DNS
// and the host's own addresses); the server's log has them.
func TestDialForbiddenHidesAddresses(t *testing.T) {
	d := &Dialer{Guard: NewGuard(nil, Policy{}), Resolver: fixedResolver{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("169.254.169.254")}, Timeout: time.Second}
	_, _, err := d.Dial(context.Background(), "db.corp.example", 443)
	var fe *ForbiddenError
	if err == nil || !errors.As(err, &fe) {
		t.Fatalf("Dial = %v, want a ForbiddenError", err)
	}
	if msg := err.Error(); strings.Contains(msg, "10.1.2.3") || strings.Contains(msg, "169.254") || !strings.Contains(msg, "forbidden address") {
		t.Errorf("the client's reason %q names the addresses or not the refusal", msg)
	}
	if !strings.Contains(fe.Detail, "10.1.2.3") {
		t.Errorf("the log's detail %q does not name the address", fe.Detail)
	}
}
