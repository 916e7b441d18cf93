package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// Secret is a credential bound to hosts (package secrets): the sandbox
// of a session that opts in sees only an opaque placeholder of its own
// in an environment variable, and the egress gate swaps the value in
// for that placeholder in requests to the bound hosts only (HTTPS by
// terminating TLS with airlock's secrets CA, which the session's
// clients trust for those hosts only). The value is never in the
// configuration: it is read from a file or the server's environment
// when the server starts.
type Secret struct {
	// File holds the value (a mounted Kubernetes Secret); Env names a
	// variable of the server's environment holding it. Set one.
	File string `json:"file,omitempty"`
	Env  string `json:"env,omitempty"`
	// Hosts are the names the value may be sent to: exact DNS names (no
	// wildcard, no IP address). A session's network allowlist must let
	// it reach them: a secret opens no egress of its own.
	Hosts []string `json:"hosts"`
	// Headers are the request header fields the value may be
	// substituted in (default: any header).
	Headers []string `json:"headers,omitempty"`
	// Query lets the value be substituted in the URL's query; Body in
	// request bodies (read whole, at most 1 MiB). Both off by default:
	// what a host stores from a body or a query it may show back to
	// anyone.
	Query bool `json:"query,omitempty"`
	Body  bool `json:"body,omitempty"`
	// PlainHTTP also substitutes it in plain http:// requests to the
	// hosts (default: HTTPS only; the value then crosses the network in
	// clear).
	PlainHTTP bool `json:"plain_http,omitempty"`
	// EnvVar is the variable holding the placeholder in the sandbox
	// (default: the secret's name).
	EnvVar string `json:"env_var,omitempty"`
}

// SecretsCA is the certificate authority of placeholder secrets. Empty:
// airlock makes one (an ECDSA key, kept in data_dir/secrets) the first
// time a secret is declared. Sandboxes never trust it as it is, but a
// copy over its key whose name constraints permit only the bound hosts.
type SecretsCA struct {
	// CertFile and KeyFile are an operator's CA certificate (PEM) and
	// its private key (PEM, PKCS#8, SEC 1 or PKCS#1); set both or
	// neither.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// TrustFile is a PEM bundle of the CAs a session with secrets
	// trusts for every other host (its SSL_CERT_FILE holds them and the
	// anchor). Default: the host's trust store, read where Go's
	// crypto/x509 reads it (SSL_CERT_FILE or the first of the usual
	// bundle files of Debian, Fedora and RHEL, openSUSE and Alpine, and
	// SSL_CERT_DIR or /etc/ssl/certs and /etc/pki/tls/certs); `airlock
	// doctor` says which. Without any, a server with secrets refuses to
	// start. The gate verifies bound hosts against the host's trust
	// store whatever this says.
	TrustFile string `json:"trust_file,omitempty"`
}

// HasSecrets reports whether the server declares any secret: without,
// there is no CA, no bundle in the roots and no interception.
func (c Config) HasSecrets() bool {
	if len(c.Secrets) > 0 {
		return true
	}
	for _, t := range c.Tenants {
		if len(t.Secrets) > 0 {
			return true
		}
	}
	return false
}

