package server

import (
	"fmt"
	"os"
	"path/filepath"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/secrets"
	"airlock/internal/session"
)

// systemBundle is the host's trust store, which the sandboxes' bundle
// extends with the secrets' anchor (Debian's and Ubuntu's path).
var systemBundle = "/etc/ssl/certs/ca-certificates.crt"

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
	system, _ := os.ReadFile(systemBundle) // none: the bundle is the anchor alone
	return set, session.SecretsFiles(anchor, system), nil
}
