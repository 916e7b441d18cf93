package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// benchE2B: creating a sandbox and running its first `x = 1` through
// E2B's API (POST /v2/sandboxes, then /execute as E2B's SDKs send them),
// against a session created and run through /v1, alternating, on the
// same warm pool (goal: within 1.2x).
func benchE2B(ctx context.Context, srv *server, r *Report, n int) error {
	viaE2B := make([]time.Duration, 0, n)
	viaV1 := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		if err := srv.waitWarm(ctx, time.Minute); err != nil {
			return err
		}
		start := time.Now()
		sess, err := srv.newSession(ctx)
		if err == nil {
			_, err = srv.exec(ctx, sess.ID, "x = 1")
		}
		if err != nil {
			return err
		}
		viaV1 = append(viaV1, time.Since(start))
		srv.deleteSession(ctx, sess.ID)
		if err := srv.waitWarm(ctx, time.Minute); err != nil {
			return err
		}
		start = time.Now()
		id, err := e2bCreateRun(ctx, srv.url, "x = 1")
		if err != nil {
			return err
		}
		viaE2B = append(viaE2B, time.Since(start))
		srv.deleteSession(ctx, id)
	}
	e, v := stats(viaE2B), stats(viaV1)
	const name = "create + first `x = 1` through E2B's API"
	r.add(Row{Scenario: name, Metric: "p50", Value: e.P50, Unit: "ms",
		Baseline: fmt.Sprintf("the same through /v1: %.1f ms", v.P50), Ratio: ratio(e.P50, v.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: e.P99, Unit: "ms", Baseline: fmt.Sprintf("/v1: %.1f ms", v.P99), Ratio: ratio(e.P99, v.P99)})
	r.Stats["e2b_create_run"], r.Stats["v1_create_run"] = e, v
	return nil
}

// e2bCreateRun creates a sandbox as E2B's JS SDK does and runs code in it,
// reading the execution's NDJSON to its end; it returns the sandbox's id.
func e2bCreateRun(ctx context.Context, url, code string) (string, error) {
	do := func(method, path string, body any, hdr map[string]string) ([]byte, error) {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, method, url+path, bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
		return data, err
	}
	data, err := do("POST", "/v2/sandboxes", map[string]string{"templateID": "code-interpreter-v1"}, nil)
	if err != nil {
		return "", err
	}
	var sbx struct{ SandboxID, EnvdAccessToken string }
	if err := json.Unmarshal(data, &sbx); err != nil {
		return "", err
	}
	out, err := do("POST", "/execute", map[string]string{"code": code}, map[string]string{
		"E2b-Sandbox-Id": sbx.SandboxID, "E2b-Sandbox-Port": "49999", "X-Access-Token": sbx.EnvdAccessToken})
	if err == nil && !strings.Contains(string(out), `"end_of_execution"`) || strings.Contains(string(out), `"type":"error"`) {
		err = fmt.Errorf("the execution did not end well: %s", out)
	}
	return sbx.SandboxID, err
}
