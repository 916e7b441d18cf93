package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/image"
)

// benchTemplate: the first pandas result of a session on a template's
// pool (templates.pool, with its own Python template interpreter) against
// one on the host root's pool, interleaved in the same run (goal: at
// most 1.2× as long); the template's size on disk, and the memory of one
// of its pooled sandboxes (PSS of its processes, the template's
// interpreter shared).
func benchTemplate(ctx context.Context, main *server, r *Report, o Options, n, poolN int) error {
	store, err := image.Open(o.TemplateDir)
	if err != nil {
		return err
	}
	tm, err := store.Get(o.Template)
	if err != nil {
		return fmt.Errorf("%w (airlock template build %s --recipe code-interpreter, or --template-dir)", err, o.Template)
	}
	srv, err := startServer(ctx, o, 0, "-tmpl", map[string]any{
		"pool":      map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": true},
		"templates": map[string]any{"dir": o.TemplateDir, "pool": map[string]any{o.Template: map[string]int{"python": poolN}}},
	})
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 5*time.Minute); err != nil {
		return err
	}
	// Memory of the pooled sandboxes, before any session exists: every
	// sandbox of this server is a pooled one of the template.
	var total int64
	count := 0
	for _, dir := range sandboxCgroups(srv.name) {
		var kib int64
		for _, pid := range cgroupPids(srv.name, dir) {
			kib += pss(pid)
		}
		if kib > 0 {
			total += kib
			count++
		}
	}
	var tmplLat, hostLat []time.Duration
	for i := 0; i < n; i++ {
		for _, side := range []struct {
			s    *server
			tmpl string
			lat  *[]time.Duration
		}{{srv, o.Template, &tmplLat}, {main, "", &hostLat}} {
			if err := side.s.waitWarm(ctx, 3*time.Minute); err != nil {
				return err
			}
			start := time.Now()
			sess, err := side.s.client.CreateSession(ctx, apitype.CreateSessionRequest{Language: apitype.Python, Template: side.tmpl})
			if err != nil {
				return err
			}
			if _, err := side.s.exec(ctx, sess.ID, pandasCode); err != nil {
				return err
			}
			*side.lat = append(*side.lat, time.Since(start))
			side.s.deleteSession(ctx, sess.ID)
		}
	}
	ts, hs := stats(tmplLat), stats(hostLat)
	name := fmt.Sprintf("create a session on template %s + first `%s`", o.Template, pandasCode)
	r.add(Row{Scenario: name, Metric: "p50", Value: ts.P50, Unit: "ms", Target: GoalTemplate.Text,
		Baseline: fmt.Sprintf("host root's pool: %.1f ms", hs.P50), Ratio: ratio(ts.P50, hs.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: ts.P99, Unit: "ms"})
	r.add(Row{Scenario: "template " + o.Template, Metric: "disk", Value: float64(tm.Size) / (1 << 20), Unit: "MB",
		Baseline: fmt.Sprintf("%d files, version %s", tm.Files, tm.Version)})
	if count > 0 {
		r.add(Row{Scenario: "template " + o.Template, Metric: "PSS per pooled sandbox", Value: float64(total) / float64(count) / 1024, Unit: "MB",
			Baseline: fmt.Sprintf("%d pooled sandboxes", count)})
	}
	r.Stats["template_pandas"] = ts
	r.Stats["host_pandas"] = hs
	return nil
}

// sandboxCgroups lists the sandboxes' cgroups (s-*) under parent.
func sandboxCgroups(parent string) []string {
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		ents, err := os.ReadDir(filepath.Join(root, parent))
		if err != nil {
			continue
		}
		var out []string
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "s-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	return nil
}
