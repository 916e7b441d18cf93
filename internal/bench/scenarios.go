package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
)

const pandasCode = "import pandas as pd; pd.DataFrame({'a': [1, 2]}).sum()"

// benchExec: `x = 1` in a warm session over HTTP, in sessions whose
// workspace is empty (the snapshot's one-fstat shortcut), holds one file,
// and holds 100 (each execution lists it twice, before and after), in
// interleaved batches on the same server so that all see the same machine.
func benchExec(ctx context.Context, srv *server, r *Report, n int) error {
	variants := []struct {
		key   string
		files int
	}{{"exec", 0}, {"exec_files_1", 1}, {"exec_files_100", 100}}
	ids := make([]string, len(variants))
	lat := make([][]time.Duration, len(variants))
	for i, v := range variants {
		sess, err := srv.newSession(ctx)
		if err != nil {
			return err
		}
		defer srv.deleteSession(ctx, sess.ID)
		ids[i] = sess.ID
		if v.files > 0 {
			code := fmt.Sprintf("for i in range(%d):\n    with open(f'/workspace/data{i}.csv', 'w') as f: f.write('a,b\\n1,2\\n')", v.files)
			if _, err := srv.exec(ctx, sess.ID, code); err != nil {
				return err
			}
		}
		for j := 0; j < 20; j++ { // warm the connection and the interpreter
			if _, err := srv.exec(ctx, sess.ID, "x = 1"); err != nil {
				return err
			}
		}
	}
	const batch = 100
	for done := 0; done < n; done += batch {
		for i := range variants {
			for j := 0; j < min(batch, n-done); j++ {
				start := time.Now()
				res, err := srv.exec(ctx, ids[i], "x = 1")
				if err != nil {
					return err
				}
				lat[i] = append(lat[i], time.Since(start))
				if len(res.FilesChanged) > 0 {
					return fmt.Errorf("x = 1 reported files changed: %v", res.FilesChanged)
				}
			}
		}
	}
	empty := stats(lat[0])
	for i, v := range variants {
		s := stats(lat[i])
		name := "warm session: execute `x = 1` over HTTP"
		if v.files > 0 {
			name = fmt.Sprintf("warm session, %d file(s) in its workspace: execute `x = 1` over HTTP", v.files)
		}
		row := Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms", Target: GoalExecP50.Text}
		if v.files > 0 {
			row.Baseline = fmt.Sprintf("empty workspace: %.3f ms", empty.P50)
			row.Ratio = fmt.Sprintf("%+.3f ms", s.P50-empty.P50)
		}
		r.add(row)
		r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms", Target: GoalExecP99.Text})
		r.Stats[v.key] = s
	}
	return nil
}

// benchCreatePandas: create a session and run a pandas snippet as its
// first execution, create to result; against a cold python doing the same
// outside any sandbox. The two are interleaved, round by round (a cold
// python, then perRound creations, each on a refilled pool), so that both
// see the same machine: a cold python swings by half from minute to
// minute on a shared host, and a baseline taken after all the creations
// judged them against another minute's machine. The goal is judged on
// the median of the rounds' ratios (the round's cold python over the
// median of its creations), and the spread of those ratios is reported.
func benchCreatePandas(ctx context.Context, srv *server, r *Report, o Options, rounds, perRound int) error {
	var lat, base []time.Duration
	ratios := make([]float64, 0, rounds)
	for i := 0; i < rounds; i++ {
		if err := srv.waitWarm(ctx, time.Minute); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // let the last teardown finish
		cold, err := timeCmd(ctx, 1, o.Python, "-c", pandasCode+"; print('ok')")
		if err != nil {
			return err
		}
		base = append(base, cold...)
		round := make([]time.Duration, 0, perRound)
		for j := 0; j < perRound; j++ {
			start := time.Now()
			sess, err := srv.newSession(ctx)
			if err != nil {
				return err
			}
			if _, err := srv.exec(ctx, sess.ID, pandasCode); err != nil {
				return err
			}
			round = append(round, time.Since(start))
			srv.deleteSession(ctx, sess.ID)
		}
		lat = append(lat, round...)
		if m := stats(round).P50; m > 0 {
			ratios = append(ratios, float64(cold[0].Microseconds())/1000/m)
		}
	}
	s, b, q := stats(lat), stats(base), spread(ratios)
	bq := spread(msOf(base))
	name := "create a session + first execution `" + pandasCode + "`"
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms", Target: GoalCreatePandas.Text + " (the median of the rounds' ratios)",
		Baseline: fmt.Sprintf("cold python3 -c, interleaved: %.1f ms (%d runs, %.0f–%.0f ms)", b.P50, b.N, bq["min"], bq["max"]),
		Ratio:    fmt.Sprintf("%.1f× faster (per round: %.1f× median, %.1f–%.1f×, quartiles %.1f–%.1f×, %d rounds)", q["median"], q["median"], q["min"], q["max"], q["p25"], q["p75"], len(ratios))})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms"})
	r.Stats["create_pandas"] = s
	r.Stats["cold_python_pandas"] = b
	r.Stats["create_pandas_ratio"] = q
	r.Stats["cold_python_pandas_spread"] = bq
	return nil
}

