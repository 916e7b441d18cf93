package config

import (
	"strings"
	"testing"
)

// Every redaction and code rule is compiled by Validate: a bad one stops
// the server at start, naming where it is.
func TestPolicyValidate(t *testing.T) {
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
		{`{"code_rules": [{"name": "x", "language": "cobol", "pattern": "a", "action": "flag"}]}`, `unknown language "cobol"`},
		{`{"tenants": {"acme": {"redaction": {"rules": [{"name": "y", "pattern": "a*"}]}}}}`, `tenants.acme.redaction: rule "y"`},
		{`{"code_rules": [{"name": "x", "pattern": "a", "action": "flag"}], "tenants": {"acme": {"code_rules": [{"name": "x", "pattern": "b", "action": "deny"}]}}}`, `tenants.acme.code_rules: code rule "x" is defined twice`},
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
	cfg.Tenants = map[string]Tenant{"acme": {Redaction: &Redaction{}}}
	if r, _ := cfg.RedactionFor("acme").Compile(); r != nil {
		t.Error("a tenant's empty redaction must turn it off")
	}
	if r, _ := cfg.RedactionFor("other").Compile(); r == nil {
		t.Error("a tenant without its own redaction gets the server's")
	}
}
