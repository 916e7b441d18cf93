package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/errdefs"
)

func TestResolveFillsDefaults(t *testing.T) {
	def, max := DefaultLimits(), DefaultMaxLimits()
	got, err := Resolve(Limits{}, def, max)
	if err != nil || got != def {
		t.Fatalf("Resolve(empty) = %+v, %v; want the defaults", got, err)
	}
	req := Limits{Memory: 64 << 20, Timeout: Duration(time.Second), CPUs: 0.5}
	got, err = Resolve(req, def, max)
	if err != nil {
		t.Fatal(err)
	}
	want := def
	want.Memory, want.Timeout, want.CPUs = req.Memory, req.Timeout, req.CPUs
	if got != want {
		t.Errorf("Resolve(%+v) = %+v, want %+v", req, got, want)
	}
	// The maxima themselves are allowed.
	if got, err := Resolve(max, def, max); err != nil || got != max {
		t.Errorf("Resolve(max) = %+v, %v", got, err)
	}
}

func TestResolveRejects(t *testing.T) {
	def, max := DefaultLimits(), DefaultMaxLimits()
	for _, c := range []struct {
		name  string
		req   Limits
		field string
		why   string
	}{
		{"timeout over max", Limits{Timeout: max.Timeout + 1}, "timeout", "exceeds"},
		{"cpu_time over max", Limits{CPUTime: max.CPUTime + 1}, "cpu_time", "exceeds"},
		{"memory over max", Limits{Memory: max.Memory + 1}, "memory", "exceeds"},
		{"memory below floor", Limits{Memory: 1 << 20}, "memory", "below"},
		{"pids over max", Limits{Pids: max.Pids + 1}, "pids", "exceeds"},
		{"pids below floor", Limits{Pids: 7}, "pids", "below"},
		{"disk over max", Limits{Disk: max.Disk + 1}, "disk", "exceeds"},
		{"disk below floor", Limits{Disk: 1024}, "disk", "below"},
		{"inodes below floor", Limits{Inodes: 1}, "inodes", "below"},
		{"inodes over max", Limits{Inodes: max.Inodes + 1}, "inodes", "exceeds"},
		{"max_output over max", Limits{MaxOutput: max.MaxOutput + 1}, "max_output", "exceeds"},
		{"cpus below floor", Limits{CPUs: 0.001}, "cpus", "below"},
		{"cpus over max", Limits{CPUs: 65}, "cpus", "exceeds"},
		{"cpus negative", Limits{CPUs: -1}, "cpus", "below"},
		{"cpus NaN", Limits{CPUs: math.NaN()}, "cpus", "not a number"},
		{"cpus +Inf", Limits{CPUs: math.Inf(1)}, "cpus", "exceeds"},
		{"cpus -Inf", Limits{CPUs: math.Inf(-1)}, "cpus", "below"},
		{"nofile below floor", Limits{NoFile: 3}, "nofile", "below"},
		{"nofile over max", Limits{NoFile: max.NoFile + 1}, "nofile", "exceeds"},
		{"negative memory", Limits{Memory: -1}, "memory", "below"},
		{"negative timeout", Limits{Timeout: -1}, "timeout", "below"},
		{"negative pids", Limits{Pids: -5}, "pids", "below"},
	} {
		_, err := Resolve(c.req, def, max)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %q does not name %q and %q", c.name, err, c.field, c.why)
		}
	}
	// Every bad field is reported at once.
	_, err := Resolve(Limits{Memory: 1, Pids: 1, NoFile: 1}, def, max)
	for _, f := range []string{"memory", "pids", "nofile"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("joined error %v does not name %s", err, f)
		}
	}
	// Defaults above the maximum are refused too: a request cannot get
	// more than the maximum by leaving a field out.
	if _, err := Resolve(Limits{}, Limits{Memory: max.Memory * 2}.Merge(def), max); err == nil {
		t.Error("a default above the maximum was accepted")
	}
}

