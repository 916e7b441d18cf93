package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

func tenantCtx(tenant string) context.Context {
	return identity.With(context.Background(), identity.Identity{Tenant: tenant})
}

// countingQuotas admits everything, with fixed quotas, and counts the
// admissions and their releases.
type countingQuotas struct {
	q        config.Quotas
	refuse   error
	mu       sync.Mutex
	admitted int
	released int
}

func (c *countingQuotas) Of(identity.Identity) config.Quotas { return c.q }
func (c *countingQuotas) AdmitSession(context.Context, identity.Identity) (func(), error) {
	return c.AdmitExecution(context.Background(), identity.Identity{})
}
func (c *countingQuotas) AdmitExecution(context.Context, identity.Identity) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse != nil {
		return nil, c.refuse
	}
	c.admitted++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.released++
	}, nil
}

func (c *countingQuotas) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.released
}

// Every way work enters the session layer asks the admitter first: a
// refusal there reaches no sandbox, whichever API the request came
// through (the v1 handlers, MCP through them, E2B's).
func TestEveryWayInIsAdmitted(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	s := create(t, m, "")
	quota := &errdefs.RetryError{Err: errdefs.ErrQuota}
	q := &countingQuotas{refuse: quota, q: config.Quotas{Egress: "deny"}}
	m.SetAdmitter(NewTenants(m.cfg, q))
	ctx := tenantCtx("a")
	for _, c := range []struct {
		name string
		do   func() error
		want error
	}{
		{"create", func() error { _, err := m.Create(ctx, apitype.CreateSessionRequest{}); return err }, errdefs.ErrQuota},
		{"execute", func() error { _, err := s.Execute(ctx, apitype.ExecuteRequest{Code: "out x"}, nil); return err }, errdefs.ErrQuota},
		{"a command", func() error {
			_, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "out x"}, nil)
			return err
		}, errdefs.ErrQuota},
		{"a background command", func() error {
			_, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "out x", Background: true}, nil)
			return err
		}, errdefs.ErrQuota},
		{"a package install", func() error {
			_, err := s.InstallPackages(ctx, apitype.PackagesRequest{Manager: "pip", Packages: []string{"x"}})
			return err
		}, errdefs.ErrQuota},
		{"a one-shot run", func() error { _, err := m.RunOnce(ctx, apitype.OneShotRequest{Code: "out x"}, nil); return err }, errdefs.ErrQuota},
		{"a program run", func() error {
			_, err := m.RunProgram(ctx, apitype.ProgramRequest{Code: "out x"}, nil)
			return err
		}, errdefs.ErrQuota},
		{"a network policy", func() error {
			_, err := s.SetNetwork(ctx, &apitype.NetworkPolicy{Allow: []string{"pypi.org"}})
			return err
		}, errdefs.ErrPermission},
	} {
		// The tenant's refusal, not the server's.
		if err := c.do(); !errors.Is(err, c.want) || (c.want == errdefs.ErrPermission && !strings.Contains(err.Error(), "tenant's quota")) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := len(src.all); n != 1 {
		t.Errorf("%d sandboxes built, want the first session's only", n)
	}
	if n := len(src.last().execs); n != 0 {
		t.Errorf("%d executions reached the runtime", n)
	}
}

