// Package bench owns `airlock bench`: it starts a real airlock server (this
// very binary, as a child process, with its own state directory and cgroup
// parent), drives the scenarios of the speed and density targets over
// HTTP, runs the baselines that can run on this machine in the same
// invocation (bare python3, bubblewrap + python3, airlock run), and
// reports medians, tail latencies, throughput, memory and ratios.
//
// It measures; it must never assert how fast anything must be. The smoke
// mode only checks that every scenario runs.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/gvisor"
	"airlock/internal/termtext"
)

// Options select what to run.
type Options struct {
	Smoke   bool   // tiny counts: checks that everything works
	Binary  string // the airlock binary (default: this executable)
	Python  string // /usr/bin/python3
	Only    string // comma-separated scenario names; all when empty
	Verbose io.Writer
	// Isolation "gvisor" adds the gVisor scenarios (a second server whose
	// sandboxes run on gVisor), side by side with the native figures.
	Isolation string
	Runsc     string // the runsc binary; found on PATH when empty
	// Sessions is the capacity scenario's number of idle sessions.
	Sessions int
	// StoreDSNFile, a file holding a PostgreSQL connection string, adds
	// the shared store's scenario (servers on it beside one on SQLite).
	StoreDSNFile string
	// TemplateDir is the template store the template scenario takes
	// Template (code-interpreter by default) from.
	TemplateDir string
	Template    string
	// Version is the airlock binary's version, as `airlock version`
	// prints it (scripts/build.sh sets it from git describe).
	Version string
}

// Stat summarises a set of durations.
type Stat struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Max  float64 `json:"max_ms"`
}

