package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"airlock/internal/apitype"
	"airlock/internal/egress"
	"airlock/internal/session"
)

// Figures read at scrape time from their owners: nothing is counted twice
// and nothing is paid between scrapes.

var (
	quotaDesc = prometheus.NewDesc(Namespace+"_quota_rejections_total",
		"Requests refused by a tenant's quota, by tenant and quota.", []string{"tenant", "quota"}, nil)

	poolReady      = poolDesc("pool_ready", "Warm sandboxes ready, by language.")
	poolTarget     = poolDesc("pool_target", "Warm sandboxes the pool keeps now, by language: pool.size, or more (up to pool.max_size) while the recent demand asks for more.")
	poolMin        = poolDesc("pool_min", "Warm sandboxes the pool keeps whatever the demand, by language: pool.size, or fewer when the pools' sizes together exceed pool.memory_budget.")
	poolMax        = poolDesc("pool_max", "Warm sandboxes the pool may grow to under demand (pool.max_size), by language.")
	poolWaiting    = poolDesc("pool_waiting", "Requests building a sandbox themselves now because the pool had none ready, by language: the pool's pressure.")
	poolMemory     = poolDesc("pool_sandbox_memory_bytes", "Memory one ready sandbox holds (its processes' PSS, measured once the pool is full), by language: what pool.memory_budget counts.")
	poolHeld       = poolDesc("pool_memory_bytes", "Memory the ready sandboxes hold, by language (pool_ready × pool_sandbox_memory_bytes).")
	poolCut        = poolDesc("pool_budget_cut", "Warm sandboxes the pool keeps fewer than its size and recent demand ask for (within pool.max_size) because of pool.memory_budget, by language: the budget's pressure.")
	poolBudget     = prometheus.NewDesc(Namespace+"_pool_memory_budget_bytes", "The memory the ready sandboxes of every language may hold together (pool.memory_budget, or its automatic value).", nil, nil)
	poolRefillSecs = poolDesc("pool_refill_seconds_total", "Time from the refill deciding to build a warm sandbox to its being ready (the wait for a build slot included), by language (divide by pool_built_total for the mean).")
	poolBuilding   = poolDesc("pool_building", "Warm sandboxes being built, by language.")
	poolHits       = poolDesc("pool_hits_total", "Sandboxes taken warm from the pool, by language.")
	poolMisses     = poolDesc("pool_misses_total", "Sandboxes built on demand because the pool was empty or could not serve the limits, by language.")
	poolBuilt      = poolDesc("pool_built_total", "Warm sandboxes built, by language.")
	poolDiscarded  = poolDesc("pool_discarded_total", "Warm sandboxes discarded unused, by language.")
	poolCold       = poolDesc("pool_cold_total", "Sandboxes handed out whose runtime the Python template could have forked but that started cold (the template was not up or could not fork), by language.")
	poolBuildSecs  = poolDesc("pool_build_seconds_total", "Time spent building warm sandboxes, by language (divide by pool_built_total for the mean).")

	egressOpen     = prometheus.NewDesc(Namespace+"_egress_open_connections", "Egress connections open, all sessions together.", nil, nil)
	egressOpenMax  = prometheus.NewDesc(Namespace+"_egress_open_connections_limit", "The server-wide cap on open egress connections (network.max_open_connections).", nil, nil)
	egressRefusals = prometheus.NewDesc(Namespace+"_egress_refusals_total",
		"Egress refused by a server-wide or rate limit, by limit (server_cap: connections over network.max_open_connections; dns_rate: DNS queries over a session's network.dns_queries_per_second).",
		[]string{"limit"}, nil)

	templateUp       = prometheus.NewDesc(Namespace+"_template_up", "1 when the Python template interpreter runs.", nil, nil)
	templateFailures = prometheus.NewDesc(Namespace+"_template_start_failures_total", "Failed starts of the Python template interpreter.", nil, nil)
	templateRestarts = prometheus.NewDesc(Namespace+"_template_restarts_total", "Restarts of the Python template interpreter after it died.", nil, nil)

	// The lean template's (pool.lean_size), exported when a server runs one.
	leanUp       = prometheus.NewDesc(Namespace+"_lean_template_up", "1 when the lean Python template interpreter (pool.lean_size: one-shots whose code needs none of the preloads) runs.", nil, nil)
	leanFailures = prometheus.NewDesc(Namespace+"_lean_template_start_failures_total", "Failed starts of the lean Python template interpreter.", nil, nil)
	leanRestarts = prometheus.NewDesc(Namespace+"_lean_template_restarts_total", "Restarts of the lean Python template interpreter after it died.", nil, nil)
)

