package docgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/bench"
)

// report is a run's report with the figures of every main row; exec's
// p50 and the one-shot rate are what the cases change.
func report(execP50, oneshotRPS float64) *bench.Report {
	return &bench.Report{
		Date: "2026-11-27", Start: "2026-11-27T17:02:10Z", End: "2026-11-27T17:14:55Z", Version: "abc1234",
		Isolation: "gvisor", Runsc: "runsc version release-20251110.0",
		Machine:   bench.Machine{Cores: 2, MemoryGiB: 24, Kernel: "6.18.44", Cgroup: "v1 (hybrid)", Go: "go1.26.8", Python: "Python 3.11.2"},
		LoadStart: [3]float64{0.7, 1, 1}, LoadEnd: [3]float64{6.4, 3, 2},
		Stats: map[string]any{
			"exec":                         bench.Stat{N: 2000, P50: execP50, P99: 1.81},
			"exec_files_1":                 bench.Stat{N: 2000, P50: 0.45, P99: 1.5},
			"exec_files_100":               bench.Stat{N: 2000, P50: 0.62, P99: 2.5},
			"create_pandas":                bench.Stat{N: 100, P50: 10, P99: 30},
			"cold_python_pandas":           bench.Stat{N: 10, P50: 418},
			"concurrent_create":            bench.Stat{N: 50, P50: 132, P99: 147},
			"drained_burst_1":              bench.Stat{N: 50, P50: 900, P99: 1335},
			"drained_oneshots_1":           bench.Stat{N: 50, P50: 850, P99: 1580},
			"oneshot_rps":                  oneshotRPS,
			"oneshot_bare_python_rps":      90.0,
			"oneshot_cpu_ms":               map[string]float64{"server": 7, "total": 40, "bare_python": 20, "host_busy": 45},
			"density_pss_mb":               4.9,
			"density_sessions":             300,
			"run_bare_python":              bench.Stat{P50: 24.7},
			"run_cold":                     bench.Stat{P50: 82.7},
			"run_bare_python_full":         bench.Stat{P50: 27.0},
			"run_cold_full":                bench.Stat{P50: 48.5},
			"audit_off":                    bench.Stat{P50: 0.76},
			"audit_on":                     bench.Stat{P50: 0.72},
			"audit_on_change_pct":          -6.2,
			"audit_on_change_iqr":          []float64{-8, -3},
			"egress_download_mbs":          map[string]float64{"gate": 1200, "direct": 1600, "ratio": 0.82, "ratio_min": 0.7, "ratio_max": 0.9, "pairs": 15},
			"gvisor_drained_create_pandas": bench.Stat{P50: 2300},
			"native_drained_create_pandas": bench.Stat{P50: 40},
			"gvisor_pss_mb":                121.5,
			"gvisor_drained_pool_image":    1.0,
		},
	}
}

// Whether a goal is met comes from the figures, each against its own
// goal, and a report read back from its JSON renders alike.
func TestBenchTableJudgesGoals(t *testing.T) {
	for _, c := range []struct {
		execP50, rps float64
		want         []string
	}{
		{0.8, 45, []string{"p50 ≤ 0.5 ms: **not met**", "≥ 1.0× bare python3 -c: **not met**", "**0.50×** bare python"}},
		{0.4, 95, []string{"p50 ≤ 0.5 ms: met", "≥ 1.0× bare python3 -c: met", "**1.1×** bare python"}},
	} {
		r := report(c.execP50, c.rps)
		got, err := BenchTable(r)
		if err != nil {
			t.Fatal(err)
		}
		want := append(c.want,
			"p99 ≤ 2 ms: met",                    // 1.81
			"≥ 40× faster than cold python: met", // 418 / 10
			"p99 ≤ 150 ms: met",                  // 147
			"p99 ≤ 150 ms: **not met**",          // 1335, drained
			"the one-shots before them: p50 850 ms, p99 1580 ms",
			"≤ 5 MB: met", "alive ≥ 300: met", // 4.9 MB, 300
			"≤ 15 ms over bare python: **not met**", // +58.0
			// The not-lean program's row: its own baseline, no verdict.
			"bare `python3 q.py` of the same: 27.0 ms | **+21.5 ms** | for information (≤ 15 ms over bare python is `print(1)`'s) |",
			// Files in the workspace, against the warm goal.
			"1 file p50 ≤ 0.5 ms: met; p99 ≤ 2 ms: met; 100 files p50 ≤ 0.5 ms: **not met**; p99 ≤ 2 ms: **not met**",
			"audit on ≤ +10%: met", "**-6.2 %** (rounds' IQR -8.0 to -3.0 %)", // −6.2 %
			// The median of the pairs' ratios, not the ratio of the medians (0.75).
			"**0.82×** direct (median of 15 pairs' ratios, 0.70 to 0.90)", "≥ 0.8× direct: met",
			"≤ 3× native: **not met**", "**57.5×** native", // 2300 / 40
			"≤ 40 MB: **not met**",
			"2026-11-27, 17:02–17:14 UTC, airlock abc1234, on 2 cores, 24 GiB, Linux 6.18.44, cgroup v1 (hybrid), go1.26.8, Python 3.11.2; load average 0.7 when it started, 6.4 when it ended; gVisor: runsc version",
			"`airlock bench --json --isolation gvisor`",
			"on a server whose pools restore their sandboxes from an image of a fresh one (`gvisor.pool_image`)")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("exec p50 %v, %v/s: the table lacks %q:\n%s", c.execP50, c.rps, w, got)
			}
		}
		b, _ := json.Marshal(r)
		back, err := bench.LoadReport(b)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := BenchTable(back); err != nil || again != got {
			t.Errorf("the report read back from JSON renders otherwise (%v):\n%s\nnot\n%s", err, again, got)
		}
	}
}

