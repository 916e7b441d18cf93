package bench

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
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
	const setup = "import pandas as pd, numpy as np; pd.DataFrame(np.random.rand(200000, 5)).to_csv('/workspace/data.csv')"
	ps, rs, cs, p, _, err := persistRounds(ctx, srv, n, setup, pandasCode, nil)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("create + first `%s`: %.1f ms", pandasCode, cs.P50)
	name := "native: pause an idle pandas session (10 MB CSV in /workspace)"
	r.add(Row{Scenario: name, Metric: "p50", Value: ps.P50, Unit: "ms"})
	r.add(Row{Scenario: name, Metric: "disk per paused session", Value: float64(p.DiskBytes) / (1 << 20), Unit: "MiB"})
	name = "native: resume it (restored files) + its first `" + pandasCode + "`"
	r.add(Row{Scenario: name, Metric: "p50", Value: rs.P50, Unit: "ms", Target: GoalResume.Text, Baseline: base, Ratio: ratio(rs.P50, cs.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: rs.P99, Unit: "ms"})
	r.Stats["persist_pause"], r.Stats["persist_resume"], r.Stats["persist_create"] = ps, rs, cs
	r.Stats["persist_disk_mib"] = float64(p.DiskBytes) / (1 << 20)
	return nil
}

// benchGVisorPersist: an idle pandas session on gVisor with persistence
// (gvisor.checkpoint unset: on, as users get it), paused with its
// memory, then resumed (restored memory: pandas still imported, its
// DataFrame there) and given the
// same first execution; against creating a session on that server and
// running it, in the same run. Also the memory image's size.
func benchGVisorPersist(ctx context.Context, r *Report, o Options, runsc string, n int) error {
	srv, err := startServer(ctx, o, 0, "-gvisor-persist", map[string]any{
		"isolation":   "gvisor",
		"gvisor":      map[string]any{"runsc": runsc},
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}, "zygote": false},
	})
	if err != nil {
		return err
	}
	defer srv.stop()
	const setup = "import pandas as pd, numpy as np; df = pd.DataFrame(np.random.rand(100000, 5))"
	ps, rs, cs, p, first, err := persistRounds(ctx, srv, n, setup, pandasCode, func(p, res *apitype.Session) error {
		if p.Paused.MemoryBytes == 0 {
			return fmt.Errorf("the pause kept no memory: %s", p.Paused.MemoryError)
		}
		if res.Restored != apitype.RestoreMemory {
			return fmt.Errorf("resumed with %q: %s", res.Restored, res.RestoredReason)
		}
		return nil
	})
	if err != nil {
		return err
	}
	name := "gVisor: pause an idle pandas session with its memory (gvisor.checkpoint)"
	r.add(Row{Scenario: name, Metric: "p50", Value: ps.P50, Unit: "ms"})
	r.add(Row{Scenario: name, Metric: "memory image", Value: float64(p.MemoryBytes) / (1 << 20), Unit: "MiB", Note: fmt.Sprintf("%.1f MiB on disk in all", float64(p.DiskBytes)/(1<<20))})
	name = "gVisor: resume it (restored memory) + its first `" + pandasCode + "`"
	r.add(Row{Scenario: name, Metric: "p50", Value: rs.P50, Unit: "ms", Target: GoalGVisorResume.Text, Baseline: fmt.Sprintf("create + the same: %.1f ms", cs.P50), Ratio: ratio(rs.P50, cs.P50)})
	r.add(Row{Scenario: name, Metric: "p99", Value: rs.P99, Unit: "ms"})
	r.Stats["gvisor_persist_pause"], r.Stats["gvisor_persist_resume"], r.Stats["gvisor_persist_create"] = ps, rs, cs
	r.Stats["gvisor_persist_image_mib"] = float64(p.MemoryBytes) / (1 << 20)
	// The resume by stage, from the server's log of each resume.
	name = "gVisor: the resume by stage (p50)"
	stages := resumeStages(srv.log())
	for _, st := range resumeStageNames {
		// A stage with nothing to do (no code contexts) is no row.
		if p50 := stats(stages[st.key]).P50; p50 > 0 {
			r.add(Row{Scenario: name, Metric: st.label, Value: p50, Unit: "ms"})
		}
	}
	r.add(Row{Scenario: name, Metric: "the first execution", Value: first.P50, Unit: "ms"})
	return nil
}

// resumeStageNames are the stages a server logs of a resume with memory
// ("session resumed"), in order.
var resumeStageNames = []struct{ key, label string }{
	{"ms", "in the server, in all"},
	{"verify_ms", "memory image checked (while runsc reads it)"},
	{"prepare_ms", "sandbox prepared"},
	{"fill_ms", "files put back"},
	{"runsc_ms", "runsc restore until it runs"},
	{"attach_ms", "runtime attached"},
	{"contexts_ms", "code contexts attached"},
}

// resumeStages collects the stage times of every resume with memory in
// a server's log.
func resumeStages(log string) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	kv := regexp.MustCompile(`\b([a-z_]*ms)=([0-9.]+)`)
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="session resumed"`) || !strings.Contains(line, "restored=memory") {
			continue
		}
		for _, m := range kv.FindAllStringSubmatch(line, -1) {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				out[m[1]] = append(out[m[1]], time.Duration(v*float64(time.Millisecond)))
			}
		}
	}
	return out
}

// persistRounds times n rounds on srv: a session set up with setup,
// paused, resumed and given first (check, when set, sees each pause's
// and resume's answer); then a session created and given first, the
// baseline. It returns the three timings and the last pause's image.
func persistRounds(ctx context.Context, srv *server, n int, setup, first string, check func(p, res *apitype.Session) error) (pause, resume, create Stat, last apitype.PausedInfo, firstExec Stat, err error) {
	if err = srv.waitWarm(ctx, 5*time.Minute); err != nil {
		return
	}
	var ps, rs, cs, fs []time.Duration
	round := func() error {
		sess, err := srv.newSession(ctx)
		if err != nil {
			return err
		}
		defer srv.deleteSession(ctx, sess.ID)
		if _, err := srv.exec(ctx, sess.ID, setup); err != nil {
			return err
		}
		// The pool refilled (the session took a sandbox from it), as
		// before the baseline's creation: on a gVisor server a refill
		// imports pandas for seconds, and would share the cores with
		// the pause and the resume.
		if err := srv.waitWarm(ctx, time.Minute); err != nil {
			return err
		}
		start := time.Now()
		p, err := srv.client.PauseSession(ctx, sess.ID)
		if err != nil {
			return err
		}
		ps = append(ps, time.Since(start))
		last = *p.Paused
		start = time.Now()
		res, err := srv.client.ResumeSession(ctx, sess.ID)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(p, res); err != nil {
				return err
			}
		}
		execStart := time.Now()
		if _, err := srv.exec(ctx, sess.ID, first); err != nil {
			return err
		}
		rs = append(rs, time.Since(start))
		fs = append(fs, time.Since(execStart))
		return nil
	}
	for i := 0; i < n; i++ {
		if err = round(); err != nil {
			return
		}
		if err = srv.waitWarm(ctx, time.Minute); err != nil {
			return
		}
		start := time.Now()
		fresh, err2 := srv.newSession(ctx)
		if err = err2; err != nil {
			return
		}
		_, err = srv.exec(ctx, fresh.ID, first)
		srv.deleteSession(ctx, fresh.ID)
		if err != nil {
			return
		}
		cs = append(cs, time.Since(start))
	}
	return stats(ps), stats(rs), stats(cs), last, stats(fs), nil
}