// spread is spreadOf(v) as the report's Stats keep it ("median", "p25",
// "p75", "min", "max"), with how many there are ("n"); empty for none.
func spread(v []float64) map[string]float64 {
	if len(v) == 0 {
		return map[string]float64{}
	}
	q := spreadOf(v)
	return map[string]float64{"median": q.Median, "p25": q.Q1, "p75": q.Q3, "min": q.Min, "max": q.Max, "n": float64(len(v))}
}

// msOf is d in milliseconds.
func msOf(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v.Microseconds()) / 1000
	}
	return out
}

// benchContexts: in a warm Python session, the first execution of another
// code context (its interpreter started in the session's sandbox then),
// per language, against a warm execution of the same code there (a row
// of its own too: the speed of each language's runtime).
func benchContexts(ctx context.Context, srv *server, r *Report, n int) error {
	for _, c := range []struct{ lang, code string }{
		{apitype.Python, "x = 1"}, {apitype.JavaScript, "x = 1"}, {apitype.Bash, "x=1"},
	} {
		first := make([]time.Duration, 0, n)
		warm := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			sess, err := srv.newSession(ctx)
			if err != nil {
				return err
			}
			if _, err := srv.exec(ctx, sess.ID, "x = 1"); err != nil {
				return err
			}
			start := time.Now()
			cc, err := srv.client.CreateContext(ctx, sess.ID, apitype.CreateContextRequest{Language: c.lang})
			if err == nil {
				_, err = srv.execIn(ctx, sess.ID, apitype.ExecuteRequest{Code: c.code, Context: cc.ID})
			}
			if err != nil {
				srv.deleteSession(ctx, sess.ID)
				return err
			}
			first = append(first, time.Since(start))
			start = time.Now()
			if _, err := srv.execIn(ctx, sess.ID, apitype.ExecuteRequest{Code: c.code, Context: cc.ID}); err != nil {
				srv.deleteSession(ctx, sess.ID)
				return err
			}
			warm = append(warm, time.Since(start))
			srv.deleteSession(ctx, sess.ID)
		}
		s, w := stats(first), stats(warm)
		name := "a warm python session: create a " + c.lang + " context + its first `" + c.code + "`"
		r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms",
			Baseline: fmt.Sprintf("the next execution there: %.1f ms", w.P50), Ratio: ratio(s.P50, w.P50)})
		r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms"})
		// For information: a warm execution in each language's runtime.
		warmName := "a warm " + c.lang + " context: its next `" + c.code + "` over HTTP"
		r.add(Row{Scenario: warmName, Metric: "p50", Value: w.P50, Unit: "ms"})
		r.add(Row{Scenario: warmName, Metric: "p99", Value: w.P99, Unit: "ms"})
		r.Stats["context_"+c.lang] = s
		r.Stats["context_"+c.lang+"_warm"] = w
	}
	return nil
}

// benchConcurrent: 50 session creations at once, each followed by one
// print(1), on a full pool of a server of the default configuration
// (startDefaultServer) of its own.
func benchConcurrent(ctx context.Context, r *Report, o Options, n int) error {
	srv, err := startDefaultServer(ctx, o, "-concurrent")
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	full := poolStats(ctx, srv)
	s, err := createBurst(ctx, srv, n)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%d concurrent session creations, each + `print(1)`, on a full pool, %s", n, DefaultConfigText)
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms"})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms", Target: GoalBurstP99.Text,
		Note: fmt.Sprintf("python pool ready %d of target %d before the creations", full.Ready, full.Target)})
	r.Stats["concurrent_create"] = s
	r.Stats["concurrent_create_config"] = DefaultConfigText
	return nil
}

// createBurst creates n sessions at once, each followed by print(1), and
// deletes them: the create-to-result latencies.
func createBurst(ctx context.Context, srv *server, n int) (Stat, error) {
	sessions, lat, err := openSessions(ctx, srv, n, n, "print(1)")
	for _, sess := range sessions {
		srv.deleteSession(ctx, sess.ID)
	}
	return stats(lat), err
}

