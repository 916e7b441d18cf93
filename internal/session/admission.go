package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// Admitter decides, for the caller a request's context carries, whether
// what it asks for may start: its tenant's ceilings on limits, the
// isolation its tenant runs on, its tenant's egress quota, and its
// quotas' counts. The manager and its sessions ask it on every way in
// (Create, Execute, RunCommand, InstallPackages, SetNetwork, RunOnce,
// RunProgram), before their own checks of the server's caps: every API
// (v1, MCP through it, E2B's) enforces the same rules through this one
// path, and an HTTP handler only decodes and encodes.
type Admitter interface {
	// AdmitSession admits a new session asking for a, which it may
	// complete (limits under the tenant's ceiling, the tenant's
	// isolation). release gives the place back if no session came of it;
	// a session's end gives it back otherwise (package quota hears it).
	AdmitSession(ctx context.Context, a *Ask) (release func(), err error)
	// AdmitExecution admits an execution, command, package install,
	// one-shot or program run asking for a. release gives its place back
	// when it ends; the session layer calls it on every path, before the
	// client can learn that it ended.
	AdmitExecution(ctx context.Context, a *Ask) (release func(), err error)
	// AdmitNetwork checks a network policy a session asks for later.
	AdmitNetwork(ctx context.Context, np *apitype.NetworkPolicy) error
}

// Ask is what a request asks for that its tenant's rules bound; what it
// does not ask for is nil or zero.
type Ask struct {
	// Limits, Isolation and Network: a session's or a run's.
	Limits    *config.Limits
	Isolation *config.Isolation
	Network   *apitype.NetworkPolicy
	// Template a session or run names ("": the server's default).
	Template string
	// Timeout: an execution's or command's own (0: the session's).
	Timeout config.Duration
}

// Quotas counts what tenants start against their quotas (package quota's
// Tracker).
type Quotas interface {
	// AdmitSession counts a new session of the caller's tenant; release
	// gives the place back if the session was not created after all.
	AdmitSession(ctx context.Context, who identity.Identity) (release func(), err error)
	// AdmitExecution counts an execution; release gives its place back.
	AdmitExecution(ctx context.Context, who identity.Identity) (release func(), err error)
	// Of is the caller's tenant's quotas.
	Of(who identity.Identity) config.Quotas
}

// Tenants is the Admitter of the configuration's tenants (their
// isolation) and of their quotas.
type Tenants struct {
	cfg    config.Config
	quotas Quotas // nil: none
}

// NewTenants admits by cfg's tenants and q's quotas (nil: none).
func NewTenants(cfg config.Config, q Quotas) *Tenants { return &Tenants{cfg: cfg, quotas: q} }

// SetAdmitter makes a the manager's admission; call it before the manager
// serves anything. Without one, NewTenants(cfg, nil) admits.
func (m *Manager) SetAdmitter(a Admitter) { m.admit = a }

func (t *Tenants) AdmitSession(ctx context.Context, a *Ask) (func(), error) {
	if err := t.check(ctx, a); err != nil {
		return nil, err
	}
	if t.quotas == nil {
		return func() {}, nil
	}
	who, _ := identity.From(ctx)
	return t.quotas.AdmitSession(ctx, who)
}

func (t *Tenants) AdmitExecution(ctx context.Context, a *Ask) (func(), error) {
	if err := t.check(ctx, a); err != nil {
		return nil, err
	}
	if t.quotas == nil {
		return func() {}, nil
	}
	who, _ := identity.From(ctx)
	return t.quotas.AdmitExecution(ctx, who)
}

func (t *Tenants) AdmitNetwork(ctx context.Context, np *apitype.NetworkPolicy) error {
	return t.egress(ctx, np)
}

// check applies the tenant's rules to a, in the order a client meets
// them: limits, network, isolation, template, the execution's timeout.
func (t *Tenants) check(ctx context.Context, a *Ask) error {
	if a.Limits != nil {
		l, err := t.limits(ctx, *a.Limits)
		if err != nil {
			return err
		}
		*a.Limits = l
	}
	if err := t.egress(ctx, a.Network); err != nil {
		return err
	}
	if a.Isolation != nil {
		if err := t.isolation(ctx, a.Isolation); err != nil {
			return err
		}
	}
	if err := t.template(ctx, a.Template); err != nil {
		return err
	}
	return t.timeout(ctx, a.Timeout)
}

// template applies the caller's tenant's templates (the configuration's
// tenants.T.templates): a request naming another is refused. One naming
// none gets templates.default, the operator's choice.
func (t *Tenants) template(ctx context.Context, asked string) error {
	if asked == "" {
		return nil
	}
	return mayName(ctx, t.cfg, asked)
}

