package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
)

// portsApp answers "ok" to any GET, and N MiB to /big/N, with
// keep-alive; it prints the port it listens on (PORT, 0: any). The same
// program serves in a session and, for the baseline, on the host.
const portsApp = `
import http.server, socketserver, sys
PORT = int(sys.argv[1])
MIB = b"x" * (1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms stall between headers and body on a kept-alive connection
    def do_GET(self):
        n = int(self.path[5:]) if self.path.startswith("/big/") else 0
        self.send_response(200)
        self.send_header("Content-Length", str(n << 20 if n else 2))
        self.end_headers()
        if not n:
            self.wfile.write(b"ok")
        for _ in range(n):
            self.wfile.write(MIB)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", PORT), H)
print(s.server_address[1], flush=True)
s.serve_forever()
`

// benchPorts: requests and a download through a session's port (the
// path form: the proxy enters the sandbox's network namespace and
// connects for each request), against the same program on the host
// reached directly, in the same run.
func benchPorts(ctx context.Context, srv *server, r *Report, o Options, n, mib int) error {
	sess, err := srv.newSession(ctx)
	if err != nil {
		return err
	}
	defer srv.deleteSession(ctx, sess.ID)
	code := "open('bench_app.py', 'w').write(" + strconv.Quote(portsApp) + ")"
	if _, err := srv.exec(ctx, sess.ID, code); err != nil {
		return err
	}
	if _, err := srv.client.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "exec python3 bench_app.py 8000", Background: true}, nil); err != nil {
		return err
	}
	proxied := srv.url + "/v1/sessions/" + sess.ID + "/ports/8000"

	dir, err := os.MkdirTemp("", "airlock-bench-ports")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	prog := filepath.Join(dir, "app.py")
	if err := os.WriteFile(prog, []byte(portsApp), 0o644); err != nil {
		return err
	}
	hostCtx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(hostCtx, o.Python, prog, "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		stop()
		return err
	}
	if err := cmd.Start(); err != nil {
		stop()
		return err
	}
	defer func() { stop(); cmd.Wait() }() // it serves until killed
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("ports bench: the app on the host: %w", err)
	}
	direct := "http://127.0.0.1:" + strings.TrimSpace(line)

	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	get := func(url string) (int64, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		k, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return k, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := get(proxied + "/")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ports bench: the app in the session never answered: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	lat := func(base string) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for i := 0; i < n+10; i++ {
			start := time.Now()
			if _, err := get(base + "/"); err != nil {
				return nil, err
			}
			if i >= 10 {
				out = append(out, time.Since(start))
			}
		}
		return out, nil
	}
	lp, err := lat(proxied)
	if err != nil {
		return err
	}
	ld, err := lat(direct)
	if err != nil {
		return err
	}
	sp, sd := stats(lp), stats(ld)
	name := "a GET to an app in a session through its port (path form)"
	r.add(Row{Scenario: name, Metric: "p50", Value: sp.P50, Unit: "ms",
		Baseline: fmt.Sprintf("the same app on the host, direct: %.2f ms", sd.P50), Ratio: fmt.Sprintf("%+.2f ms", sp.P50-sd.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: sp.P99, Unit: "ms", Baseline: fmt.Sprintf("direct: %.2f ms", sd.P99)})
	r.Stats["ports_get"], r.Stats["ports_get_direct"] = sp, sd

	mbs := func(base string) (float64, error) {
		best := 0.0
		for i := 0; i < 3; i++ {
			start := time.Now()
			k, err := get(base + "/big/" + strconv.Itoa(mib))
			if err != nil {
				return 0, err
			}
			if k != int64(mib)<<20 {
				return 0, fmt.Errorf("ports bench: %d bytes of %d MiB", k, mib)
			}
			best = max(best, float64(k)/1e6/time.Since(start).Seconds())
		}
		return best, nil
	}
	tp, err := mbs(proxied)
	if err != nil {
		return err
	}
	td, err := mbs(direct)
	if err != nil {
		return err
	}
	r.add(Row{Scenario: fmt.Sprintf("a %d MiB download from an app in a session through its port", mib), Metric: "best of 3", Value: tp, Unit: "MB/s",
		Baseline: fmt.Sprintf("the same app on the host, direct: %.0f MB/s", td), Ratio: fmt.Sprintf("%.2f× direct", tp/td)})
	return nil
}