// benchOneShot: POST /v1/execute of print(1) with 4 clients, sustained;
// against bare python3 and bubblewrap + python3 run one after another.
// Then the same with DrainedOneShotCode, which the lean template's scan
// refuses (it names numpy), for comparison: the goal is print(1)'s.
func benchOneShot(ctx context.Context, srv *server, r *Report, o Options, d time.Duration) error {
	const clients = 4
	lean := "python" + apitype.LeanPoolSuffix
	full0, lean0 := poolStats(ctx, srv), poolStatsOf(ctx, srv, lean)
	cpu0 := srv.cpu()
	lat, err := oneShotLoad(ctx, srv, clients, d, "print(1)")
	if err != nil {
		return err
	}
	// Every one-shot's init and runtime reaped, and the pool refilled:
	// the CPU each party spent on the runs, built and torn down.
	if err := srv.waitWarm(ctx, time.Minute); err != nil {
		return err
	}
	cpu1 := srv.cpu()
	full1, lean1 := poolStats(ctx, srv), poolStatsOf(ctx, srv, lean)
	fmt.Fprintf(o.Verbose, "oneshot: %d runs; python pool hits +%d misses +%d built +%d; %s hits +%d misses +%d built +%d\n",
		len(lat), full1.Hits-full0.Hits, full1.Misses-full0.Misses, full1.Built-full0.Built, lean, lean1.Hits-lean0.Hits, lean1.Misses-lean0.Misses, lean1.Built-lean0.Built)
	s := stats(lat)
	rps := float64(len(lat)) / d.Seconds()
	// The baselines: as many bare `python3 -c 'print(1)'` as 4 clients can
	// start and finish in the same time, no sandbox at all; the same in
	// bubblewrap; and bubblewrap running /usr/bin/true, the cost of fresh
	// namespaces and mounts alone, a ceiling for any design that gives
	// every run its own.
	child0 := childrenCPU()
	baseRPS := throughput(ctx, clients, d, o.Python, "-c", "print(1)")
	basePer := perRun(childrenCPU()-child0, int(baseRPS*d.Seconds()))
	name := "one-shot POST /v1/execute `print(1)`, 4 clients"
	r.add(Row{Scenario: name, Metric: "throughput", Value: rps, Unit: "req/s", Target: GoalOneShot.Text,
		Baseline: fmt.Sprintf("bare python3 -c, 4 at a time: %.1f req/s", baseRPS), Ratio: ratio(1/rps, 1/baseRPS)})
	r.Stats["oneshot_rps"], r.Stats["oneshot_bare_python_rps"] = rps, baseRPS
	reportOneShotCPU(r, name, cpu0, cpu1, len(lat), basePer)
	if bw := bwrapArgv(); bw != nil {
		bwPy := throughput(ctx, clients, d, append(bw, o.Python, "-c", "print(1)")...)
		r.add(Row{Scenario: name, Metric: "throughput vs bubblewrap", Value: rps, Unit: "req/s",
			Baseline: fmt.Sprintf("bwrap + python3 -c, 4 at a time: %.1f req/s", bwPy), Ratio: ratio(1/rps, 1/bwPy)})
		r.Stats["oneshot_bwrap_python_rps"] = bwPy
		bwTrue := throughput(ctx, clients, d, append(bw, "/usr/bin/true")...)
		r.add(Row{Scenario: name, Metric: "throughput vs namespaces alone", Value: rps, Unit: "req/s",
			Baseline: fmt.Sprintf("bwrap + true, 4 at a time: %.1f req/s", bwTrue), Ratio: ratio(1/rps, 1/bwTrue)})
		r.Stats["oneshot_bwrap_true_rps"] = bwTrue
	}
	r.add(Row{Scenario: name, Metric: "p50", Value: s.P50, Unit: "ms"})
	r.add(Row{Scenario: name, Metric: "p99", Value: s.P99, Unit: "ms"})
	r.Stats["oneshot"] = s

	// Code the lean template does not serve: each one-shot a sandbox of
	// the Python pool's (forked from the full template) or one built for
	// it, and torn down after.
	cpu0 = srv.cpu()
	lat, err = oneShotLoad(ctx, srv, clients, d, DrainedOneShotCode)
	if err != nil {
		return err
	}
	if err := srv.waitWarm(ctx, time.Minute); err != nil {
		return err
	}
	cpu1 = srv.cpu()
	fs := stats(lat)
	frps := float64(len(lat)) / d.Seconds()
	ftotal := perRun(cpu1.parties()-cpu0.parties(), len(lat))
	fname := fmt.Sprintf("one-shot POST /v1/execute `%s` (the full template's path), 4 clients", DrainedOneShotCode)
	r.add(Row{Scenario: fname, Metric: "throughput", Value: frps, Unit: "req/s",
		Baseline: fmt.Sprintf("bare python3 -c print(1), 4 at a time: %.1f req/s", baseRPS), Ratio: ratio(1/frps, 1/baseRPS),
		Note: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", fs.P50, fs.P99)})
	r.add(Row{Scenario: fname, Metric: "CPU per one-shot, all parties", Value: ftotal, Unit: "ms",
		Baseline: fmt.Sprintf("bare python3 -c print(1): %.1f ms of CPU per run", basePer), Ratio: ratio(ftotal, basePer)})
	r.Stats["oneshot_full"] = fs
	r.Stats["oneshot_full_rps"], r.Stats["oneshot_full_cpu_ms"] = frps, ftotal
	r.Stats["oneshot_full_code"] = DrainedOneShotCode
	return nil
}

// oneShotLoad runs one-shots of code (which prints 1) from clients
// goroutines, one after another each, for d: their latencies.
func oneShotLoad(ctx context.Context, srv *server, clients int, d time.Duration, code string) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) {
				t := time.Now()
				res, err := srv.client.RunOnce(ctx, apitype.OneShotRequest{Code: code}, nil)
				if err == nil && res.Stdout != "1\n" {
					err = fmt.Errorf("unexpected stdout %q", res.Stdout)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					lat = append(lat, time.Since(t))
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, firstErr
}

// reportOneShotCPU adds the CPU per one-shot by party (the process that
// spent it, read from /proc and getrusage; not by stage: one process runs
// several), against the CPU of one bare python3 -c run (basePer ms).
func reportOneShotCPU(r *Report, name string, a, b cpuSnap, n int, basePer float64) {
	parts := []struct {
		key, what string
		d         time.Duration
	}{
		{"server", "the server (HTTP, session, pool refill: cgroup, the root's plan; the teardown)", b.server - a.server},
		{"spawner", "the server's spawner (the clone of the init with its namespaces)", b.spawner - a.spawner},
		{"init", "the sandbox init (Go start, mounts, rootfs, seccomp and landlock plans, its exit)", b.inits - a.inits},
		{"template", "the Python template (forking the runtime)", b.template - a.template},
		{"runtime", "the runtime (entering the sandbox, copy-on-write faults, running, exit)", b.runtimes - a.runtimes},
		{"client", "the bench's HTTP client", b.client - a.client},
	}
	per := map[string]float64{}
	var sum time.Duration
	var notes []string
	for _, p := range parts {
		per[p.key] = perRun(p.d, n)
		sum += p.d
		r.add(Row{Scenario: name, Metric: "CPU per one-shot: " + p.what, Value: per[p.key], Unit: "ms"})
		notes = append(notes, fmt.Sprintf("%s %.1f", p.key, per[p.key]))
	}
	per["total"] = perRun(sum, n)
	per["host_busy"] = perRun(b.host-a.host, n)
	per["bare_python"] = basePer
	r.add(Row{Scenario: name, Metric: "CPU per one-shot, all processes (by process, not by stage)", Value: per["total"], Unit: "ms",
		Note:     strings.Join(notes, ", ") + fmt.Sprintf("; the host was busy %.1f ms per one-shot in all (kernel workers, other processes)", per["host_busy"]),
		Baseline: fmt.Sprintf("bare python3 -c: %.1f ms of CPU per run", basePer), Ratio: ratio(per["total"], basePer)})
	r.Stats["oneshot_cpu_ms"] = per
}

// throughput runs argv over and over from clients goroutines for d and
// returns the completed runs per second.
func throughput(ctx context.Context, clients int, d time.Duration, argv ...string) float64 {
	var mu sync.Mutex
	var n int
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if _, err := timeCmd(ctx, 1, argv...); err != nil {
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return float64(n) / d.Seconds()
}

// bwrapArgv is bubblewrap with a root like airlock's (host /usr read-only,
// fresh /proc, /dev and /tmp, every namespace unshared), ready for the
// program's argv; nil when bubblewrap is not installed.
func bwrapArgv(binds ...string) []string {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil
	}
	argv := []string{bw, "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp"}
	for _, b := range binds {
		argv = append(argv, "--ro-bind", b, b)
	}
	return append(argv, "--unshare-all", "--die-with-parent", "--new-session")
}

// benchDensity: n idle Python sessions with numpy and pandas imported,
// all alive at once; proportional memory (PSS) of each session's processes.
func benchDensity(ctx context.Context, srv *server, r *Report, n int) error {
	var sessions []*apitype.Session
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, s := range sessions {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); srv.deleteSession(ctx, s.ID); <-sem }()
		}
		wg.Wait()
	}()
	var err error
	if sessions, _, err = openSessions(ctx, srv, n, 8, "import numpy, pandas"); err != nil {
		return err
	}
	// Every one of them still answers.
	alive := 0
	for _, s := range sessions {
		if _, err := srv.exec(ctx, s.ID, "x = 1"); err == nil {
			alive++
		}
	}
	p := sessionsPSS(srv, sessions)
	r.add(Row{Scenario: "idle Python sessions with numpy and pandas imported", Metric: "alive at once", Value: float64(alive), Unit: "sessions", Target: GoalDensityAlive.Text})
	r.add(Row{Scenario: "idle Python sessions with numpy and pandas imported", Metric: "PSS per session", Value: p.per, Unit: "MB", Target: GoalIdlePSS.Text,
		Note: p.note("init and interpreter")})
	r.Stats["density_sessions"] = alive
	r.Stats["density_pss_mb"] = p.per
	r.Stats["density_init_pss_mb"] = p.init
	return nil
}

