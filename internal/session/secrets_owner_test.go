package session

import (
	"context"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/identity"
	"airlock/internal/secrets"
)

// TestResumeTakesTheOwnersSecrets: an admin who resumes or forks a
// tenant's paused session gives it that tenant's secrets, never the ones
// of the admin's own tenant (a secret of the same name there would put
// another credential in the tenant's sandbox).
func TestResumeTakesTheOwnersSecrets(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	set := secretSet(t, nil, map[string][]secrets.Spec{
		"ta": {{Name: "K", Env: "VA", Hosts: []string{"a.test"}}},
		"tb": {{Name: "K", Env: "VB", Hosts: []string{"b.test"}}},
	}, "VA=value-of-tenant-a", "VB=value-of-tenant-b")
	if err := m.SetSecrets(set); err != nil {
		t.Fatal(err)
	}
	owner := identity.With(context.Background(), identity.Identity{Tenant: "ta", KeyID: "ka"})
	admin := identity.With(context.Background(), identity.Identity{Tenant: "tb", KeyID: "kb", Admin: true})
	s, err := m.Create(owner, apitype.CreateSessionRequest{Language: "python", Secrets: []string{"K"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(owner, ""); err != nil {
		t.Fatal(err)
	}
	hosts := func(s *Session) []string {
		t.Helper()
		if s.secrets == nil {
			t.Fatal("the session has no secrets")
		}
		var out []string
		for _, d := range s.Secrets() {
			out = append(out, d.Hosts...)
		}
		return out
	}
	fork, err := m.ForkFor(admin, s.ID())
	if err != nil {
		t.Fatalf("an admin's fork: %v", err)
	}
	if h := hosts(fork); len(h) != 1 || h[0] != "a.test" {
		t.Errorf("an admin's fork has the secret bound to %v, want the owner's a.test", h)
	}
	r, err := m.ResumeFor(admin, s.ID())
	if err != nil {
		t.Fatalf("an admin's resume: %v", err)
	}
	if h := hosts(r); len(h) != 1 || h[0] != "a.test" {
		t.Errorf("an admin's resume has the secret bound to %v, want the owner's a.test", h)
	}
}
