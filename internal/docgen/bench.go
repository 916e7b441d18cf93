package docgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airlock/internal/bench"
	"airlock/internal/termtext"
)

// The performance page's benchmark table is rendered from the committed
// report of one `airlock bench --json` run, between two markers.
const (
	BenchReport     = "docs/explanation/bench.json"
	PerformancePage = "docs/explanation/performance.md"
	tableBegin      = "<!-- BEGIN bench table: generated from bench.json by internal/docgen; do not edit; run `" + Regenerate + "`. -->"
	tableEnd        = "<!-- END bench table -->"
)

// Performance is the performance page with its benchmark table rendered
// from the report, everything outside the markers as it is.
func Performance(root string) ([]byte, error) {
	page, err := os.ReadFile(filepath.Join(root, PerformancePage))
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, BenchReport))
	if err != nil {
		return nil, err
	}
	r, err := bench.LoadReport(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", BenchReport, err)
	}
	table, err := BenchTable(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", BenchReport, err)
	}
	return splice(page, table)
}

// splice puts text between the page's markers, each there once.
func splice(page []byte, text string) ([]byte, error) {
	if bytes.Count(page, []byte(tableBegin)) != 1 || bytes.Count(page, []byte(tableEnd)) != 1 {
		return nil, fmt.Errorf("%s: the bench table's markers must be there once each:\n%s\n%s", PerformancePage, tableBegin, tableEnd)
	}
	head, rest, _ := bytes.Cut(page, []byte(tableBegin))
	_, tail, ok := bytes.Cut(rest, []byte(tableEnd))
	if !ok {
		return nil, fmt.Errorf("%s: the bench table's end marker comes before its start", PerformancePage)
	}
	var out bytes.Buffer
	out.Write(head)
	out.WriteString(tableBegin + "\n\n" + text + "\n" + tableEnd)
	out.Write(tail)
	return out.Bytes(), nil
}

// tableRow is one line of the benchmark table.
type tableRow struct {
	scenario, airlock, baseline, ratio string
	goals                              []judged
	info                               string // the target cell of a row with no goal of its own
}

// judged is a goal and the figure it judges.
type judged struct {
	label string // what the figure is, when a row has several ("p50")
	goal  bench.Goal
	value float64
}

func (j judged) String() string {
	verdict := "met"
	if !j.goal.Met(j.value) {
		verdict = "**not met**"
	}
	return strings.TrimSpace(j.label+" "+j.goal.Text) + ": " + verdict
}

// BenchTable renders a report's figures as the performance page's table:
// what was run, when, on what, then a row per scenario the report has,
// each against its goal (met or not, from the figures) and the baselines
// of the same run.
func BenchTable(r *bench.Report) (string, error) {
	if r.Smoke {
		return "", errors.New("a smoke run's numbers mean nothing: run the bench in full")
	}
	start, err1 := time.Parse(time.RFC3339, r.Start)
	end, err2 := time.Parse(time.RFC3339, r.End)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("the report's start and end: %w", err)
	}
	rows := benchRows(r)
	if len(rows) == 0 {
		return "", errors.New("the report has none of the table's figures")
	}
	var b strings.Builder
	cmd := "airlock bench --json"
	if r.Isolation == "gvisor" {
		cmd += " --isolation gvisor"
	}
	if r.Only != "" {
		cmd += " --only " + r.Only
	}
	fmt.Fprintf(&b, "`%s`, one run, %s, %s–%s UTC, airlock %s, on %s; load average %.1f when it started, %.1f when it ended",
		cmd, start.Format(time.DateOnly), start.Format("15:04"), end.Format("15:04"), cell(r.Version), cell(r.Machine.String()), r.LoadStart[0], r.LoadEnd[0])
	if r.Runsc != "" {
		fmt.Fprintf(&b, "; gVisor: %s", cell(r.Runsc))
	}
	b.WriteString(". Every figure, as the bench printed it: [bench.json](bench.json).\n\n")
	b.WriteString("| scenario | airlock | baselines, same run | ratio | target |\n|---|---|---|---|---|\n")
	for _, row := range rows {
		var goals []string
		for _, j := range row.goals {
			goals = append(goals, j.String())
		}
		if row.info != "" {
			goals = append(goals, row.info)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.scenario, row.airlock, row.baseline, row.ratio, strings.Join(goals, "; "))
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nScenarios that failed in this run:\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", cell(termtext.Field(e)))
		}
	}
	return b.String(), nil
}

