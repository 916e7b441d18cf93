package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// benchStore: the cost of a shared store. Servers side by side (batches
// interleaved), each with API keys and the audit log on and a tenant's
// key: SQLite in data_dir; PostgreSQL (the database of --store-dsn-file);
// PostgreSQL with the tenant's executions bounded (max_concurrent_executions,
// so that every execution is admitted and released in the database).
// Measured: session creation (POST /v1/sessions from a warm pool: with
// PostgreSQL the tenant's place is admitted and the session registered
// in the directory, one round trip each) and warm `x = 1` executions.
func benchStore(ctx context.Context, r *Report, o Options, n int) error {
	if o.StoreDSNFile == "" {
		fmt.Fprintln(o.Verbose, "store: skipped (no --store-dsn-file)")
		return nil
	}
	tenancy := func(store map[string]any) map[string]any {
		out := map[string]any{"audit": map[string]any{"enabled": true, "code": "sha256"}, "server": map[string]any{"auth": "keys"}}
		if store != nil {
			out["store"] = store
		}
		return out
	}
	pg := map[string]any{"driver": "postgres", "dsn_file": o.StoreDSNFile}
	type variant struct {
		label, tenant string
		extra         map[string]any
		flags         []string
		srv           *server
		sess          string
		create, exec  []time.Duration
	}
	vs := []*variant{
		{label: "sqlite", tenant: "bench-sqlite", extra: tenancy(nil), flags: []string{"--max-sessions", "1000"}},
		{label: "postgres", tenant: "bench-pg", extra: tenancy(pg), flags: []string{"--max-sessions", "1000"}},
		{label: "postgres, executions bounded", tenant: "bench-pg-bounded", extra: tenancy(pg), flags: []string{"--max-sessions", "1000", "--max-concurrent-executions", "64"}},
	}
	for i, v := range vs {
		srv, err := startServer(ctx, o, 4, fmt.Sprintf("-store%d", i), v.extra)
		if err != nil {
			return err
		}
		defer srv.stop()
		v.srv = srv
		args := append([]string{"keys", "create", "--config", srv.cfgPath, "--tenant", v.tenant}, v.flags...)
		out, err := exec.CommandContext(ctx, o.Binary, args...).Output()
		if err != nil {
			return fmt.Errorf("keys create (%s): %v", v.label, err)
		}
		srv.useKey(strings.TrimSpace(string(out)))
		if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
			return err
		}
		s, err := srv.newSession(ctx)
		if err != nil {
			return fmt.Errorf("%s: %v", v.label, err)
		}
		v.sess = s.ID
		for j := 0; j < 50; j++ {
			if _, err := srv.exec(ctx, s.ID, "x = 1"); err != nil {
				return err
			}
		}
	}
	const batch = 10
	creations := max(n/10, 3)
	for done := 0; done < creations; done += batch {
		for _, v := range vs {
			for j := 0; j < min(batch, creations-done); j++ {
				if err := v.srv.waitWarm(ctx, time.Minute); err != nil {
					return err
				}
				start := time.Now()
				s, err := v.srv.newSession(ctx)
				if err != nil {
					return fmt.Errorf("%s: create: %v", v.label, err)
				}
				v.create = append(v.create, time.Since(start))
				v.srv.deleteSession(ctx, s.ID)
			}
		}
	}
	for done := 0; done < n; done += 100 {
		for _, v := range vs {
			for j := 0; j < min(100, n-done); j++ {
				start := time.Now()
				if _, err := v.srv.exec(ctx, v.sess, "x = 1"); err != nil {
					return err
				}
				v.exec = append(v.exec, time.Since(start))
			}
		}
	}
	baseC, baseE := stats(vs[0].create), stats(vs[0].exec)
	for i, v := range vs {
		c, e := stats(v.create), stats(v.exec)
		rc := Row{Scenario: "create a session (warm pool), store " + v.label, Metric: "p50", Value: c.P50, Unit: "ms", Note: fmt.Sprintf("p99 %.2f ms", c.P99)}
		re := Row{Scenario: "warm execute `x = 1`, store " + v.label, Metric: "p50", Value: e.P50, Unit: "ms", Note: fmt.Sprintf("p99 %.2f ms", e.P99)}
		if i > 0 {
			rc.Target, rc.Baseline, rc.Ratio = "≤ +2 ms over sqlite", fmt.Sprintf("%.3f ms (sqlite)", baseC.P50), fmt.Sprintf("%+.2f ms", c.P50-baseC.P50)
			re.Baseline, re.Ratio = fmt.Sprintf("%.3f ms (sqlite)", baseE.P50), fmt.Sprintf("%+.1f%%", (e.P50/baseE.P50-1)*100)
			if i == 1 {
				re.Target = "unchanged (≤ +5%)"
			}
		}
		r.add(rc)
		r.add(re)
		r.Stats["store/create/"+v.label] = c
		r.Stats["store/exec/"+v.label] = e
	}
	return nil
}
