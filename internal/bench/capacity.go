package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
)

// benchCapacity: n idle Python sessions with numpy and pandas imported,
// alive at once on a server of their own (server.max_sessions sized for
// them), and what they cost: memory per session in the sandboxes and on
// the host side, the server's descriptors, threads and goroutines per
// session, listing them, and a warm `x = 1` in one more session while
// they idle.
func benchCapacity(ctx context.Context, r *Report, o Options, n, execs int) error {
	// Pools of a fixed size: what is measured is the sessions' cost.
	srv, err := startServer(ctx, o, 8, "-capacity", map[string]any{
		"server": map[string]any{"max_sessions": n + 64},
		"pool": map[string]any{"size": map[string]int{"python": 8, "bash": 1, "javascript": 1},
			"max_size": map[string]int{"python": 8, "bash": 1, "javascript": 1}},
	})
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	pid := srv.cmd.Process.Pid
	base := hostSide(ctx, srv, pid)
	memBefore := meminfo()
	var sessions []*apitype.Session
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, s := range sessions {
			sem <- struct{}{}
			wg.Go(func() { srv.deleteSession(ctx, s.ID); <-sem })
		}
		wg.Wait()
	}()
	start := time.Now()
	sessions, _, err = openSessions(ctx, srv, n, 8, "import numpy, pandas")
	if err != nil {
		return fmt.Errorf("%d sessions open: %w", len(sessions), err)
	}
	opened := time.Since(start)
	fmt.Fprintf(o.Verbose, "%d sessions open in %v\n", len(sessions), opened)
	// Let the creations' garbage go before measuring what stays.
	time.Sleep(2 * time.Second)
	loaded := hostSide(ctx, srv, pid)
	memAfter := meminfo()
	idle := idleCPU(srv, 10*time.Second)
	pss := sessionsPSS(srv, sessions)
	// The server stays responsive: warm `x = 1` in one more session.
	probe, err := srv.newSession(ctx)
	if err != nil {
		return err
	}
	defer srv.deleteSession(ctx, probe.ID)
	var lat []time.Duration
	for i := 0; i < execs; i++ {
		t := time.Now()
		if _, err := srv.exec(ctx, probe.ID, "x = 1"); err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
	}
	var list []time.Duration
	for range 5 {
		t := time.Now()
		got, err := srv.client.Sessions(ctx)
		if err != nil {
			return err
		}
		if len(got) < n {
			return fmt.Errorf("listing: %d sessions, want %d", len(got), n)
		}
		list = append(list, time.Since(t))
	}
	fmt.Fprintf(o.Verbose, "measured; checking each answers\n")
	// Every one of them still answers.
	alive := 0
	for _, s := range sessions {
		if _, err := srv.exec(ctx, s.ID, "x = 1"); err == nil {
			alive++
		}
	}
	per := func(a, b float64) float64 { return (b - a) / float64(n) }
	scen := fmt.Sprintf("%d idle Python sessions with numpy and pandas imported, one server", n)
	ex := stats(lat)
	r.add(Row{Scenario: scen, Metric: "alive at once", Value: float64(alive), Unit: "sessions", Target: fmt.Sprintf("%d", n),
		Note: fmt.Sprintf("opened in %.0f s, 8 at a time", opened.Seconds())})
	r.add(Row{Scenario: scen, Metric: "PSS per session (sandbox)", Value: pss.per, Unit: "MB", Target: GoalIdlePSS.Text,
		Note: pss.note("init and interpreter")})
	// What PSS does not show: the kernel's memory for each session (its
	// processes' page tables and kernel stacks, the slab of its
	// namespaces, mounts, cgroups and descriptors), read as the host's
	// /proc/meminfo before and after; for information (anything else
	// running on the host moves it too).
	kernel := map[string]float64{}
	for _, f := range meminfoFields {
		d := per(memBefore[f.key], memAfter[f.key]) / 1024
		if f.key == "MemAvailable" {
			d = -d // what the sessions took
		}
		kernel[f.stat] = d
		r.add(Row{Scenario: scen, Metric: "host /proc/meminfo per session: " + f.what, Value: d, Unit: "MB", Target: "for information"})
	}
	r.Stats["capacity_meminfo_mb"] = kernel
	r.add(Row{Scenario: scen, Metric: "server PSS per session (host side)", Value: per(base.pssKB, loaded.pssKB) / 1024, Unit: "MB"})
	r.add(Row{Scenario: scen, Metric: "server descriptors per session", Value: per(base.fds, loaded.fds), Unit: "fds",
		Note: fmt.Sprintf("%.0f open of a limit of %.0f", loaded.fds, loaded.fdLimit)})
	r.add(Row{Scenario: scen, Metric: "server goroutines per session", Value: per(base.goroutines, loaded.goroutines), Unit: "goroutines",
		Note: fmt.Sprintf("threads %.0f", loaded.threads)})
	r.add(Row{Scenario: scen, Metric: "CPU while they idle", Value: idle.total(), Unit: "% of a core", Target: "~0",
		Note: idle.note()})
	r.add(Row{Scenario: scen, Metric: "warm `x = 1` p50 while they idle", Value: ex.P50, Unit: "ms"})
	r.add(Row{Scenario: scen, Metric: "warm `x = 1` p99 while they idle", Value: ex.P99, Unit: "ms", Target: GoalCapacityExecP99.Text})
	r.add(Row{Scenario: scen, Metric: "GET /v1/sessions, median", Value: stats(list).P50, Unit: "ms"})
	r.Stats["capacity_exec"] = ex
	r.Stats["capacity_sessions"] = alive
	r.Stats["capacity_pss_mb"] = pss.per
	return nil
}