// A row whose figures the report lacks is left out; a smoke run's
// report, or one without times, is refused.
func TestBenchTableRefuses(t *testing.T) {
	r := report(0.8, 45)
	delete(r.Stats, "gvisor_pss_mb")
	got, err := BenchTable(r)
	if err != nil || strings.Contains(got, "gVisor: idle") {
		t.Errorf("a missing figure's row: %v\n%s", err, got)
	}
	r.Smoke = true
	if _, err := BenchTable(r); err == nil {
		t.Error("a smoke run rendered")
	}
	r = report(0.8, 45)
	r.End = ""
	if _, err := BenchTable(r); err == nil {
		t.Error("a report without its end rendered")
	}
	if _, err := bench.LoadReport([]byte(`{"rows": []}`)); err == nil {
		t.Error("a JSON without a start or stats loaded as a report")
	}
}

// The table goes between its markers and nowhere else; a page without
// them, or with them twice, is an error.
func TestSplice(t *testing.T) {
	page := "# P\n\nbefore\n\n" + tableBegin + "\nold table\n" + tableEnd + "\n\nafter\n"
	got, err := splice([]byte(page), "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# P\n\nbefore\n\n" + tableBegin + "\n\nnew table\n\n" + tableEnd + "\n\nafter\n"; string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	again, err := splice(got, "new table\n")
	if err != nil || string(again) != string(got) {
		t.Errorf("splicing the same table twice changed the page: %v", err)
	}
	for _, bad := range []string{"no markers", tableBegin + tableBegin + tableEnd, tableEnd + "x" + tableBegin} {
		if _, err := splice([]byte(bad), "t"); err == nil {
			t.Errorf("%q spliced", bad)
		}
	}
}

// A report whose figures changed makes the committed page stale: what
// TestReference (cmd/airlock) and land refuse.
func TestStaleTableIsCaught(t *testing.T) {
	root := t.TempDir()
	write := func(name string, b []byte) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeReport := func(execP50 float64) {
		b, _ := json.Marshal(report(execP50, 45))
		write(BenchReport, b)
	}
	write(PerformancePage, []byte("# Performance\n\n"+tableBegin+"\n"+tableEnd+"\n"))
	writeReport(0.8)
	page, err := Performance(root)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{PerformancePage: page}
	if stale := Stale(root, files); len(stale) != 1 {
		t.Fatalf("a page never rendered is not stale: %v", stale)
	}
	if err := Write(root, files); err != nil {
		t.Fatal(err)
	}
	if stale := Stale(root, files); len(stale) != 0 {
		t.Fatalf("stale right after writing: %v", stale)
	}
	writeReport(0.9)
	if page, err = Performance(root); err != nil {
		t.Fatal(err)
	}
	if stale := Stale(root, map[string][]byte{PerformancePage: page}); len(stale) != 1 || stale[0] != PerformancePage {
		t.Errorf("a changed report left the page current: %v", stale)
	}
}

// The drained burst's second round is called grown only when its pool's
// target exceeded its size before it; its rows say what the one-shots
// ran and on what configuration, and the full template's one-shot row
// is shown for information beside the goal's.
func TestBenchTableDrainedRounds(t *testing.T) {
	pool := func(target float64) map[string]float64 {
		return map[string]float64{"size": 64, "ready_before_oneshots": target, "target_before_oneshots": target,
			"ready_before_creations": target - 8, "target_before_creations": target}
	}
	for _, c := range []struct {
		name      string
		stats     map[string]any
		want, not []string
	}{
		{"grown", map[string]any{"drained_pool_2": pool(125), "drained_oneshot_code": bench.DrainedOneShotCode, "drained_config": "the default configuration (X)"},
			[]string{"has grown the pool (to 125, its size 64)", "50 one-shots of `" + bench.DrainedOneShotCode + "`, the default configuration (X): a fresh server",
				"the Python pool 125 ready of 125 before the one-shots, 117 of 125 before the creations"},
			[]string{"did not grow"}},
		{"at its size", map[string]any{"drained_pool_2": pool(64)},
			[]string{"the first did not grow the pool (target 64, its size 64)"},
			[]string{"has grown"}},
		{"an older report", nil,
			[]string{"not in the report", "of `print(1)` (served by the lean template: the Python pool untouched), default pools, no API keys, the audit log off"},
			[]string{"has grown"}},
		{"the full template's one-shots", map[string]any{"oneshot_full_rps": 45.0, "oneshot_full_cpu_ms": 30.0, "oneshot_full_code": "import numpy; print(1)"},
			[]string{"of `import numpy; print(1)`, code the lean template does not serve", "**45.0/s**", "**0.50×** bare python; CPU 1.5×",
				"for information (≥ 1.0× bare python3 -c is `print(1)`'s)"},
			nil},
	} {
		r := report(0.4, 95)
		r.Stats["drained_burst_2"] = bench.Stat{N: 50, P50: 60, P99: 90}
		for k, v := range c.stats {
			r.Stats[k] = v
		}
		got, err := BenchTable(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the table lacks %q:\n%s", c.name, w, got)
			}
		}
		for _, w := range c.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: the table says %q:\n%s", c.name, w, got)
			}
		}
	}
}