func stats(d []time.Duration) Stat {
	if len(d) == 0 {
		return Stat{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	p99 := s[min(len(s)-1, (len(s)*99+99)/100-1)]
	return Stat{N: len(s), P50: ms(s[len(s)/2]), P99: ms(p99), Mean: ms(sum / time.Duration(len(s))), Max: ms(s[len(s)-1])}
}

// Row is one line of the result table.
type Row struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Target   string  `json:"target,omitempty"`
	Baseline string  `json:"baseline,omitempty"`
	Ratio    string  `json:"ratio,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// Report is the whole result: when, of what build, on what machine, and
// every figure (Rows for people, Stats by key for docgen's table).
type Report struct {
	Date      string         `json:"date"`  // the day it started, UTC
	Start     string         `json:"start"` // RFC 3339, UTC
	End       string         `json:"end"`
	Version   string         `json:"version"` // the airlock binary's
	Isolation string         `json:"isolation"`
	Runsc     string         `json:"runsc,omitempty"` // which runsc (gvisor.Version), with gVisor
	Only      string         `json:"only,omitempty"`
	Machine   Machine        `json:"machine"`
	LoadStart [3]float64     `json:"load_start"` // the load average when it started
	LoadEnd   [3]float64     `json:"load_end"`
	Smoke     bool           `json:"smoke"`
	Rows      []Row          `json:"rows"`
	Stats     map[string]any `json:"stats"`
	Errors    []string       `json:"errors,omitempty"`
}

// Machine is what the figures were measured on.
type Machine struct {
	Cores     int    `json:"cores"`
	MemoryGiB int    `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	Cgroup    string `json:"cgroup"` // v1, v1 (hybrid) or v2
	Go        string `json:"go"`
	Python    string `json:"python"` // the baselines' python3 --version
}

func (m Machine) String() string {
	return fmt.Sprintf("%d cores, %d GiB, Linux %s, cgroup %s, %s, %s", m.Cores, m.MemoryGiB, m.Kernel, m.Cgroup, m.Go, m.Python)
}

func (r *Report) add(row Row) { r.Rows = append(r.Rows, row) }

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "airlock bench %s, %s to %s, %s, load average %.1f to %.1f%s\n\n", r.Version, r.Start, r.End, r.Machine, r.LoadStart[0], r.LoadEnd[0], map[bool]string{true: " (smoke: tiny counts, numbers mean nothing)"}[r.Smoke])
	fmt.Fprintf(w, "| scenario | metric | value | target | baseline | ratio |\n|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		val := fmt.Sprintf("%.2f %s", row.Value, row.Unit)
		if row.Unit == "req/s" || row.Unit == "sessions" || row.Unit == "MB" {
			val = fmt.Sprintf("%.1f %s", row.Value, row.Unit)
		}
		if row.Note != "" {
			val += " (" + row.Note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", row.Scenario, row.Metric, val, row.Target, row.Baseline, row.Ratio)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nerror: %s\n", termtext.Field(e)) // may quote a server's or a sandbox's words
	}
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Binary = exe
	}
	if o.Python == "" {
		o.Python = "/usr/bin/python3"
	}
	if o.Verbose == nil {
		o.Verbose = io.Discard
	}
	if o.Isolation == "" {
		o.Isolation = "native"
	}
	now := time.Now().UTC()
	r := &Report{Date: now.Format(time.DateOnly), Start: now.Format(time.RFC3339), Version: o.Version, Isolation: o.Isolation,
		Only: o.Only, Machine: machine(ctx, o.Python), LoadStart: loadAverage(), Smoke: o.Smoke, Stats: map[string]any{}}
	if o.Isolation == "gvisor" || o.Only == "gvisor" || o.Only == "gvisor_persist" {
		r.Runsc = runscVersion(ctx, o.Runsc)
	}
	defer func() {
		r.End = time.Now().UTC().Format(time.RFC3339)
		r.LoadEnd = loadAverage()
	}()
	want := func(name string) bool {
		if o.Only == "" {
			return true
		}
		for _, n := range strings.Split(o.Only, ",") {
			if strings.TrimSpace(n) == name {
				return true
			}
		}
		return false
	}
	n := func(full, smoke int) int {
		if o.Smoke {
			return smoke
		}
		return full
	}
	dur := func(full, smoke time.Duration) time.Duration {
		if o.Smoke {
			return smoke
		}
		return full
	}
	if o.Sessions == 0 {
		o.Sessions = 1000
	}
	capacity := func() {
		// A server of its own, holding the sessions.
		fmt.Fprintf(o.Verbose, "running capacity\n")
		if err := benchCapacity(ctx, r, o, n(o.Sessions, 3), n(1000, 20)); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("capacity: %v", err))
		}
	}
	if o.Only == "capacity" {
		// Only the capacity scenario: no other server.
		capacity()
		return r, nil
	}
	if o.Only == "gvisor_persist" {
		// Only the gVisor pause and resume with memory.
		runsc, err := gvisor.Find(o.Runsc)
		if err == nil {
			err = benchGVisorPersist(ctx, r, o, runsc, n(10, 2))
		}
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("gvisor_persist: %v", err))
		}
		return r, nil
	}
	if o.Only == "gvisor" {
		// Only the gVisor scenarios: no native server to warm.
		if err := benchGVisor(ctx, r, o, n); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("gvisor: %v", err))
		}
		return r, nil
	}
	poolSize := n(64, 4)
	srv, err := startServer(ctx, o, poolSize, "", nil)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	fmt.Fprintf(o.Verbose, "server up at %s; warming pools\n", srv.url)
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	try := func(name string, fn func() error) {
		if !want(name) {
			return
		}
		fmt.Fprintf(o.Verbose, "running %s\n", name)
		if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", name, err))
			return
		}
		if err := fn(); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", name, err))
		}
	}
	try("exec", func() error { return benchExec(ctx, srv, r, n(2000, 30)) })
	try("create_pandas", func() error { return benchCreatePandas(ctx, srv, r, o, n(25, 1), n(4, 3)) })
	try("concurrent_create", func() error { return benchConcurrent(ctx, r, o, n(50, 4)) })
	if want("drained_burst") {
		// A server of its own, of the default pool configuration.
		fmt.Fprintf(o.Verbose, "running drained_burst\n")
		if err := benchDrained(ctx, r, o, n(50, 4)); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("drained_burst: %v", err))
		}
	}
	try("contexts", func() error { return benchContexts(ctx, srv, r, n(20, 2)) })
	try("e2b", func() error { return benchE2B(ctx, srv, r, n(20, 2)) })
	try("oneshot", func() error { return benchOneShot(ctx, srv, r, o, dur(10*time.Second, time.Second)) })
	try("density", func() error { return benchDensity(ctx, srv, r, n(300, 3)) })
	try("airlock_run", func() error { return benchRun(ctx, srv, r, o, n(40, 2)) })
	try("audit", func() error { return benchAudit(ctx, r, o, n(3000, 30)) })
	try("observe", func() error { return benchObserve(ctx, r, o, n(3000, 30)) })
	try("history", func() error { return benchHistory(ctx, r, o, n(3000, 30)) })
	try("egress", func() error { return benchEgress(ctx, r, o, n(15, 1), n(100e6, 10e6)) })
	try("store", func() error { return benchStore(ctx, r, o, n(3000, 30)) })
	try("persist", func() error { return benchPersist(ctx, r, o, n(20, 2)) })
	try("ports", func() error { return benchPorts(ctx, srv, r, o, n(2000, 20), n(256, 4)) })
	if o.TemplateDir != "" {
		try("template", func() error { return benchTemplate(ctx, srv, r, o, n(30, 2), n(8, 2)) })
	}
	try("tools", func() error { return benchTools(ctx, r, o, n(2000, 50)) })
	try("secrets", func() error { return benchSecrets(ctx, r, o, n(1000, 30)) })
	if want("capacity") {
		capacity()
	}
	if h, err := srv.health(ctx); err == nil {
		r.Stats["pool"] = h.Pool
	}
	if o.Isolation == "gvisor" || (o.Only != "" && want("gvisor")) {
		fmt.Fprintf(o.Verbose, "running gvisor\n")
		if err := benchGVisor(ctx, r, o, n); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("gvisor: %v", err))
		}
	}
	return r, nil
}

