// Package egress owns a sandbox's network egress by allowlist: the policy
// (which DNS names and ports a session may reach), the address guard (which
// addresses are never dialled, whatever the policy says), and the sockets
// airlock puts inside a sandbox's loopback-only network namespace — a
// fake-address DNS responder on 127.0.0.1:53, one listener per allowed port
// and local routes that make every IP-literal connect reach airlock — which
// it serves from the host: it ties each connection to the allowed name
// behind its fake address (and to the TLS SNI, or the Host of every HTTP
// request, it carries, unless its entry is opaque),
// resolves that name itself, dials only guarded addresses, and splices the
// bytes with counters, caps and one log line per decision. Its limits are
// per session (bytes, connections, timeouts, a DNS query rate) and per
// server (Shared: the egress connections open at once, all sessions).
//
// It must never give a sandbox a route out (no veth, TAP, NAT or firewall
// rules: every byte leaves through airlock's own host sockets), never send a
// name the policy denies to a real resolver, never dial an address chosen by
// the sandbox, and never exist for a sandbox without a policy. It must not
// depend on anything else in airlock but config-free standard types.
package egress

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// DefaultPorts are the ports an entry without a port allows.
var DefaultPorts = []uint16{80, 443}

// Rule is one allowlist entry: a DNS name (exact, or every name strictly
// below Suffix when Wildcard) and a port (0: DefaultPorts).
type Rule struct {
	Name     string // normalised; without "*." when Wildcard
	Wildcard bool
	Port     uint16
	// Opaque ("name:port/opaque") carries the port's bytes without
	// looking at them: no TLS SNI or HTTP Host is required, the fake
	// address alone ties the connection to the name. Protocols where the
	// server speaks first (SMTP) or that are neither TLS nor HTTP (SSH)
	// need it; every other connection must start with a ClientHello or a
	// request naming the name. Never on 80 or 443, and only with a port.
	Opaque bool
}

// opaqueSuffix marks an opaque entry.
const opaqueSuffix = "/opaque"

// String renders a rule the way it is written in a request.
func (r Rule) String() string {
	s := r.Name
	if r.Wildcard {
		s = "*." + s
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	if r.Opaque {
		s += opaqueSuffix
	}
	return s
}

// Ports are the ports the rule allows.
func (r Rule) Ports() []uint16 {
	if r.Port == 0 {
		return DefaultPorts
	}
	return []uint16{r.Port}
}

// MatchName reports whether name (normalised) falls under the rule.
func (r Rule) MatchName(name string) bool {
	if !r.Wildcard {
		return name == r.Name
	}
	return len(name) > len(r.Name)+1 && strings.HasSuffix(name, r.Name) && name[len(name)-len(r.Name)-1] == '.'
}

// Within reports whether every name and port the rule allows is also
// allowed by outer (the operator's allow_only list). An opaque rule is
// within an opaque outer rule only: opaque checks less.
func (r Rule) Within(outer Rule) bool {
	if r.Opaque && !outer.Opaque {
		return false
	}
	for _, p := range r.Ports() {
		if !slices.Contains(outer.Ports(), p) {
			return false
		}
	}
	if !outer.Wildcard {
		return !r.Wildcard && r.Name == outer.Name
	}
	if r.Wildcard {
		return r.Name == outer.Name || outer.MatchName(r.Name)
	}
	return outer.MatchName(r.Name)
}

// ParseRule parses "name", "name:port", "*.suffix" or "*.suffix:port",
// each port optionally followed by "/opaque".
func ParseRule(s string) (Rule, error) {
	var r Rule
	host := s
	if rest, ok := strings.CutSuffix(s, opaqueSuffix); ok {
		host, r.Opaque = rest, true
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		p, err := strconv.ParseUint(host[i+1:], 10, 16)
		if err != nil || p == 0 {
			return Rule{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
		}
		host, r.Port = host[:i], uint16(p)
		if r.Port == 53 {
			return Rule{}, fmt.Errorf("%q: port 53 is airlock's DNS inside the sandbox", s)
		}
	}
	if r.Opaque && (r.Port == 0 || r.Port == 80 || r.Port == 443) {
		return Rule{}, fmt.Errorf("%q: an opaque entry needs a port other than 80 and 443 (there, TLS SNI or HTTP Host is always checked)", s)
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, r.Wildcard = rest, true
	}
	name, err := NormalizeName(host)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %v", s, err)
	}
	if looksNumeric(name) {
		return Rule{}, fmt.Errorf("%q: entries are DNS names, not IP addresses", s)
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("%q: a wildcard must be below a domain with at least two labels", s)
	}
	r.Name = name
	return r, nil
}

var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true), idna.BidiRule())

