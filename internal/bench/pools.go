package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"time"

	"airlock/internal/apitype"
)

// DrainedOneShotCode is the drained burst's one-shot: code the lean
// template's scan refuses (it names numpy), so that the one-shots take
// their sandboxes from the Python pool the session creations take from,
// as an agent's do (print(1) alone would run on the lean pool and leave
// the Python pool untouched).
const DrainedOneShotCode = "import numpy; print(1)"

// DefaultConfigText says what a server of startDefaultServer runs with,
// for the rows of the scenarios that measure the default configuration.
const DefaultConfigText = "the default configuration (API keys, the audit log on, the default pools)"

// startDefaultServer starts a server of the default configuration but
// for what the bench needs to run beside others (its own state
// directory, cgroup parent, ids, loopback address): API keys (its client
// sends a key it created), the audit log on, the default pools, the
// default limits on sessions and executions.
func startDefaultServer(ctx context.Context, o Options, suffix string) (*server, error) {
	srv, err := startServer(ctx, o, 0, suffix, map[string]any{
		"pool": map[string]any{}, "audit": nil,
		"server": map[string]any{"auth": nil, "max_sessions": nil, "max_concurrent_executions": nil},
	})
	if err != nil {
		return nil, err
	}
	if err := srv.createKey(ctx, o); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// benchDrained: a burst of n session creations (each + `print(1)`) right
// after a burst of n one-shots of DrainedOneShotCode, on a server of the
// default configuration (startDefaultServer): the first round on a fresh
// server (the pool at its size, the one-shots taking what it does not
// keep for sessions), the second once the pool has refilled, grown
// toward what the first asked for if it grew (the pool's figures before
// each phase are kept: the table says whether it did). With -v, each
// phase's CPU by party and the pool's figures.
func benchDrained(ctx context.Context, r *Report, o Options, n int) error {
	srv, err := startDefaultServer(ctx, o, "-drained")
	if err != nil {
		return err
	}
	defer srv.stop()
	r.Stats["drained_config"] = DefaultConfigText
	r.Stats["drained_oneshot_code"] = DrainedOneShotCode
	for round := range 2 {
		if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
			return err
		}
		before := poolStats(ctx, srv)
		c0, t0 := srv.cpu(), time.Now()
		shots, err := oneShotBurst(ctx, srv, n, DrainedOneShotCode)
		if err != nil {
			return err
		}
		between := poolStats(ctx, srv)
		c1, t1 := srv.cpu(), time.Now()
		sessions, lat, err := openSessions(ctx, srv, n, n, "print(1)")
		c2, t2 := srv.cpu(), time.Now()
		after := poolStats(ctx, srv)
		for _, sess := range sessions {
			srv.deleteSession(ctx, sess.ID)
		}
		if err != nil {
			return err
		}
		s := stats(lat)
		phase(o, fmt.Sprintf("round %d one-shots", round+1), c0, c1, t1.Sub(t0), before, between)
		phase(o, fmt.Sprintf("round %d creations", round+1), c1, c2, t2.Sub(t1), between, after)
		name := "a fresh server, the pool at its size"
		if round == 1 {
			name = "the second round, the pool refilled"
			if before.Target > before.Size {
				name = fmt.Sprintf("the second round, the pool grown by the first to %d (its size %d)", before.Target, before.Size)
			}
		}
		scen := fmt.Sprintf("%d concurrent session creations + `print(1)` right after %d one-shots of `%s`, %s: %s", n, n, DrainedOneShotCode, DefaultConfigText, name)
		r.add(Row{Scenario: scen, Metric: "p50", Value: s.P50, Unit: "ms"})
		r.add(Row{Scenario: scen, Metric: "p99", Value: s.P99, Unit: "ms", Target: GoalBurstP99.Text,
			Note: fmt.Sprintf("python pool ready %d of target %d (size %d) before the one-shots, %d of %d (%d building) before the creations; the one-shots p50 %.0f ms, p99 %.0f ms",
				before.Ready, before.Target, before.Size, between.Ready, between.Target, between.Building, shots.P50, shots.P99)})
		r.Stats[fmt.Sprintf("drained_burst_%d", round+1)] = s
		r.Stats[fmt.Sprintf("drained_oneshots_%d", round+1)] = shots
		r.Stats[fmt.Sprintf("drained_pool_%d", round+1)] = map[string]float64{
			"size": float64(before.Size), "ready_before_oneshots": float64(before.Ready), "target_before_oneshots": float64(before.Target),
			"ready_before_creations": float64(between.Ready), "target_before_creations": float64(between.Target),
			"building_before_creations": float64(between.Building),
		}
	}
	after := poolStats(ctx, srv)
	r.Stats["drained_burst_pool"] = after
	return nil
}

// phase says, with -v, what a phase of the drained burst cost: its wall
// time, the CPU of each party and of the host, and the pool's figures.
func phase(o Options, name string, a, b cpuSnap, wall time.Duration, pa, pb apitype.PoolStats) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Fprintf(o.Verbose, "%s: wall %.0f ms; host busy %.0f ms (%.0f%% of the cores); server %.0f, spawner %.0f, inits reaped %.0f, template %.0f, runtimes reaped %.0f, client %.0f ms; pool ready %d->%d target %d->%d building %d->%d, hits +%d misses +%d built +%d\n",
		name, ms(wall), ms(b.host-a.host), 100*float64(b.host-a.host)/float64(wall)/float64(runtime.NumCPU()),
		ms(b.server-a.server), ms(b.spawner-a.spawner), ms(b.inits-a.inits), ms(b.template-a.template), ms(b.runtimes-a.runtimes), ms(b.client-a.client),
		pa.Ready, pb.Ready, pa.Target, pb.Target, pa.Building, pb.Building, pb.Hits-pa.Hits, pb.Misses-pa.Misses, pb.Built-pa.Built)
}

// oneShotBurst runs n one-shots of code (which prints 1) at once; their
// latencies.
func oneShotBurst(ctx context.Context, srv *server, n int, code string) (Stat, error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	lat := make(chan time.Duration, n)
	for range n {
		wg.Go(func() {
			start := time.Now()
			res, err := srv.client.RunOnce(ctx, apitype.OneShotRequest{Code: code}, nil)
			if err == nil && res.Stdout != "1\n" {
				err = fmt.Errorf("one-shot: unexpected stdout %q", res.Stdout)
			}
			if err != nil {
				errs <- err
				return
			}
			lat <- time.Since(start)
		})
	}
	wg.Wait()
	close(errs)
	close(lat)
	var all []time.Duration
	for d := range lat {
		all = append(all, d)
	}
	return stats(all), <-errs
}

// poolStats is the server's python pool figures (zero if it has none).
func poolStats(ctx context.Context, srv *server) apitype.PoolStats {
	return poolStatsOf(ctx, srv, "python")
}

// poolStatsOf is the figures of the server's pool key (zero if it has
// none).
func poolStatsOf(ctx context.Context, srv *server, key string) apitype.PoolStats {
	var s apitype.PoolStats
	if h, err := srv.health(ctx); err == nil {
		if raw, ok := h.Pool[key]; ok {
			json.Unmarshal(raw, &s)
		}
	}
	return s
}
