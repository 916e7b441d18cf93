package config

import (
	"strings"
	"testing"
)

// TestSecretsEnvVars: a placeholder never takes a variable the session
// needs (the gate's proxy settings included), and two secrets a session
// may take together never share one.
func TestSecretsEnvVars(t *testing.T) {
	sec := func(envVar string) Secret {
		return Secret{File: "/run/secrets/x", Hosts: []string{"api.example.com"}, EnvVar: envVar}
	}
	for _, c := range []struct {
		name    string
		server  map[string]Secret
		tenants map[string]map[string]Secret
		want    string // "" for valid
	}{
		{"distinct", map[string]Secret{"A_KEY": sec(""), "B_KEY": sec("")}, nil, ""},
		{"two server secrets, one variable", map[string]Secret{"A_KEY": sec("TOKEN"), "B_KEY": sec("TOKEN")}, nil, "env_var TOKEN is also secrets.A_KEY's"},
		{"default name taken by another's env_var", map[string]Secret{"TOKEN": sec(""), "B_KEY": sec("TOKEN")}, nil, "env_var TOKEN is also"},
		{"tenant's against the server's", map[string]Secret{"A_KEY": sec("TOKEN")}, map[string]map[string]Secret{"t1": {"B_KEY": sec("TOKEN")}}, "tenants.t1.secrets.B_KEY: env_var TOKEN is also secrets.A_KEY's"},
		{"two tenants may each use one", nil, map[string]map[string]Secret{"t1": {"A_KEY": sec("TOKEN")}, "t2": {"B_KEY": sec("TOKEN")}}, ""},
		{"proxy variable", map[string]Secret{"A_KEY": sec("HTTPS_PROXY")}, nil, "env_var HTTPS_PROXY is a variable the session needs"},
		{"lower-case proxy variable", map[string]Secret{"A_KEY": sec("no_proxy")}, nil, "env_var no_proxy is a variable the session needs"},
	} {
		cfg := Default()
		cfg.Secrets = c.server
		for tn, s := range c.tenants {
			if cfg.Tenants == nil {
				cfg.Tenants = map[string]Tenant{}
			}
			cfg.Tenants[tn] = Tenant{Secrets: s}
		}
		var got []string
		for _, err := range cfg.validateSecrets() {
			got = append(got, err.Error())
		}
		all := strings.Join(got, "\n")
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: refused: %s", c.name, all)
		case c.want != "" && !strings.Contains(all, c.want):
			t.Errorf("%s: errors %q, want one containing %q", c.name, all, c.want)
		}
	}
}
