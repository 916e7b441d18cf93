package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The trust store of sessions with secrets is found where Go's
// crypto/x509 looks on every usual distribution, in its order, or taken
// from the operator's file; none found is an error that says what to do.
func TestLoadTrustStore(t *testing.T) {
	certs := make([][]byte, 4)
	for i := range certs {
		ca, err := LoadOrCreateCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if certs[i], err = ca.Anchor([]string{"x.test"}); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c, d := string(certs[0]), string(certs[1]), string(certs[2]), string(certs[3])
	for _, tc := range []struct {
		name  string
		files map[string]string // under the root
		env   map[string]string
		file  string // trust_file
		want  []string
		certs int
		err   string
	}{
		{name: "debian", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": a + b}, want: []string{"/etc/ssl/certs/ca-certificates.crt"}, certs: 2},
		// Debian's directory holds the bundle and each certificate: once each.
		{name: "debian with its directory", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": a + b, "/etc/ssl/certs/a.pem": a},
			want: []string{"/etc/ssl/certs/ca-certificates.crt"}, certs: 2},
		{name: "fedora", files: map[string]string{"/etc/pki/tls/certs/ca-bundle.crt": a}, want: []string{"/etc/pki/tls/certs/ca-bundle.crt"}, certs: 1},
		{name: "rhel", files: map[string]string{"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem": a + c}, want: []string{"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"}, certs: 2},
		{name: "opensuse", files: map[string]string{"/etc/ssl/ca-bundle.pem": b}, want: []string{"/etc/ssl/ca-bundle.pem"}, certs: 1},
		{name: "alpine", files: map[string]string{"/etc/ssl/cert.pem": c}, want: []string{"/etc/ssl/cert.pem"}, certs: 1},
		{name: "first file wins", files: map[string]string{"/etc/ssl/cert.pem": c, "/etc/ssl/ca-bundle.pem": b}, want: []string{"/etc/ssl/ca-bundle.pem"}, certs: 1},
		{name: "a directory only", files: map[string]string{"/etc/ssl/certs/one.pem": a, "/etc/ssl/certs/two.crt": b, "/etc/ssl/certs/README": "not a cert"},
			want: []string{"/etc/ssl/certs"}, certs: 2},
		{name: "a file and a directory", files: map[string]string{"/etc/ssl/cert.pem": c, "/etc/pki/tls/certs/extra.pem": d},
			want: []string{"/etc/ssl/cert.pem", "/etc/pki/tls/certs"}, certs: 2},
		{name: "SSL_CERT_FILE", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": a, "/opt/mine.pem": d}, env: map[string]string{"SSL_CERT_FILE": "/opt/mine.pem"},
			want: []string{"/opt/mine.pem", "/etc/ssl/certs"}, certs: 2},
		{name: "SSL_CERT_DIR", files: map[string]string{"/opt/d1/x.pem": b, "/opt/d2/y.pem": c, "/etc/ssl/certs/z.pem": d},
			env: map[string]string{"SSL_CERT_DIR": "/opt/d1:/opt/d2"}, want: []string{"/opt/d1", "/opt/d2"}, certs: 2},
		{name: "trust_file", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": a, "/opt/trust.pem": d + c}, file: "/opt/trust.pem",
			want: []string{"/opt/trust.pem"}, certs: 2},
		{name: "trust_file missing", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": a}, file: "/opt/none.pem", err: "cannot read /opt/none.pem"},
		{name: "trust_file without a certificate", files: map[string]string{"/opt/trust.pem": "junk"}, file: "/opt/trust.pem", err: "holds no PEM certificate"},
		{name: "nothing", err: "install the host's CA certificates or set secrets_ca.trust_file"},
		{name: "an empty bundle", files: map[string]string{"/etc/ssl/certs/ca-certificates.crt": ""}, err: "no CA certificates found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, data := range tc.files {
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ts, err := loadTrustStore(root, tc.file, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if tc.file == "" && !errors.Is(err, ErrNoTrustStore) {
					t.Errorf("%v is not ErrNoTrustStore", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ts.Sources, ",") != strings.Join(tc.want, ",") || ts.Count != tc.certs || bytes.Count(ts.PEM, []byte("BEGIN CERTIFICATE")) != tc.certs {
				t.Errorf("sources %v, %d certificates (%d in the PEM); want %v, %d", ts.Sources, ts.Count, bytes.Count(ts.PEM, []byte("BEGIN CERTIFICATE")), tc.want, tc.certs)
			}
		})
	}
}
