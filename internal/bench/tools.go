package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
)

// toolCallCode times N calls of a tool the same way on both sides, over
// one kept-alive HTTP connection: in a session, POST to airlock's tool
// endpoint (which calls the upstream with the credential); on the host,
// the same GET to the upstream, direct. It prints the per-call times in
// microseconds.
const toolCallCode = `
import http.client, time
def bench(host, port, method, path, body, n):
    c = http.client.HTTPConnection(host, port, timeout=30)
    out = []
    for i in range(n + 20):
        t = time.perf_counter()
        c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit("status %d" % r.status)
        if i >= 20:
            out.append(int((time.perf_counter() - t) * 1e6))
    print(" ".join(map(str, out)))
`

// benchTools: a brokered tool call from sandboxed code (the arguments
// checked against the schema, the URL built, the credential attached,
// the answer scrubbed and recorded) against the same call made directly
// from the host. The goal is at most 1 ms added.
func benchTools(ctx context.Context, r *Report, o Options, n int) error {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"q": %q, "hits": ["a", "b", "c"]}`, req.URL.Query().Get("q"))
	})}
	go up.Serve(ln)
	defer up.Close()
	dir, err := os.MkdirTemp("", "airlock-bench-tools")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("bench-token-0123456789abcdef"), 0o600); err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/search?q={q}"
	srv, err := startServer(ctx, o, 2, "-tools", map[string]any{"tools": map[string]any{
		"search": map[string]any{
			"description": "bench", "http": map[string]any{"url": url},
			"arguments":  map[string]any{"type": "object", "required": []string{"q"}, "properties": map[string]any{"q": map[string]any{"type": "string", "maxLength": 64}}},
			"credential": map[string]any{"file": token}, "rate_per_minute": 100000, "burst": 100000, "daily_per_session": 10000000,
		},
	}})
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	sess, err := srv.client.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Tools: []string{"search"}})
	if err != nil {
		return err
	}
	defer srv.deleteSession(ctx, sess.ID)
	code := toolCallCode + fmt.Sprintf("bench('127.0.0.1', 3129, 'POST', '/v1/tools/search', b'{\"q\": \"airlock\"}', %d)\n", n)
	res, err := srv.exec(ctx, sess.ID, code)
	if err != nil {
		return err
	}
	if res.Error != nil {
		return fmt.Errorf("in the session: %s: %s", res.Error.Name, res.Error.Value)
	}
	brokered, err := micros(res.Stdout)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	direct := toolCallCode + fmt.Sprintf("bench(%q, %d, 'GET', '/search?q=airlock', None, %d)\n", host, p, n)
	out, err := exec.CommandContext(ctx, o.Python, "-c", direct).Output()
	if err != nil {
		return fmt.Errorf("direct: %v", err)
	}
	base, err := micros(string(out))
	if err != nil {
		return err
	}
	s, b := stats(brokered), stats(base)
	name := "brokered tool call from a session vs the same call from the host"
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms", Target: GoalToolCall.Text,
		Baseline: fmt.Sprintf("direct from the host: %.3f ms", b.P50), Ratio: fmt.Sprintf("+%.3f ms", s.P50-b.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms", Baseline: fmt.Sprintf("direct: %.3f ms", b.P99)})
	r.Stats["tool_call"] = s
	r.Stats["tool_call_direct"] = b
	return nil
}

// micros parses the per-call times toolCallCode prints.
func micros(out string) ([]time.Duration, error) {
	var d []time.Duration
	for _, f := range strings.Fields(out) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("unexpected output %q", clipOut(out))
		}
		d = append(d, time.Duration(v)*time.Microsecond)
	}
	if len(d) == 0 {
		return nil, fmt.Errorf("no timings in %q", clipOut(out))
	}
	return d, nil
}

func clipOut(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