// sandboxPSS is what sessions' sandboxes hold: the mean PSS per session
// (MB) of every process of each one's sandbox cgroup, and of its init
// (PID 1 of its pid namespace) alone; and the number of processes.
type sandboxPSS struct {
	per, init float64
	procs     int
}

// note says how a session's PSS divides.
func (p sandboxPSS) note(what string) string {
	return fmt.Sprintf("%d processes (%s): the init %.2f MB, the rest %.2f MB", p.procs, what, p.init, p.per-p.init)
}

func sessionsPSS(srv *server, sessions []*apitype.Session) sandboxPSS {
	var total, init int64
	procs := 0
	for _, s := range sessions {
		var counted []int
		for _, pid := range cgroupPids(srv.name, s.Sandbox) {
			procs++
			// An address space counts once (gVisor's systrap stubs come
			// in pairs sharing one), as pool.memory_budget counts it.
			if slices.ContainsFunc(counted, func(c int) bool { return cgroup.SameAddressSpace(pid, c) }) {
				continue
			}
			counted = append(counted, pid)
			kb := pss(pid)
			total += kb
			if nsPid(pid) == 1 {
				init += kb
			}
		}
	}
	n := float64(max(1, len(sessions))) * 1024
	return sandboxPSS{per: float64(total) / n, init: float64(init) / n, procs: procs}
}

