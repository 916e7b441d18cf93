package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// Quotas admits what a tenant starts. The API asks before it creates a
// session or starts an execution; package quota answers.
type Quotas interface {
	// AdmitSession counts a new session of the caller's tenant against
	// its quota; release gives the place back if the session was not
	// created after all (its end gives it back otherwise).
	AdmitSession(ctx context.Context, who identity.Identity) (release func(), err error)
	// AdmitExecution counts an execution, command, package install,
	// one-shot or program run; release gives its place back when it
	// ends (the handler calls it on every path: see admitExecution).
	AdmitExecution(ctx context.Context, who identity.Identity) (release func(), err error)
	// Of is the caller's tenant's quotas.
	Of(who identity.Identity) config.Quotas
}

func (s *Server) admitSession(r *http.Request) (func(), error) {
	if s.Quotas == nil {
		return func() {}, nil
	}
	who, _ := identity.From(r.Context())
	return s.Quotas.AdmitSession(r.Context(), who)
}

// admitExecution admits an execution of the caller's tenant. The handler
// defers release right away: it runs when the handler returns, by an
// error, the client leaving (the execution is stopped before the session
// call returns), a timeout or a panic (ServeHTTP recovers it above the
// handler's defers); respond calls it earlier, as the execution ends. A
// background command, which outlives its request, takes release over (see
// runCommand). Observer events are no substitute: an execution refused
// before it starts sends none. However often release is called, the
// tracker's is called once.
func (s *Server) admitExecution(r *http.Request) (release func(), err error) {
	if s.Quotas == nil {
		return func() {}, nil
	}
	who, _ := identity.From(r.Context())
	rel, err := s.Quotas.AdmitExecution(r.Context(), who)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(rel) }, nil
}

// tenantLimits checks limits a request asks for against its tenant's
// ceiling and returns them complete (defaults lowered to the ceiling), so
// that the session package, which checks them against the server's max,
// never fills in a default above the tenant's ceiling. The request's own
// limits are returned unchanged when the tenant has no ceiling.
func (s *Server) tenantLimits(r *http.Request, req config.Limits) (config.Limits, error) {
	if s.Quotas == nil {
		return req, nil
	}
	who, _ := identity.From(r.Context())
	q := s.Quotas.Of(who)
	if q.MaxLimits == (config.Limits{}) {
		return req, nil
	}
	ceiling := q.Cap(s.cfg.Max)
	l, err := config.Resolve(req, config.Clamp(s.cfg.Defaults, ceiling), ceiling)
	if err != nil {
		return config.Limits{}, fmt.Errorf("%w (the tenant's quota max_limits)", err)
	}
	return l, nil
}

// checkTimeout checks an execution's own timeout against the tenant's
// ceiling.
func (s *Server) checkTimeout(r *http.Request, d config.Duration) error {
	if s.Quotas == nil || d == 0 {
		return nil
	}
	who, _ := identity.From(r.Context())
	if c := s.Quotas.Of(who).MaxLimits.Timeout; c > 0 && d > c {
		return fmt.Errorf("%w: timeout %s exceeds the tenant's quota max_limits.timeout %s", errdefs.ErrInvalidArgument, d, c)
	}
	return nil
}

// isolationHook applies the caller's tenant's isolation (the
// configuration's tenants.T.isolation): its requests run there, and one
// asking for another gets a 403. What the server allows at all is checked
// by the session layer.
func (s *Server) isolationHook(r *http.Request, asked *config.Isolation) error {
	who, _ := identity.From(r.Context())
	t, ok := s.cfg.Tenants[who.Tenant]
	if !ok || t.Isolation == "" || who.Tenant == "" {
		return nil
	}
	if *asked != "" && *asked != t.Isolation {
		return fmt.Errorf("%w: the tenant's sandboxes run on %s (tenants.%s.isolation), not %s", errdefs.ErrPermission, t.Isolation, who.Tenant, *asked)
	}
	*asked = t.Isolation
	return nil
}

// egressHook is where a tenant's egress quota (Quotas.Egress,
// EgressAllow) meets a request's network policy: a tenant with egress
// "deny" asking for any network gets a 403, and one with EgressAllow may
// name only entries inside those (same syntax as network.allow_only).
// The server's own caps are checked by the session layer.
func (s *Server) egressHook(r *http.Request, np *apitype.NetworkPolicy) error {
	if s.Quotas == nil || np == nil || len(np.Allow) == 0 {
		return nil
	}
	who, _ := identity.From(r.Context())
	q := s.Quotas.Of(who)
	if q.Egress == "deny" {
		return fmt.Errorf("%w: the tenant's quota denies network egress", errdefs.ErrPermission)
	}
	if len(q.EgressAllow) == 0 {
		return nil
	}
	only, err := egress.ParsePolicy(q.EgressAllow)
	if err != nil {
		return fmt.Errorf("%w: the tenant's egress_allow quota: %v", errdefs.ErrUnavailable, err)
	}
	p, err := egress.ParsePolicy(np.Allow)
	if err != nil {
		return nil // the session layer says what is wrong with it
	}
	if err := p.Limit(len(p.Rules), only); err != nil {
		return fmt.Errorf("%w: %s (the tenant's quota egress_allow)", errdefs.ErrPermission, err)
	}
	return nil
}
