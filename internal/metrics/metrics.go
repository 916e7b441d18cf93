// Package metrics owns airlock's Prometheus metrics: one registry per
// server (never the global one), filled by a session.Observer (sessions,
// executions, kills, file transfers), a hook of the API (HTTP requests by
// route pattern and status), hooks other packages call (quota rejections,
// egress decisions and bytes, redactions, code rules) and collectors read
// at scrape time (warm pools and the template, quota refusals), plus the
// Go runtime's and the process's own metrics.
//
// It must never block or allocate much on the request path (a label
// lookup and an atomic add per event), never label by anything a client
// chooses freely (session ids, paths, codes: only route patterns,
// languages, tenants, which operators create, and fixed vocabularies),
// and cost nothing when metrics are off: then no *Metrics exists, and
// every method is safe on a nil receiver.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"airlock/internal/apitype"
	"airlock/internal/session"
)

// Namespace prefixes every airlock metric.
const Namespace = "airlock"

// Metrics is a server's registry and the metrics in it.
type Metrics struct {
	reg *prometheus.Registry

	sessionsActive  *prometheus.GaugeVec
	sessionsCreated *prometheus.CounterVec
	sessionsEnded   *prometheus.CounterVec
	executions      *prometheus.CounterVec
	execDuration    *prometheus.HistogramVec
	kills           *prometheus.CounterVec
	files           *prometheus.CounterVec
	fileBytes       *prometheus.CounterVec
	httpRequests    *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	quotas          *quotaCollector
	egressDecisions *prometheus.CounterVec
	egressBytes     *prometheus.CounterVec
	redactions      *prometheus.CounterVec
	codeRules       *prometheus.CounterVec
	refused         *prometheus.CounterVec
	portsOpen       prometheus.Gauge
	portConns       prometheus.Counter
	portBytes       *prometheus.CounterVec
	toolCalls       *prometheus.CounterVec
	toolDuration    *prometheus.HistogramVec
	pauses          *prometheus.CounterVec
	pauseDuration   *prometheus.HistogramVec
	seals           *prometheus.CounterVec
	sealBytes       prometheus.Counter

	// own are the collectors above, in the order they are registered
	// (Catalog describes them).
	own []prometheus.Collector
}

