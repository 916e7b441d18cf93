package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"airlock/internal/apitype"
	"airlock/internal/coderules"
	"airlock/internal/config"
	"airlock/internal/redact"
)

// DeniedError is the error name observers see for an execution a code
// rule denied (its CodeFlags name the rule); it never ran.
const DeniedError = "CodeRuleDenied"

// policy is the output policy and code rules of each tenant, compiled
// once from the configuration's data (CheckPolicy compiled them at start,
// so errors cannot happen).
type policy struct {
	redact       map[string]*redact.Redactor // tenants with their own
	redactDef    *redact.Redactor
	rules        map[string]*coderules.Set
	rulesDef     *coderules.Set
	anyRedaction bool
}

// compiled is the policy newPolicy compiled last and its inputs: a
// command compiles the same configuration's up to three times (its
// LoadConfig, the composition root's check, the manager), and a
// redaction set's patterns take tens of milliseconds to compile. A
// policy is never changed once compiled, so managers may share one.
var compiled struct {
	sync.Mutex
	key []byte
	p   *policy
	err error
}

// noPolicy is the key of a configuration without redaction or code
// rules (no JSON encoding is "none").
var noPolicy = []byte("none")

// policyKey is what cfg's policy is compiled from (nil: it cannot be
// encoded, and is compiled each time). Without any redaction or rule, it
// is noPolicy, without the encoding: its first use costs a command's
// start 0.1-0.2 ms (the types' reflection).
func policyKey(cfg config.Config) []byte {
	none := len(cfg.Redaction.Builtin) == 0 && len(cfg.Redaction.Rules) == 0 && len(cfg.CodeRules) == 0
	for _, t := range cfg.Tenants {
		none = none && t.Redaction == nil && len(t.CodeRules) == 0
	}
	if none {
		return noPolicy
	}
	type tenant struct {
		Redaction *config.Redaction `json:"r"`
		CodeRules []config.CodeRule `json:"c"`
	}
	in := struct {
		Redaction config.Redaction  `json:"r"`
		CodeRules []config.CodeRule `json:"c"`
		Tenants   map[string]tenant `json:"t"`
	}{Redaction: cfg.Redaction, CodeRules: cfg.CodeRules, Tenants: map[string]tenant{}}
	for name, t := range cfg.Tenants {
		in.Tenants[name] = tenant{t.Redaction, t.CodeRules}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil
	}
	return b
}

// newPolicy compiles cfg's, or returns the one compiled last from the
// same inputs.
func newPolicy(cfg config.Config) (*policy, error) {
	key := policyKey(cfg)
	compiled.Lock()
	defer compiled.Unlock()
	if key != nil && bytes.Equal(key, compiled.key) {
		return compiled.p, compiled.err
	}
	p, err := compilePolicy(cfg)
	if key != nil {
		compiled.key, compiled.p, compiled.err = key, p, err
	}
	return p, err
}

// compilePolicy compiles cfg's.
func compilePolicy(cfg config.Config) (*policy, error) {
	p := &policy{redact: map[string]*redact.Redactor{}, rules: map[string]*coderules.Set{}}
	var errs []error
	var err error
	if p.redactDef, err = compileRedaction(cfg.Redaction); err != nil {
		errs = append(errs, fmt.Errorf("redaction: %w", err))
	}
	if p.rulesDef, err = compileCodeRules(cfg.CodeRules); err != nil {
		errs = append(errs, fmt.Errorf("code_rules: %w", err))
	}
	p.anyRedaction = p.redactDef != nil
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		t := cfg.Tenants[name]
		if t.Redaction != nil {
			r, err := compileRedaction(cfg.RedactionFor(name))
			if err != nil {
				errs = append(errs, fmt.Errorf("tenants.%s.redaction: %w", name, err))
			}
			p.redact[name] = r
			p.anyRedaction = p.anyRedaction || r != nil
		}
		if len(t.CodeRules) > 0 {
			s, err := compileCodeRules(cfg.CodeRulesFor(name))
			if err != nil {
				errs = append(errs, fmt.Errorf("tenants.%s.code_rules: %w", name, err))
			}
			p.rules[name] = s
		}
	}
	return p, errors.Join(errs...)
}

// CheckPolicy compiles every redaction and code rule of cfg, the server's
// and each tenant's, so that a bad pattern stops the server at start
// naming its key (config.Validate checks the rest of the same keys). Its
// error is a *config.Error.
func CheckPolicy(cfg config.Config) error {
	_, err := newPolicy(cfg)
	return config.Problems(err)
}

// compileRedaction builds the redactor of r (nil: redaction off).
func compileRedaction(r config.Redaction) (*redact.Redactor, error) {
	rules := make([]redact.Rule, len(r.Rules))
	for i, x := range r.Rules {
		rules[i] = redact.Rule{Name: x.Name, Pattern: x.Pattern}
	}
	return redact.New(r.Builtin, rules)
}

