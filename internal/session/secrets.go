package session

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/redact"
	"airlock/internal/secrets"
)

// Where a session's clients find the CA that vouches for its secrets'
// bound hosts (root files, see SecretsFiles): the anchor alone, and the
// host's trust store with the anchor added.
const (
	SecretsDir    = "/opt/airlock/secrets"
	SecretsAnchor = SecretsDir + "/anchor.pem"
	SecretsBundle = SecretsDir + "/ca-bundle.pem"
)

// SecretsFiles are the root files of a server with secrets: the anchor
// (PEM) and a bundle of system, the host's trust store, with it.
func SecretsFiles(anchor, system []byte) map[string]string {
	bundle := append(append([]byte{}, system...), '\n')
	return map[string]string{SecretsAnchor: string(anchor), SecretsBundle: string(append(bundle, anchor...))}
}

// SetSecrets makes the operator's secrets available to sessions (nil:
// the server declares none); call it before the manager serves anything.
// It checks that every tenant's output redaction has room for the rule
// a session's secrets add to it (see Session.redactor).
func (m *Manager) SetSecrets(set *secrets.Set) error {
	m.secrets = set
	if set == nil {
		return nil
	}
	return m.policy.roomFor(redact.Rule{Name: secretRule, Pattern: "x"})
}

// secretRule names the rule of a session's secrets in its redaction.
const secretRule = "airlock-secret"

// secretRules is one redaction rule matching every form of a session's
// values (nil: none).
func secretRules(forms []string) []redact.Rule {
	if len(forms) == 0 {
		return nil
	}
	alts := make([]string, len(forms))
	for i, f := range forms {
		alts[i] = regexp.QuoteMeta(f)
	}
	r := redact.Rule{Name: secretRule, Pattern: "(?:" + strings.Join(alts, "|") + ")"}
	if !slices.ContainsFunc(forms, func(f string) bool { return strings.ContainsFunc(f, func(c rune) bool { return c >= utf8.RuneSelf }) }) {
		// Every match is one of them: text without any is not searched,
		// and a stream holds back only where one may begin.
		r.Literals = forms
	}
	return []redact.Rule{r}
}

// redactor is the output policy of the session's code run for tenant:
// tenant's, with the values of the session's own secrets added, never
// another session's or tenant's (code that prints a guess of another
// tenant's value sees its own text, or redaction would confirm the
// guess). A session without secrets shares its tenant's, at no cost.
func (s *Session) redactor(tenant string) (*redact.Redactor, error) {
	base := s.m.policy.redactor(tenant)
	if s.secrets == nil {
		return base, nil
	}
	s.redMu.Lock()
	defer s.redMu.Unlock()
	if r, ok := s.reds[tenant]; ok {
		return r, nil
	}
	r, err := base.With(secretRules(s.secrets.Forms()))
	if err != nil {
		// Never the error itself: its pattern holds the values.
		return nil, fmt.Errorf("%w: the output redaction of the session's secrets could not be built", errdefs.ErrUnavailable)
	}
	if s.reds == nil {
		s.reds = map[string]*redact.Redactor{}
	}
	if len(s.reds) < 16 {
		s.reds[tenant] = r
	}
	return r, nil
}

// resolveSecrets checks a request's secrets against its tenant's and
// gives them their placeholders (nil: none asked).
func (m *Manager) resolveSecrets(tenant string, asked []string) (*secrets.Session, error) {
	if len(asked) == 0 {
		return nil, nil
	}
	if m.secrets == nil {
		return nil, fmt.Errorf("%w: secrets: this server declares no secrets (its operator declares them under \"secrets\" in the configuration)", errdefs.ErrInvalidArgument)
	}
	names, err := m.secrets.Resolve(tenant, asked)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	ss, err := m.secrets.NewSession(tenant, names)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	if _, err := redact.New(nil, secretRules(ss.Forms())); err != nil {
		return nil, fmt.Errorf("%w: secrets: %s are too long together for the output redaction to look for; ask for fewer", errdefs.ErrInvalidArgument, strings.Join(names, ", "))
	}
	return ss, nil
}

// errSecretEnv: a client variable would hide a placeholder.
var errSecretEnv = errors.New("env sets a variable a secret's placeholder takes")

// secretsEnv adds the placeholders to env, and what points the usual
// clients (OpenSSL and Python's ssl, requests, httpx, curl, git, Go,
// node) at the bundle that trusts airlock's anchor; a CA variable the
// client set is kept. A client variable named like a placeholder's is
// refused: the code would use the client's value, not the placeholder.
func secretsEnv(env, user map[string]string, ss *secrets.Session) (map[string]string, error) {
	if ss == nil {
		return env, nil
	}
	for k, v := range ss.Env() {
		if _, set := user[k]; set {
			return nil, fmt.Errorf("%w: %w: %s (drop it from env: the secret's placeholder is put there)", errdefs.ErrInvalidArgument, errSecretEnv, k)
		}
		env[k] = v
	}
	for k, v := range map[string]string{"SSL_CERT_FILE": SecretsBundle, "REQUESTS_CA_BUNDLE": SecretsBundle, "CURL_CA_BUNDLE": SecretsBundle,
		"GIT_SSL_CAINFO": SecretsBundle, "NODE_EXTRA_CA_CERTS": SecretsAnchor} {
		if _, set := user[k]; !set {
			env[k] = v
		}
	}
	return env, nil
}

// Secrets describes the secrets the session's code may use.
func (s *Session) Secrets() []apitype.SecretInfo {
	return secretInfos(s.secrets)
}

func secretInfos(ss *secrets.Session) []apitype.SecretInfo {
	if ss == nil {
		return nil
	}
	var out []apitype.SecretInfo
	for _, i := range ss.Infos() {
		out = append(out, apitype.SecretInfo{Name: i.Name, EnvVar: i.EnvVar, Hosts: i.Hosts})
	}
	return out
}

// SecretsFor lists the secrets tenant's sessions may opt in to.
func (m *Manager) SecretsFor(tenant string) []apitype.SecretInfo {
	out := []apitype.SecretInfo{}
	if m.secrets == nil {
		return out
	}
	for _, i := range m.secrets.Describe(tenant) {
		out = append(out, apitype.SecretInfo{Name: i.Name, EnvVar: i.EnvVar, Hosts: i.Hosts})
	}
	return out
}