// ms formats milliseconds with the precision they carry.
func ms(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// times is how many times a is b ("0.53×", "3.2×", "117×").
func times(a, b float64) string {
	switch v := a / b; {
	case v < 1:
		return fmt.Sprintf("%.2f×", v)
	case v < 100:
		return fmt.Sprintf("%.1f×", v)
	default:
		return fmt.Sprintf("%.0f×", v)
	}
}

// benchRows are the table's rows the report has figures for.
func benchRows(r *bench.Report) []tableRow {
	var rows []tableRow
	add := func(row tableRow) { rows = append(rows, row) }
	const pandas = "`import pandas as pd; pd.DataFrame({'a': [1, 2]}).sum()`"

	if s, ok := r.Stat("exec"); ok {
		add(tableRow{scenario: "execute `x = 1` in a warm session, over HTTP, its workspace empty",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99)),
			goals:   []judged{{"p50", bench.GoalExecP50, s.P50}, {"p99", bench.GoalExecP99, s.P99}}})
	}
	// The same with files in the workspace, which each execution lists
	// before and after (an empty one is one fstat): against the same goal.
	if s1, ok := r.Stat("exec_files_1"); ok {
		row := tableRow{scenario: "the same, 1 file in the workspace; 100 files ([the snapshots](#the-workspaces-snapshots))",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s1.P50), ms(s1.P99)),
			goals:   []judged{{"1 file p50", bench.GoalExecP50, s1.P50}, {"p99", bench.GoalExecP99, s1.P99}}}
		var ratios []string
		if e, ok := r.Stat("exec"); ok {
			row.baseline = "empty workspace: p50 " + ms(e.P50)
			ratios = append(ratios, fmt.Sprintf("%+.3f ms", s1.P50-e.P50))
		}
		if s100, ok := r.Stat("exec_files_100"); ok {
			row.airlock += fmt.Sprintf("; p50 **%s**, p99 %s", ms(s100.P50), ms(s100.P99))
			row.goals = append(row.goals, judged{"100 files p50", bench.GoalExecP50, s100.P50}, judged{"p99", bench.GoalExecP99, s100.P99})
			if e, ok := r.Stat("exec"); ok {
				ratios = append(ratios, fmt.Sprintf("%+.3f ms", s100.P50-e.P50))
			}
		}
		row.ratio = strings.Join(ratios, "; ")
		add(row)
	}
	if s, ok := r.Stat("create_pandas"); ok {
		row := tableRow{scenario: "create a session, then " + pandas + " as its first execution, create to result",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99))}
		if c, ok := r.Stat("cold_python_pandas"); ok {
			row.baseline = "cold `python3 -c` of the same: " + ms(c.P50)
			row.ratio = "**" + times(c.P50, s.P50) + "** faster"
			row.goals = []judged{{"", bench.GoalCreatePandas, c.P50 / s.P50}}
			// Since the cold python is interleaved with the creations,
			// the goal is judged on the median of the rounds' ratios,
			// their spread shown (a report from before has neither).
			if q, ok := r.Numbers("create_pandas_ratio"); ok && q["n"] > 0 {
				if b, ok := r.Numbers("cold_python_pandas_spread"); ok && b["n"] > 0 {
					row.baseline += fmt.Sprintf(" (%.0f runs interleaved with the creations, %s–%s)", b["n"], ms(b["min"]), ms(b["max"]))
				}
				row.ratio = fmt.Sprintf("**%s** faster (the median of %.0f rounds' ratios; quartiles %s–%s, all %s–%s)",
					times(q["median"], 1), q["n"], times(q["p25"], 1), times(q["p75"], 1), times(q["min"], 1), times(q["max"], 1))
				row.goals = []judged{{"median", bench.GoalCreatePandas, q["median"]}}
			}
		}
		add(row)
	}
	if s, ok := r.Stat("concurrent_create"); ok {
		where := "on the bench's full pool (no API keys, the audit log off)"
		if cfg, ok := r.Text("concurrent_create_config"); ok {
			where = "on a full pool, " + cfg
		}
		add(tableRow{scenario: fmt.Sprintf("%d concurrent session creations, each + `print(1)`, %s", s.N, where),
			airlock: fmt.Sprintf("p99 **%s**, p50 %s", ms(s.P99), ms(s.P50)),
			goals:   []judged{{"p99", bench.GoalBurstP99, s.P99}}})
	}
	for i := range 2 {
		s, ok := r.Stat(fmt.Sprintf("drained_burst_%d", i+1))
		if !ok {
			continue
		}
		row := tableRow{scenario: drainedScenario(r, i, s.N),
			airlock: fmt.Sprintf("p99 **%s**, p50 %s", ms(s.P99), ms(s.P50)),
			goals:   []judged{{"p99", bench.GoalBurstP99, s.P99}}}
		if p, ok := r.Numbers(fmt.Sprintf("drained_pool_%d", i+1)); ok {
			row.airlock += fmt.Sprintf("; the Python pool %.0f ready of %.0f before the one-shots, %.0f of %.0f before the creations",
				p["ready_before_oneshots"], p["target_before_oneshots"], p["ready_before_creations"], p["target_before_creations"])
		}
		// The refill during the one-shots is paid by them: shown.
		if o, ok := r.Stat(fmt.Sprintf("drained_oneshots_%d", i+1)); ok {
			row.baseline = fmt.Sprintf("the one-shots before them: p50 %s, p99 %s", ms(o.P50), ms(o.P99))
		}
		add(row)
	}
	if rps, ok := r.Number("oneshot_rps"); ok {
		row := tableRow{scenario: "one-shot `POST /v1/execute` of `print(1)`, 4 clients, sustained",
			airlock: fmt.Sprintf("**%.1f/s**", rps)}
		if s, ok := r.Stat("oneshot"); ok {
			row.airlock += fmt.Sprintf(" (p50 %s, p99 %s)", ms(s.P50), ms(s.P99))
		}
		var base, ratios []string
		if bare, ok := r.Number("oneshot_bare_python_rps"); ok {
			base = append(base, fmt.Sprintf("bare `python3 -c`, no sandbox: %.1f/s", bare))
			ratios = append(ratios, "**"+times(rps, bare)+"** bare python")
			row.goals = []judged{{"", bench.GoalOneShot, rps / bare}}
		}
		if bw, ok := r.Number("oneshot_bwrap_python_rps"); ok {
			base = append(base, fmt.Sprintf("bubblewrap + `python3 -c`: %.1f/s", bw))
			ratios = append(ratios, times(rps, bw)+" bubblewrap + python")
		}
		if bw, ok := r.Number("oneshot_bwrap_true_rps"); ok {
			base = append(base, fmt.Sprintf("bubblewrap + `true` (namespaces and mounts alone): %.1f/s", bw))
		}
		row.baseline, row.ratio = strings.Join(base, "; "), strings.Join(ratios, "; ")
		add(row)
	}
	if rps, ok := r.Number("oneshot_full_rps"); ok {
		code, _ := r.Text("oneshot_full_code")
		row := tableRow{scenario: fmt.Sprintf("one-shot `POST /v1/execute` of `%s`, code the lean template does not serve (for comparison), 4 clients, sustained", code),
			airlock: fmt.Sprintf("**%.1f/s**", rps), info: "for information (" + bench.GoalOneShot.Text + " is `print(1)`'s)"}
		if s, ok := r.Stat("oneshot_full"); ok {
			row.airlock += fmt.Sprintf(" (p50 %s, p99 %s)", ms(s.P50), ms(s.P99))
		}
		var ratios []string
		if bare, ok := r.Number("oneshot_bare_python_rps"); ok {
			row.baseline = fmt.Sprintf("bare `python3 -c` of `print(1)`: %.1f/s", bare)
			ratios = append(ratios, "**"+times(rps, bare)+"** bare python")
		}
		if cpu, ok := r.Number("oneshot_full_cpu_ms"); ok {
			row.airlock += fmt.Sprintf("; CPU %.1f ms per one-shot, all parties", cpu)
			if c, ok := r.Numbers("oneshot_cpu_ms"); ok && c["bare_python"] > 0 {
				row.baseline += fmt.Sprintf(", %.1f ms of CPU per run", c["bare_python"])
				ratios = append(ratios, "CPU "+times(cpu, c["bare_python"]))
			}
		}
		row.ratio = strings.Join(ratios, "; ")
		add(row)
	}
	if cpu, ok := r.Numbers("oneshot_cpu_ms"); ok {
		var parts []string
		for _, p := range []string{"server", "spawner", "init", "template", "runtime", "client"} {
			if v, ok := cpu[p]; ok {
				parts = append(parts, fmt.Sprintf("%s %.1f", p, v))
			}
		}
		// By the process that spent it, read from /proc: not by stage
		// (one process runs several stages; the stages are traced and
		// profiled in the page's dated sections).
		add(tableRow{scenario: "CPU per one-shot, by the process that spent it, not by stage ([which is which](#what-a-one-shot-costs); by stage: [the cold run's](#where-airlock-run---cold-spends-its-time), [the runtime's](#the-runtimes-part-by-stage-2026-11-27-evening))",
			airlock:  fmt.Sprintf("**%.1f ms**: %s; the host busy %.1f ms per one-shot in all", cpu["total"], strings.Join(parts, ", "), cpu["host_busy"]),
			baseline: fmt.Sprintf("bare `python3 -c`: %.1f ms per run", cpu["bare_python"]),
			ratio:    times(cpu["total"], cpu["bare_python"])})
	}
	if pss, ok := r.Number("density_pss_mb"); ok {
		row := tableRow{scenario: "idle Python sessions with numpy and pandas imported, PSS of each one's processes",
			airlock: fmt.Sprintf("**%.2f MB** each", pss), goals: []judged{{"", bench.GoalIdlePSS, pss}}}
		if init, ok := r.Number("density_init_pss_mb"); ok {
			row.airlock += fmt.Sprintf(" (the init %.2f MB, the interpreter %.2f MB)", init, pss-init)
		}
		if n, ok := r.Number("density_sessions"); ok {
			row.airlock += fmt.Sprintf(", %.0f alive", n)
			row.goals = append(row.goals, judged{"alive", bench.GoalDensityAlive, n})
		}
		add(row)
	}
	if n, ok := r.Number("capacity_sessions"); ok {
		row := tableRow{scenario: "idle Python sessions with numpy and pandas imported, on a server of their own (the capacity scenario)",
			airlock: fmt.Sprintf("**%.0f** alive", n)}
		if pss, ok := r.Number("capacity_pss_mb"); ok {
			row.airlock += fmt.Sprintf(", PSS %.2f MB each", pss)
			row.goals = append(row.goals, judged{"PSS", bench.GoalIdlePSS, pss})
		}
		if s, ok := r.Stat("capacity_exec"); ok {
			row.airlock += fmt.Sprintf("; warm `x = 1` meanwhile p50 %s, p99 %s", ms(s.P50), ms(s.P99))
			row.goals = append(row.goals, judged{"p99", bench.GoalCapacityExecP99, s.P99})
		}
		// The kernel's memory per session, which PSS leaves out: for
		// information, beside it.
		if k, ok := r.Numbers("capacity_meminfo_mb"); ok {
			row.baseline = fmt.Sprintf("the host's /proc/meminfo per session ([what PSS leaves out](#what-pss-leaves-out-the-kernels-share)): MemAvailable −%.2f MB; PageTables +%.2f, SUnreclaim +%.2f, KernelStack +%.2f MB",
				k["mem_available"], k["page_tables"], k["sunreclaim"], k["kernel_stack"])
			row.info = "the kernel's share: for information"
		}
		add(row)
	}
	if bare, ok := r.Stat("run_bare_python"); ok {
		base := "bare `python3 p.py`: " + ms(bare.P50)
		if bw, ok := r.Stat("run_bwrap_python"); ok {
			base += "; bubblewrap + python3: " + ms(bw.P50)
		}
		for _, v := range []struct {
			key, what string
			goal      bench.Goal
		}{
			{"run_server", "`airlock run` of `print(1)`, a server running (median)", bench.GoalRunServer},
			{"run_cold", "`airlock run --cold` of `print(1)`, no server (median; [its phases](#where-airlock-run---cold-spends-its-time))", bench.GoalRunCold},
		} {
			if s, ok := r.Stat(v.key); ok {
				add(tableRow{scenario: v.what, airlock: "**" + ms(s.P50) + "**", baseline: base,
					ratio: fmt.Sprintf("**%+.1f ms**", s.P50-bare.P50), goals: []judged{{"", v.goal, s.P50 - bare.P50}}})
			}
		}
	}
	// A program the lean scan sends to the full path (the session
	// runtime started with site), against bare python3 of the same: the
	// goal is print(1)'s, shown for comparison, not judged.
	if s, ok := r.Stat("run_cold_full"); ok {
		if bare, ok := r.Stat("run_bare_python_full"); ok {
			add(tableRow{scenario: "`airlock run --cold` of `import logging; print(1)`, a program [the lean scan](#a-lean-template-for-one-shots-2026-11-28) sends to the full path (median)",
				airlock: "**" + ms(s.P50) + "**", baseline: "bare `python3 q.py` of the same: " + ms(bare.P50),
				ratio: fmt.Sprintf("**%+.1f ms**", s.P50-bare.P50), info: "for information (" + bench.GoalRunCold.Text + " is `print(1)`'s)"})
		}
	}
	for _, ab := range []struct {
		off, what, offWhat string
		on                 []struct{ key, what string }
		goals              []bench.Goal
	}{
		{"audit_off", "warm `x = 1` with the audit log on; with an API key too", "audit off, no keys",
			[]struct{ key, what string }{{"audit_on", "audit on"}, {"audit_on_api_key", "with a key"}}, []bench.Goal{bench.GoalAudit, bench.GoalAudit}},
		{"metrics_off", "a warm execution printing a line with metrics on; with redaction (all three sets) and a code rule too", "metrics off",
			[]struct{ key, what string }{{"metrics_on", "metrics on"}, {"metrics_redaction", "with redaction"}}, []bench.Goal{bench.GoalMetrics, bench.GoalRedaction}},
		{"history_off", "a warm execution with the history on; with a console watching too", "history off",
			[]struct{ key, what string }{{"history_on", "history on"}, {"history_console", "with a console"}}, []bench.Goal{bench.GoalHistory, bench.GoalHistory}},
	} {
		off, ok := r.Stat(ab.off)
		if !ok {
			continue
		}
		row := tableRow{scenario: ab.what, baseline: fmt.Sprintf("%s: p50 %s", ab.offWhat, ms(off.P50))}
		var figs, changes []string
		for i, on := range ab.on {
			s, ok1 := r.Stat(on.key)
			c, ok2 := r.Number(on.key + "_change_pct")
			if !ok1 || !ok2 {
				continue
			}
			figs = append(figs, "p50 "+ms(s.P50))
			change := fmt.Sprintf("**%+.1f %%**", c)
			if iqr, ok := r.Floats(on.key + "_change_iqr"); ok && len(iqr) == 2 {
				change += fmt.Sprintf(" (rounds' IQR %+.1f to %+.1f %%)", iqr[0], iqr[1])
			}
			changes = append(changes, change)
			row.goals = append(row.goals, judged{on.what, ab.goals[i], c})
		}
		row.airlock, row.ratio = strings.Join(figs, "; "), strings.Join(changes, "; ")
		add(row)
	}
	if mbs, ok := r.Numbers("egress_download_mbs"); ok && mbs["direct"] > 0 {
		row := tableRow{scenario: "a 100 MB download from a session through the egress gate ([egress](#egress))",
			airlock: fmt.Sprintf("**%.0f MB/s**", mbs["gate"]), baseline: fmt.Sprintf("the same Python on the host, direct: %.0f MB/s", mbs["direct"]),
			ratio: "**" + times(mbs["gate"], mbs["direct"]) + "** direct", goals: []judged{{"", bench.GoalEgress, mbs["gate"] / mbs["direct"]}}}
		if q, ok := mbs["ratio"]; ok {
			// Runs since the pairs' ratio: its median, and its range.
			row.ratio = fmt.Sprintf("**%.2f×** direct (median of %.0f pairs' ratios, %.2f to %.2f)", q, mbs["pairs"], mbs["ratio_min"], mbs["ratio_max"])
			row.goals = []judged{{"", bench.GoalEgress, q}}
		}
		add(row)
	}
	for _, v := range []struct {
		key, base, what, baseWhat string
		goal                      bench.Goal
	}{
		{"tool_call", "tool_call_direct", "a brokered tool call from Python in a session ([tools](#brokered-tool-calls))", "the same call from the host", bench.GoalToolCall},
		{"secret_request", "secret_request_spliced", "an HTTPS request with a secret's placeholder substituted ([secrets](#secrets-as-placeholders))", "a request no secret is bound to, spliced", bench.GoalSecret},
	} {
		s, ok1 := r.Stat(v.key)
		b, ok2 := r.Stat(v.base)
		if ok1 && ok2 {
			add(tableRow{scenario: v.what, airlock: "p50 **" + ms(s.P50) + "**", baseline: v.baseWhat + ": " + ms(b.P50),
				ratio: fmt.Sprintf("**%+.2f ms**", s.P50-b.P50), goals: []judged{{"", v.goal, s.P50 - b.P50}}})
		}
	}
	if s, ok := r.Stat("persist_resume"); ok {
		row := tableRow{scenario: "resume a paused pandas session (a 10 MB CSV in /workspace) + its first " + pandas + " ([pause and resume](#pause-and-resume))",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99)), goals: []judged{{"", bench.GoalResume, s.P50}}}
		if p, ok := r.Stat("persist_pause"); ok {
			row.airlock += "; the pause p50 " + ms(p.P50)
		}
		if d, ok := persistDisk(r); ok {
			row.airlock += fmt.Sprintf(", %.1f MiB on disk per paused session", d)
		}
		if c, ok := r.Stat("persist_create"); ok {
			row.baseline, row.ratio = "create + the same: "+ms(c.P50), times(s.P50, c.P50)
		}
		add(row)
	}
	return append(rows, gvisorRows(r, pandas)...)
}

