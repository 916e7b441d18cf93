package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/identity"
	"airlock/internal/redact"
	"airlock/internal/secrets"
)

// TestSecretsRedactedPerSession: a session's output redaction holds the
// values of its own secrets only. Code of tenant ta that prints tenant
// tb's value (a guess of it) gets its own text back as printed, so
// redaction confirms nothing; tb's session that uses the secret has it
// redacted (as is and base64-encoded) in its result, its stream, its
// commands, its history and its tool calls' arguments (which the audit
// log records); tb's session without secrets pays for no
// redaction at all.
func TestSecretsRedactedPerSession(t *testing.T) {
	// Values that differ early: base64 forms are matched a character
	// (6 bits) at a time, edges included (secrets.formsOf), so values
	// that differ only in their last bits share their base64 forms.
	const va, vb = "alpha-value-of-ta", "bravo-value-of-tb"
	cfg := testConfig()
	cfg.Tenants = map[string]config.Tenant{"tc": {Redaction: &config.Redaction{Rules: []config.RedactionRule{{Name: "ticket", Pattern: `TICKET-[0-9]{1,8}`}}}}}
	m, _, _ := newTestManager(t, &cfg)
	set := secretSet(t, nil, map[string][]secrets.Spec{
		"ta": {{Name: "K", Env: "VA", Hosts: []string{"a.test"}}},
		"tb": {{Name: "K", Env: "VB", Hosts: []string{"b.test"}}},
		"tc": {{Name: "K", Env: "VA", Hosts: []string{"c.test"}}},
	}, "VA="+va, "VB="+vb)
	if err := m.SetSecrets(set); err != nil {
		t.Fatal(err)
	}
	ctxOf := func(tenant string) context.Context {
		return identity.With(context.Background(), identity.Identity{Tenant: tenant, KeyID: "k" + tenant})
	}
	open := func(tenant string, names ...string) *Session {
		t.Helper()
		s, err := m.Create(ctxOf(tenant), apitype.CreateSessionRequest{Language: "python", Secrets: names})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// run prints text from an execution (streamed too) and a command, and
	// returns what came back of each, the history's code included.
	run := func(s *Session, text string) []string {
		t.Helper()
		ctx := ctxOf(s.Tenant())
		var streamed strings.Builder
		r, err := s.Execute(ctx, apitype.ExecuteRequest{Code: "out " + text}, func(e apitype.Event) {
			if e.Type == apitype.EventStdout {
				streamed.WriteString(e.Text)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "out " + text}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := readHistory(t, m, ctx, s.ID(), 0)
		last := h.Entries[len(h.Entries)-2] // the execution
		return []string{"result " + r.Stdout, "stream " + streamed.String(), "command " + c.Stdout, "history " + last.Code}
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(vb))
	for _, c := range []struct {
		what, tenant string
		secrets      []string
		text         string
		redacted     bool
	}{
		{"ta prints tb's value", "ta", []string{"K"}, vb, false},
		{"ta prints tb's value in base64", "ta", []string{"K"}, b64, false},
		{"ta prints its own value", "ta", []string{"K"}, va, true},
		{"tb prints its own value", "tb", []string{"K"}, vb, true},
		{"tb prints its own value in base64", "tb", []string{"K"}, b64, true},
		{"tb without the secret prints its value", "tb", nil, vb, false},
		{"tc's own rule and its secret", "tc", []string{"K"}, va + " TICKET-12", true},
	} {
		s := open(c.tenant, c.secrets...)
		for _, got := range run(s, c.text) {
			what, out, _ := strings.Cut(got, " ")
			has := strings.Contains(out, c.text)
			if c.redacted == has || c.redacted && !strings.Contains(out, "[REDACTED:"+secretRule+"]") {
				t.Errorf("%s: its %s is %q", c.what, what, out)
			}
		}
		// A tool call's arguments, as its record shows them.
		red, err := s.toolRedaction(c.tenant)
		if err != nil {
			t.Fatal(err)
		}
		args, _ := json.Marshal(map[string]string{"q": c.text})
		if got := string(red(args)); strings.Contains(got, c.text) == c.redacted {
			t.Errorf("%s: a tool call's arguments are recorded as %s", c.what, got)
		}
		if c.tenant == "tc" {
			if _, out, _ := strings.Cut(run(s, "TICKET-34")[0], " "); strings.Contains(out, "TICKET-34") || !strings.Contains(out, "[REDACTED:ticket]") {
				t.Errorf("tc's own rule: %q", out)
			}
		}
		if c.secrets == nil {
			if r, _ := s.redactor(c.tenant); r != nil {
				t.Errorf("%s: a session without secrets has a redactor (%v)", c.what, r.Rules())
			}
		}
		if err := m.Delete(s.ID()); err != nil {
			t.Fatal(err)
		}
	}
}

// A tenant's redaction with no room for the secrets' rule, or one of
// the same name, stops the server at start.
func TestSecretsRedactionRoom(t *testing.T) {
	set := secretSet(t, []secrets.Spec{{Name: "K", Env: "V", Hosts: []string{"a.test"}}}, nil, "V=value-of-the-server")
	full := make([]config.RedactionRule, redact.MaxRules)
	for i := range full {
		full[i] = config.RedactionRule{Name: "r" + strings.Repeat("x", i), Pattern: "y{1,2}"}
	}
	for name, red := range map[string]config.Redaction{
		"full":  {Rules: full},
		"taken": {Rules: []config.RedactionRule{{Name: secretRule, Pattern: "z{1,2}"}}},
	} {
		cfg := testConfig()
		cfg.Tenants = map[string]config.Tenant{"t": {Redaction: &red}}
		m, _, _ := newTestManager(t, &cfg)
		if err := m.SetSecrets(set); err == nil || !strings.Contains(err.Error(), "tenants.t.redaction") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A value's forms are as long as redaction can find.
func TestSecretsMaxForm(t *testing.T) {
	if secrets.MaxForm > redact.MaxMatch {
		t.Errorf("secrets.MaxForm %d > redact.MaxMatch %d", secrets.MaxForm, redact.MaxMatch)
	}
}

// secretSet is the server's and tenants' secrets, their values from env,
// under a fresh CA.
func secretSet(t *testing.T, server []secrets.Spec, tenants map[string][]secrets.Spec, env ...string) *secrets.Set {
	t.Helper()
	ca, err := secrets.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.New(server, tenants, ca, env)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
