package config

import (
	"errors"
	"fmt"
	"sort"
)

// Redaction is an output policy: what is replaced in stdout, stderr, text
// results and error messages before they go back to the caller (see
// package redact). Not a security boundary.
type Redaction struct {
	// Builtin names built-in rule sets: "credentials", "host_paths",
	// "ip_addresses". Each is off unless named.
	Builtin []string `json:"builtin,omitempty"`
	// Rules are the operator's own patterns (bounded repetitions only).
	Rules []RedactionRule `json:"rules,omitempty"`
}

// RedactionRule is one operator pattern; a match becomes
// [REDACTED:name] (only its group named "secret", if it has one).
type RedactionRule struct {
	// Name names the rule in [REDACTED:name] and in the metrics.
	Name string `json:"name"`
	// Pattern is a regular expression (RE2, bounded repetitions only).
	Pattern string `json:"pattern"`
}

// CodeRule is an advisory rule over submitted code (see package
// coderules). Not a security boundary.
type CodeRule struct {
	// Name names the rule in results, the audit log and the metrics.
	Name string `json:"name"`
	// Language: "python", "bash" or "javascript"; empty for every one.
	Language string `json:"language,omitempty"`
	// Pattern is a regular expression (RE2) matched against the code.
	Pattern string `json:"pattern"`
	// Action: "flag" (recorded in the result and the audit log) or
	// "deny" (403 naming the rule).
	Action string `json:"action"`
	// Message, optional, tells the client why (a denial's error says
	// it); at most 256 bytes.
	Message string `json:"message,omitempty"`
}

// Tenant is configuration of one tenant (the tenant of its API keys).
type Tenant struct {
	// Redaction, when set, replaces the server's redaction for the
	// tenant's sessions ({} turns it off for the tenant).
	Redaction *Redaction `json:"redaction,omitempty"`
	// CodeRules are checked after the server's code_rules.
	CodeRules []CodeRule `json:"code_rules,omitempty"`
	// Isolation, when set, is the kernel every sandbox of the tenant runs
	// on ("gvisor" puts a tenant on gVisor whatever it asks); a request
	// of the tenant asking for another is refused. It must be the
	// server's isolation or in allow_isolation.
	Isolation Isolation `json:"isolation,omitempty"`
	// Templates, when set, are the only templates the tenant's requests
	// may name (a request naming none gets templates.default).
	Templates []string `json:"templates,omitempty"`
	// Tools are the tenant's own tools, besides the server's (a name may
	// not be both).
	Tools map[string]Tool `json:"tools,omitempty"`
	// Secrets are the tenant's own secrets, besides the server's (a name
	// may not be both).
	Secrets map[string]Secret `json:"secrets,omitempty"`
}

// RedactionFor is the redaction of tenant's sessions: its own if set,
// else the server's.
func (c Config) RedactionFor(tenant string) Redaction {
	if t, ok := c.Tenants[tenant]; ok && t.Redaction != nil {
		return *t.Redaction
	}
	return c.Redaction
}

// CodeRulesFor is the code rules of tenant: the server's, then its own.
func (c Config) CodeRulesFor(tenant string) []CodeRule {
	return append(append([]CodeRule(nil), c.CodeRules...), c.Tenants[tenant].CodeRules...)
}

// validatePolicy checks the redaction and code rules' data: their
// languages, the tenants' names and isolations. Their patterns are
// compiled by the packages that use them (session.CheckPolicy, which the
// server runs at start).
func (c Config) validatePolicy() error {
	var errs []error
	for _, r := range c.CodeRules {
		if r.Language != "" && !KnownLanguage(r.Language) {
			errs = append(errs, fmt.Errorf("code_rules: rule %q: unknown language %q", r.Name, r.Language))
		}
	}
	names := make([]string, 0, len(c.Tenants))
	for name := range c.Tenants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := c.Tenants[name]
		if name == "" || len(name) > 128 {
			errs = append(errs, fmt.Errorf("tenants: %q is not a tenant name", name))
		}
		for _, r := range t.CodeRules {
			if r.Language != "" && !KnownLanguage(r.Language) {
				errs = append(errs, fmt.Errorf("tenants.%s.code_rules: rule %q: unknown language %q", name, r.Name, r.Language))
			}
		}
		if i := t.Isolation; i != "" && (!i.Valid() || !c.Allows(i)) {
			errs = append(errs, fmt.Errorf("tenants.%s.isolation %q must be \"native\" or \"gvisor\", and the server's isolation or in allow_isolation", name, i))
		}
	}
	return errors.Join(errs...)
}
