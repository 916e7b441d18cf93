package api

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// tenantQuotas answers Of with fixed quotas.
type tenantQuotas struct{ q config.Quotas }

func (t tenantQuotas) AdmitSession(context.Context, identity.Identity) (func(), error) {
	return func() {}, nil
}
func (t tenantQuotas) AdmitExecution(context.Context, identity.Identity) (func(), error) {
	return func() {}, nil
}
func (t tenantQuotas) Of(identity.Identity) config.Quotas { return t.q }

// A tenant's egress quota narrows what its requests may allow.
func TestEgressHook(t *testing.T) {
	for _, tc := range []struct {
		q     config.Quotas
		allow []string
		err   error
	}{
		{config.Quotas{}, []string{"evil.test"}, nil},
		{config.Quotas{Egress: "deny"}, nil, nil},
		{config.Quotas{Egress: "deny"}, []string{"pypi.org"}, errdefs.ErrPermission},
		{config.Quotas{EgressAllow: []string{"pypi.org", "*.corp.test"}}, []string{"pypi.org", "x.corp.test"}, nil},
		{config.Quotas{EgressAllow: []string{"pypi.org"}}, []string{"pypi.org", "evil.test"}, errdefs.ErrPermission},
		{config.Quotas{EgressAllow: []string{"pypi.org:443"}}, []string{"pypi.org"}, errdefs.ErrPermission}, // 80 too
	} {
		s := &Server{Quotas: tenantQuotas{tc.q}}
		r := httptest.NewRequest("POST", "/v1/sessions", nil)
		r = r.WithContext(identity.With(r.Context(), identity.Identity{Tenant: "t"}))
		var np *apitype.NetworkPolicy
		if tc.allow != nil {
			np = &apitype.NetworkPolicy{Allow: tc.allow}
		}
		err := s.egressHook(r, np)
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("quota %+v, allow %v: %v, want %v", tc.q, tc.allow, err, tc.err)
		}
	}
}
