package server

import (
	"fmt"
	"path/filepath"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/secrets"
	"airlock/internal/session"
)

// loadSecrets reads the secrets of cfg and their CA, and makes the root
// files their sandboxes trust it from (nothing when none is declared).
// A missing value or a bad CA stops the server.
func loadSecrets(cfg config.Config) (*secrets.Set, map[string]string, error) {
	if !cfg.HasSecrets() {
		return nil, nil, nil
	}
	dir := filepath.Join(cfg.DataDir, "secrets")
	var ca *secrets.CA
	var err error
	if cfg.SecretsCA.CertFile != "" {
		ca, err = secrets.LoadCA(cfg.SecretsCA.CertFile, cfg.SecretsCA.KeyFile)
	} else {
		ca, err = secrets.LoadOrCreateCA(dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: secrets_ca: %v", errdefs.ErrInvalidArgument, err)
	}
	specs := func(m map[string]config.Secret) []secrets.Spec {
		var out []secrets.Spec
		for name, s := range m {
			out = append(out, secrets.Spec{Name: name, File: s.File, Env: s.Env, Hosts: s.Hosts, Headers: s.Headers,
				Query: s.Query, Body: s.Body, PlainHTTP: s.PlainHTTP, EnvVar: s.EnvVar})
		}
		return out
	}
	tenants := map[string][]secrets.Spec{}
	for tn, t := range cfg.Tenants {
		tenants[tn] = specs(t.Secrets)
	}
	set, err := secrets.New(specs(cfg.Secrets), tenants, ca, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	anchor, err := ca.StoredAnchor(dir, set.Hosts())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: secrets CA: %v", errdefs.ErrUnavailable, err)
	}
	trust, _, err := SecretsTrust(cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	return set, session.SecretsFiles(anchor, trust.PEM), nil
}

// SecretsTrust is what sessions with secrets trust besides the anchor
// (the operator's secrets_ca.trust_file, or the host's trust store), and
// what the gate verifies bound hosts against (the host's, as Go's
// crypto/x509 finds it; getenv is the server's environment, nil: the
// process's). Either missing stops the server: its sessions would reach
// no other HTTPS host, or none of their bound hosts.
func SecretsTrust(cfg config.Config, getenv func(string) string) (sandbox, gate secrets.TrustStore, err error) {
	if gate, err = secrets.LoadTrustStore("", getenv); err != nil {
		return sandbox, gate, fmt.Errorf("%w: secrets: the gate verifies bound hosts against the host's trust store: %v", errdefs.ErrUnavailable, err)
	}
	sandbox = gate
	if cfg.SecretsCA.TrustFile != "" {
		if sandbox, err = secrets.LoadTrustStore(cfg.SecretsCA.TrustFile, getenv); err != nil {
			return sandbox, gate, fmt.Errorf("%w: secrets_ca.%v", errdefs.ErrUnavailable, err)
		}
	}
	return sandbox, gate, nil
}