var (
	pausedSessions = prometheus.NewDesc(Namespace+"_paused_sessions", "Paused sessions kept on the server's disk, by tenant.", []string{"tenant"}, nil)
	pausedBytes    = prometheus.NewDesc(Namespace+"_paused_disk_bytes",
		"Disk the paused sessions' images take, with the images and memory images kept for inspection and the live sessions' recovery points and resumed images, by tenant (what counts against quotas.max_paused_bytes).", []string{"tenant"}, nil)
	pausedKept = prometheus.NewDesc(Namespace+"_paused_kept",
		"Images, memory images and live sessions' recovery points kept for inspection under persistence.dir (damaged, over persistence.max_image_bytes, or refused by a resume; removed persistence.keep after they were kept), by tenant ((unknown) when the damage hid whose).", []string{"tenant"}, nil)
)

// Paused exports the paused sessions and their disk, read from usage
// (session.Manager.PausedUsage) at each scrape.
func (m *Metrics) Paused(usage func() map[string]session.PausedUsage) {
	if m == nil || usage == nil {
		return
	}
	m.reg.MustRegister(pausedCollector(usage))
}

type pausedCollector func() map[string]session.PausedUsage

func (p pausedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pausedSessions
	ch <- pausedBytes
	ch <- pausedKept
}

func (p pausedCollector) Collect(ch chan<- prometheus.Metric) {
	for tenant, u := range p() {
		ch <- prometheus.MustNewConstMetric(pausedSessions, prometheus.GaugeValue, float64(u.Sessions), tenant)
		ch <- prometheus.MustNewConstMetric(pausedBytes, prometheus.GaugeValue, float64(u.DiskBytes), tenant)
		ch <- prometheus.MustNewConstMetric(pausedKept, prometheus.GaugeValue, float64(u.Kept), tenant)
	}
}

func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_"+name, help, []string{"language"}, nil)
}

// Pools exports the warm pools' figures, read from stats (pool.Pool.Stats:
// an apitype.PoolStats per language and the template's
// apitype.TemplateStats) at each scrape.
func (m *Metrics) Pools(stats func() map[string]any) {
	if m == nil || stats == nil {
		return
	}
	m.reg.MustRegister(poolCollector(stats))
}

type poolCollector func() map[string]any

func (p poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolReady, poolTarget, poolMin, poolMax, poolWaiting, poolMemory, poolHeld, poolCut, poolBudget, poolRefillSecs, poolBuilding, poolHits, poolMisses, poolBuilt, poolDiscarded,
		poolCold, poolBuildSecs, templateUp, templateFailures, templateRestarts, leanUp, leanFailures, leanRestarts} {
		ch <- d
	}
}