// New returns a registry with airlock's metrics and the Go runtime's and
// the process's.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	m.sessionsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "sessions_active",
		Help: "Live client sessions, by language and tenant."}, []string{"language", "tenant"})
	m.sessionsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "sessions_created_total",
		Help: "Client sessions created, by language and tenant."}, []string{"language", "tenant"})
	m.sessionsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "sessions_ended_total",
		Help: "Client sessions ended, by language and end code."}, []string{"language", "end_code"})
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "executions_total",
		Help: "Finished executions, by kind (session, oneshot, program, command), language and outcome (ok, error, killed, session_ended, denied)."},
		[]string{"kind", "language", "outcome"})
	m.execDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "execution_duration_seconds",
		Help:    "Wall-clock time of finished executions, by kind and language.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}},
		[]string{"kind", "language"})
	m.kills = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "kills_total",
		Help: "Executions stopped at a limit, by kill reason."}, []string{"reason"})
	m.files = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "file_operations_total",
		Help: "File operations of clients on session workspaces, by operation and result (ok, error)."}, []string{"op", "result"})
	m.fileBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "file_bytes_total",
		Help: "Bytes uploaded to or downloaded from session workspaces, by operation."}, []string{"op"})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "http_requests_total",
		Help: "HTTP requests, by route pattern and status code."}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "http_request_duration_seconds",
		Help: "Time to answer HTTP requests (streams: to their end), by route pattern.", Buckets: prometheus.DefBuckets},
		[]string{"route"})
	m.quotas = &quotaCollector{own: map[[2]string]uint64{}}
	m.egressDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "egress_decisions_total",
		Help: "Egress decisions, by kind (dns, connect) and decision (allowed, denied)."}, []string{"kind", "decision"})
	m.egressBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "egress_bytes_total",
		Help: "Bytes carried by allowed egress connections, by direction (up, down)."}, []string{"direction"})
	m.redactions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "redactions_total",
		Help: "Matches redacted from output sent back to callers, by tenant."}, []string{"tenant"})
	m.codeRules = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "code_rule_matches_total",
		Help: "Submitted code matched by an operator's code rule, by rule and action (flag, deny)."}, []string{"rule", "action"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "access_refused_total",
		Help: "Requests refused for who sent them, by reason (missing_key, unknown_key, revoked_key, expired_key: authentication; cross_tenant: another tenant's session or records, answered as not found; admin_only; browser: the no-auth server's browser guard; port_token: a private port of a session without its token)."},
		[]string{"reason"})
	m.portsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "ports_open",
		Help: "Sessions' ports open to the outside (POST /v1/sessions/{id}/ports/{port}, or reached with an API key)."})
	m.portConns = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "port_connections_total",
		Help: "Connections made to programs listening in sessions, for proxied requests and WebSockets (counted when they end)."})
	m.portBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "port_bytes_total",
		Help: "Bytes carried to (in) and from (out) programs listening in sessions, counted when each connection ends."}, []string{"direction"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tool_calls_total",
		Help: "Calls of brokered tools by sandbox code, by tool and decision (ok, refused, failed)."}, []string{"tool", "decision"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "tool_call_duration_seconds",
		Help:    "Time brokered tool calls took, checks included, by tool.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"tool"})
	m.pauses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "session_pauses_total",
		Help: "Pauses, resumes and forks of sessions tried, by operation (pause, resume, fork), kind (files: the workspace and settings; memory: those and the memory, under gVisor) and outcome (ok; busy: refused while the session worked; quota; corrupt: an image that failed its checks; failed)."},
		[]string{"op", "kind", "outcome"})
	m.pauseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "session_pause_duration_seconds",
		Help:    "Time successful pauses, resumes and forks of sessions took, by operation and kind (a shutdown's or timeout's pause includes waiting for the session to stop working).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"op", "kind"})
	m.seals = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "recovery_point_seals_total",
		Help: "Seals of live sessions' recovery points tried (persistence), by outcome (sealed; deferred: the tenant's persistence.seal_bytes_per_second, caught up later; quota: its quotas.max_paused_bytes; failed: the disk, a workspace that cannot be kept whole). A point not sealed stays at its last sealed operation, stale."},
		[]string{"outcome"})
	m.sealBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "recovery_point_seal_bytes_total",
		Help: "Bytes the sealed recovery points wrote: the changed files they copied and their point.json (what persistence.seal_bytes_per_second charges)."})
	m.own = []prometheus.Collector{m.refused, m.sessionsActive, m.sessionsCreated, m.sessionsEnded, m.executions, m.execDuration,
		m.kills, m.files, m.fileBytes, m.httpRequests, m.httpDuration, m.quotas, m.egressDecisions, m.egressBytes,
		m.redactions, m.codeRules, m.portsOpen, m.portConns, m.portBytes,
		m.toolCalls, m.toolDuration, m.pauses, m.pauseDuration, m.seals, m.sealBytes}
	for _, c := range m.own {
		f(c)
	}
	// Every kill reason is exported from the start, so that a rate over
	// it is defined before the first kill; every seal outcome too.
	for _, r := range apitype.KillReasons() {
		m.kills.WithLabelValues(string(r))
	}
	for _, o := range session.SealOutcomes() {
		m.seals.WithLabelValues(o)
	}
	return m
}

// Handler serves the registry in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the server's registry (for tests and for collectors added
// by other packages).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Pause counts a pause, resume or fork (session.Manager.OnPause).
func (m *Metrics) Pause(e session.PauseEvent) {
	if m == nil {
		return
	}
	m.pauses.WithLabelValues(e.Op, e.Kind, e.Outcome).Inc()
	if e.Outcome == "ok" {
		m.pauseDuration.WithLabelValues(e.Op, e.Kind).Observe(e.Duration.Seconds())
	}
}

// Seal counts a seal of a recovery point (session.Manager.OnSeal).
func (m *Metrics) Seal(e session.SealEvent) {
	if m == nil {
		return
	}
	m.seals.WithLabelValues(e.Outcome).Inc()
	m.sealBytes.Add(float64(e.Bytes))
}

// The session.Observer.

var _ session.Observer = (*Metrics)(nil)

func (m *Metrics) SessionCreated(e session.SessionEvent) {
	m.sessionsActive.WithLabelValues(e.Language, e.Tenant).Inc()
	m.sessionsCreated.WithLabelValues(e.Language, e.Tenant).Inc()
}

func (m *Metrics) SessionEnded(e session.SessionEvent) {
	m.sessionsActive.WithLabelValues(e.Language, e.Tenant).Dec()
	m.sessionsEnded.WithLabelValues(e.Language, string(e.End.Code)).Inc()
}

func (m *Metrics) ExecutionStarted(session.ExecutionEvent) {}

