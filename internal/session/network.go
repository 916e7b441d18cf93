package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"airlock/internal/apitype"
	"airlock/internal/broker"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
)

// Egress is the server's egress setup, shared by every session with a
// network policy: the guarded dialer and the operator's caps.
type Egress struct {
	Dialer    *egress.Dialer
	Limits    egress.Limits
	MaxAllow  int
	AllowOnly egress.Policy
	Enabled   bool
	Proxy     bool
}

// NewEgress builds the egress setup from the network section.
func NewEgress(n config.Network) (*Egress, error) {
	only, err := egress.ParsePolicy(n.AllowOnly)
	if err != nil {
		return nil, fmt.Errorf("%w: network.allow_only: %v", errdefs.ErrInvalidArgument, err)
	}
	internal, err := egress.ParsePolicy(n.InternalNames)
	if err != nil {
		return nil, fmt.Errorf("%w: network.internal_names: %v", errdefs.ErrInvalidArgument, err)
	}
	var open []netip.Prefix
	for _, c := range n.InternalCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%w: network.internal_cidrs: %v", errdefs.ErrInvalidArgument, err)
		}
		open = append(open, p.Masked())
	}
	lim := egress.Limits{Bytes: int64(n.Bytes), MaxConnections: n.MaxConnections, Connections: int64(n.ConnectionBudget),
		ConnectTimeout: n.ConnectTimeout.D(), IdleTimeout: n.IdleTimeout.D(), DNSRate: n.DNSQueriesPerSecond, DNSBurst: n.DNSBurst,
		WildcardNames: n.MaxWildcardNames}
	return &Egress{
		Dialer: &egress.Dialer{Guard: egress.NewGuard(open, internal), Resolver: net.DefaultResolver, Timeout: lim.ConnectTimeout},
		Limits: lim, MaxAllow: n.MaxAllow, AllowOnly: only, Enabled: n.Enabled, Proxy: n.Proxy,
	}, nil
}

// SetEgress gives the manager its egress setup; call it before serving.
// Without one, requests asking for a network policy are refused.
func (m *Manager) SetEgress(e *Egress) { m.egress = e }

// Egress returns the manager's egress setup (nil: none).
func (m *Manager) Egress() *Egress { return m.egress }