// mayName refuses a template the caller's tenant may not name.
func mayName(ctx context.Context, cfg config.Config, name string) error {
	who, _ := identity.From(ctx)
	tenant, ok := cfg.Tenants[who.Tenant]
	if !ok || len(tenant.Templates) == 0 || who.Tenant == "" {
		return nil
	}
	if !slices.Contains(tenant.Templates, name) {
		return fmt.Errorf("%w: the tenant may use the templates %s (tenants.%s.templates), not %q", errdefs.ErrPermission, strings.Join(tenant.Templates, ", "), who.Tenant, name)
	}
	return nil
}

// limits checks limits a request asks for against its tenant's ceiling
// and returns them complete (defaults lowered to the ceiling), so that
// the session layer, which checks them against the server's max, never
// fills in a default above the tenant's ceiling. The request's own limits
// are returned unchanged when the tenant has no ceiling.
func (t *Tenants) limits(ctx context.Context, req config.Limits) (config.Limits, error) {
	if t.quotas == nil {
		return req, nil
	}
	who, _ := identity.From(ctx)
	q := t.quotas.Of(who)
	if q.MaxLimits == (config.Limits{}) {
		return req, nil
	}
	ceiling := q.Cap(t.cfg.Max)
	l, err := config.Resolve(req, config.Clamp(t.cfg.Defaults, ceiling), ceiling)
	if err != nil {
		return config.Limits{}, fmt.Errorf("%w (the tenant's quota max_limits)", err)
	}
	return l, nil
}

// timeout checks an execution's own timeout against the tenant's
// ceiling.
func (t *Tenants) timeout(ctx context.Context, d config.Duration) error {
	if t.quotas == nil || d == 0 {
		return nil
	}
	who, _ := identity.From(ctx)
	if c := t.quotas.Of(who).MaxLimits.Timeout; c > 0 && d > c {
		return fmt.Errorf("%w: timeout %s exceeds the tenant's quota max_limits.timeout %s", errdefs.ErrInvalidArgument, d, c)
	}
	return nil
}

// isolation applies the caller's tenant's isolation (the configuration's
// tenants.T.isolation): its requests run there, and one asking for
// another is refused. What the server allows at all is the manager's to
// check.
func (t *Tenants) isolation(ctx context.Context, asked *config.Isolation) error {
	who, _ := identity.From(ctx)
	tenant, ok := t.cfg.Tenants[who.Tenant]
	if !ok || tenant.Isolation == "" || who.Tenant == "" {
		return nil
	}
	if *asked != "" && *asked != tenant.Isolation {
		return fmt.Errorf("%w: the tenant's sandboxes run on %s (tenants.%s.isolation), not %s", errdefs.ErrPermission, tenant.Isolation, who.Tenant, *asked)
	}
	*asked = tenant.Isolation
	return nil
}

// egress is where a tenant's egress quota (Quotas.Egress, EgressAllow)
// meets a request's network policy: a tenant with egress "deny" asking
// for any network is refused, and one with EgressAllow may name only
// entries inside those (same syntax as network.allow_only). The server's
// own caps are the manager's to check (NetworkPolicy).
func (t *Tenants) egress(ctx context.Context, np *apitype.NetworkPolicy) error {
	if t.quotas == nil || np == nil || len(np.Allow) == 0 {
		return nil
	}
	who, _ := identity.From(ctx)
	q := t.quotas.Of(who)
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
		return nil // the manager says what is wrong with it
	}
	if err := p.Limit(len(p.Rules), only); err != nil {
		return fmt.Errorf("%w: %s (the tenant's quota egress_allow)", errdefs.ErrPermission, err)
	}
	return nil
}

// admitExecution admits an execution for ctx's caller. release is safe
// to call any number of times (the admitter's is called once): callers
// defer it on every path, and call it earlier where the work ends before
// they answer (see endFirst).
func (m *Manager) admitExecution(ctx context.Context, a *Ask) (release func(), err error) {
	rel, err := m.admit.AdmitExecution(ctx, a)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(rel) }, nil
}

// endFirst is emit that gives the admission back (release) before the end
// event goes out: a client that starts the next execution as soon as it
// learns this one ended is not refused for this one.
func endFirst(emit func(apitype.Event), release func()) func(apitype.Event) {
	if emit == nil {
		return nil
	}
	return func(ev apitype.Event) {
		if ev.Type == apitype.EventEnd {
			release()
		}
		emit(ev)
	}
}