// nsPid is a process's pid in its innermost pid namespace, 0 when it
// cannot be read.
func nsPid(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" {
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// cgroupPids lists the processes of a sandbox's cgroup.
func cgroupPids(parent, name string) []int {
	for _, dir := range []string{
		filepath.Join("/sys/fs/cgroup/pids", parent, name),
		filepath.Join("/sys/fs/cgroup", parent, name),
	} {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return out
	}
	return nil
}

// pss is a process's proportional set size in KiB.
func pss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if n, _ := fmt.Sscanf(sc.Text(), "Pss: %d kB", &kb); n == 1 {
			return kb
		}
	}
	return 0
}

// fullProgram is a program the lean scan sends to the full path (it
// imports a standard module outside runtimes' leanModules): a cold run
// of it starts the session runtime with site, as a bare python3 does.
const fullProgram = "import logging\nprint(1)\n"

// benchRun: `airlock run` of print(1), through the server and building its
// own jail, against bare python3 and bubblewrap + python3, interleaved so
// that all see the same machine; and `airlock run --cold` of fullProgram
// against bare python3 of the same. Every run starts on an idle machine:
// the pool has refilled from the previous server run, so refills neither
// slow the baselines nor help airlock.
func benchRun(ctx context.Context, srv *server, r *Report, o Options, n int) error {
	dir, err := os.MkdirTemp("", "airlock-bench-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	prog := filepath.Join(dir, "p.py")
	if err := os.WriteFile(prog, []byte("print(1)\n"), 0o644); err != nil {
		return err
	}
	full := filepath.Join(dir, "q.py")
	if err := os.WriteFile(full, []byte(fullProgram), 0o644); err != nil {
		return err
	}
	const viaServer = "airlock run p.py (server running)"
	type variant struct {
		key, name string // key: its figures' in Stats
		argv      []string
		base      int  // the index of its baseline's variant
		bare      bool // a baseline itself
		goal      Goal
	}
	variants := []variant{
		{key: "run_bare_python", name: "bare python3 p.py", argv: []string{o.Python, prog}, bare: true},
		{key: "run_server", name: viaServer, argv: []string{o.Binary, "run", "--config", srv.cfgPath, prog}, goal: GoalRunServer},
		{key: "run_cold", name: "airlock run --cold p.py (no server)", argv: []string{o.Binary, "run", "--cold", "--config", srv.cfgPath, prog}, goal: GoalRunCold},
		{key: "run_bare_python_full", name: "bare python3 q.py (`import logging`: not lean)", argv: []string{o.Python, full}, bare: true},
		{key: "run_cold_full", name: "airlock run --cold q.py (`import logging`: not lean; no server)", argv: []string{o.Binary, "run", "--cold", "--config", srv.cfgPath, full}, base: 3},
	}
	if bw := bwrapArgv(prog); bw != nil {
		variants = append(variants, variant{key: "run_bwrap_python", name: "bwrap + python3 p.py", argv: append(bw, o.Python, prog)})
	}
	times := make([][]time.Duration, len(variants))
	for i := 0; i < n+3; i++ {
		for j, v := range variants {
			if err := srv.waitWarm(ctx, time.Minute); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond) // let the last teardown finish
			d, err := timeCmd(ctx, 1, v.argv...)
			if err != nil {
				return err
			}
			if i >= 3 { // warm-up runs are dropped
				times[j] = append(times[j], d[0])
			}
		}
	}
	for j, v := range variants {
		s := stats(times[j])
		row := Row{Scenario: "one program run from the command line: " + v.name, Metric: "median", Value: s.P50, Unit: "ms", Target: v.goal.Text}
		if !v.bare {
			base := stats(times[v.base])
			row.Baseline = fmt.Sprintf("%s: %.1f ms", variants[v.base].name, base.P50)
			row.Ratio = fmt.Sprintf("%+.1f ms", s.P50-base.P50)
		}
		if v.key == "run_cold_full" {
			row.Target = "for information (" + GoalRunCold.Text + " is print(1)'s)"
		}
		r.add(row)
		r.Stats[v.key] = s
	}
	if err := coldPhases(ctx, r, o, srv.cfgPath, prog, "p.py", n); err != nil {
		return err
	}
	return coldPhases(ctx, r, o, srv.cfgPath, full, "q.py (not lean)", n)
}