// NetworkPolicy parses a request's network policy against the server's
// caps. A nil or empty policy is no network at all.
func (m *Manager) NetworkPolicy(np *apitype.NetworkPolicy) (egress.Policy, error) {
	if np == nil || len(np.Allow) == 0 {
		return egress.Policy{}, nil
	}
	e := m.egress
	if e == nil || !e.Enabled {
		return egress.Policy{}, fmt.Errorf("%w: network egress is disabled on this server (network.enabled)", errdefs.ErrPermission)
	}
	if len(np.Allow) > e.MaxAllow {
		return egress.Policy{}, fmt.Errorf("%w: network.allow has %d entries, more than the server's network.max_allow (%d)", errdefs.ErrInvalidArgument, len(np.Allow), e.MaxAllow)
	}
	p, err := egress.ParsePolicy(np.Allow)
	if err != nil {
		return egress.Policy{}, fmt.Errorf("%w: network.allow: %s", errdefs.ErrInvalidArgument, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if err := p.Limit(e.MaxAllow, e.AllowOnly); err != nil {
		return egress.Policy{}, fmt.Errorf("%w: %v", errdefs.ErrPermission, err)
	}
	if e.Proxy && slices.Contains(p.Ports(), 3128) {
		return egress.Policy{}, fmt.Errorf("%w: network.allow: port 3128 is airlock's proxy inside the sandbox", errdefs.ErrInvalidArgument)
	}
	if m.broker != nil && slices.Contains(p.Ports(), broker.Port) {
		return egress.Policy{}, fmt.Errorf("%w: network.allow: port %d is airlock's tool endpoint inside the sandbox", errdefs.ErrInvalidArgument, broker.Port)
	}
	return p, nil
}

// attachEgress puts the session's egress sockets into its sandbox, or
// gives the gate already there policy p; it returns the policy p
// replaced. Changes are serialised here: two at once would both find no
// gate and attach two.
func (s *Session) attachEgress(p egress.Policy) (egress.Policy, error) {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	if end := s.End(); !end.Zero() {
		// Teardown may have closed the sandbox and its handle.
		return egress.Policy{}, gone(end)
	}
	if g := s.egressGate(); g != nil {
		prev := g.Policy()
		if err := g.SetPolicy(p); err != nil {
			return egress.Policy{}, gateErr("could not change the session's network egress", err)
		}
		return prev, nil
	}
	if p.Empty() {
		return egress.Policy{}, nil
	}
	ns, ok := s.inst.NetNS()
	if !ok {
		// Only gVisor sandboxes started without a network: runsc fixes a
		// sandbox's network when it boots.
		return egress.Policy{}, fmt.Errorf("%w: this %s session was created without a network, and its sandbox cannot get one now; create the session with \"network\" (an empty allow list is enough) to set its policy later", errdefs.ErrConflict, s.inst.Isolation())
	}
	g, err := egress.Attach(ns, egress.Options{
		Session: s.id, Policy: p, Limits: s.m.egress.Limits, Dialer: s.m.egress.Dialer, Log: s.m.log, Proxy: s.m.egress.Proxy,
		Secrets: s.secrets,
	})
	if err != nil {
		return egress.Policy{}, gateErr("could not set up the session's network egress", err)
	}
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	return egress.Policy{}, nil
}

// gateErr says why a gate could not take a policy: a port the session's
// own code listens on is the client's to free (409, the policy is
// unchanged), anything else is the server's.
func gateErr(public string, err error) error {
	var held *egress.PortInUseError
	if errors.As(err, &held) {
		return fmt.Errorf("%w: port %d is in use inside the sandbox (a program of the session listens on it), so airlock cannot listen there for the allowlist; the network policy is unchanged: stop that program, then set the policy again", errdefs.ErrConflict, held.Port)
	}
	return errdefs.Private(errdefs.ErrUnavailable, public, err)
}

func (s *Session) egressGate() *egress.Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate
}

// closeEgress closes the session's egress sockets and connections.
func (s *Session) closeEgress() {
	if g := s.egressGate(); g != nil {
		g.Close()
	}
}

// Network returns the session's egress policy and counters (nil: the
// session has no network).
func (s *Session) Network() *apitype.NetworkState {
	g := s.egressGate()
	if g == nil {
		return nil
	}
	st := g.Stats()
	return &apitype.NetworkState{Allow: g.Policy().Entries(), BytesUsed: st.BytesUsed, BytesBudget: st.BytesBudget,
		OpenConnections: st.Open, Connections: st.Connections, Denied: st.Denied,
		ConnectionsAllowed: st.Allowed, ConnectionBudget: st.ConnectionBudget}
}

// SetNetwork replaces the session's egress policy: new lookups and
// connections follow it, open connections are left alone. A session
// created without a network gets one now; an empty list closes it to
// new connections (the sockets stay until the session ends).
// Every attempt, refused or not, is reported to the observers with who
// made it and the policy it replaced.
func (s *Session) SetNetwork(ctx context.Context, np *apitype.NetworkPolicy) (_ *apitype.NetworkState, err error) {
	var prev egress.Policy
	defer func() {
		if err != nil {
			prev = s.currentPolicy()
		}
		s.networkChanged(ctx, np, prev.Entries(), err)
	}()
	if err := s.m.admit.AdmitNetwork(ctx, np); err != nil {
		return nil, err
	}
	if !s.End().Zero() {
		return nil, gone(s.End())
	}
	// The image keeps the policy as the pause began: a change now
	// would be lost on resume.
	if err := s.notPausing(); err != nil {
		return nil, err
	}
	p, err := s.m.NetworkPolicy(np)
	if err != nil {
		return nil, err
	}
	if prev, err = s.attachEgress(p); err != nil {
		return nil, err
	}
	if !s.End().Zero() { // ended meanwhile: teardown may have missed the gate
		s.closeEgress()
		return nil, gone(s.End())
	}
	s.proxyLater(p)
	s.Touch()
	return s.Network(), nil
}

// currentPolicy is the session's policy (empty: none).
func (s *Session) currentPolicy() egress.Policy {
	if g := s.egressGate(); g != nil {
		return g.Policy()
	}
	return egress.Policy{}
}

// maxAuditEntries and maxAuditEntry bound what the audit keeps of a
// refused request's entries (an accepted one is within network.max_allow
// and normalised).
const (
	maxAuditEntries = 64
	maxAuditEntry   = 255
)

func (s *Session) networkChanged(ctx context.Context, np *apitype.NetworkPolicy, prev []string, err error) {
	if s.m.obs == nil {
		return
	}
	var allow []string
	if np != nil {
		if p, perr := egress.ParsePolicy(np.Allow); perr == nil && len(p.Rules) <= maxAuditEntries {
			allow = p.Entries()
		} else {
			for _, e := range np.Allow[:min(len(np.Allow), maxAuditEntries)] {
				if len(e) > maxAuditEntry {
					e = e[:maxAuditEntry] + "..."
				}
				allow = append(allow, e)
			}
		}
	}
	if allow == nil {
		allow = []string{}
	}
	s.m.obs.NetworkChanged(NetworkEvent{Caller: callerOf(ctx), Session: s.id, Allow: allow, Previous: prev, Err: err})
}

// proxyEnv adds the proxy variables to a runtime's environment when the
// server runs the egress proxy and the session has a policy.
func (m *Manager) proxyEnv(env map[string]string, p egress.Policy) map[string]string {
	if p.Empty() || m.egress == nil || !m.egress.Proxy {
		return env
	}
	u := "http://" + egress.ProxyAddr
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if _, set := env[k]; !set {
			env[k] = u
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if _, set := env[k]; !set {
			env[k] = "localhost,127.0.0.1,::1"
		}
	}
	return env
}

// proxyLater gives a session that got its network after it started the
// proxy settings it would have started with (HTTP(S)_PROXY, NO_PROXY,
// when the server runs the proxy): commands started from now on get
// them, and every context's runtime before its next execution, so that
// the code's libraries and the processes it starts use the proxy. A
// variable the client set, or the code has set since, is kept.
func (s *Session) proxyLater(p egress.Policy) {
	add := s.m.proxyEnv(map[string]string{}, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.ctxs {
		var env, pending map[string]string
		for k, v := range add {
			if _, set := c.env[k]; set {
				continue
			}
			if env == nil {
				env, pending = maps.Clone(c.env), maps.Clone(c.envPending)
				if pending == nil {
					pending = map[string]string{}
				}
			}
			env[k], pending[k] = v, v
		}
		if env != nil {
			c.env, c.envPending = env, pending
		}
	}
}

// runtimeEnv is the environment commands start from: the default
// context's.
func (s *Session) runtimeEnv() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.def.env
}

// takeEnvPending gives c's runtime the variables it has yet to take;
// the caller holds c's execMu (no execution runs in it).
func (s *Session) takeEnvPending(ctx context.Context, c *codeContext) error {
	s.mu.Lock()
	env := c.envPending
	s.mu.Unlock()
	if env == nil {
		return nil
	}
	if err := c.it.SetDefaults(ctx, env); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the session's runtime did not take its new network's proxy settings", err)
	}
	s.mu.Lock()
	if maps.Equal(c.envPending, env) {
		c.envPending = nil
	}
	s.mu.Unlock()
	return nil
}

// egressOf converts decisions for a result, with how many of them are
// summarised (folded into an entry's count).
func egressOf(rs []egress.Record) ([]apitype.EgressDecision, int64) {
	if len(rs) == 0 {
		return nil, 0
	}
	out := make([]apitype.EgressDecision, len(rs))
	for i, r := range rs {
		out[i] = apitype.EgressDecision{Kind: r.Kind, Host: r.Name, Port: int(r.Port), Allowed: r.Allowed, Reason: r.Reason,
			Dest: r.Dest, Address: r.Address, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMs: ms(r.Duration),
			Count: r.Count, First: r.First, Last: r.Last}
	}
	return out, egress.Summarized(rs)
}
