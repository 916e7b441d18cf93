package secrets

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Where the host's trust store is looked for: the places Go's
// crypto/x509 reads on Linux (which the gate verifies bound hosts with),
// in its order: the first bundle file found, and every directory.
var (
	bundleFiles = []string{
		"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
		"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
		"/etc/ssl/ca-bundle.pem",                            // openSUSE
		"/etc/pki/tls/cacert.pem",                           // OpenELEC
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7 and later
		"/etc/ssl/cert.pem",                                 // Alpine
	}
	bundleDirs = []string{"/etc/ssl/certs", "/etc/pki/tls/certs"}
)

// TrustStore is the CAs a sandbox with secrets trusts besides airlock's
// anchor (for every host a secret is not bound to).
type TrustStore struct {
	// Sources are the files and directories the certificates came from.
	Sources []string
	// PEM holds each certificate once.
	PEM []byte
	// Count is how many certificates it holds.
	Count int
}

// ErrNoTrustStore: no certificate was found where the host's trust store
// is looked for.
var ErrNoTrustStore = errors.New("no CA certificates found")

// LoadTrustStore reads file (the operator's: it must hold a certificate)
// or, when file is empty, the host's trust store from where Go's
// crypto/x509 reads it: SSL_CERT_FILE or the first of the usual bundle
// files, and the certificates in SSL_CERT_DIR's directories or the
// usual ones. getenv is the server's environment (nil: the process's).
func LoadTrustStore(file string, getenv func(string) string) (TrustStore, error) {
	return loadTrustStore("", file, getenv)
}

// loadTrustStore is LoadTrustStore with every host path under root.
func loadTrustStore(root, file string, getenv func(string) string) (TrustStore, error) {
	var ts TrustStore
	seen := map[string]bool{}
	add := func(data []byte) int {
		n := 0
		for len(data) > 0 {
			var b *pem.Block
			b, data = pem.Decode(data)
			if b == nil {
				break
			}
			if b.Type != "CERTIFICATE" || len(b.Headers) > 0 || seen[string(b.Bytes)] {
				continue
			}
			seen[string(b.Bytes)] = true
			ts.PEM = append(ts.PEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})...)
			n++
		}
		ts.Count += n
		return n
	}
	if file != "" {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return TrustStore{}, fmt.Errorf("trust_file: cannot read %s: %v", file, errors.Unwrap(err))
		}
		if add(data) == 0 {
			return TrustStore{}, fmt.Errorf("trust_file: %s holds no PEM certificate", file)
		}
		ts.Sources = []string{file}
		return ts, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	files, dirs := bundleFiles, bundleDirs
	if f := getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	if d := getenv("SSL_CERT_DIR"); d != "" {
		dirs = strings.Split(d, ":")
	}
	for _, f := range files {
		if data, err := os.ReadFile(filepath.Join(root, f)); err == nil {
			if add(data) > 0 {
				ts.Sources = append(ts.Sources, f)
			}
			break // as Go: the first file read, certificates or not
		}
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		n := 0
		for _, e := range ents {
			if sameDirLink(filepath.Join(root, d), e) {
				continue // OpenSSL's hash links: the file is read by its name
			}
			if data, err := os.ReadFile(filepath.Join(root, d, e.Name())); err == nil {
				n += add(data)
			}
		}
		if n > 0 {
			ts.Sources = append(ts.Sources, d)
		}
	}
	if ts.Count == 0 {
		where := strings.Join(files, ", ") + " and the directories " + strings.Join(dirs, ", ")
		return TrustStore{}, fmt.Errorf("%w in %s: sandboxes with secrets would trust no host but the bound ones; install the host's CA certificates or set secrets_ca.trust_file", ErrNoTrustStore, where)
	}
	return ts, nil
}

// sameDirLink reports whether e is a symbolic link to a file of its own
// directory (a name without a slash), which Go's crypto/x509 skips too.
func sameDirLink(dir string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := os.Readlink(filepath.Join(dir, e.Name()))
	return err == nil && !strings.Contains(target, "/")
}

// Describe says where the trust store came from, for doctor and logs.
func (ts TrustStore) Describe() string {
	return fmt.Sprintf("%d CA certificates from %s", ts.Count, strings.Join(ts.Sources, " and "))
}