// persistDisk is what a native paused session of the pause scenario
// takes on disk, in MiB: its figure, or (a report from before it was
// one) its row.
func persistDisk(r *bench.Report) (float64, bool) {
	if d, ok := r.Number("persist_disk_mib"); ok {
		return d, true
	}
	for _, row := range r.Rows {
		if row.Metric == "disk per paused session" && strings.HasPrefix(row.Scenario, "native: pause") {
			return row.Value, true
		}
	}
	return 0, false
}

// gvisorRows are the table's rows of `--isolation gvisor`'s scenarios.
func gvisorRows(r *bench.Report, pandas string) []tableRow {
	var rows []tableRow
	if s, ok := r.Stat("gvisor_create_pandas"); ok {
		row := tableRow{scenario: "gVisor: create a session + " + pandas + ", one at a time on a refilled pool",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99)), goals: []judged{{"p50", bench.GoalGVisorCreateP50, s.P50}}}
		var base []string
		if c, ok := r.Stat("gvisor_cold_runsc_do_pandas"); ok {
			base = append(base, "cold `runsc do python3 -c` of the same: "+ms(c.P50))
			row.ratio = "**" + times(c.P50, s.P50) + "** faster than cold runsc"
			row.goals = append(row.goals, judged{"", bench.GoalGVisorCreateCold, c.P50 / s.P50})
		}
		if n, ok := r.Stat("create_pandas"); ok {
			base = append(base, "native: "+ms(n.P50))
		}
		row.baseline = strings.Join(base, "; ")
		rows = append(rows, row)
	}
	if s, ok := r.Stat("gvisor_drained_create_pandas"); ok {
		row := tableRow{scenario: "gVisor: the same on a drained pool (its ready sandboxes taken by other sessions)",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99))}
		if v, ok := r.Number("gvisor_drained_pool_image"); ok && v == 1 {
			row.scenario += ", on a server whose pools restore their sandboxes from an image of a fresh one (`gvisor.pool_image`)"
		}
		if n, ok := r.Stat("native_drained_create_pandas"); ok {
			row.baseline = "native, a drained pool of the same size: " + ms(n.P50)
			row.ratio = "**" + times(s.P50, n.P50) + "** native"
			row.goals = []judged{{"", bench.GoalGVisorDrained, s.P50 / n.P50}}
		}
		rows = append(rows, row)
	}
	if s, ok := r.Stat("gvisor_create_pandas_network"); ok {
		rows = append(rows, tableRow{scenario: "gVisor: the same on a refilled pool, the session created with `network` (`pool.network_size`)",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99))})
	}
	if s, ok := r.Stat("gvisor_exec"); ok {
		row := tableRow{scenario: "gVisor: execute `x = 1` in a warm session, over HTTP",
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99)), goals: []judged{{"p50", bench.GoalGVisorExecP50, s.P50}}}
		if n, ok := r.Stat("exec"); ok {
			row.baseline, row.ratio = "native: p50 "+ms(n.P50), times(s.P50, n.P50)
		}
		rows = append(rows, row)
	}
	if pss, ok := r.Number("gvisor_pss_mb"); ok {
		row := tableRow{scenario: "gVisor: idle Python sessions with numpy and pandas imported, PSS of every process of each one's cgroup (Sentry, gofer, stubs)",
			airlock: fmt.Sprintf("**%.1f MB** each", pss), goals: []judged{{"", bench.GoalGVisorPSS, pss}}}
		if n, ok := r.Number("density_pss_mb"); ok {
			row.baseline, row.ratio = fmt.Sprintf("native: %.2f MB", n), times(pss, n)
		}
		rows = append(rows, row)
	}
	if s, ok := r.Stat("gvisor_persist_resume"); ok {
		row := tableRow{scenario: "gVisor: resume an idle pandas session paused with its memory (`gvisor.checkpoint`) + its first " + pandas,
			airlock: fmt.Sprintf("p50 **%s**, p99 %s", ms(s.P50), ms(s.P99)), goals: []judged{{"", bench.GoalGVisorResume, s.P50}}}
		if p, ok := r.Stat("gvisor_persist_pause"); ok {
			row.airlock += "; the pause p50 " + ms(p.P50)
		}
		if m, ok := r.Number("gvisor_persist_image_mib"); ok {
			row.airlock += fmt.Sprintf(", its memory image %.1f MiB", m)
		}
		if c, ok := r.Stat("gvisor_persist_create"); ok {
			row.baseline, row.ratio = "create + the same on that server: "+ms(c.P50), times(s.P50, c.P50)
		}
		rows = append(rows, row)
	}
	return rows
}

