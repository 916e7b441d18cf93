package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/secrets"
)

// echoes answers the bound host's echoing paths with the Authorization
// it got: in a 103 head, in trailers, in base64 after a few bytes, and
// gzipped twice under two Content-Encoding lines. It reports whether
// the path was one of them.
func echoes(w http.ResponseWriter, r *http.Request) bool {
	a := r.Header.Get("Authorization")
	switch r.URL.Path {
	case "/early":
		w.Header().Set("Link", "</x?k="+a+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "final")
	case "/trailers":
		w.Header().Set("Trailer", "X-Echo")
		io.WriteString(w, "body")
		w.Header().Set("X-Echo", a)
	case "/b64":
		off, _ := strconv.Atoi(r.URL.Query().Get("off"))
		io.WriteString(w, base64.StdEncoding.EncodeToString([]byte(strings.Repeat("~", off)+a+"?")))
	case "/gzip2":
		body := []byte("you sent " + a)
		for range 2 {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			body = b.Bytes()
		}
		w.Header()["Content-Encoding"] = []string{"gzip", "gzip"}
		w.Write(body)
	default:
		return false
	}
	return true
}

// echoCode reads raw answers of the bound host from inside the sandbox
// (HTTP/1.1 over Python's ssl, every byte: 1xx heads, trailers) into a
// file: files are not redacted, so only the gate keeps the value out.
const echoCode = `
import os, socket, ssl
key = os.environ["OPENAI_API_KEY"]
ctx = ssl.create_default_context()
with open("/workspace/raw.txt", "wb") as out:
    for path in ["/early", "/trailers", "/b64?off=1", "/b64?off=2", "/gzip2"]:
        s = ctx.wrap_socket(socket.create_connection(("api.a.test", int(os.environ["TLS_PORT"])), timeout=20), server_hostname="api.a.test")
        s.sendall(("GET %s HTTP/1.1\r\nHost: api.a.test\r\nAuthorization: Bearer %s\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n" % (path, key)).encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        out.write(data + b"\n----\n")
        print(path, len(data))
print("placeholder", key)
`

// Echoes of a secret the bound host sends back in a 103 head, in a
// trailer, in base64 at an offset, or under two gzip codings reach the
// sandbox as the placeholder only: the raw bytes it read hold no form
// of the value.
func TestSecretsEchoesFromSandbox(t *testing.T) {
	s, api, value, _ := secretsServer(t, func(*config.Config) {})
	c := client.New("http://" + s.Addr().String())
	defer c.CloseIdleConnections()
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Secrets: []string{"OPENAI_API_KEY"},
		Network: &apitype.NetworkPolicy{Allow: []string{fmt.Sprintf("api.a.test:%d", api.tlsPort)}},
		Env:     map[string]string{"TLS_PORT": fmt.Sprint(api.tlsPort)}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: echoCode}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ph, _ := strings.Cut(r.Stdout, "placeholder ")
	ph = strings.TrimSpace(ph)
	if !strings.HasPrefix(ph, secrets.PlaceholderPrefix) {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	}
	rc, err := c.Download(ctx, sess.ID, "raw.txt")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	for _, f := range secrets.Forms(value) {
		if bytes.Contains(raw, []byte(f)) {
			t.Fatalf("the sandbox read a form of the value (%q...):\n%s", f[:4], raw)
		}
	}
	for _, want := range []string{"HTTP/1.1 103", "Link: </x?k=Bearer " + ph, "X-Echo: Bearer " + ph, "you sent Bearer " + ph} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("the raw answers lack %q:\n%s", want, raw)
		}
	}
	if n := bytes.Count(raw, []byte(ph)); n != 5 {
		t.Errorf("%d placeholders in the raw answers, want 5 (103, trailer, two base64, gzip):\n%s", n, raw)
	}
}
