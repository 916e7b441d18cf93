package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/egress"
	"airlock/internal/secrets"
)

// secretsName is the bound host of the secrets scenario; worldName, on
// the same upstream, is not bound.
const secretsName = "api.bench.airlock.test"

// secretsCode times N HTTPS requests over one kept-alive connection to
// HOST (port 443), carrying the placeholder in Authorization; the
// client trusts the upstream's CA (CADATA) and airlock's anchor. It
// prints the per-request times in microseconds.
const secretsCode = `
import http.client, ssl, time, os
ctx = ssl.create_default_context(cadata=CADATA + open("/opt/airlock/secrets/anchor.pem").read())
def bench(host, n):
    c = http.client.HTTPSConnection(host, 443, timeout=30, context=ctx)
    key = os.environ["BENCH_KEY"]
    out = []
    for i in range(n + 20):
        t = time.perf_counter()
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise SystemExit("status %d %s" % (r.status, body[:200]))
        if i >= 20:
            out.append(int((time.perf_counter() - t) * 1e6))
    print(" ".join(map(str, out)))
`

// benchSecrets: an HTTPS request from a session to a host a secret is
// bound to (the gate terminates TLS, substitutes the placeholder,
// re-encrypts upstream and redacts the answer) against the same request
// to a host on the same upstream that no secret is bound to (spliced
// through the gate as it is), interleaved in one session. The goal is
// under 1 ms added per request.
func benchSecrets(ctx context.Context, r *Report, o Options, n int) error {
	w, err := newWorld(64)
	if err != nil {
		return err
	}
	defer w.close()
	dir, err := os.MkdirTemp("", "airlock-bench-secrets")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The upstream's "public" CA: the server trusts it through
	// SSL_CERT_FILE, the session's code through its own context.
	public, err := secrets.LoadOrCreateCA(filepath.Join(dir, "public"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "public", "ca.pem"))
	if err != nil {
		return err
	}
	tl, err := egress.ListenIn(w.ns, "0.0.0.0:443")
	if err != nil {
		return err
	}
	ts := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		io.WriteString(rw, `{"data": [{"id": "model-a"}, {"id": "model-b"}]}`)
	})}
	go ts.Serve(tls.NewListener(tl, &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return public.Leaf(h.ServerName)
	}}))
	defer ts.Close()
	orig, _ := os.ReadFile("/etc/hosts")
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, fmt.Appendf(orig, "\n%s %s %s\n", worldPeer.Addr(), worldName, secretsName), 0o644); err != nil {
		return err
	}
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("sk-bench-0123456789abcdef0123456789"), 0o600); err != nil {
		return err
	}
	srv, err := startServerEnv(ctx, o, 1, "-secrets", map[string]any{
		"network": map[string]any{"enabled": true, "bytes": "1T", "connection_budget": 1 << 20,
			"internal_cidrs": []string{netip.PrefixFrom(worldPeer.Addr(), 32).String()},
			"internal_names": []string{worldName, secretsName}},
		"secrets": map[string]any{"BENCH_KEY": map[string]any{"file": key, "hosts": []string{secretsName}}},
	}, []string{"SSL_CERT_FILE=" + filepath.Join(dir, "public", "ca.pem")}, hosts)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	sess, err := srv.client.CreateSession(ctx, apitype.CreateSessionRequest{Language: apitype.Python, Secrets: []string{"BENCH_KEY"},
		Network: &apitype.NetworkPolicy{Allow: []string{secretsName + ":443", worldName + ":443"}}})
	if err != nil {
		return err
	}
	defer srv.deleteSession(ctx, sess.ID)
	run := func(host string) ([]time.Duration, error) {
		code := fmt.Sprintf("CADATA = %q\n", caPEM) + secretsCode + fmt.Sprintf("bench(%q, %d)\n", host, n)
		res, err := srv.exec(ctx, sess.ID, code)
		if err != nil {
			return nil, err
		}
		if res.Error != nil {
			return nil, fmt.Errorf("in the session: %s: %s %s", res.Error.Name, res.Error.Value, clipOut(strings.Join(res.Error.Traceback, "\n")))
		}
		return micros(res.Stdout)
	}
	var with, without []time.Duration
	for range 3 {
		a, err := run(secretsName)
		if err != nil {
			return fmt.Errorf("bound host: %w", err)
		}
		b, err := run(worldName)
		if err != nil {
			return fmt.Errorf("unbound host: %w", err)
		}
		with, without = append(with, a...), append(without, b...)
	}
	s, b := stats(with), stats(without)
	name := "an HTTPS request from a session with its secret substituted vs the same request spliced through the gate"
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms", Target: GoalSecret.Text,
		Baseline: fmt.Sprintf("no secret bound (spliced): %.3f ms", b.P50), Ratio: fmt.Sprintf("+%.3f ms", s.P50-b.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms", Baseline: fmt.Sprintf("spliced: %.3f ms", b.P99)})
	r.Stats["secret_request"] = s
	r.Stats["secret_request_spliced"] = b
	return nil
}

// startServerEnv is startServer with env added to the server's
// environment.
func startServerEnv(ctx context.Context, o Options, poolSize int, suffix string, extra map[string]any, env []string, hosts ...string) (*server, error) {
	return startServerWith(ctx, o, poolSize, suffix, extra, func(c *exec.Cmd) { c.Env = append(os.Environ(), env...) }, hosts...)
}