// An admitted execution's place is given back exactly once on every
// path, and before the client can learn that it ended: before the end
// event of a stream, and before the call returns (the answer is written
// after).
func TestAdmissionGivenBackBeforeTheEnd(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream bool
		run    func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error
		fails  bool
	}{
		{"an execution", false, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.Execute(ctx, apitype.ExecuteRequest{Code: "out x"}, emit)
			return err
		}, false},
		{"an execution, streamed", true, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.Execute(ctx, apitype.ExecuteRequest{Code: "out x;display"}, emit)
			return err
		}, false},
		{"an execution refused", false, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.Execute(ctx, apitype.ExecuteRequest{Code: strings.Repeat("x", MaxCode+1)}, emit)
			return err
		}, true},
		{"a command, streamed", true, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "out x"}, emit)
			return err
		}, false},
		{"a command refused", false, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.RunCommand(ctx, apitype.CommandRequest{Command: ""}, emit)
			return err
		}, true},
		{"a one-shot run, streamed", true, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := m.RunOnce(ctx, apitype.OneShotRequest{Code: "out x"}, emit)
			return err
		}, false},
		{"a program run", false, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := m.RunProgram(ctx, apitype.ProgramRequest{Code: "out x"}, emit)
			return err
		}, false},
		{"a package install refused", false, func(ctx context.Context, m *Manager, s *Session, emit func(apitype.Event)) error {
			_, err := s.InstallPackages(ctx, apitype.PackagesRequest{Manager: "pip", Packages: []string{"x"}})
			return err
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _, _ := newTestManager(t, nil)
			s := create(t, m, "")
			q := &countingQuotas{}
			m.SetAdmitter(NewTenants(m.cfg, q))
			var emit func(apitype.Event)
			ends := 0
			if c.stream {
				emit = func(ev apitype.Event) {
					switch n := q.count(); {
					case ev.Type == apitype.EventEnd && n != 1:
						t.Errorf("given back %d times at the end event, want once", n)
					case ev.Type != apitype.EventEnd && n != 0:
						t.Errorf("given back at a %s event", ev.Type)
					}
					if ev.Type == apitype.EventEnd {
						ends++
					}
				}
			}
			err := c.run(tenantCtx("a"), m, s, emit)
			if (err != nil) != c.fails {
				t.Fatalf("error %v", err)
			}
			if q.admitted != 1 || q.count() != 1 {
				t.Errorf("admitted %d, given back %d times when the call returned; want once", q.admitted, q.count())
			}
			if c.stream && ends != 1 {
				t.Errorf("%d end events", ends)
			}
		})
	}
}

