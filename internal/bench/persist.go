package bench

import (
	"context"
	"fmt"
	"time"
)

// benchPersist: an idle pandas session (pandas imported, a 10 MB CSV in
// its workspace) paused, then resumed and its pandas imported again (the
// interpreter restarts: restored "files"); against creating a session and
// running the same first execution, in the same run. Also the size on
// disk per paused session.
func benchPersist(ctx context.Context, r *Report, o Options, n int) error {
	srv, err := startServer(ctx, o, 2, "-persist", map[string]any{"persistence": map[string]any{"enabled": true}})
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	const setup = "import pandas as pd, numpy as np; pd.DataFrame(np.random.rand(200000, 5)).to_csv('/workspace/data.csv')"
	var pause, resume, create []time.Duration
	var disk int64
	for i := 0; i < n; i++ {
		sess, err := srv.newSession(ctx)
		if err != nil {
			return err
		}
		if _, err := srv.exec(ctx, sess.ID, setup); err != nil {
			srv.deleteSession(ctx, sess.ID)
			return err
		}
		start := time.Now()
		p, err := srv.client.PauseSession(ctx, sess.ID)
		if err != nil {
			srv.deleteSession(ctx, sess.ID)
			return err
		}
		pause = append(pause, time.Since(start))
		disk = p.Paused.DiskBytes
		start = time.Now()
		if _, err := srv.client.ResumeSession(ctx, sess.ID); err != nil {
			srv.deleteSession(ctx, sess.ID)
			return err
		}
		if _, err := srv.exec(ctx, sess.ID, pandasCode); err != nil {
			srv.deleteSession(ctx, sess.ID)
			return err
		}
		resume = append(resume, time.Since(start))
		srv.deleteSession(ctx, sess.ID)

		if err := srv.waitWarm(ctx, time.Minute); err != nil {
			return err
		}
		start = time.Now()
		fresh, err := srv.newSession(ctx)
		if err != nil {
			return err
		}
		if _, err := srv.exec(ctx, fresh.ID, pandasCode); err != nil {
			srv.deleteSession(ctx, fresh.ID)
			return err
		}
		create = append(create, time.Since(start))
		srv.deleteSession(ctx, fresh.ID)
	}
	ps, rs, cs := stats(pause), stats(resume), stats(create)
	base := fmt.Sprintf("create + first `%s`: %.1f ms", pandasCode, cs.P50)
	name := "native: pause an idle pandas session (10 MB CSV in /workspace)"
	r.add(Row{Scenario: name, Metric: "p50", Value: ps.P50, Unit: "ms"})
	r.add(Row{Scenario: name, Metric: "disk per paused session", Value: float64(disk) / (1 << 20), Unit: "MiB"})
	name = "native: resume it (restored files) + its first `" + pandasCode + "`"
	r.add(Row{Scenario: name, Metric: "p50", Value: rs.P50, Unit: "ms", Target: "≤ 100 ms", Baseline: base, Ratio: ratio(rs.P50, cs.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: rs.P99, Unit: "ms"})
	r.Stats["persist_pause"], r.Stats["persist_resume"], r.Stats["persist_create"] = ps, rs, cs
	return nil
}