func TestLimitsValidate(t *testing.T) {
	for name, l := range map[string]Limits{"defaults": DefaultLimits(), "maxima": DefaultMaxLimits()} {
		if err := ValidateLimits(l); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := DefaultLimits()
	bad.Pids = 1
	if err := ValidateLimits(bad); err == nil {
		t.Error("pids 1 validated")
	}
}

func TestMerge(t *testing.T) {
	def := DefaultLimits()
	if got := (Limits{}).Merge(def); got != def {
		t.Errorf("empty.Merge = %+v", got)
	}
	full := DefaultMaxLimits()
	if got := full.Merge(def); got != full {
		t.Errorf("full.Merge = %+v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("the default configuration is invalid: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(*Config)
		field  string
	}{
		{"relative state_dir", func(c *Config) { c.StateDir = "run/airlock" }, "state_dir"},
		{"root state_dir", func(c *Config) { c.StateDir = "/" }, "state_dir"},
		{"unclean state_dir", func(c *Config) { c.StateDir = "/run/../etc" }, "state_dir"},
		{"trailing slash cache_dir", func(c *Config) { c.CacheDir = "/var/cache/airlock/" }, "cache_dir"},
		{"empty cache_dir", func(c *Config) { c.CacheDir = "" }, "cache_dir"},
		{"empty cgroup_parent", func(c *Config) { c.CgroupParent = "" }, "cgroup_parent"},
		{"absolute cgroup_parent", func(c *Config) { c.CgroupParent = "/airlock" }, "cgroup_parent"},
		{"escaping cgroup_parent", func(c *Config) { c.CgroupParent = "../airlock" }, "cgroup_parent"},
		{"dotdot cgroup_parent", func(c *Config) { c.CgroupParent = "a/../b" }, "cgroup_parent"},
		{"unclean cgroup_parent", func(c *Config) { c.CgroupParent = "a//b" }, "cgroup_parent"},
		{"id_base 0", func(c *Config) { c.IDBase = 0 }, "id_base"},
		{"id_base below 65536", func(c *Config) { c.IDBase = 65535 }, "id_base"},
		{"id_base too high", func(c *Config) { c.IDBase = 1<<31 - idSpan + 1 }, "id_base"},
		{"id_base max", func(c *Config) { c.IDBase = math.MaxUint32 }, "id_base"},
		{"id_count odd", func(c *Config) { c.IDBase, c.IDCount = 10000, 50001 }, "id_count"},
		{"id_count tiny", func(c *Config) { c.IDBase, c.IDCount = 10000, 32 }, "id_count"},
		{"pod ids from 0", func(c *Config) { c.IDBase, c.IDCount = 0, 50000 }, "id_base"},
		{"pod ids past 65534", func(c *Config) { c.IDBase, c.IDCount = 20000, 45536 }, "65534"},
		{"pod ids past 2^31", func(c *Config) { c.IDBase, c.IDCount = 1<<31-100, 1000 }, "2^31"},
		{"pod ids too few for the server", func(c *Config) { c.IDBase, c.IDCount = 10000, 1000 }, "server.max_sessions"},
		{"two pod name sources", func(c *Config) { c.Cluster.PodName, c.Cluster.PodNameEnv = "airlock-0", "POD_NAME" }, "one of pod_name"},
		{"pod name with a dot", func(c *Config) { c.Cluster.PodName = "airlock.0" }, "cluster.pod_name"},
		{"pod name upper case", func(c *Config) { c.Cluster.PodName = "Airlock-0" }, "cluster.pod_name"},
		{"pod name dash last", func(c *Config) { c.Cluster.PodName = "airlock-" }, "cluster.pod_name"},
		{"pod name too long", func(c *Config) { c.Cluster.PodName = strings.Repeat("a", 64) }, "cluster.pod_name"},
		{"pod name file relative", func(c *Config) { c.Cluster.PodNameFile = "etc/pod/name" }, "cluster.pod_name_file"},
		{"pod name env odd", func(c *Config) { c.Cluster.PodNameEnv = "POD-NAME" }, "cluster.pod_name_env"},
		{"python outside /usr", func(c *Config) { c.Runtimes.Python = "/opt/python3" }, "runtimes.python"},
		{"bash escaping /usr", func(c *Config) { c.Runtimes.Bash = "/usr/../bin/bash" }, "runtimes.bash"},
		{"relative node", func(c *Config) { c.Runtimes.Node = "usr/bin/node" }, "runtimes.node"},
		{"seccomp maybe", func(c *Config) { c.Protections.Seccomp = "maybe" }, "protections.seccomp"},
		{"landlock empty", func(c *Config) { c.Protections.Landlock = "" }, "protections.landlock"},
		{"isolation empty", func(c *Config) { c.Isolation = "" }, "isolation"},
		{"isolation kvm", func(c *Config) { c.Isolation = "kata" }, "isolation"},
		{"allow_isolation unknown", func(c *Config) { c.AllowIsolation = []Isolation{"firecracker"} }, "allow_isolation"},
		{"runsc relative", func(c *Config) { c.GVisor.Runsc = "bin/runsc" }, "gvisor.runsc"},
		{"runsc unclean", func(c *Config) { c.GVisor.Runsc = "/usr/../bin/runsc" }, "gvisor.runsc"},
		{"platform kvm", func(c *Config) { c.GVisor.Platform = "kvm" }, "gvisor.platform"},
		{"checkpoint without persistence", func(c *Config) { on := true; c.GVisor.Checkpoint = &on }, "gvisor.checkpoint"},
		{"seal rate below 1 MiB", func(c *Config) { c.Persistence.SealBytesPerSecond = 1 << 19 }, "persistence.seal_bytes_per_second"},
		{"seal burst below the rate", func(c *Config) { c.Persistence.SealBurstBytes = c.Persistence.SealBytesPerSecond - 1 }, "persistence.seal_burst_bytes"},
		{"pool image without the keeper", func(c *Config) { off := false; c.GVisor.Checkpoint = &off; c.GVisor.PoolImage = true }, "gvisor.pool_image"},
		{"max below floors", func(c *Config) { c.Max.Memory = 1 }, "max: memory 1 is below the minimum"},
		{"defaults over max", func(c *Config) { c.Defaults.Memory = c.Max.Memory + 1 }, "defaults"},
		{"max_sessions 0", func(c *Config) { c.Server.MaxSessions = 0 }, "max_sessions"},
		{"max_concurrent_executions 0", func(c *Config) { c.Server.MaxConcurrentExecutions = 0 }, "max_concurrent_executions"},
		{"quota max_concurrent_executions negative", func(c *Config) { c.Quotas.MaxConcurrentExecutions = -1 }, "quotas: max_sessions, executions_per_minute, cpu_seconds_per_day and max_concurrent_executions"},
		{"max_env negative", func(c *Config) { c.Server.MaxEnv = -1 }, "max_env"},
		{"max_body_bytes tiny", func(c *Config) { c.Server.MaxBodyBytes = 100 }, "max_body_bytes"},
		{"max_file_bytes 0", func(c *Config) { c.Server.MaxFileBytes = 0 }, "max_file_bytes"},
		{"idle_timeout 0", func(c *Config) { c.Server.IdleTimeout = 0 }, "idle_timeout"},
		{"max_idle below idle", func(c *Config) { c.Server.MaxIdleTimeout = c.Server.IdleTimeout - 1 }, "idle_timeout"},
		{"interrupt_grace 0", func(c *Config) { c.Server.InterruptGrace = 0 }, "interrupt_grace"},
		{"queue_timeout negative", func(c *Config) { c.Server.QueueTimeout = -1 }, "queue_timeout"},
		{"max_concurrent_transfers 0", func(c *Config) { c.Server.MaxConcurrentTransfers = 0 }, "max_concurrent_transfers"},
		{"max_session_transfers 0", func(c *Config) { c.Server.MaxSessionTransfers = 0 }, "max_session_transfers"},
		{"session transfers over server", func(c *Config) { c.Server.MaxSessionTransfers = c.Server.MaxConcurrentTransfers + 1 }, "max_session_transfers"},
		{"transfer_stall_timeout 0", func(c *Config) { c.Server.TransferStallTimeout = 0 }, "transfer_stall_timeout"},
		{"transfer_stall_timeout 2h", func(c *Config) { c.Server.TransferStallTimeout = Duration(2 * time.Hour) }, "transfer_stall_timeout"},
		{"max_rich_output small", func(c *Config) { c.Server.MaxRichOutput = 1 << 10 }, "max_rich_output"},
		{"max_rich_output 2G", func(c *Config) { c.Server.MaxRichOutput = 2 << 30 }, "max_rich_output"},
		{"pool unknown language", func(c *Config) { c.Pool.Size = map[string]int{"cobol": 1} }, "unknown language"},
		{"pool negative", func(c *Config) { c.Pool.Size = map[string]int{"python": -1} }, "pool.size.python"},
		{"pool huge", func(c *Config) { c.Pool.Size = map[string]int{"bash": 5000} }, "pool.size.bash"},
		{"pool oneshot negative", func(c *Config) { c.Pool.OneShotSize = map[string]int{"python": -1} }, "pool.oneshot_size.python"},
		{"pool lean negative", func(c *Config) { c.Pool.LeanSize = -1 }, "pool.lean_size"},
		{"pool oneshot unknown language", func(c *Config) { c.Pool.OneShotSize = map[string]int{"cobol": 1} }, "unknown language"},
		{"parallel 0", func(c *Config) { c.Pool.Parallel = 0 }, "pool.parallel"},
		{"parallel 257", func(c *Config) { c.Pool.Parallel = 257 }, "pool.parallel"},
		{"preload empty", func(c *Config) { c.Pool.Preload = []string{""} }, "pool.preload"},
		{"preload digit first", func(c *Config) { c.Pool.Preload = []string{"1abc"} }, "pool.preload"},
		{"preload empty part", func(c *Config) { c.Pool.Preload = []string{"a..b"} }, "pool.preload"},
		{"preload dash", func(c *Config) { c.Pool.Preload = []string{"a-b"} }, "pool.preload"},
		{"preload code", func(c *Config) { c.Pool.Preload = []string{"os; import sys"} }, "pool.preload"},
		{"preload newline", func(c *Config) { c.Pool.Preload = []string{"os\nimport sys"} }, "pool.preload"},
		{"preload too long", func(c *Config) { c.Pool.Preload = []string{strings.Repeat("a", 129)} }, "pool.preload"},
		{"max_open_connections negative", func(c *Config) { c.Network.MaxOpenConnections = -1 }, "network.max_open_connections"},
		{"max_open_connections huge", func(c *Config) { c.Network.MaxOpenConnections = 1<<20 + 1 }, "network.max_open_connections"},
		{"dns rate negative", func(c *Config) { c.Network.DNSQueriesPerSecond = -1 }, "network.dns_queries_per_second"},
		{"dns burst 0", func(c *Config) { c.Network.DNSBurst = 0 }, "network.dns_burst"},
		{"connection budget 0", func(c *Config) { c.Network.ConnectionBudget = 0 }, "network.connection_budget"},
		{"wildcard names 0", func(c *Config) { c.Network.MaxWildcardNames = 0 }, "network.max_wildcard_names"},
		{"wildcard names huge", func(c *Config) { c.Network.MaxWildcardNames = 65535 }, "network.max_wildcard_names"},
		{"internal cidrs without names", func(c *Config) { c.Network.InternalCIDRs = []string{"10.1.0.0/16"} }, "network.internal_names"},
	} {
		cfg := Default()
		c.change(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q does not name %q", c.name, err, c.field)
		}
	}
	ok := Default()
	ok.Pool.Preload = []string{"numpy", "matplotlib.pyplot", "_private", "a1.b2"}
	ok.Pool.Size = map[string]int{"python": 0, "bash": 4096, "javascript": 1}
	ok.IDBase = 65536
	ok.Cluster.PodName = strings.Repeat("a", 62) + "0"
	ok.Server.MaxSessionTransfers = ok.Server.MaxConcurrentTransfers
	ok.Server.TransferStallTimeout = Duration(time.Second)
	ok.Network.MaxOpenConnections = 1 << 20
	ok.Network.DNSQueriesPerSecond, ok.Network.DNSBurst = 0, 0 // no limit: no burst needed
	ok.Isolation, ok.AllowIsolation, ok.GVisor = GVisor, []Isolation{Native, GVisor}, GVisorConfig{Runsc: "/usr/local/bin/runsc", Platform: "ptrace"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid edge values refused: %v", err)
	}
	// Pod mode: the chart's userns range, and the largest that fits.
	for _, ids := range [][2]uint32{{10000, 50000}, {1, 65532}, {2_000_000, 1 << 20}} {
		pod := Default()
		pod.IDBase, pod.IDCount = ids[0], ids[1]
		pod.Cluster.PodNameFile = "/etc/airlock/pod/name"
		if err := pod.Validate(); err != nil {
			t.Errorf("id_base %d id_count %d refused: %v", ids[0], ids[1], err)
		}
	}
}

func TestIsolationAllowed(t *testing.T) {
	c := Default()
	if !c.Allows(Native) || c.Allows(GVisor) || !slices.Equal(c.Isolations(), []Isolation{Native}) {
		t.Errorf("default: allows native %v, gvisor %v, isolations %v", c.Allows(Native), c.Allows(GVisor), c.Isolations())
	}
	c.Isolation, c.AllowIsolation = GVisor, []Isolation{GVisor, Native}
	if !c.Allows(Native) || !c.Allows(GVisor) || !slices.Equal(c.Isolations(), []Isolation{GVisor, Native}) {
		t.Errorf("gvisor allowing native: allows native %v, gvisor %v, isolations %v", c.Allows(Native), c.Allows(GVisor), c.Isolations())
	}
}

// gvisor.checkpoint: unset is on exactly when the server may run gVisor
// sessions and pauses them; true and false mean what they say, from the
// file or the environment; true without persistence is refused.
func TestGVisorCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name, file string
		env        []string
		on         bool
		why        string
	}{
		{"default", `{}`, nil, false, "no gVisor"},
		{"native with persistence", `{"persistence": {"enabled": true}}`, nil, false, "no gVisor"},
		{"gvisor without persistence", `{"isolation": "gvisor"}`, nil, false, "persistence.enabled is off"},
		{"gvisor with persistence", `{"isolation": "gvisor", "persistence": {"enabled": true}}`, nil, true, "unset: on"},
		{"gvisor allowed with persistence", `{"allow_isolation": ["gvisor"], "persistence": {"enabled": true}}`, nil, true, "unset: on"},
		{"null is unset", `{"isolation": "gvisor", "gvisor": {"checkpoint": null}, "persistence": {"enabled": true}}`, nil, true, "unset: on"},
		{"explicit false", `{"isolation": "gvisor", "gvisor": {"checkpoint": false}, "persistence": {"enabled": true}}`, nil, false, "files only"},
		{"explicit true", `{"isolation": "gvisor", "gvisor": {"checkpoint": true}, "persistence": {"enabled": true}}`, nil, true, "checkpoint: true"},
		{"explicit true, native", `{"gvisor": {"checkpoint": true}, "persistence": {"enabled": true}}`, nil, true, "checkpoint: true"},
		{"false from the environment", `{"isolation": "gvisor", "persistence": {"enabled": true}}`, []string{"AIRLOCK_GVISOR_CHECKPOINT=false"}, false, "files only"},
		{"true from the environment", `{"isolation": "gvisor", "persistence": {"enabled": true}}`, []string{"AIRLOCK_GVISOR_CHECKPOINT=true"}, true, "checkpoint: true"},
	} {
		cfg := Default()
		if err := Decode([]byte(c.file), &cfg); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := cfg.ApplyEnv(c.env); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if on, why := cfg.GVisorCheckpoint(); on != c.on || !strings.Contains(why, c.why) {
			t.Errorf("%s: %v %q, want %v and %q", c.name, on, why, c.on, c.why)
		}
	}
	cfg := Default()
	if err := Decode([]byte(`{"isolation": "gvisor", "gvisor": {"checkpoint": true}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gvisor.checkpoint needs persistence.enabled") {
		t.Errorf("checkpoint true without persistence: %v", err)
	}
}

func TestDecode(t *testing.T) {
	var c Config
	good := `{"state_dir": "/run/x", "defaults": {"memory": "128M", "timeout": 5}, "server": {"max_body_bytes": "1M"}}`
	c = Default()
	if err := Decode([]byte(good), &c); err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/run/x" || c.Defaults.Memory != 128<<20 || c.Defaults.Timeout != Duration(5*time.Second) ||
		c.Server.MaxBodyBytes != 1<<20 || c.CacheDir != Default().CacheDir {
		t.Errorf("decoded %+v", c)
	}
	for _, in := range []string{
		`{"state_dirr": "/x"}`,               // a typo is not silently ignored
		`{"defaults": {"memroy": "1G"}}`,     // nested too
		`{"server": {"listen": 8080}}`,       // wrong type
		`{"defaults": {"memory": -1}}`,       // bad value
		`{"defaults": {"pids": 1.5}}`,        // fraction of a count
		`{"defaults": {"timeout": null}}`,    // null is not "unset"
		`{"id_base": -1}`,                    // negative into unsigned
		`{"id_base": 4294967296}`,            // overflow
		`{} {}`, `{}]`, `{}}`, `{} x`, `{}{`, // trailing data, including what dec.More misses
		`[]`, `null x`, ``, `{`, `{"a":`, "\xff",
	} {
		c := Default()
		if err := Decode([]byte(in), &c); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Decode(%q) = %v, want ErrInvalidArgument", in, err)
		}
	}
	for _, in := range []string{`{}`, " {} \n\t ", `{"protections": {"seccomp": "off"}}`} {
		c := Default()
		if err := Decode([]byte(in), &c); err != nil {
			t.Errorf("Decode(%q): %v", in, err)
		}
	}
}

func TestLoad(t *testing.T) {
	if c, err := Load(""); err != nil || c.StateDir != Default().StateDir {
		t.Errorf("Load(\"\") = %+v, %v", c, err)
	}
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := Load(write("ok.json", `{"cgroup_parent": "custom", "max": {"memory": "16G"}}`))
	if err != nil || c.CgroupParent != "custom" || c.Max.Memory != 16<<30 || c.Defaults != DefaultLimits() {
		t.Errorf("Load = %+v, %v", c, err)
	}
	for name, content := range map[string]string{
		"invalid.json": `{"cgroup_parent": "/abs"}`,                             // decodes, fails Validate
		"typo.json":    `{"cgroup_parnet": "x"}`,                                // unknown field
		"huge.json":    `{"state_dir": "/x"` + strings.Repeat(" ", 1<<20) + `}`, // cut at 1 MiB
	} {
		if _, err := Load(write(name, content)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Load(%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestKnownLanguage(t *testing.T) {
	for _, l := range Languages {
		if !KnownLanguage(l) {
			t.Errorf("%s unknown", l)
		}
	}
	for _, l := range []string{"", "Python", "py", "node", "js"} {
		if KnownLanguage(l) {
			t.Errorf("%q known", l)
		}
	}
}

// audit.on_failure is "refuse" by default, and "continue" or nothing else.
func TestAuditOnFailure(t *testing.T) {
	if got := Default().Audit.OnFailure; got != AuditRefuse {
		t.Errorf("default audit.on_failure %q, want refuse", got)
	}
	for v, ok := range map[string]bool{"refuse": true, "continue": true, "": false, "ignore": false} {
		c := Default()
		c.Audit.OnFailure = v
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("audit.on_failure %q: %v", v, err)
		}
	}
}