// reservedEnv are variables a placeholder may not take: the session
// needs them for itself.
var reservedEnv = []string{"PATH", "HOME", "USER", "SHELL", "PWD", "TMPDIR", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "NODE_PATH", "PYTHONPATH",
	// The egress gate's proxy settings: a placeholder in their place
	// would turn the session's clients away from the gate.
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"}

func (s Secret) validate(key string) []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(key+": "+f, a...)) }
	errs = append(errs, checkSource(key, s.File, s.Env)...)
	if len(s.Hosts) == 0 || len(s.Hosts) > 64 {
		bad("hosts must name 1 to 64 hosts the value may be sent to")
	}
	for _, h := range s.Hosts {
		if _, err := netip.ParseAddr(h); err == nil {
			bad("hosts: %q is an IP address: bind a secret to a name", clip(h))
		} else if !validHostName(h) {
			bad("hosts: %q must be a DNS name in lower case, without a wildcard, port or trailing dot", clip(h))
		}
	}
	for _, h := range s.Headers {
		if !validHeaderName(h) || slices.ContainsFunc([]string{"Host", "Connection", "Transfer-Encoding", "Content-Length", "Upgrade", "Te", "Trailer"},
			func(x string) bool { return strings.EqualFold(x, h) }) {
			bad("headers: %q is not a header a secret may be substituted in", clip(h))
		}
	}
	if s.EnvVar != "" && !validEnvName(s.EnvVar) {
		bad("env_var %q is not a variable name", clip(s.EnvVar))
	}
	if slices.Contains(reservedEnv, s.EnvVar) || strings.HasPrefix(s.EnvVar, "LD_") || strings.HasPrefix(s.EnvVar, "AIRLOCK_") {
		bad("env_var %s is a variable the session needs for itself", s.EnvVar)
	}
	return errs
}

// envVar is the variable holding the placeholder of the secret named
// name.
func (s Secret) envVar(name string) string {
	if s.EnvVar == "" {
		return name
	}
	return s.EnvVar
}

// validHostName: lower-case LDH labels, at least two, each 1 to 63
// bytes, 253 in all.
func validHostName(h string) bool {
	if len(h) > 253 || !strings.Contains(h, ".") {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// validateSecrets checks the secrets and the CA's files.
func (c Config) validateSecrets() []error {
	var errs []error
	if (c.SecretsCA.CertFile == "") != (c.SecretsCA.KeyFile == "") {
		errs = append(errs, fmt.Errorf("secrets_ca: set both cert_file and key_file, or neither"))
	}
	for _, f := range []string{c.SecretsCA.CertFile, c.SecretsCA.KeyFile, c.SecretsCA.TrustFile} {
		if f != "" && (!filepath.IsAbs(f) || filepath.Clean(f) != f) {
			errs = append(errs, fmt.Errorf("secrets_ca: %q must be a clean absolute path", f))
		}
	}
	check := func(prefix string, secrets map[string]Secret) {
		for _, name := range sortedNames(secrets) {
			s := secrets[name]
			if !validEnvName(name) || len(name) > 64 {
				errs = append(errs, fmt.Errorf("%ssecrets: %q must be a variable name (letters, digits, '_') of at most 64 bytes", prefix, clip(name)))
			}
			if s.EnvVar == "" {
				s.EnvVar = name
			}
			errs = append(errs, s.validate(prefix+"secrets."+name)...)
		}
	}
	// Two secrets a session may take together never share a variable:
	// one placeholder would hide the other's.
	vars := func(prefix string, secrets map[string]Secret, taken map[string]string) {
		for _, name := range sortedNames(secrets) {
			v := secrets[name].envVar(name)
			if other, dup := taken[v]; dup {
				errs = append(errs, fmt.Errorf("%ssecrets.%s: env_var %s is also %s's: give each secret its own variable", prefix, name, v, other))
				continue
			}
			taken[v] = prefix + "secrets." + name
		}
	}
	check("", c.Secrets)
	vars("", c.Secrets, map[string]string{})
	for _, tn := range sortedNames(c.Tenants) {
		t := c.Tenants[tn]
		check("tenants."+tn+".", t.Secrets)
		for name := range t.Secrets {
			if _, dup := c.Secrets[name]; dup {
				errs = append(errs, fmt.Errorf("tenants.%s.secrets.%s: the server declares a secret of that name for every tenant", tn, name))
			}
		}
		taken := map[string]string{}
		for _, name := range sortedNames(c.Secrets) {
			taken[c.Secrets[name].envVar(name)] = "secrets." + name
		}
		vars("tenants."+tn+".", t.Secrets, taken)
	}
	return errs
}
