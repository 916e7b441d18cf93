package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"airlock/internal/apitype"
	"airlock/internal/config"
)

// scrape is one parse of /metrics by Prometheus' own text parser.
type scrape map[string]*dto.MetricFamily

func (s *server) scrape(url string, hdr map[string]string) scrape {
	s.t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value is the metric of family name whose labels include want (a
// counter's or gauge's value, a histogram's count); -1 when there is none.
func (sc scrape) value(name string, want map[string]string) float64 {
	f := sc[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

// /metrics parses with Prometheus' text parser, and its figures move as
// a tenant's sessions, executions (ok, error, killed), uploads and quota
// refusals happen; it needs an admin key.
func TestMetricsMoveWithOperations(t *testing.T) {
	s := keysServer(t, map[string]any{"server": map[string]any{"token": "admin-token"}})
	ctx := context.Background()
	admin := bearer("admin-token")
	key := s.newKey("team-m", "--max-sessions", "1")
	c := s.as(key)

	before := s.scrape(s.URL+"/metrics", admin)
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "airlock_pool_ready", "airlock_template_up", "airlock_kills_total"} {
		if before[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	if v := before.value("airlock_template_up", nil); v != 1 {
		t.Errorf("airlock_template_up %v, want 1", v)
	}
	if code, _ := s.raw("GET", "/metrics", nil, bearer(key)); code != 403 {
		t.Errorf("a tenant's key reads /metrics: %d, want 403", code)
	}
	if code, _ := s.raw("GET", "/metrics", nil, nil); code != 401 {
		t.Errorf("/metrics without a key: %d, want 401", code)
	}

	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"print(1)", "1/0"} {
		if _, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "while True: pass", Timeout: config.Duration(time.Second)}, nil)
	if err != nil || res.KillReason != apitype.KillTimeout {
		t.Fatalf("%+v %v: want a timeout kill", res, err)
	}
	if _, err := c.Upload(ctx, sess.ID, "f.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	wantError(t, "a second session over max_sessions 1", err, 429, "quota_exceeded")

	after := s.scrape(s.URL+"/metrics", admin)
	moved := func(name string, labels map[string]string, by float64) {
		t.Helper()
		b, a := max(before.value(name, labels), 0), after.value(name, labels)
		if a-b < by {
			t.Errorf("%s%v: %v -> %v, want +%v", name, labels, b, a, by)
		}
	}
	py := map[string]string{"language": "python"}
	moved("airlock_sessions_active", map[string]string{"language": "python", "tenant": "team-m"}, 1)
	moved("airlock_sessions_created_total", map[string]string{"language": "python", "tenant": "team-m"}, 1)
	for _, outcome := range []string{"ok", "error", "killed"} {
		moved("airlock_executions_total", map[string]string{"kind": "session", "language": "python", "outcome": outcome}, 1)
	}
	moved("airlock_execution_duration_seconds", map[string]string{"kind": "session", "language": "python"}, 3)
	moved("airlock_kills_total", map[string]string{"reason": "timeout"}, 1)
	moved("airlock_http_requests_total", map[string]string{"route": "POST /v1/sessions/{id}/execute", "code": "200"}, 3)
	moved("airlock_http_requests_total", map[string]string{"route": "POST /v1/sessions", "code": "429"}, 1)
	moved("airlock_http_requests_total", map[string]string{"route": "none", "code": "401"}, 1)
	moved("airlock_http_request_duration_seconds", map[string]string{"route": "POST /v1/sessions"}, 2)
	moved("airlock_file_bytes_total", map[string]string{"op": "upload"}, 5)
	moved("airlock_quota_rejections_total", map[string]string{"tenant": "team-m", "quota": "max_sessions"}, 1)
	moved("airlock_pool_hits_total", py, 1)

	if err := c.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	end := s.scrape(s.URL+"/metrics", admin)
	if v := end.value("airlock_sessions_active", map[string]string{"language": "python", "tenant": "team-m"}); v != 0 {
		t.Errorf("sessions_active after the delete: %v, want 0", v)
	}
	if v := end.value("airlock_sessions_ended_total", map[string]string{"language": "python", "end_code": "deleted"}); v < 1 {
		t.Errorf("sessions_ended_total{end_code=deleted}: %v", v)
	}
	// No label carries what a client chooses: session ids stay out.
	if raw := fmt.Sprint(end); strings.Contains(raw, sess.ID) {
		t.Errorf("/metrics names session %s", sess.ID)
	}
}

// metrics.listen serves /metrics on its own address without a key (and
// not on the API's); metrics.enabled off serves none at all.
func TestMetricsListenerAndOff(t *testing.T) {
	noPools := map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": false}
	s := startServer(t, map[string]any{"pool": noPools, "metrics": map[string]any{"listen": "127.0.0.1:0"}})
	m := regexp.MustCompile(`metrics=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", s.stderr.String())
	}
	if _, err := s.c.RunOnce(context.Background(), apitype.OneShotRequest{Language: "bash", Code: "echo hi"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := s.scrape("http://"+m[1]+"/metrics", nil)
	if v := sc.value("airlock_executions_total", map[string]string{"kind": "oneshot", "language": "bash", "outcome": "ok"}); v != 1 {
		t.Errorf("oneshot executions: %v, want 1", v)
	}
	if code, _ := s.raw("GET", "/metrics", nil, nil); code != 404 {
		t.Errorf("/metrics on the API with its own listener: %d, want 404", code)
	}

	off := startServer(t, map[string]any{"pool": noPools, "metrics": map[string]any{"enabled": false}})
	if code, _ := off.raw("GET", "/metrics", nil, nil); code != 404 {
		t.Errorf("/metrics with metrics off: %d, want 404", code)
	}
}
