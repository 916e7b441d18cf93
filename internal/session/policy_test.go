package session

import (
	"errors"
	"fmt"
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

// A command compiles its configuration's policy more than once (its
// LoadConfig, the composition root, the manager): the same inputs are
// compiled once, and any change to them compiles anew.
func TestPolicyCompiledOnce(t *testing.T) {
	decode := func(js string) config.Config {
		cfg := config.Default()
		if err := config.Decode([]byte(js), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const base = `{"redaction": {"builtin": ["credentials"]}, "code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`
	first, err := newPolicy(decode(base))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := newPolicy(decode(base)); again != first {
		t.Error("the same configuration's policy was compiled again")
	}
	for _, js := range []string{
		`{"redaction": {"builtin": ["host_paths"]}, "code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`,
		`{"redaction": {"builtin": ["credentials"]}, "code_rules": [{"name": "x", "pattern": "c", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`,
		`{"redaction": {"builtin": ["credentials"]}, "code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "y", "pattern": "d", "action": "deny"}]}}}`,
		`{"redaction": {"builtin": ["credentials"]}, "code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"redaction": {}, "code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`,
		`{"redaction": {"builtin": ["credentials"]}, "code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"other": {"code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`,
	} {
		first, _ = newPolicy(decode(base)) // the one compiled last
		cfg := decode(js)
		p, err := newPolicy(cfg)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		fresh, _ := compilePolicy(cfg)
		if p == first || policyBehaviour(p) != policyBehaviour(fresh) {
			t.Errorf("%s: got the policy of another configuration", js)
		}
	}
	// A configuration without any redaction or rule shares the empty
	// policy; one with a tenant's never gets it.
	empty, err := newPolicy(decode(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := newPolicy(decode(`{"tenants": {"acme": {}}}`)); again != empty {
		t.Error("an empty configuration's policy was compiled again")
	}
	for _, js := range []string{
		`{"tenants": {"acme": {"code_rules": [{"name": "y", "pattern": "b", "action": "deny"}]}}}`,
		`{"tenants": {"acme": {"redaction": {"builtin": ["credentials"]}}}}`,
		`{"redaction": {"rules": [{"name": "r", "pattern": "s"}]}}`,
	} {
		newPolicy(decode(`{}`))
		if p, err := newPolicy(decode(js)); err != nil || p == empty {
			t.Errorf("%s: got the empty configuration's policy (%v)", js, err)
		}
	}
	if _, err := newPolicy(decode(`{"code_rules": [{"name": "x", "pattern": "(", "action": "deny"}]}`)); err == nil {
		t.Error("a bad pattern compiled")
	}
	if _, err := newPolicy(decode(`{"code_rules": [{"name": "x", "pattern": "(", "action": "deny"}]}`)); err == nil {
		t.Error("a bad pattern's error was not kept with its policy")
	}
}

// policyBehaviour is what p does to a few probes, as text.
func policyBehaviour(p *policy) string {
	var b strings.Builder
	for _, tenant := range []string{"", "acme", "other"} {
		for _, code := range []string{"a", "b", "c", "d"} {
			flags, err := p.codeRules(tenant).Check("python", code)
			fmt.Fprintf(&b, "%s %s: %v %v\n", tenant, code, flags, err)
		}
		if r := p.redactor(tenant); r != nil {
			fmt.Fprintf(&b, "%s: %v\n", tenant, r.Rules())
		}
	}
	return b.String()
}
