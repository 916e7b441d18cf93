package config

import (
	"strings"
	"testing"
)

// Validate checks the data of redaction and code rules (languages,
// tenants); their patterns are compiled by their users (see
// session.CheckPolicy).
func TestPolicyValidate(t *testing.T) {
	for _, c := range []struct {
		json, want string
	}{
		{`{"redaction": {"builtin": ["credentials", "host_paths", "ip_addresses"], "rules": [{"name": "ticket", "pattern": "TICKET-[0-9]{1,8}"}]},
		   "code_rules": [{"name": "no-subprocess", "language": "python", "pattern": "subprocess", "action": "deny"}],
		   "tenants": {"acme": {"redaction": {}, "code_rules": [{"name": "net", "pattern": "requests", "action": "flag"}]}}}`, ""},
		{`{"code_rules": [{"name": "x", "language": "cobol", "pattern": "a", "action": "flag"}]}`, `unknown language "cobol"`},
		{`{"tenants": {"acme": {"code_rules": [{"name": "x", "language": "cobol", "pattern": "a", "action": "flag"}]}}}`, `tenants.acme.code_rules: rule "x": unknown language "cobol"`},
		{`{"tenants": {"acme": {"isolation": "kata"}}}`, `tenants.acme.isolation "kata"`},
		{`{"tenants": {"acme": {"isolation": "gvisor"}}}`, `tenants.acme.isolation "gvisor"`},
	} {
		cfg := Default()
		err := Decode([]byte(c.json), &cfg)
		if err == nil {
			err = cfg.Validate()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.json, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		}
	}
	cfg := Default()
	cfg.Redaction = Redaction{Builtin: []string{"credentials"}}
	cfg.Tenants = map[string]Tenant{"acme": {Redaction: &Redaction{}, CodeRules: []CodeRule{{Name: "b"}}}}
	cfg.CodeRules = []CodeRule{{Name: "a"}}
	if r := cfg.RedactionFor("acme"); len(r.Builtin) != 0 || len(r.Rules) != 0 {
		t.Errorf("a tenant's empty redaction must turn it off: %+v", r)
	}
	if r := cfg.RedactionFor("other"); len(r.Builtin) != 1 {
		t.Errorf("a tenant without its own redaction gets the server's: %+v", r)
	}
	if r := cfg.CodeRulesFor("acme"); len(r) != 2 || r[0].Name != "a" || r[1].Name != "b" {
		t.Errorf("a tenant's code rules come after the server's: %+v", r)
	}
}