// coldPhases runs `airlock run --cold` n times more with AIRLOCK_TRACE
// set and reports the median time of each phase it traces (each from the
// previous one) and the rest of the wall time: where a cold run's time
// goes.
func coldPhases(ctx context.Context, r *Report, o Options, cfgPath, prog, what string, n int) error {
	var order []string
	phases := map[string][]time.Duration{}
	for i := 0; i < n; i++ {
		cmd := exec.CommandContext(ctx, o.Binary, "run", "--cold", "--config", cfgPath, prog)
		cmd.Env = append(os.Environ(), "AIRLOCK_TRACE=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("airlock run --cold with AIRLOCK_TRACE: %v: %s", err, stderr.String())
		}
		wall := time.Since(start)
		prev, last := "", time.Duration(0)
		for _, line := range strings.Split(stderr.String(), "\n") {
			var ms float64
			var what string
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "trace" {
				continue
			}
			if _, err := fmt.Sscanf(f[1], "%fms", &ms); err != nil {
				continue
			}
			what = strings.Join(f[2:], " ")
			at := time.Duration(ms * float64(time.Millisecond))
			name := "→ " + what
			if prev == "" {
				name = "package initialisers (from the jail package's) → " + what
			}
			if _, ok := phases[name]; !ok {
				order = append(order, name)
			}
			phases[name] = append(phases[name], at-last)
			prev, last = what, at
		}
		// The rest: exec, the Go start before the first trace, exit.
		name := "the rest of the wall time: exec and Go start before tracing, exit"
		if _, ok := phases[name]; !ok {
			order = append(order, name)
		}
		phases[name] = append(phases[name], max(wall-last, 0))
	}
	for _, name := range order {
		r.add(Row{Scenario: "airlock run --cold " + what + ", phase by phase (AIRLOCK_TRACE)", Metric: name, Value: stats(phases[name]).P50, Unit: "ms"})
	}
	return nil
}

// openSessions creates n Python sessions, at most parallel at a time (all
// let go at once), each running code as its first execution. It returns the
// sessions created (to delete), each success's create-to-result latency,
// and the first error.
func openSessions(ctx context.Context, srv *server, n, parallel int, code string) ([]*apitype.Session, []time.Duration, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		sessions []*apitype.Session
		lat      = make([]time.Duration, 0, n)
		firstErr error
	)
	sem := make(chan struct{}, parallel)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			sess, err := srv.newSession(ctx)
			if err == nil {
				_, err = srv.exec(ctx, sess.ID, code)
			}
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if sess != nil {
				sessions = append(sessions, sess)
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			lat = append(lat, d)
		}()
	}
	close(start)
	wg.Wait()
	return sessions, lat, firstErr
}