func machine(ctx context.Context, python string) Machine {
	var u syscall.Utsname
	syscall.Uname(&u)
	m := Machine{Cores: runtime.NumCPU(), Kernel: strings.TrimRight(string(bytesOf(u.Release[:])), "\x00"), Go: runtime.Version(), Cgroup: "v1"}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		m.MemoryGiB = int((kb + (1 << 19)) >> 20)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		m.Cgroup = "v2"
	} else if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
		m.Cgroup = "v1 (hybrid)"
	}
	if out, err := exec.CommandContext(ctx, python, "--version").Output(); err == nil {
		m.Python = strings.TrimSpace(string(out))
	}
	return m
}

// loadAverage is the host's 1, 5 and 15 minute load averages.
func loadAverage() [3]float64 {
	var l [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscanf(string(b), "%f %f %f", &l[0], &l[1], &l[2])
	}
	return l
}

// runscVersion is which runsc the run used (gvisor.Version: the module
// version it was built from, or what runsc --version says; "" when
// there is none).
func runscVersion(ctx context.Context, configured string) string {
	runsc, err := gvisor.Find(configured)
	if err != nil {
		return ""
	}
	v, _ := gvisor.Version(ctx, runsc)
	return v
}

func bytesOf(a []int8) []byte {
	b := make([]byte, len(a))
	for i, v := range a {
		b[i] = byte(v)
	}
	return b
}

// server is the airlock server under test.
type server struct {
	cmd     *exec.Cmd
	url     string
	name    string
	dir     string
	cfgPath string // its configuration: `airlock run --config` finds its socket
	client  *client.Client
	stderr  *bytes.Buffer
	mu      sync.Mutex
}

// Each server the bench starts gets host ids of its own, apart from each
// other's (several run side by side) and from a server of the default
// configuration that may run on the host: a server refuses a range
// another holds. Its sandboxes use slots 2^22 to 2^22+2^20 from its base.
const (
	benchIDBase = 1_200_000_000
	benchIDStep = 1 << 22
)

var idSeq atomic.Int32

func nextIDBase() int { return benchIDBase + int(idSeq.Add(1))*benchIDStep }

// startServer starts a server named airlock-bench-<pid><suffix>; extra
// sets top-level keys of its configuration (and "server" keys). Unless
// extra says otherwise it runs without authentication (on loopback) and
// without the audit log: the scenarios measure sandboxes, and the audit
// scenario measures those two; a nil value in extra removes the key, for
// the server's default. hosts, when given, is the server's
// /etc/hosts (startWithHosts).
func startServer(ctx context.Context, o Options, poolSize int, suffix string, extra map[string]any, hosts ...string) (*server, error) {
	return startServerWith(ctx, o, poolSize, suffix, extra, nil, hosts...)
}

