package doctor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/secrets"
)

// With secrets declared, doctor names the CA certificates their sessions
// trust and those the gate verifies bound hosts against, and fails, saying
// what to set, when either is missing; without secrets it says nothing.
func TestDoctorSecretsTrust(t *testing.T) {
	dir := t.TempDir()
	pemOf := func(name string) string {
		ca, err := secrets.LoadOrCreateCA(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := ca.Anchor([]string{"x.test"})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".pem")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	host, mine := pemOf("host"), pemOf("mine")
	empty := t.TempDir()
	withSecret := config.Default()
	withSecret.Secrets = map[string]config.Secret{"K": {Env: "K", Hosts: []string{"api.test"}}}
	withFile := withSecret
	withFile.SecretsCA.TrustFile = mine
	missing := withSecret
	missing.SecretsCA.TrustFile = filepath.Join(dir, "none.pem")
	for _, c := range []struct {
		name string
		cfg  config.Config
		env  map[string]string
		want []string // in the printed report; none: no line
		ok   bool
	}{
		{"no secrets", config.Default(), nil, nil, true},
		{"the host's", withSecret, map[string]string{"SSL_CERT_FILE": host, "SSL_CERT_DIR": empty},
			[]string{"ok    secrets trust  sessions with secrets trust 1 CA certificates from " + host, "the gate verifies bound hosts against 1 CA certificates from " + host}, true},
		{"the operator's", withFile, map[string]string{"SSL_CERT_FILE": host, "SSL_CERT_DIR": empty},
			[]string{"sessions with secrets trust 1 CA certificates from " + mine, "the gate verifies bound hosts against 1 CA certificates from " + host}, true},
		{"the operator's missing", missing, map[string]string{"SSL_CERT_FILE": host, "SSL_CERT_DIR": empty},
			[]string{"FAIL  secrets trust", "cannot read " + missing.SecretsCA.TrustFile, "refuses to start"}, false},
		{"none on the host", withFile, map[string]string{"SSL_CERT_FILE": filepath.Join(empty, "x"), "SSL_CERT_DIR": empty},
			[]string{"FAIL  secrets trust", "no CA certificates found", "set secrets_ca.trust_file"}, false},
	} {
		r := &Report{}
		secretsChecks(r, c.cfg, func(k string) string { return c.env[k] })
		var out bytes.Buffer
		r.Print(&out)
		if r.OK() != c.ok || (c.want == nil) != (len(r.Checks) == 0) {
			t.Errorf("%s: ok %v, %d checks:\n%s", c.name, r.OK(), len(r.Checks), out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: the report lacks %q:\n%s", c.name, w, out.String())
			}
		}
	}
}
