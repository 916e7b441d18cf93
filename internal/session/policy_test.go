package session

import (
	"errors"
	"strings"
	"testing"

	"airlock/internal/config"
)

// Every redaction and code rule is compiled by CheckPolicy, which the
// server runs at start: a bad one stops it, naming where it is, as a
// configuration error.
func TestCheckPolicy(t *testing.T) {
	for _, c := range []struct {
		json, want string
	}{
		{`{"redaction": {"builtin": ["credentials", "host_paths", "ip_addresses"], "rules": [{"name": "ticket", "pattern": "TICKET-[0-9]{1,8}"}]},
		   "code_rules": [{"name": "no-subprocess", "language": "python", "pattern": "subprocess", "action": "deny"}],
		   "tenants": {"acme": {"redaction": {}, "code_rules": [{"name": "net", "pattern": "requests", "action": "flag"}]}}}`, ""},
		{`{"redaction": {"builtin": ["passwords"]}}`, `redaction: unknown built-in rule set "passwords"`},
		{`{"redaction": {"rules": [{"name": "x", "pattern": "TICKET-[0-9]+"}]}}`, `redaction: rule "x"`},
		{`{"redaction": {"rules": [{"name": "x", "pattern": "("}]}}`, `missing closing )`},
		{`{"code_rules": [{"name": "x", "pattern": "(", "action": "deny"}]}`, `code_rules: code rule "x"`},
		{`{"code_rules": [{"name": "x", "pattern": "a", "action": "block"}]}`, `action "block"`},
		{`{"tenants": {"acme": {"redaction": {"rules": [{"name": "y", "pattern": "a*"}]}}}}`, `tenants.acme.redaction: rule "y"`},
		{`{"code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "x", "pattern": "b", "action": "deny"}]}}}`, `tenants.acme.code_rules: code rule "x" is defined twice`},
	} {
		cfg := config.Default()
		if err := config.Decode([]byte(c.json), &cfg); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		err := CheckPolicy(cfg)
		var ce *config.Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.json, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		case c.want != "" && !errors.As(err, &ce):
			t.Errorf("%s: %T is not a configuration error", c.json, err)
		case c.want != "" && strings.Contains(err.Error(), "invalid argument"):
			t.Errorf("%s: %q says invalid argument", c.json, err)
		}
	}
}

// A tenant's empty redaction turns it off; a tenant without one gets the
// server's.
func TestPolicyPerTenant(t *testing.T) {
	cfg := config.Default()
	cfg.Redaction = config.Redaction{Builtin: []string{"credentials"}}
	cfg.Tenants = map[string]config.Tenant{"acme": {Redaction: &config.Redaction{}}}
	p, err := newPolicy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.redactor("acme") != nil {
		t.Error("a tenant's empty redaction must turn it off")
	}
	if p.redactor("other") == nil {
		t.Error("a tenant without its own redaction gets the server's")
	}
}