// hostFigures are the server process's own costs.
type hostFigures struct {
	pssKB, fds, fdLimit, threads, goroutines float64
}

func hostSide(ctx context.Context, srv *server, pid int) hostFigures {
	var h hostFigures
	h.pssKB = float64(pss(pid))
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		h.fds = float64(len(ents))
	}
	h.fdLimit = procField(fmt.Sprintf("/proc/%d/limits", pid), "Max open files", 1)
	h.threads = procField(fmt.Sprintf("/proc/%d/status", pid), "Threads:", 0)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				h.goroutines, _ = strconv.ParseFloat(v, 64)
			}
		}
		resp.Body.Close()
	}
	return h
}

// procField is the number after prefix on the line of a /proc file that
// starts with it (the skip-th field after it).
func procField(path, prefix string, skip int) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			f := strings.Fields(rest)
			if len(f) > skip {
				v, _ := strconv.ParseFloat(f[skip], 64)
				return v
			}
		}
	}
	return 0
}

// idleFigures is the CPU a server and its sandboxes used while nothing
// ran, in percent of one core.
type idleFigures struct {
	server, sandboxes, host float64
}

func (f idleFigures) total() float64 { return f.server + f.sandboxes }

func (f idleFigures) note() string {
	return fmt.Sprintf("the server %.2f %%, its sandboxes, template and pools %.2f %% (the host: %.0f %%)", f.server, f.sandboxes, f.host)
}

// idleCPU measures, over d, the CPU of srv's own process (its spawner
// and template too) and of everything in its cgroup parent.
func idleCPU(srv *server, d time.Duration) idleFigures {
	before, cgBefore := srv.cpu(), cgroupCPU(srv.name)
	time.Sleep(d)
	after, cgAfter := srv.cpu(), cgroupCPU(srv.name)
	pct := func(t time.Duration) float64 { return 100 * float64(t) / float64(d) }
	return idleFigures{
		server:    pct(after.server - before.server + after.spawner - before.spawner),
		sandboxes: pct(cgAfter - cgBefore),
		host:      pct(after.host - before.host),
	}
}

// cgroupCPU is the CPU time of everything in cgroup name (v1: cpuacct;
// v2: cpu.stat); 0 when it cannot be read.
func cgroupCPU(name string) time.Duration {
	if b, err := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/cpuacct/%s/cpuacct.usage", name)); err == nil {
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns)
	}
	return time.Duration(procField(fmt.Sprintf("/sys/fs/cgroup/%s/cpu.stat", name), "usage_usec", 0)) * time.Microsecond
}

// meminfoFields are the /proc/meminfo lines the capacity scenario reports
// per session: the memory the host lost, and the kernel's own parts of
// it that no process's PSS counts.
var meminfoFields = []struct{ key, stat, what string }{
	{"MemAvailable", "mem_available", "MemAvailable fell by"},
	{"PageTables", "page_tables", "PageTables rose by"},
	{"SUnreclaim", "sunreclaim", "SUnreclaim (unreclaimable slab) rose by"},
	{"KernelStack", "kernel_stack", "KernelStack rose by"},
}

// meminfo is the host's /proc/meminfo in kB, by name.
func meminfo() map[string]float64 {
	out := map[string]float64{}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if f := strings.Fields(rest); ok && len(f) > 0 {
			out[name], _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return out
}
