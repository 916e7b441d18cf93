package secrets

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"airlock/internal/testenv"
)

func TestReplacerEverySplit(t *testing.T) {
	old := [][]byte{[]byte("SECRETVALUE"), []byte("U0VDUkVU"), []byte("SECRET")}
	new := [][]byte{[]byte("<ph1>"), []byte("<ph2>"), []byte("<ph3>")}
	in := "a SECRETVALUE b U0VDUkVU c SECRET d SECRETVALUESECRETVALUE e SECRETVAL"
	want := "a <ph1> b <ph2> c <ph3> d <ph1><ph1> e <ph3>VAL"
	for split := 0; split <= len(in); split++ {
		r := io.MultiReader(iotest.OneByteReader(strings.NewReader(in[:split])), strings.NewReader(in[split:]))
		got, err := io.ReadAll(NewReplacer(r, old, new))
		if err != nil || string(got) != want {
			t.Fatalf("split %d: %q, %v", split, got, err)
		}
	}
	// An end that cannot start a secret passes at once (a stream's
	// event is not held back).
	pr, pw := io.Pipe()
	rp := NewReplacer(pr, old, new)
	go pw.Write([]byte("data: x\n\n"))
	buf := make([]byte, 64)
	n, err := rp.Read(buf)
	if err != nil || string(buf[:n]) != "data: x\n\n" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	go pw.Write([]byte("data: SECR"))
	if n, _ = rp.Read(buf); string(buf[:n]) != "data: " {
		t.Fatalf("a possible start was not held: %q", buf[:n])
	}
	pw.Close()
}

func newSet(t *testing.T, specs []Spec, env ...string) (*Set, error) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return New(specs, nil, ca, env)
}

func TestNewRefusesBadValues(t *testing.T) {
	for name, v := range map[string]string{
		"newline": "sk-abcdefgh\r\nX-Evil: 1", "tab": "sk-abc\tdefgh", "short": "sk-1", "empty": "",
		"long": strings.Repeat("x", MaxValue+1), "del": "sk-abcdefgh\x7f",
		// Within MaxValue, but three times as long URL-escaped.
		"escaped": strings.Repeat("%?&", MaxForm/9+1),
	} {
		_, err := newSet(t, []Spec{{Name: "K", Env: "V", Hosts: []string{"h.test"}}}, "V="+v)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if len(v) >= 4 && strings.Contains(err.Error(), v[:4]) || name == "escaped" && !strings.Contains(err.Error(), "URL-escaped") {
			t.Errorf("%s: the error shows the value: %v", name, err)
		}
	}
	if _, err := newSet(t, []Spec{{Name: "K", Env: "V", Hosts: []string{"h.test"}}}, "V=sk-fine-value-123"); err != nil {
		t.Fatal(err)
	}
}