// startServerWith is startServer with adjust applied to the server's
// command before it starts.
func startServerWith(ctx context.Context, o Options, poolSize int, suffix string, extra map[string]any, adjust func(*exec.Cmd), hosts ...string) (*server, error) {
	name := fmt.Sprintf("airlock-bench-%d%s", os.Getpid(), suffix)
	dir, err := os.MkdirTemp("", "airlock-bench")
	if err != nil {
		return nil, err
	}
	srvCfg := map[string]any{
		"listen": "127.0.0.1:0", "max_sessions": 1024, "max_concurrent_executions": 256, "auth": "none",
	}
	cfg := map[string]any{
		"state_dir":     "/run/" + name,
		"cgroup_parent": name,
		"id_base":       nextIDBase(),
		"data_dir":      filepath.Join(dir, "data"),
		"audit":         map[string]any{"enabled": false},
		"server":        srvCfg,
		"pool":          map[string]any{"size": map[string]int{"python": poolSize, "bash": 1, "javascript": 1}, "zygote": true},
	}
	// A nil value removes the key: the server's default applies.
	for k, v := range extra {
		if m, ok := v.(map[string]any); ok && k == "server" {
			for kk, vv := range m {
				srvCfg[kk] = vv
				if vv == nil {
					delete(srvCfg, kk)
				}
			}
			continue
		}
		cfg[k] = v
		if v == nil {
			delete(cfg, k)
		}
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return nil, err
	}
	s := &server{name: name, dir: dir, cfgPath: cfgPath, stderr: &bytes.Buffer{}}
	s.cmd = exec.Command(o.Binary, "serve", "--config", cfgPath)
	if adjust != nil {
		adjust(s.cmd)
	}
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	start := s.cmd.Start
	if len(hosts) > 0 {
		start = func() error { return startWithHosts(s.cmd, hosts[0]) }
	}
	if err := start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if s.stderr.Len() < 1<<20 {
				s.stderr.WriteString(line + "\n")
			}
			s.mu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		s.url = "http://" + a
		s.client = client.New(s.url, client.WithHTTPClient(&http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}, Timeout: 5 * time.Minute}))
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, fmt.Errorf("server did not start: %s", s.log())
	}
	return s, nil
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			s.cmd.Process.Kill()
		}
	}
	os.RemoveAll(s.dir)
	os.RemoveAll("/run/" + s.name)
	// A server that had to be killed leaves its (empty) cgroups behind.
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct", "unified", ""} {
		parent := filepath.Join("/sys/fs/cgroup", ctl, s.name)
		kids, _ := os.ReadDir(parent)
		for _, k := range kids {
			if k.IsDir() {
				os.Remove(filepath.Join(parent, k.Name()))
			}
		}
		os.Remove(parent)
	}
}

// createKey creates an API key of tenant "bench" on the server (of
// auth "keys") and makes its client send it.
func (s *server) createKey(ctx context.Context, o Options) error {
	out, err := exec.CommandContext(ctx, o.Binary, "keys", "create", "--config", s.cfgPath, "--tenant", "bench").Output()
	if err != nil {
		return fmt.Errorf("keys create: %v", err)
	}
	s.useKey(strings.TrimSpace(string(out)))
	return nil
}

// useKey makes the server's client send key.
func (s *server) useKey(key string) {
	s.client = client.New(s.url, client.WithToken(key), client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}, Timeout: 5 * time.Minute}))
}

// health is the server's /healthz.
func (s *server) health(ctx context.Context) (*apitype.Health, error) { return s.client.Health(ctx) }

// waitWarm waits until every pool is full and the template runs.
func (s *server) waitWarm(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := s.client.WaitWarm(ctx); err != nil {
		return fmt.Errorf("pools did not fill in %v: %w", limit, err)
	}
	return nil
}

func (s *server) newSession(ctx context.Context) (*apitype.Session, error) {
	return s.client.CreateSession(ctx, apitype.CreateSessionRequest{Language: apitype.Python})
}

// exec runs code in a session; an exception or a kill is an error.
func (s *server) exec(ctx context.Context, id, code string) (*apitype.Result, error) {
	return s.execIn(ctx, id, apitype.ExecuteRequest{Code: code})
}

// execIn is exec of req (a context, a language).
func (s *server) execIn(ctx context.Context, id string, req apitype.ExecuteRequest) (*apitype.Result, error) {
	res, err := s.client.Execute(ctx, id, req, nil)
	if err != nil {
		return nil, err
	}
	if res.Error != nil || res.Killed {
		return res, fmt.Errorf("execution failed: %+v", res.Error)
	}
	return res, nil
}

func (s *server) deleteSession(ctx context.Context, id string) {
	s.client.DeleteSession(ctx, id)
}

// timeCmd runs a command n times and returns the wall times.
func timeCmd(ctx context.Context, n int, argv ...string) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, b)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return ""
	}
	if a >= b {
		return fmt.Sprintf("%.1f× slower", a/b)
	}
	return fmt.Sprintf("%.1f× faster", b/a)
}
