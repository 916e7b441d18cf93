package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/secrets"
)

// apiServer is an upstream on 127.0.0.2 that records what it gets: over
// HTTPS with a certificate for api.a.test from a "public" CA the server
// trusts (egress.RootCAs) and the sandbox does not, and over plain HTTP.
type apiServer struct {
	mu       sync.Mutex
	auth     []string // Authorization of each request, in order
	tlsPort  int
	httpPort int
}

func (a *apiServer) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...)
}

func newAPIServer(t *testing.T) *apiServer {
	a := &apiServer{}
	public, err := secrets.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auth = append(a.auth, r.Header.Get("Authorization"))
		a.mu.Unlock()
		if r.URL.Path == "/echo" {
			fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
			return
		}
		if echoes(w, r) {
			return
		}
		io.WriteString(w, "ok")
	})
	tl, err := tls.Listen("tcp", "127.0.0.2:0", &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return public.Leaf(hi.ServerName)
	}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := &http.Server{Handler: h}, &http.Server{Handler: h}
	go s1.Serve(tl)
	go s2.Serve(pl)
	t.Cleanup(func() { s1.Close(); s2.Close() })
	a.tlsPort, a.httpPort = tl.Addr().(*net.TCPAddr).Port, pl.Addr().(*net.TCPAddr).Port
	pem, _ := public.Anchor([]string{"api.a.test", "other.a.test"})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	prev := egress.RootCAs
	egress.RootCAs = pool
	t.Cleanup(func() { egress.RootCAs = prev })
	return a
}

// secretsCode runs in the sandbox: it calls the bound host with its
// placeholder over HTTPS (Python's default SSL context, which the
// session's SSL_CERT_FILE points at airlock's anchor), an unbound host
// over plain HTTP, and an echoing endpoint; then it looks everywhere it
// can read for the value (it knows only its hash).
const secretsCode = `
import os, ssl, urllib.request, hashlib, re, json
key = os.environ["OPENAI_API_KEY"]
def get(url):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
    try:
        return urllib.request.urlopen(req, timeout=20).read().decode()
    except Exception as e:
        return "fail %s %s" % (type(e).__name__, e)
print("placeholder", key)
print("bound", get("https://api.a.test:%s/record" % os.environ["TLS_PORT"]))
print("unbound", get("http://other.a.test:%s/record" % os.environ["HTTP_PORT"]))
print("echo", get("https://api.a.test:%s/echo" % os.environ["TLS_PORT"]))

EXTRA = []
` + scanForSecret

// secretsServer is a server with the secret OPENAI_API_KEY bound to
// api.a.test, its value in a file.
func secretsServer(t *testing.T, with func(*config.Config)) (*Server, *apiServer, string, string) {
	var b [16]byte
	rand.Read(b[:])
	part := hex.EncodeToString(b[:])
	value := "sk-" + part
	file := filepath.Join(t.TempDir(), "openai")
	if err := os.WriteFile(file, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	api := newAPIServer(t)
	s, _ := testServer(t, newRecorder(), with, func(c *config.Config) {
		c.Network.Enabled = true
		c.Secrets = map[string]config.Secret{"OPENAI_API_KEY": {File: file, Hosts: []string{"api.a.test"}}}
	})
	eg := s.manager.Egress()
	eg.Dialer.Guard.SetTestHooks(netip.MustParsePrefix("127.0.0.2/32"))
	eg.Dialer.Resolver = &mapResolver{asked: map[string]int{}, addrs: map[string][]netip.Addr{
		"api.a.test": {netip.MustParseAddr("127.0.0.2")}, "other.a.test": {netip.MustParseAddr("127.0.0.2")},
	}}
	return s, api, value, part
}

// A session opted in to a secret sees only its placeholder; the bound
// host receives the value, an unbound host the placeholder; an echo of
// the value comes back as the placeholder; nothing the sandbox can read
// (environment, /proc, files) or the result holds the value.
func TestSecretsFromSandbox(t *testing.T) {
	kernels(t, testSecretsFromSandbox)
}

func testSecretsFromSandbox(t *testing.T, iso config.Isolation, with func(*config.Config)) {
	s, api, value, part := secretsServer(t, with)
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()

	if _, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Secrets: []string{"NOPE"}}); err == nil ||
		!strings.Contains(err.Error(), "declared: OPENAI_API_KEY") {
		t.Fatalf("unknown secret: %v", err)
	}
	if _, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Secrets: []string{"OPENAI_API_KEY"},
		Env: map[string]string{"OPENAI_API_KEY": "mine"}}); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("a client variable over the placeholder: %v", err)
	}
	list, err := c.Secrets(ctx)
	if err != nil || len(list.Secrets) != 1 || list.Secrets[0].Hosts[0] != "api.a.test" {
		t.Fatalf("GET /v1/secrets = %+v, %v", list, err)
	}
	sum := sha256.Sum256([]byte(part))
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Isolation: iso, Secrets: []string{"OPENAI_API_KEY"},
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("api.a.test:%d", api.tlsPort), fmt.Sprintf("other.a.test:%d", api.httpPort)}},
		Env:     map[string]string{"SECRET_SHA256": hex.EncodeToString(sum[:]), "TLS_PORT": fmt.Sprint(api.tlsPort), "HTTP_PORT": fmt.Sprint(api.httpPort)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Secrets) != 1 || sess.Secrets[0].EnvVar != "OPENAI_API_KEY" {
		t.Errorf("session secrets %+v", sess.Secrets)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: secretsCode}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] = v
	}
	ph := lines["placeholder"]
	if !strings.HasPrefix(ph, secrets.PlaceholderPrefix) {
		t.Fatalf("placeholder %q\nstdout:\n%s\nstderr:\n%s", ph, r.Stdout, r.Stderr)
	}
	if lines["bound"] != "ok" || lines["unbound"] != "ok" || lines["echo"] != "you sent Bearer "+ph || lines["found"] != "[]" {
		t.Errorf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	}
	got := api.got()
	if len(got) != 3 || got[0] != "Bearer "+value || got[1] != "Bearer "+ph || got[2] != "Bearer "+value {
		t.Errorf("the upstream received %q; want the value, the placeholder (unbound host), the value", got)
	}
	doc, _ := json.Marshal(r)
	info, _ := c.Session(ctx, sess.ID)
	infoDoc, _ := json.Marshal(info)
	for what, text := range map[string]string{"the result": string(doc), "the session": string(infoDoc)} {
		for _, f := range secrets.Forms(value) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the value", what)
			}
		}
	}
	if !strings.Contains(string(doc), "TLS terminated by airlock for secrets, 1 requests, 1 with secrets substituted (OPENAI_API_KEY)") {
		t.Errorf("the result's egress does not say the secret was substituted: %s", doc)
	}
	if strings.Contains(string(infoDoc), ph) {
		t.Error("the session's description shows the placeholder")
	}

	// A one-shot run takes secrets too.
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Isolation: iso, Secrets: []string{"OPENAI_API_KEY"},
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("api.a.test:%d", api.tlsPort)}},
		Code: fmt.Sprintf(`import os, urllib.request
print(urllib.request.urlopen(urllib.request.Request("https://api.a.test:%d/echo", headers={"Authorization": os.environ["OPENAI_API_KEY"]}), timeout=20).read().decode())`, api.tlsPort)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = api.got()
	if !strings.HasPrefix(one.Stdout, "you sent "+secrets.PlaceholderPrefix) || got[len(got)-1] != value {
		t.Errorf("one-shot: %q %q; upstream got %d requests", one.Stdout, one.Stderr, len(got))
	}
}