func (p poolCollector) Collect(ch chan<- prometheus.Metric) {
	var budget int64 // the same in each of the root's pools; 0 in templates'
	for lang, v := range p() {
		switch s := v.(type) {
		case apitype.PoolStats:
			g := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
				ch <- prometheus.MustNewConstMetric(d, t, v, lang)
			}
			g(poolReady, prometheus.GaugeValue, float64(s.Ready))
			g(poolTarget, prometheus.GaugeValue, float64(s.Target))
			g(poolMin, prometheus.GaugeValue, float64(s.Min))
			g(poolMax, prometheus.GaugeValue, float64(s.Max))
			g(poolWaiting, prometheus.GaugeValue, float64(s.Waiting))
			g(poolMemory, prometheus.GaugeValue, float64(s.MemoryBytes))
			g(poolHeld, prometheus.GaugeValue, float64(s.HeldBytes))
			g(poolCut, prometheus.GaugeValue, float64(s.BudgetCut))
			budget = max(budget, s.MemoryBudget)
			g(poolRefillSecs, prometheus.CounterValue, s.AvgRefillMs*float64(s.Built)/1000)
			g(poolBuilding, prometheus.GaugeValue, float64(s.Building))
			g(poolHits, prometheus.CounterValue, float64(s.Hits))
			g(poolMisses, prometheus.CounterValue, float64(s.Misses))
			g(poolBuilt, prometheus.CounterValue, float64(s.Built))
			g(poolDiscarded, prometheus.CounterValue, float64(s.Discarded))
			g(poolCold, prometheus.CounterValue, float64(s.Cold))
			g(poolBuildSecs, prometheus.CounterValue, s.AvgBuildMs*float64(s.Built)/1000)
		case apitype.TemplateStats:
			template(ch, s, templateUp, templateFailures, templateRestarts)
			if s.Lean != nil {
				template(ch, *s.Lean, leanUp, leanFailures, leanRestarts)
			}
		}
	}
	if budget > 0 {
		ch <- prometheus.MustNewConstMetric(poolBudget, prometheus.GaugeValue, float64(budget))
	}
}