// With the cold python interleaved, the create + first pandas goal is
// judged on the median of the rounds' ratios, not on the ratio of the
// two medians, and the spread is shown.
func TestBenchTableCreatePandasRounds(t *testing.T) {
	r := report(0.4, 95) // the medians' ratio: 418 / 10, met
	r.Stats["create_pandas_ratio"] = map[string]float64{"median": 35, "p25": 31, "p75": 44, "min": 22, "max": 58, "n": 25}
	r.Stats["cold_python_pandas_spread"] = map[string]float64{"min": 350, "max": 610, "n": 25}
	got, err := BenchTable(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"median ≥ 40× faster than cold python: **not met**",
		"**35.0×** faster (the median of 25 rounds' ratios; quartiles 31.0×–44.0×, all 22.0×–58.0×)",
		"cold `python3 -c` of the same: 418 ms (25 runs interleaved with the creations, 350 ms–610 ms)",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("the table lacks %q:\n%s", w, got)
		}
	}
}

// The capacity row shows the kernel's memory per session beside PSS,
// for information.
func TestBenchTableCapacityKernel(t *testing.T) {
	r := report(0.4, 95)
	r.Stats["capacity_sessions"] = 1000
	r.Stats["capacity_pss_mb"] = 4.66
	r.Stats["capacity_meminfo_mb"] = map[string]float64{"mem_available": 6.1, "page_tables": 0.356, "sunreclaim": 0.816, "kernel_stack": 0.122}
	got, err := BenchTable(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"**1000** alive, PSS 4.66 MB each",
		"MemAvailable −6.10 MB; PageTables +0.36, SUnreclaim +0.82, KernelStack +0.12 MB",
		"PSS ≤ 5 MB: met; the kernel's share: for information"} {
		if !strings.Contains(got, w) {
			t.Errorf("the table lacks %q:\n%s", w, got)
		}
	}
}

// The resume row shows what a native paused session takes on disk: its
// figure, or in a report from before it was one, its row. Checked
// against a mutant: persistDisk not called (the row lacked it).
func TestBenchTablePausedDisk(t *testing.T) {
	for _, fromRow := range []bool{false, true} {
		r := report(0.4, 95)
		r.Stats["persist_resume"] = bench.Stat{P50: 85.8, P99: 152}
		r.Stats["persist_pause"] = bench.Stat{P50: 105}
		if fromRow {
			r.Rows = append(r.Rows, bench.Row{Scenario: "native: pause an idle pandas session (10 MB CSV in /workspace)", Metric: "disk per paused session", Value: 19.61, Unit: "MiB"})
		} else {
			r.Stats["persist_disk_mib"] = 19.61
		}
		got, err := BenchTable(r)
		if err != nil {
			t.Fatal(err)
		}
		if w := "the pause p50 105 ms, 19.6 MiB on disk per paused session"; !strings.Contains(got, w) {
			t.Errorf("from its row %v: the table lacks %q:\n%s", fromRow, w, got)
		}
	}
}