// An agent asks for secrets over MCP as over HTTP: list_secrets names
// them (never a value), create_session takes them with the same
// validation and errors, says where the placeholder is, and the
// session's code reaches the bound host with the value substituted.
func TestSecretsOverMCP(t *testing.T) {
	s, api, value, _ := secretsServer(t, func(*config.Config) {})
	cs := mcpClient(t, s)
	text, isErr, out := mcpCall(t, cs, "list_secrets", nil)
	if isErr || !strings.Contains(text, "OPENAI_API_KEY: a placeholder in $OPENAI_API_KEY, sent as the value only to api.a.test") ||
		len(out["secrets"].([]any)) != 1 || strings.Contains(text, value) {
		t.Fatalf("list_secrets: %v %q %v", isErr, text, out)
	}
	if text, isErr, _ = mcpCall(t, cs, "create_session", map[string]any{"secrets": []string{"NOPE"}}); !isErr ||
		!strings.Contains(text, `"NOPE" not declared for this tenant (declared: OPENAI_API_KEY)`) {
		t.Fatalf("an unknown secret: %v %q", isErr, text)
	}
	if text, isErr, _ = mcpCall(t, cs, "create_session", map[string]any{"secrets": []string{"OPENAI_API_KEY"}, "env": map[string]string{"OPENAI_API_KEY": "mine"}}); !isErr ||
		!strings.Contains(text, "placeholder") {
		t.Fatalf("env over the placeholder: %v %q", isErr, text)
	}
	if text, isErr, _ = mcpCall(t, cs, "create_session", map[string]any{"secrets": "OPENAI_API_KEY"}); !isErr {
		t.Fatalf("secrets as a string: %q", text)
	}
	text, isErr, out = mcpCall(t, cs, "create_session", map[string]any{"secrets": []string{"OPENAI_API_KEY"},
		"network": map[string]any{"allow": []string{fmt.Sprintf("api.a.test:%d", api.tlsPort)}}})
	if isErr || !strings.Contains(text, "$OPENAI_API_KEY holds a placeholder for the secret OPENAI_API_KEY, sent as its value only to api.a.test") {
		t.Fatalf("create_session: %v %q", isErr, text)
	}
	secs, _ := out["secrets"].([]any)
	if len(secs) != 1 || secs[0].(map[string]any)["env_var"] != "OPENAI_API_KEY" {
		t.Fatalf("create_session's secrets: %v", out)
	}
	text, isErr, _ = mcpCall(t, cs, "execute_code", map[string]any{"session_id": out["session_id"], "code": fmt.Sprintf(`import os, urllib.request
print(urllib.request.urlopen(urllib.request.Request("https://api.a.test:%d/echo", headers={"Authorization": os.environ["OPENAI_API_KEY"]}), timeout=20).read().decode())`, api.tlsPort)})
	got := api.got()
	if isErr || !strings.Contains(text, "you sent "+secrets.PlaceholderPrefix) || strings.Contains(text, value) || len(got) != 1 || got[0] != value {
		t.Fatalf("execute_code: %v %q; upstream got %q", isErr, text, got)
	}
}