// benchAudit: the cost of tenancy on the hot path. Warm `x = 1` executions
// on three servers run side by side (same machine, same moment, batches
// interleaved): no authentication and no audit log; the audit log on
// (every execution one record, its code hashed, written off the request
// path); and API keys plus the audit log (a key lookup in the database on
// every request, too).
func benchAudit(ctx context.Context, r *Report, o Options, n int) error {
	vs := []*abVariant{
		{label: "audit off, no auth", key: "audit_off", extra: nil},
		{label: "audit on", key: "audit_on", goal: GoalAudit, extra: map[string]any{"audit": map[string]any{"enabled": true, "code": "sha256"}}},
		{label: "audit on, API key", key: "audit_on_api_key", goal: GoalAudit, extra: map[string]any{"audit": map[string]any{"enabled": true, "code": "sha256"}, "server": map[string]any{"auth": "keys"}}, apiKey: true},
	}
	if err := runAB(ctx, o, vs, "-audit", "x = 1", n); err != nil {
		return err
	}
	reportAB(r, vs, "warm execute `x = 1`: ")
	return nil
}

// benchObserve: the cost of metrics and of the output policy on the hot
// path. Warm executions printing one line, on three servers side by side
// (batches interleaved): metrics off; metrics on (the default: an
// observer and the API's request hook); metrics on plus every built-in
// redaction set and a flag code rule (the output scanned, the code
// screened).
func benchObserve(ctx context.Context, r *Report, o Options, n int) error {
	const code = `print("epoch 3: loss=0.25 on host-7")`
	vs := []*abVariant{
		{label: "metrics off", key: "metrics_off", extra: map[string]any{"metrics": map[string]any{"enabled": false}}},
		{label: "metrics on", key: "metrics_on", goal: GoalMetrics, extra: map[string]any{"metrics": map[string]any{"enabled": true}}},
		{label: "metrics on, redaction and a code rule", key: "metrics_redaction", goal: GoalRedaction, extra: map[string]any{
			"metrics":    map[string]any{"enabled": true},
			"redaction":  map[string]any{"builtin": []string{"credentials", "host_paths", "ip_addresses"}},
			"code_rules": []map[string]string{{"name": "network", "pattern": `\b(requests|urllib)\b`, "action": "flag"}},
		}},
	}
	if err := runAB(ctx, o, vs, "-observe", code, n); err != nil {
		return err
	}
	reportAB(r, vs, "warm execute, one line printed: ")
	return nil
}

// benchHistory: the cost of each session's history and of the console on
// the hot path. Warm executions printing one line and returning a value,
// on servers side by side (batches interleaved): history off; history on
// (the default: every execution an entry, its result shared with the
// response); history on with a console open on the session (its polls:
// the session list every 2 s, the history's new entries every second).
func benchHistory(ctx context.Context, r *Report, o Options, n int) error {
	const code = "print(\"epoch 3: loss=0.25\"); 41 + 1"
	vs := []*abVariant{
		{label: "history off", key: "history_off", extra: map[string]any{"history": map[string]any{"enabled": false}}},
		{label: "history on", key: "history_on", goal: GoalHistory, extra: map[string]any{"history": map[string]any{"enabled": true}}},
		{label: "history on, console watching", key: "history_console", goal: GoalHistory, extra: map[string]any{"history": map[string]any{"enabled": true}}, watch: consoleWatch},
	}
	if err := runAB(ctx, o, vs, "-history", code, n); err != nil {
		return err
	}
	reportAB(r, vs, "warm execute, a line and a value: ")
	return nil
}

// consoleWatch polls as the console's pages do while one is open on
// session id, until ctx ends.
func consoleWatch(ctx context.Context, srv *server, id string) {
	var after int64
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if i%2 == 0 {
			srv.client.Sessions(ctx)
		}
		if h, err := srv.client.History(ctx, id, after); err == nil {
			for _, e := range h.Entries {
				after = max(after, e.Seq)
			}
		}
	}
}

