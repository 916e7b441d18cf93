package secrets

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"airlock/internal/privdir"
)

// CA issues the certificates the gate presents to a sandbox for bound
// hosts. Its key stays on the host. What sandboxes trust is not its own
// certificate but an anchor over the same key and name (Anchor) whose
// name constraints permit only the bound hosts and no IP address, so
// that nothing it signs can vouch for another name to a client that
// checks name constraints (OpenSSL, Go, NSS, Node all do).
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	now    func() time.Time
}

// Files of a CA airlock made, under its directory.
const (
	certFile = "ca.pem"
	keyFile  = "ca-key.pem"
)

// leafLife is how long a certificate for a bound host is valid; it is
// made again when a third of that is left.
const leafLife = 7 * 24 * time.Hour

// LoadCA reads an operator's CA: a PEM certificate and its PEM private
// key (ECDSA, RSA or Ed25519, PKCS#8, SEC 1 or PKCS#1).
func LoadCA(certPath, keyPath string) (*CA, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("secrets CA certificate: %v", errors.Unwrap(err))
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("secrets CA key: %v", errors.Unwrap(err))
	}
	return parseCA(cb, kb)
}

func parseCA(cb, kb []byte) (*CA, error) {
	blk, _ := pem.Decode(cb)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("secrets CA certificate: not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secrets CA certificate: %v", err)
	}
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, errors.New("secrets CA key: not a PEM key")
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kblk.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kblk.Bytes); err != nil {
			key, err = x509.ParsePKCS1PrivateKey(kblk.Bytes)
		}
	}
	signer, ok := key.(crypto.Signer)
	if err != nil || !ok {
		return nil, errors.New("secrets CA key: not a PKCS#8, SEC 1 or PKCS#1 private key")
	}
	if !publicEqual(signer.Public(), cert.PublicKey) {
		return nil, errors.New("secrets CA key: it is not the certificate's key")
	}
	if !cert.IsCA {
		return nil, errors.New("secrets CA certificate: not a CA (basicConstraints)")
	}
	return &CA{cert: cert, key: signer, leaves: map[string]*tls.Certificate{}, now: time.Now}, nil
}

func publicEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// LoadOrCreateCA reads the CA airlock keeps in dir, making it (an ECDSA
// P-256 key, readable by the server's user only) the first time. dir and
// what it holds must be the server's own (package privdir): whoever else
// could write them could put in a CA of theirs, and read what sessions
// send to the hosts their secrets are bound to.
func LoadOrCreateCA(dir string) (*CA, error) {
	if err := privdir.Ensure(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets CA: %v", err)
	}
	cp, kp := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	_, cerr := privdir.File(cp)
	_, kerr := privdir.File(kp)
	for _, err := range []error{cerr, kerr} {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("secrets CA: %v", err)
		}
	}
	if kerr == nil && cerr == nil {
		return LoadCA(cp, kp)
	}
	// The certificate is written before the key, each by rename: a crash
	// leaves no key (made again with a new certificate) or both. A key
	// without its certificate (one deleted by hand) is replaced too:
	// sandboxes learn the anchor from the server at each start.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var r [8]byte
	rand.Read(r[:])
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("airlock secrets CA %x", r), Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	cb := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	if err := writeFile(cp, cb, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(kp, kb, 0o600); err != nil {
		return nil, err
	}
	return parseCA(cb, kb)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("secrets CA: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("secrets CA: %v", err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Anchor is what a sandbox trusts, PEM: a self-signed certificate over
// the CA's name and key whose name constraints (critical) permit hosts
// only — a DNS name constraint also permits the names under it, which
// airlock never issues for — and exclude every IP address.
func (ca *CA) Anchor(hosts []string) ([]byte, error) {
	if len(hosts) == 0 {
		return nil, errors.New("an anchor needs at least one host")
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     ca.cert.Subject,
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    ca.cert.NotAfter,
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign,
		SubjectKeyId:                ca.keyID(),
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
		ExcludedIPRanges:            []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, ca.key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// keyID is the subject key id of the anchor and the authority key id
// of every leaf: the CA certificate's own if it has one.
func (ca *CA) keyID() []byte {
	if len(ca.cert.SubjectKeyId) > 0 {
		return ca.cert.SubjectKeyId
	}
	der, _ := x509.MarshalPKIXPublicKey(ca.key.Public())
	sum := sha256.Sum256(der)
	return sum[:20]
}

// Leaf is the certificate the gate presents for host, made on first use
// and kept while it has a third of its life left.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	now := ca.now()
	if c, ok := ca.leaves[host]; ok && c.Leaf.NotAfter.Sub(now) > leafLife/3 {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	parent := *ca.cert
	parent.SubjectKeyId = ca.keyID()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &parent, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	ca.leaves[host] = c
	return c, nil
}

// anchorFile keeps the anchor in the CA's directory: sandbox roots hold
// it, and a new one at each start would make every root anew.
const anchorFile = "anchor.pem"

// StoredAnchor is Anchor(hosts), kept in dir and reused while it is over
// the CA's key, for exactly hosts, and far from expiring.
func (ca *CA) StoredAnchor(dir string, hosts []string) ([]byte, error) {
	p := filepath.Join(dir, anchorFile)
	if b, err := os.ReadFile(p); err == nil {
		if blk, _ := pem.Decode(b); blk != nil {
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil && slices.Equal(c.PermittedDNSDomains, hosts) &&
				bytes.Equal(c.SubjectKeyId, ca.keyID()) && publicEqual(ca.key.Public(), c.PublicKey) && c.NotAfter.After(ca.now().AddDate(0, 1, 0)) {
				return b, nil
			}
		}
	}
	b, err := ca.Anchor(hosts)
	if err != nil {
		return nil, err
	}
	if err := privdir.Ensure(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets CA: %v", err)
	}
	return b, writeFile(p, b, 0o644)
}