// compileCodeRules builds the set of rules (nil: none).
func compileCodeRules(rules []config.CodeRule) (*coderules.Set, error) {
	out := make([]coderules.Rule, len(rules))
	for i, r := range rules {
		out[i] = coderules.Rule{Name: r.Name, Language: r.Language, Pattern: r.Pattern, Action: r.Action, Message: r.Message}
	}
	return coderules.New(out)
}

// redactor is tenant's output policy (nil: none).
func (p *policy) redactor(tenant string) *redact.Redactor {
	if p == nil || !p.anyRedaction {
		return nil
	}
	if r, ok := p.redact[tenant]; ok {
		return r
	}
	return p.redactDef
}

// roomFor checks that x can be added to every tenant's redaction (a
// name of its own, and under redact.MaxRules).
func (p *policy) roomFor(x redact.Rule) error {
	var errs []error
	if _, err := p.redactDef.With([]redact.Rule{x}); err != nil {
		errs = append(errs, fmt.Errorf("redaction: %w", err))
	}
	for _, name := range slices.Sorted(maps.Keys(p.redact)) {
		if _, err := p.redact[name].With([]redact.Rule{x}); err != nil {
			errs = append(errs, fmt.Errorf("tenants.%s.redaction: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w (secrets add a rule named %s)", err, x.Name)
	}
	return nil
}

// codeRules are tenant's code rules (nil: none).
func (p *policy) codeRules(tenant string) *coderules.Set {
	if p == nil {
		return nil
	}
	if s, ok := p.rules[tenant]; ok {
		return s
	}
	return p.rulesDef
}

// screen checks code against tenant's code rules: the names of the rules
// that flag it, or the denial of one, which observers hear of as an
// execution that never ran (error DeniedError).
func (m *Manager) screen(tenant string, e ExecutionEvent) ([]string, error) {
	set := m.policy.codeRules(tenant)
	if set == nil {
		return nil, nil
	}
	flags, err := set.Check(e.Language, e.Code)
	var d *coderules.Denied
	if errors.As(err, &d) {
		m.log.Info("code rule denied an execution", "request", e.RequestID, "tenant", tenant, "session", e.Session, "rule", d.Rule)
		if m.obs != nil {
			e.Error, e.CodeFlags = DeniedError, []string{d.Rule}
			m.obs.ExecutionFinished(e)
		}
	}
	return flags, err
}

// binaryMIME reports whether a rich output's type carries base64 bytes
// (an image, a PDF), which redaction leaves alone: a pattern found in
// base64 is chance, and replacing it would break the file.
func binaryMIME(mt string) bool {
	if mt == "image/svg+xml" {
		return false // text
	}
	for _, p := range []string{"image/", "audio/", "video/", "font/"} {
		if strings.HasPrefix(mt, p) {
			return true
		}
	}
	return mt == "application/pdf" || mt == "application/octet-stream"
}

// redactData redacts a rich output: every string of each value of its
// MIME bundle whose type is not binary (text/plain, text/html,
// text/markdown, text/latex, image/svg+xml, application/json and every
// *+json or other type sandboxed code can name), and its metadata. It
// returns a new map when anything changed, and the count.
func redactData(r *redact.Redactor, data map[string]json.RawMessage, meta json.RawMessage) (map[string]json.RawMessage, json.RawMessage, int) {
	if r == nil {
		return data, meta, 0
	}
	total := 0
	out := data
	for mt, raw := range data {
		if binaryMIME(mt) {
			continue
		}
		red, n := r.JSON(raw)
		if n == 0 {
			continue
		}
		if total == 0 {
			out = maps.Clone(data)
		}
		out[mt] = red
		total += n
	}
	meta, n := r.JSON(meta)
	return out, meta, total + n
}

// redactError redacts an execution's error: its name (a class code
// defines), value and traceback.
func redactError(r *redact.Redactor, e *apitype.ExecError) (*apitype.ExecError, int) {
	if r == nil || e == nil {
		return e, 0
	}
	out := *e
	var total, n int
	out.Name, n = r.String(e.Name)
	total += n
	out.Value, n = r.String(e.Value)
	total += n
	out.Traceback = make([]string, len(e.Traceback))
	for i, line := range e.Traceback {
		out.Traceback[i], n = r.String(line)
		total += n
	}
	if total == 0 {
		return e, 0
	}
	return &out, total
}

// redactChanges redacts the paths of files an execution changed (names
// code chose) in place.
func redactChanges(r *redact.Redactor, changes []apitype.FileChange) int {
	total := 0
	for i := range changes {
		var n int
		changes[i].Path, n = r.String(changes[i].Path)
		total += n
	}
	return total
}