// drainedScenario describes round i (0 or 1) of the drained burst of n:
// what the one-shots ran, on what configuration, and whether the first
// round grew the pool (only when the second found its target above its
// size).
func drainedScenario(r *bench.Report, i, n int) string {
	shots := fmt.Sprintf("%d one-shots", n)
	if code, ok := r.Text("drained_oneshot_code"); ok {
		shots += " of `" + code + "`"
	} else {
		shots += " of `print(1)` (served by the lean template: the Python pool untouched)"
	}
	cfg, ok := r.Text("drained_config")
	if !ok {
		cfg = "default pools, no API keys, the audit log off"
	}
	if i == 0 {
		return fmt.Sprintf("%d concurrent creations + `print(1)` right after %s, %s: a fresh server (the Python pool at its size when the one-shots begin)", n, shots, cfg)
	}
	p, ok := r.Numbers("drained_pool_2")
	switch {
	case !ok:
		return "the same, a second round (whether the first grew the pool is not in the report)"
	case p["target_before_oneshots"] > p["size"]:
		return fmt.Sprintf("the same once the first round has grown the pool (to %.0f, its size %.0f) and it has refilled", p["target_before_oneshots"], p["size"])
	default:
		return fmt.Sprintf("the same, a second round: the first did not grow the pool (target %.0f, its size %.0f)", p["target_before_oneshots"], p["size"])
	}
}
