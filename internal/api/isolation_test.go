package api

import (
	"errors"
	"net/http/httptest"
	"testing"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// A tenant the operator puts on an isolation runs there whatever it asks
// for; asking for another is a 403. Other tenants pick freely (the session
// layer checks what the server allows).
func TestIsolationHook(t *testing.T) {
	cfg := config.Default()
	cfg.AllowIsolation = []config.Isolation{config.GVisor}
	cfg.Tenants = map[string]config.Tenant{"strict": {Isolation: config.GVisor}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: cfg}
	for _, c := range []struct {
		tenant   string
		asked    config.Isolation
		want     config.Isolation
		refusing bool
	}{
		{"strict", "", config.GVisor, false},
		{"strict", config.GVisor, config.GVisor, false},
		{"strict", config.Native, "", true},
		{"other", "", "", false},
		{"other", config.Native, config.Native, false},
		{"", config.GVisor, config.GVisor, false},
	} {
		r := httptest.NewRequest("POST", "/v1/sessions", nil)
		r = r.WithContext(identity.With(r.Context(), identity.Identity{Tenant: c.tenant}))
		got := c.asked
		err := s.isolationHook(r, &got)
		if c.refusing {
			if !errors.Is(err, errdefs.ErrPermission) {
				t.Errorf("%s asking %q: %v, want a refusal", c.tenant, c.asked, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s asking %q: %q %v, want %q", c.tenant, c.asked, got, err, c.want)
		}
	}
	// The tenant's isolation must be one the server offers.
	bad := config.Default()
	bad.Tenants = map[string]config.Tenant{"t": {Isolation: config.GVisor}}
	if err := bad.Validate(); err == nil {
		t.Error("a tenant on an isolation the server does not offer was accepted")
	}
}
