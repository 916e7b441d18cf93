package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/gvisor"
)

// gVisorBudget is the gVisor servers' pool.memory_budget: their pools
// keep the sizes the scenarios ask for (about 95 MiB each) whatever the
// host's memory.
const gVisorBudget = "8G"

// benchGVisor runs the session scenarios on a second server whose
// isolation is gVisor, side by side with the native server's figures
// (when those scenarios ran) and with a cold `runsc do python3`.
func benchGVisor(ctx context.Context, r *Report, o Options, n func(full, smoke int) int) error {
	runsc, err := gvisor.Find(o.Runsc)
	if err != nil {
		return err
	}
	pool := n(12, 2)
	srv, err := startServer(ctx, o, 0, "-gvisor", map[string]any{
		"isolation": "gvisor",
		"gvisor":    map[string]any{"runsc": runsc},
		"pool": map[string]any{"size": map[string]int{"python": pool, "bash": 0, "javascript": 0}, "zygote": false,
			"max_size": map[string]int{"python": pool}, "network_size": map[string]int{"python": n(4, 1)}, "memory_budget": gVisorBudget},
	})
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Fprintf(o.Verbose, "gVisor server up at %s; warming its pool\n", srv.url)
	if err := srv.waitWarm(ctx, 5*time.Minute); err != nil {
		return err
	}
	native := func(key string, pick func(Stat) float64) string {
		if s, ok := r.Stats[key].(Stat); ok {
			return fmt.Sprintf("native: %.2f ms", pick(s))
		}
		return ""
	}
	p50 := func(s Stat) float64 { return s.P50 }

	// Create to first pandas result, from the warm pool (one at a time:
	// the pool refills between creations).
	createPandas := func(times int, req apitype.CreateSessionRequest) ([]time.Duration, error) {
		lat := make([]time.Duration, 0, times)
		for i := 0; i < times; i++ {
			if err := srv.waitWarm(ctx, 5*time.Minute); err != nil {
				return nil, err
			}
			start := time.Now()
			sess, err := srv.client.CreateSession(ctx, req)
			if err != nil {
				return nil, err
			}
			if _, err := srv.exec(ctx, sess.ID, pandasCode); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(start))
			srv.deleteSession(ctx, sess.ID)
		}
		return lat, nil
	}
	lat, err := createPandas(n(30, 2), apitype.CreateSessionRequest{Language: apitype.Python})
	if err != nil {
		return err
	}
	// The cold baseline: gVisor's own `runsc do` of python importing pandas.
	root, err := os.MkdirTemp("", "airlock-bench-runsc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	cold, err := timeCmd(ctx, n(5, 1), runsc, "--root", root, "--network=none", "do", o.Python, "-c", pandasCode+"; print('ok')")
	if err != nil {
		return err
	}
	s, c := stats(lat), stats(cold)
	name := "gVisor: create a session + first execution `" + pandasCode + "`"
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms", Target: joinGoals(GoalGVisorCreateP50, GoalGVisorCreateCold),
		Baseline: strings.TrimSuffix(fmt.Sprintf("cold runsc do python3 -c: %.1f ms; %s", c.P50, native("create_pandas", p50)), "; "), Ratio: ratio(s.P50, c.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms"})
	r.Stats["gvisor_create_pandas"] = s
	r.Stats["gvisor_cold_runsc_do_pandas"] = c

	if err := benchDrainedImage(ctx, r, o, runsc, pool, n(5, 1)); err != nil {
		return err
	}

	// The same with a network (an empty allowlist: the egress gate in the
	// sandbox's namespace), from the pool of sandboxes booted with one.
	netLat, err := createPandas(n(10, 2), apitype.CreateSessionRequest{Language: apitype.Python, Network: &apitype.NetworkPolicy{}})
	if err != nil {
		return err
	}
	ns := stats(netLat)
	netName := "gVisor: the same, session created with `network` (pool.network_size)"
	r.add(Row{Scenario: netName, Metric: "p50", Value: ns.P50, Unit: "ms", Baseline: fmt.Sprintf("without network: %.1f ms", s.P50), Ratio: ratio(ns.P50, s.P50)})
	r.add(Row{Scenario: netName, Metric: "p99", Value: ns.P99, Unit: "ms"})
	r.Stats["gvisor_create_pandas_network"] = ns

	// Warm execution.
	sess, err := srv.newSession(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < 20; i++ {
		if _, err := srv.exec(ctx, sess.ID, "x = 1"); err != nil {
			return err
		}
	}
	lat = lat[:0]
	for i := 0; i < n(1000, 20); i++ {
		start := time.Now()
		if _, err := srv.exec(ctx, sess.ID, "x = 1"); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	srv.deleteSession(ctx, sess.ID)
	s = stats(lat)
	r.add(Row{Scenario: "gVisor: warm session, execute `x = 1` over HTTP", Metric: "p50", Value: s.P50, Unit: "ms", Target: GoalGVisorExecP50.Text, Baseline: native("exec", p50)})
	r.add(Row{Scenario: "gVisor: warm session, execute `x = 1` over HTTP", Metric: "p99", Value: s.P99, Unit: "ms"})
	r.Stats["gvisor_exec"] = s

	// Memory of idle sessions with numpy and pandas imported: every
	// process of the sandbox's cgroup (Sentry, gofer, stubs) counted,
	// each address space once.
	sessions, _, err := openSessions(ctx, srv, n(10, 2), 2, "import numpy, pandas")
	defer func() {
		for _, s := range sessions {
			srv.deleteSession(ctx, s.ID)
		}
	}()
	if err != nil {
		return err
	}
	p := sessionsPSS(srv, sessions)
	base := ""
	if v, ok := r.Stats["density_pss_mb"].(float64); ok {
		base = fmt.Sprintf("native: %.1f MB", v)
	}
	r.add(Row{Scenario: "gVisor: idle Python sessions with numpy and pandas imported", Metric: "PSS per session", Value: p.per, Unit: "MB", Baseline: base,
		Note: fmt.Sprintf("%d processes (Sentry, gofer, stubs), each address space counted once", p.procs)})
	r.Stats["gvisor_pss_mb"] = p.per
	srv.stop()
	return benchGVisorPersist(ctx, r, o, runsc, n(10, 2))
}

// benchDrainedImage runs benchDrainedCreate on a gVisor server of its
// own whose pools restore their sandboxes from an image of a fresh one
// (gvisor.pool_image; the keeper with it), the other gVisor scenarios
// staying on the default configuration.
func benchDrainedImage(ctx context.Context, r *Report, o Options, runsc string, pool, rounds int) error {
	srv, err := startServer(ctx, o, 0, "-gvisor-image", map[string]any{
		"isolation": "gvisor",
		"gvisor":    map[string]any{"runsc": runsc, "pool_image": true},
		"pool": map[string]any{"size": map[string]int{"python": pool, "bash": 0, "javascript": 0}, "zygote": false,
			"max_size": map[string]int{"python": pool}, "memory_budget": gVisorBudget},
	})
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 5*time.Minute); err != nil {
		return err
	}
	r.Stats["gvisor_drained_pool_image"] = 1.0
	return benchDrainedCreate(ctx, r, o, srv, pool, rounds)
}

// benchDrainedCreate: create + first pandas result on a drained pool,
// gVisor's (srv, pool python sandboxes) against a native server's of the
// same size, in alternating rounds: each round holds a session of every
// ready sandbox of the server's pool, then times one more session's
// creation and its first pandas result (it waits for a sandbox being
// built), then lets them all go.
func benchDrainedCreate(ctx context.Context, r *Report, o Options, gv *server, pool, rounds int) error {
	nat, err := startServer(ctx, o, pool, "-drained-native", map[string]any{"pool": map[string]any{
		"size": map[string]int{"python": pool, "bash": 0, "javascript": 0}, "zygote": true, "max_size": map[string]int{"python": pool}}})
	if err != nil {
		return err
	}
	defer nat.stop()
	var gvLat, natLat []time.Duration
	for range rounds {
		for _, side := range []struct {
			srv *server
			lat *[]time.Duration
		}{{nat, &natLat}, {gv, &gvLat}} {
			for _, s := range []*server{nat, gv} {
				if err := s.waitWarm(ctx, 5*time.Minute); err != nil {
					return err
				}
			}
			d, err := drainedCreate(ctx, side.srv)
			if err != nil {
				return err
			}
			*side.lat = append(*side.lat, d)
		}
	}
	g, nt := stats(gvLat), stats(natLat)
	name := fmt.Sprintf("gVisor: create a session + first `%s` on a drained pool (its %d ready sandboxes taken)", pandasCode, pool)
	r.add(Row{Scenario: name, Metric: "p50", Value: g.P50, Unit: "ms", Target: GoalGVisorDrained.Text,
		Baseline: fmt.Sprintf("native, a drained pool of %d: %.1f ms", pool, nt.P50), Ratio: ratio(g.P50, nt.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: g.P99, Unit: "ms"})
	r.Stats["gvisor_drained_create_pandas"], r.Stats["native_drained_create_pandas"] = g, nt
	return nil
}

// drainedCreate takes sessions of srv's ready Python sandboxes until it
// has none ready (its refill builds more meanwhile), then times one more
// session's creation and first pandas result, and deletes them all.
func drainedCreate(ctx context.Context, srv *server) (time.Duration, error) {
	var (
		mu   sync.Mutex
		held []*apitype.Session
		errs = make(chan error, 1)
	)
	defer func() {
		for _, s := range held {
			srv.deleteSession(ctx, s.ID)
		}
	}()
	for try := 0; ; try++ {
		ready := poolStats(ctx, srv).Ready
		if ready == 0 {
			break
		}
		if try == 50 {
			return 0, fmt.Errorf("the pool kept %d ready sandboxes after %d sessions took theirs", ready, len(held))
		}
		var wg sync.WaitGroup
		for range ready {
			wg.Go(func() {
				s, err := srv.newSession(ctx)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				mu.Lock()
				held = append(held, s)
				mu.Unlock()
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			return 0, err
		default:
		}
	}
	start := time.Now()
	sess, err := srv.newSession(ctx)
	if err != nil {
		return 0, err
	}
	held = append(held, sess)
	if _, err := srv.exec(ctx, sess.ID, pandasCode); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