// template sends a template interpreter's figures as up, failures and
// restarts.
func template(ch chan<- prometheus.Metric, s apitype.TemplateStats, up, failures, restarts *prometheus.Desc) {
	v := 0.0
	if s.Running {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(up, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(failures, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(restarts, prometheus.CounterValue, float64(s.Restarts))
}

// Quotas exports the refusals of tenants' quotas, read from refused
// (quota.Tracker.Refused: counts by tenant and quota) at each scrape.
func (m *Metrics) Quotas(refused func() map[string]map[string]uint64) {
	if m == nil {
		return
	}
	m.quotas.mu.Lock()
	m.quotas.source = refused
	m.quotas.mu.Unlock()
}

// quotaCollector is quota_rejections_total: the tracker's counts plus
// those reported through QuotaRejected.
type quotaCollector struct {
	mu     sync.Mutex
	source func() map[string]map[string]uint64
	own    map[[2]string]uint64
}

func (q *quotaCollector) add(tenant, quota string) {
	q.mu.Lock()
	q.own[[2]string{tenant, quota}]++
	q.mu.Unlock()
}

func (q *quotaCollector) Describe(ch chan<- *prometheus.Desc) { ch <- quotaDesc }

func (q *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	q.mu.Lock()
	all := make(map[[2]string]uint64, len(q.own))
	for k, v := range q.own {
		all[k] = v
	}
	source := q.source
	q.mu.Unlock()
	if source != nil {
		for tenant, byQuota := range source() {
			for quota, n := range byQuota {
				all[[2]string{tenant, quota}] += n
			}
		}
	}
	for k, v := range all {
		ch <- prometheus.MustNewConstMetric(quotaDesc, prometheus.CounterValue, float64(v), k[0], k[1])
	}
}

// Egress exports the server-wide egress figures, read from stats
// (egress.Shared.Stats) at each scrape.
func (m *Metrics) Egress(stats func() egress.SharedStats) {
	if m == nil || stats == nil {
		return
	}
	m.reg.MustRegister(egressCollector(stats))
}

type egressCollector func() egress.SharedStats

func (e egressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- egressOpen
	ch <- egressOpenMax
	ch <- egressRefusals
}

func (e egressCollector) Collect(ch chan<- prometheus.Metric) {
	s := e()
	ch <- prometheus.MustNewConstMetric(egressOpen, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(egressOpenMax, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(egressRefusals, prometheus.CounterValue, float64(s.CapRefused), "server_cap")
	ch <- prometheus.MustNewConstMetric(egressRefusals, prometheus.CounterValue, float64(s.DNSRefused), "dns_rate")
}

var (
	auditWritable = prometheus.NewDesc(Namespace+"_audit_writable",
		"1 while the audit log writes its records; 0 while it cannot (data directory full or read-only: with audit.on_failure refuse, work is refused meanwhile).", nil, nil)
	auditWritten  = prometheus.NewDesc(Namespace+"_audit_records_written_total", "Audit records committed.", nil, nil)
	auditDropped  = prometheus.NewDesc(Namespace+"_audit_records_dropped_total", "Audit records lost: a full queue, more held than audit.queue while writes failed, or held at shutdown.", nil, nil)
	auditFailures = prometheus.NewDesc(Namespace+"_audit_write_failures_total", "Commits of audit records that failed (each is retried).", nil, nil)
	auditHeld     = prometheus.NewDesc(Namespace+"_audit_records_held", "Audit records a failed commit holds for the next try.", nil, nil)
)

// Audit exports the audit log's state, read from health (audit.Log.Health)
// at each scrape.
func (m *Metrics) Audit(health func() apitype.AuditHealth) {
	if m == nil || health == nil {
		return
	}
	m.reg.MustRegister(auditCollector(health))
}

type auditCollector func() apitype.AuditHealth

func (a auditCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{auditWritable, auditWritten, auditDropped, auditFailures, auditHeld} {
		ch <- d
	}
}

func (a auditCollector) Collect(ch chan<- prometheus.Metric) {
	h := a()
	writable := 1.0
	if h.Status != "ok" {
		writable = 0
	}
	ch <- prometheus.MustNewConstMetric(auditWritable, prometheus.GaugeValue, writable)
	ch <- prometheus.MustNewConstMetric(auditWritten, prometheus.CounterValue, float64(h.Written))
	ch <- prometheus.MustNewConstMetric(auditDropped, prometheus.CounterValue, float64(h.Dropped))
	ch <- prometheus.MustNewConstMetric(auditFailures, prometheus.CounterValue, float64(h.FailedWrites))
	ch <- prometheus.MustNewConstMetric(auditHeld, prometheus.GaugeValue, float64(h.Held))
}

var (
	ptysBudget  = prometheus.NewDesc(Namespace+"_ptys_budget", "The pseudo-terminals the server's sandboxes may hold together (server.max_ptys, or kernel.pty.max − kernel.pty.reserve).", nil, nil)
	ptysSandbox = prometheus.NewDesc(Namespace+"_sandbox_ptys_max", "The pseudo-terminals one sandbox may hold (server.max_session_ptys, or its share of the budget).", nil, nil)
	ptysHost    = prometheus.NewDesc(Namespace+"_host_ptys_open", "Pseudo-terminals open on the whole host now, every server's sandboxes and the host's own (kernel.pty.nr): all count against kernel.pty.max.", nil, nil)
)

// Ptys exports the server's pty budget, each sandbox's share, and the
// ptys open on the host, read from open at each scrape.
func (m *Metrics) Ptys(budget, perSandbox int, open func() (int, error)) {
	if m == nil || open == nil {
		return
	}
	m.reg.MustRegister(ptyCollector{budget, perSandbox, open})
}

type ptyCollector struct {
	budget, perSandbox int
	open               func() (int, error)
}

func (p ptyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ptysBudget
	ch <- ptysSandbox
	ch <- ptysHost
}

func (p ptyCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(ptysBudget, prometheus.GaugeValue, float64(p.budget))
	ch <- prometheus.MustNewConstMetric(ptysSandbox, prometheus.GaugeValue, float64(p.perSandbox))
	if n, err := p.open(); err == nil {
		ch <- prometheus.MustNewConstMetric(ptysHost, prometheus.GaugeValue, float64(n))
	}
}