func TestSessionSubstitute(t *testing.T) {
	set, err := newSet(t, []Spec{
		{Name: "A", Env: "VA", Hosts: []string{"a.test"}, Headers: []string{"Authorization"}},
		{Name: "B", Env: "VB", Hosts: []string{"b.test"}, Query: true, EnvVar: "B_KEY"},
	}, "VA=value-of-a-123", "VB=value of b&=")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Resolve("", []string{"A", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Resolve(nope) = %v", err)
	}
	ss, _ := set.NewSession("", []string{"A", "B"})
	ss2, _ := set.NewSession("", []string{"A", "B"})
	env := ss.Env()
	a, b := env["A"], env["B_KEY"]
	if a == "" || b == "" || a == ss2.Env()["A"] {
		t.Fatalf("placeholders %v (a second session's must differ)", env)
	}
	for _, c := range []struct {
		in, host string
		where    Where
		field    string
		tls      bool
		want     string
	}{
		{"Bearer " + a, "a.test", InHeader, "Authorization", true, "Bearer value-of-a-123"},
		{"Bearer " + a, "a.test", InHeader, "X-Other", true, "Bearer " + a},        // not its header
		{"Bearer " + a, "b.test", InHeader, "Authorization", true, "Bearer " + a},  // not its host
		{"Bearer " + a, "a.test", InHeader, "Authorization", false, "Bearer " + a}, // plain HTTP
		{"k=" + b, "b.test", InQuery, "", true, "k=value+of+b%26%3D"},
		{"k=" + a, "a.test", InQuery, "", true, "k=" + a}, // A may not go in the query
		{b + a, "b.test", InBody, "", true, b + a},
	} {
		if got, _ := ss.Substitute(c.in, c.host, c.where, c.field, c.tls); got != c.want {
			t.Errorf("Substitute(%q, %s, %v, %s, %v) = %q, want %q", c.in, c.host, c.where, c.field, c.tls, got, c.want)
		}
	}
}

// TestCAAfterACrash: whichever of its two files a crash (or a hand) left
// alone, the server starts with a whole CA; a whole pair is kept.
func TestCAAfterACrash(t *testing.T) {
	for _, lost := range []string{certFile, keyFile} {
		dir := t.TempDir()
		if _, err := LoadOrCreateCA(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, lost)); err != nil {
			t.Fatal(err)
		}
		ca, err := LoadOrCreateCA(dir)
		if err != nil {
			t.Fatalf("%s lost: %v", lost, err)
		}
		again, err := LoadCA(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
		if err != nil || !again.cert.Equal(ca.cert) {
			t.Fatalf("%s lost: the pair written is not whole: %v", lost, err)
		}
	}
}

// TestAnchorNameConstrained: what a sandbox trusts vouches for the bound
// hosts only, whatever the CA's key signs, to Go, Python's ssl (OpenSSL),
// curl and node.
func TestAnchorNameConstrained(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := LoadOrCreateCA(dir); err != nil || !again.cert.Equal(ca.cert) {
		t.Fatalf("the CA was not kept: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, keyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	anchor, err := ca.Anchor([]string{"bound.test"})
	if err != nil {
		t.Fatal(err)
	}
	anchorFile := filepath.Join(dir, "anchor.pem")
	os.WriteFile(anchorFile, anchor, 0o644)
	// The CA's key signs for any name: only the anchor's constraints
	// stop an unbound one.
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf(h.ServerName)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(anchor)
	blk, _ := pem.Decode(anchor)
	cert, _ := x509.ParseCertificate(blk.Bytes)
	if !cert.PermittedDNSDomainsCritical || len(cert.ExcludedIPRanges) != 2 {
		t.Fatalf("anchor constraints: %v %v", cert.PermittedDNSDomains, cert.ExcludedIPRanges)
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{{"bound.test", true}, {"unbound.test", false}, {"bound.test.evil", false}} {
		// Go
		conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: pool, ServerName: c.name})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("Go, %s: %v, want ok=%v", c.name, err, c.ok)
		}
		// Python's ssl (OpenSSL)
		py := exec.Command("python3", "-c", `import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
with socket.create_connection(("127.0.0.1", int(sys.argv[2]))) as s:
    with ctx.wrap_socket(s, server_hostname=sys.argv[3]) as t:
        print("verified")`, anchorFile, port, c.name)
		py.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		out, err := py.CombinedOutput()
		if (err == nil) != c.ok || (!c.ok && !strings.Contains(string(out), "CERTIFICATE_VERIFY_FAILED")) {
			t.Errorf("python ssl, %s: %v %s", c.name, err, out)
		}
		// curl
		if _, err := exec.LookPath("curl"); err != nil {
			testenv.Skip(t, "curl is not installed")
		} else {
			cu := exec.Command("curl", "-sS", "--max-time", "10", "--cacert", anchorFile, "--resolve", c.name+":"+port+":127.0.0.1", "https://"+c.name+":"+port+"/")
			cu.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
			out, err = cu.CombinedOutput()
			if (err == nil) != c.ok {
				t.Errorf("curl, %s: %v %s", c.name, err, out)
			}
		}
		// node
		if _, err := exec.LookPath("node"); err != nil {
			testenv.Skip(t, "node is not installed")
		} else {
			nd := exec.Command("node", "-e", `const tls = require("tls"), fs = require("fs");
const s = tls.connect({host: "127.0.0.1", port: +process.argv[2], servername: process.argv[3], ca: fs.readFileSync(process.argv[1])}, () => { console.log("verified"); s.end(); });
s.on("error", e => { console.error(e.code || e.message); process.exit(1); });`, anchorFile, port, c.name)
			nd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
			out, err = nd.CombinedOutput()
			if (err == nil) != c.ok {
				t.Errorf("node, %s: %v %s", c.name, err, out)
			}
		}
	}
	// The anchor carries the CA's name and key: leaves chain to it.
	if !bytes.Equal(cert.RawSubject, ca.cert.RawSubject) {
		t.Error("the anchor's subject is not the CA's")
	}
}

// The CA airlock keeps is read only from a directory, and files, of the
// server's own: one another user could write (every user's write bit,
// another owner, a group's write outside Kubernetes' fsGroup layout) is
// refused, never loaded or written into; a setgid directory
// group-writable by the server's own group, and its files (fsGroup), are
// taken. checked against mutants: LoadOrCreateCA without the directory
// check (it wrote its key into a world-writable one), without the
// files' check (another user's key was loaded).
func TestCADirIsTheServers(t *testing.T) {
	testenv.RequireRoot(t, "a key of another owner")
	dir := filepath.Join(t.TempDir(), "secrets")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	if _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "another user could write it") {
		t.Errorf("a world-writable directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("written into it: %v", ents)
	}
	os.Chmod(dir, 0o770)
	if _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "chmod g-w") {
		t.Errorf("a group-writable directory, not setgid: %v", err)
	}
	os.Chmod(dir, 0o770|os.ModeSetgid)
	if _, err := LoadOrCreateCA(dir); err != nil {
		t.Fatalf("a setgid directory of the server's own group: %v", err)
	}
	// kubelet's fsGroup again at the next mount: the files group-writable.
	os.Chmod(filepath.Join(dir, keyFile), 0o660)
	if _, err := LoadOrCreateCA(dir); err != nil {
		t.Fatalf("the fsGroup's key: %v", err)
	}
	os.Chown(filepath.Join(dir, keyFile), 54321, 54321)
	if _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "belongs to uid 54321") {
		t.Errorf("another user's key: %v", err)
	}
}