// reportAB adds a row per variant of an A/B scenario: its p50, and for
// each after the first its change from the first's against its goal:
// the median of the rounds' changes (each round's p50 against the first
// variant's p50 of the same round), with their interquartile range. Stats
// go under each variant's key (all its latencies), each change in percent
// under its key_change_pct, and the range under key_change_iqr.
func reportAB(r *Report, vs []*abVariant, scenario string) {
	base := stats(vs[0].lat)
	for i, v := range vs {
		s := stats(v.lat)
		row := Row{Scenario: scenario + v.label, Metric: "p50", Value: s.P50, Unit: "ms"}
		if i > 0 {
			c := roundChanges(vs[0].rounds, v.rounds)
			row.Target = v.goal.Text + " of " + vs[0].label
			row.Baseline = fmt.Sprintf("%.3f ms (%s)", base.P50, vs[0].label)
			row.Ratio = fmt.Sprintf("%+.1f%% (median of %d rounds; IQR %+.1f to %+.1f%%)", c.Median, len(v.rounds), c.Q1, c.Q3)
			r.Stats[v.key+"_change_pct"] = c.Median
			r.Stats[v.key+"_change_iqr"] = []float64{c.Q1, c.Q3}
		}
		r.add(row)
		r.Stats[v.key] = s
	}
}

// quartiles are the median of a set of figures, its quartiles and ends.
type quartiles struct {
	Median, Q1, Q3, Min, Max float64
}

// spreadOf is the spread of v (zero when empty).
func spreadOf(v []float64) quartiles {
	if len(v) == 0 {
		return quartiles{}
	}
	s := slices.Sorted(slices.Values(v))
	q := func(f float64) float64 { // linear between the closest ranks
		x := f * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return quartiles{Median: q(0.5), Q1: q(0.25), Q3: q(0.75), Min: s[0], Max: s[len(s)-1]}
}

// roundChanges is the spread of the rounds' changes of b's p50 from a's,
// in percent; the rounds are paired by index.
func roundChanges(a, b [][]time.Duration) quartiles {
	var c []float64
	for i := range min(len(a), len(b)) {
		pa, pb := stats(a[i]).P50, stats(b[i]).P50
		if pa > 0 {
			c = append(c, (pb/pa-1)*100)
		}
	}
	return spreadOf(c)
}

// abVariant is one server configuration of an A/B scenario.
type abVariant struct {
	label string
	// key names its figures in Stats; goal bounds its change from the
	// first variant's (every variant but the first).
	key    string
	goal   Goal
	extra  map[string]any
	apiKey bool // the requests carry a tenant's API key
	// watch, if set, runs beside the variant's executions (a client
	// reading the server meanwhile) until they end.
	watch  func(ctx context.Context, srv *server, id string)
	lat    []time.Duration
	rounds [][]time.Duration // lat, by round
}

// abSets is how many servers each variant of an A/B scenario gets: a
// server's own luck (where its interpreter's memory and threads landed)
// moved one variant by several percent for a whole run.
const abSets = 2

// runAB starts abSets servers per variant, warms a session on each, then
// runs code n times for each variant in rounds of abRound executions:
// within a round the variants take turns execution by execution (the
// order rotating), so that the machine's drift falls on every variant
// alike, and the rounds take the servers' sets in turn. It fills each
// variant's latencies, whole and by round.
func runAB(ctx context.Context, o Options, vs []*abVariant, suffix, code string, n int) error {
	sets := abSets
	if n < 2*abRound {
		sets = 1
	}
	srvs := make([][]*server, len(vs))
	sess := make([][]string, len(vs))
	for set := range sets {
		for i, v := range vs {
			srv, err := startServer(ctx, o, 1, fmt.Sprintf("%s%d-%d", suffix, i, set), v.extra)
			if err != nil {
				return err
			}
			defer srv.stop()
			srvs[i] = append(srvs[i], srv)
			if v.apiKey {
				if err := srv.createKey(ctx, o); err != nil {
					return err
				}
			}
			if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
				return err
			}
			s, err := srv.newSession(ctx)
			if err != nil {
				return err
			}
			sess[i] = append(sess[i], s.ID)
			for j := 0; j < 50; j++ {
				if _, err := srv.exec(ctx, s.ID, code); err != nil {
					return err
				}
			}
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer func() { stopWatch(); watching.Wait() }()
	for i, v := range vs {
		if v.watch != nil {
			for set := range sets {
				watching.Go(func() { v.watch(wctx, srvs[i][set], sess[i][set]) })
			}
		}
	}
	for round, done := 0, 0; done < n; round, done = round+1, done+abRound {
		set := round % sets
		for _, v := range vs {
			v.rounds = append(v.rounds, nil)
		}
		for j := range min(abRound, n-done) {
			for k := range vs {
				i := (j + k) % len(vs)
				v := vs[i]
				start := time.Now()
				if _, err := srvs[i][set].exec(ctx, sess[i][set], code); err != nil {
					return err
				}
				d := time.Since(start)
				v.lat = append(v.lat, d)
				v.rounds[round] = append(v.rounds[round], d)
			}
		}
	}
	return nil
}

// abRound is the executions of each variant in one round of an A/B
// scenario.
const abRound = 100