// NormalizeName returns the lower-case ASCII (punycode) form of a DNS name
// without its trailing dot, or an error if it is not a valid host name.
func NormalizeName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", errors.New("empty name")
	}
	if len(s) > 253*4 {
		return "", errors.New("name too long")
	}
	if !utf8.ValidString(s) {
		return "", errors.New("not valid UTF-8")
	}
	a, err := profile.ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("not a valid DNS name: %v", err)
	}
	a = strings.ToLower(a)
	// A punycode label must decode to a valid name again: no U+FFFD or
	// other mapping artefacts.
	if again, err := profile.ToASCII(a); err != nil || again != a {
		return "", errors.New("not a valid DNS name")
	}
	if len(a) > 253 {
		return "", errors.New("name longer than 253 characters")
	}
	for _, l := range strings.Split(a, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q is not a valid DNS label", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("label %q is not a valid DNS label", l)
			}
		}
	}
	return a, nil
}

// looksNumeric reports whether the last label is all digits or hex with
// 0x: what inet_aton would take for an address (2130706433, 0x7f.1).
func looksNumeric(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.HasPrefix(last, "0x") {
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// Policy is an allowlist. The zero Policy allows nothing.
type Policy struct {
	Rules []Rule
}

// ParsePolicy parses a request's allow entries, dropping duplicates.
func ParsePolicy(entries []string) (Policy, error) {
	var p Policy
	var errs []error
	for _, e := range entries {
		r, err := ParseRule(strings.TrimSpace(e))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(p.Rules, r) {
			p.Rules = append(p.Rules, r)
		}
	}
	return p, errors.Join(errs...)
}

// Empty reports whether the policy allows nothing.
func (p Policy) Empty() bool { return len(p.Rules) == 0 }

// Entries renders the policy as request entries.
func (p Policy) Entries() []string {
	out := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		out[i] = r.String()
	}
	return out
}

// AllowsName reports whether some rule covers name on any port.
func (p Policy) AllowsName(name string) bool {
	for _, r := range p.Rules {
		if r.MatchName(name) {
			return true
		}
	}
	return false
}

// Allows reports whether name:port is allowed.
func (p Policy) Allows(name string, port uint16) bool {
	for _, r := range p.Rules {
		if r.MatchName(name) && slices.Contains(r.Ports(), port) {
			return true
		}
	}
	return false
}

// Opaque reports whether name:port is allowed by an opaque rule: its
// connections are carried without a TLS SNI or HTTP Host check.
func (p Policy) Opaque(name string, port uint16) bool {
	for _, r := range p.Rules {
		if r.Opaque && r.MatchName(name) && r.Port == port {
			return true
		}
	}
	return false
}

// Ports returns the sorted set of ports the policy allows.
func (p Policy) Ports() []uint16 {
	var out []uint16
	for _, r := range p.Rules {
		for _, port := range r.Ports() {
			if !slices.Contains(out, port) {
				out = append(out, port)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Limit checks a client policy against the operator's caps: at most max
// entries, each within one of only (when only is not empty).
func (p Policy) Limit(max int, only Policy) error {
	if len(p.Rules) > max {
		return fmt.Errorf("network.allow has %d entries, more than the server's network.max_allow (%d)", len(p.Rules), max)
	}
	if only.Empty() {
		return nil
	}
	for _, r := range p.Rules {
		ok := false
		for _, o := range only.Rules {
			if r.Within(o) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("network.allow entry %q is outside the server's network.allow_only list", r)
		}
	}
	return nil
}
