package session

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

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
// the server declares none) and teaches every tenant's output redaction
// their values; call it before the manager serves anything.
func (m *Manager) SetSecrets(set *secrets.Set) error {
	m.secrets = set
	if set == nil {
		return nil
	}
	p, err := newPolicy(m.cfg, secretRules(set.Values()))
	if err != nil {
		return err
	}
	m.policy = p
	return nil
}

// secretRules is one redaction rule matching every form of values.
func secretRules(values []string) []redact.Rule {
	if len(values) == 0 {
		return nil
	}
	var alts []string
	for _, v := range values {
		for _, f := range secrets.Forms(v) {
			alts = append(alts, regexp.QuoteMeta(f))
		}
	}
	return []redact.Rule{{Name: "airlock-secret", Pattern: "(?:" + strings.Join(alts, "|") + ")"}}
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