// A tenant's rules: its ceiling on limits (defaults lowered to it), its
// execution timeout, its isolation, its egress quota.
func TestTenants(t *testing.T) {
	cfg := config.Default()
	cfg.AllowIsolation = []config.Isolation{config.GVisor}
	cfg.Tenants = map[string]config.Tenant{"strict": {Isolation: config.GVisor}, "acme": {Templates: []string{"code-interpreter"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ceiling := config.Quotas{MaxLimits: config.Limits{Memory: 128 << 20, Timeout: config.Duration(5e9)}}
	iso := func(i config.Isolation) *config.Isolation { return &i }
	for _, c := range []struct {
		name   string
		tenant string
		q      config.Quotas
		ask    Ask
		want   error
		check  func(*testing.T, Ask)
	}{
		{"no quota: limits as asked", "a", config.Quotas{}, Ask{Limits: &config.Limits{}}, nil, func(t *testing.T, a Ask) {
			if *a.Limits != (config.Limits{}) {
				t.Errorf("limits %+v", *a.Limits)
			}
		}},
		{"a ceiling lowers the defaults", "a", ceiling, Ask{Limits: &config.Limits{}}, nil, func(t *testing.T, a Ask) {
			if a.Limits.Memory != 128<<20 || a.Limits.Timeout != config.Duration(5e9) {
				t.Errorf("limits %+v, want the ceiling's memory and timeout", *a.Limits)
			}
		}},
		{"above the ceiling", "a", ceiling, Ask{Limits: &config.Limits{Memory: 256 << 20}}, errdefs.ErrInvalidArgument, nil},
		{"an execution's timeout above the ceiling", "a", ceiling, Ask{Timeout: config.Duration(6e9)}, errdefs.ErrInvalidArgument, nil},
		{"an execution's timeout under it", "a", ceiling, Ask{Timeout: config.Duration(4e9)}, nil, nil},
		{"the tenant's isolation applies", "strict", config.Quotas{}, Ask{Isolation: iso("")}, nil, func(t *testing.T, a Ask) {
			if *a.Isolation != config.GVisor {
				t.Errorf("isolation %q, want gvisor", *a.Isolation)
			}
		}},
		{"asking for the tenant's isolation", "strict", config.Quotas{}, Ask{Isolation: iso(config.GVisor)}, nil, nil},
		{"asking for another", "strict", config.Quotas{}, Ask{Isolation: iso(config.Native)}, errdefs.ErrPermission, nil},
		{"other tenants pick theirs", "other", config.Quotas{}, Ask{Isolation: iso(config.Native)}, nil, func(t *testing.T, a Ask) {
			if *a.Isolation != config.Native {
				t.Errorf("isolation %q", *a.Isolation)
			}
		}},
		{"a template the tenant may use", "acme", config.Quotas{}, Ask{Template: "code-interpreter"}, nil, nil},
		{"no template: the server's default", "acme", config.Quotas{}, Ask{}, nil, nil},
		{"a template the tenant may not use", "acme", config.Quotas{}, Ask{Template: "gpu"}, errdefs.ErrPermission, nil},
		{"other tenants name any", "other", config.Quotas{}, Ask{Template: "gpu"}, nil, nil},
		{"no egress quota", "a", config.Quotas{}, Ask{Network: &apitype.NetworkPolicy{Allow: []string{"evil.test"}}}, nil, nil},
		{"egress denied, no network asked", "a", config.Quotas{Egress: "deny"}, Ask{Network: &apitype.NetworkPolicy{}}, nil, nil},
		{"egress denied", "a", config.Quotas{Egress: "deny"}, Ask{Network: &apitype.NetworkPolicy{Allow: []string{"pypi.org"}}}, errdefs.ErrPermission, nil},
		{"inside egress_allow", "a", config.Quotas{EgressAllow: []string{"pypi.org", "*.corp.test"}},
			Ask{Network: &apitype.NetworkPolicy{Allow: []string{"pypi.org", "x.corp.test"}}}, nil, nil},
		{"outside egress_allow", "a", config.Quotas{EgressAllow: []string{"pypi.org"}},
			Ask{Network: &apitype.NetworkPolicy{Allow: []string{"pypi.org", "evil.test"}}}, errdefs.ErrPermission, nil},
		{"a port egress_allow leaves out", "a", config.Quotas{EgressAllow: []string{"pypi.org:443"}},
			Ask{Network: &apitype.NetworkPolicy{Allow: []string{"pypi.org"}}}, errdefs.ErrPermission, nil}, // 80 too
	} {
		t.Run(c.name, func(t *testing.T) {
			q := &countingQuotas{q: c.q}
			a := c.ask
			_, err := NewTenants(cfg, q).AdmitExecution(tenantCtx(c.tenant), &a)
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if err != nil && q.admitted != 0 {
				t.Error("refused, yet counted against the quota")
			}
			if c.check != nil {
				c.check(t, a)
			}
		})
	}
	// A network policy asked for later meets the same egress quota.
	deny := NewTenants(cfg, &countingQuotas{q: config.Quotas{Egress: "deny"}})
	if err := deny.AdmitNetwork(tenantCtx("a"), &apitype.NetworkPolicy{Allow: []string{"x.test"}}); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("a later policy: %v, want refused", err)
	}
	// A tenant's templates are checked names.
	badTemplates := config.Default()
	badTemplates.Tenants = map[string]config.Tenant{"t": {Templates: []string{"../x"}}}
	if err := badTemplates.Validate(); err == nil {
		t.Error("a bad template name in tenants.t.templates was accepted")
	}
	// The tenant's isolation must be one the server offers.
	bad := config.Default()
	bad.Tenants = map[string]config.Tenant{"t": {Isolation: config.GVisor}}
	if err := bad.Validate(); err == nil {
		t.Error("a tenant on an isolation the server does not offer was accepted")
	}
}

// A streamed execution's context and session are free by its end event:
// the next cell, sent the moment the client learns this one ended, runs
// instead of being refused as "already executing" (a CI run saw that
// 409 for %pip's cell).
func TestNextCellAtTheEndEvent(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	var next *apitype.Result
	var nextErr error
	_, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "out x"}, func(ev apitype.Event) {
		if ev.Type == apitype.EventEnd {
			next, nextErr = s.Execute(context.Background(), apitype.ExecuteRequest{Code: "out y"}, nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if nextErr != nil || next == nil || next.Stdout != "y" {
		t.Errorf("the next cell at the end event: %+v %v", next, nextErr)
	}
}