func (m *Metrics) ExecutionFinished(e session.ExecutionEvent) {
	m.executions.WithLabelValues(e.Kind, e.Language, Outcome(e)).Inc()
	m.execDuration.WithLabelValues(e.Kind, e.Language).Observe(e.Duration.Seconds())
	if e.Killed && e.KillReason != "" {
		m.kills.WithLabelValues(string(e.KillReason)).Inc()
	}
	if e.Redactions > 0 {
		m.redactions.WithLabelValues(e.Tenant).Add(float64(e.Redactions))
	}
	action := "flag"
	if e.Error == session.DeniedError {
		action = "deny"
	}
	for _, rule := range e.CodeFlags {
		m.codeRules.WithLabelValues(rule, action).Inc()
	}
	for _, d := range e.Egress {
		m.EgressDecision(d.Kind, d.Allowed, d.BytesUp, d.BytesDown)
	}
}

// Outcome names how an execution ended: "denied" by a code rule (it
// never ran), "killed" at a limit, "error" for an uncaught error or a
// non-zero exit status, "session_ended" when its session ended under it
// otherwise, else "ok".
func Outcome(e session.ExecutionEvent) string {
	switch {
	case e.Error == session.DeniedError:
		return "denied"
	case e.Killed:
		return "killed"
	case !e.End.Zero() && e.End.Code != apitype.EndProgramExited && e.End.Code != apitype.EndFinished:
		return "session_ended"
	case e.Error != "" || e.ExitCode != 0:
		return "error"
	}
	return "ok"
}

func (m *Metrics) FileTransferred(e session.FileEvent) {
	result := "ok"
	if e.Err != nil {
		result = "error"
	}
	m.files.WithLabelValues(e.Op, result).Inc()
	if e.Bytes > 0 && (e.Op == session.FileUpload || e.Op == session.FileDownload) {
		m.fileBytes.WithLabelValues(e.Op).Add(float64(e.Bytes))
	}
}

// PortUsed counts sessions' open ports and what their connections
// carried.
func (m *Metrics) PortUsed(e session.PortEvent) {
	switch e.Op {
	case session.PortOpen:
		m.portsOpen.Inc()
	case session.PortClose:
		m.portsOpen.Dec()
	case session.PortTraffic:
		m.portConns.Inc()
		m.portBytes.WithLabelValues("in").Add(float64(e.BytesIn))
		m.portBytes.WithLabelValues("out").Add(float64(e.BytesOut))
	}
}

// NetworkChanged: policy changes are the audit log's, not a metric.
func (m *Metrics) NetworkChanged(session.NetworkEvent) {}

// ToolCalled counts a brokered call. Tool names come from the operator's
// configuration (a call naming an unknown one is counted as "unknown"),
// so the labels stay bounded.
func (m *Metrics) ToolCalled(e session.ToolCallEvent) {
	name := e.Call.Tool
	if e.Call.Code == "not_found" {
		name = "unknown"
	}
	m.toolCalls.WithLabelValues(name, e.Call.Decision).Inc()
	m.toolDuration.WithLabelValues(name).Observe(e.Call.DurationMs / 1000)
}

// HTTP counts one answered request: route is its ServeMux pattern ("" for
// a request refused before routing, such as an unauthenticated one).
func (m *Metrics) HTTP(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "none"
	}
	m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// QuotaRejected counts a request a tenant's quota refused, for refusals
// made outside the quota tracker (whose own are read at scrape time, see
// Quotas).
func (m *Metrics) QuotaRejected(tenant, quota string) {
	if m == nil {
		return
	}
	m.quotas.add(tenant, quota)
}

// EgressDecision counts one egress decision (kind "dns" or "connect")
// and the bytes its connection carried each way. The decisions of an
// execution arrive with its ExecutionFinished; this is also the hook for
// decisions made outside executions.
func (m *Metrics) EgressDecision(kind string, allowed bool, bytesUp, bytesDown int64) {
	if m == nil {
		return
	}
	decision := "denied"
	if allowed {
		decision = "allowed"
	}
	m.egressDecisions.WithLabelValues(kind, decision).Inc()
	if bytesUp > 0 {
		m.egressBytes.WithLabelValues("up").Add(float64(bytesUp))
	}
	if bytesDown > 0 {
		m.egressBytes.WithLabelValues("down").Add(float64(bytesDown))
	}
}

// AccessRefusals exports every reason from the start (0), so that a rate
// over them is defined before the first refusal.
func (m *Metrics) AccessRefusals(reasons []string) {
	if m == nil {
		return
	}
	for _, r := range reasons {
		m.refused.WithLabelValues(r)
	}
}

// AccessRefused counts a request refused for who sent it, by reason (a
// fixed vocabulary: see api.RefusalReasons).
func (m *Metrics) AccessRefused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}
