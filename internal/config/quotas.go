package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Quotas bound what one tenant may use. A zero field means "no quota of
// this kind" (the server's own caps still hold).
type Quotas struct {
	// MaxSessions caps the tenant's live sessions.
	MaxSessions int `json:"max_sessions,omitempty"`
	// ExecutionsPerMinute caps executions, commands, one-shot and program
	// runs started in any 60 seconds.
	ExecutionsPerMinute int `json:"executions_per_minute,omitempty"`
	// CPUSecondsPerDay caps the CPU time the tenant's executions use per
	// UTC day; the execution that crosses it finishes, the next is refused.
	CPUSecondsPerDay int `json:"cpu_seconds_per_day,omitempty"`
	// MaxConcurrentExecutions caps the tenant's executions in flight at
	// once: session executions, commands (a background one until it
	// ends), package installs, one-shot and program runs, from admission
	// (waiting for a server slot included) to their end. It bounds how
	// far cpu_seconds_per_day, counted as executions finish, can be
	// overshot (by about this many times the longest timeout), and
	// reaches one-shots, which max_sessions does not. 0: unlimited, like
	// every quota, as server.max_concurrent_executions bounds the machine;
	// a fair share is the operator's to size (cores / tenants).
	MaxConcurrentExecutions int `json:"max_concurrent_executions,omitempty"`
	// MaxPausedBytes caps the disk the tenant's paused sessions take
	// (persistence); a pause that would cross it is refused and the
	// session keeps running.
	MaxPausedBytes Size `json:"max_paused_bytes,omitempty"`
	// MaxLimits caps the limits the tenant may ask for, below the
	// server's max (a zero field: the server's max).
	MaxLimits Limits `json:"max_limits,omitzero"`
	// Egress: "allow" or "deny" network egress for the tenant's sandboxes
	// ("": the server's policy); EgressAllow narrows it to these names.
	Egress      string   `json:"egress,omitempty"`
	EgressAllow []string `json:"egress_allow,omitempty"`
}

// Over returns q with every unset field taken from def.
func (q Quotas) Over(def Quotas) Quotas {
	if q.MaxSessions == 0 {
		q.MaxSessions = def.MaxSessions
	}
	if q.ExecutionsPerMinute == 0 {
		q.ExecutionsPerMinute = def.ExecutionsPerMinute
	}
	if q.CPUSecondsPerDay == 0 {
		q.CPUSecondsPerDay = def.CPUSecondsPerDay
	}
	if q.MaxConcurrentExecutions == 0 {
		q.MaxConcurrentExecutions = def.MaxConcurrentExecutions
	}
	if q.MaxPausedBytes == 0 {
		q.MaxPausedBytes = def.MaxPausedBytes
	}
	q.MaxLimits = q.MaxLimits.Merge(def.MaxLimits)
	if q.Egress == "" {
		q.Egress = def.Egress
	}
	if q.EgressAllow == nil {
		q.EgressAllow = def.EgressAllow
	}
	return q
}

// Validate checks the quotas.
func (q Quotas) Validate() error {
	var errs []error
	if q.MaxSessions < 0 || q.ExecutionsPerMinute < 0 || q.CPUSecondsPerDay < 0 || q.MaxConcurrentExecutions < 0 || q.MaxPausedBytes < 0 {
		errs = append(errs, errors.New("max_sessions, executions_per_minute, cpu_seconds_per_day and max_concurrent_executions must not be negative"))
	}
	if q.Egress != "" && q.Egress != "allow" && q.Egress != "deny" {
		errs = append(errs, fmt.Errorf("egress %q must be \"allow\", \"deny\" or empty", q.Egress))
	}
	for _, n := range q.EgressAllow {
		if n == "" || strings.ContainsAny(n, " /\\") {
			errs = append(errs, fmt.Errorf("egress_allow: %q is not a host name", n))
		}
	}
	return errors.Join(errs...)
}

// Cap returns max with every field lowered to the tenant's ceiling where
// it sets one.
func (q Quotas) Cap(max Limits) Limits {
	m := q.MaxLimits
	if m.Timeout > 0 && m.Timeout < max.Timeout {
		max.Timeout = m.Timeout
	}
	if m.CPUTime > 0 && m.CPUTime < max.CPUTime {
		max.CPUTime = m.CPUTime
	}
	if m.Memory > 0 && m.Memory < max.Memory {
		max.Memory = m.Memory
	}
	if m.Pids > 0 && m.Pids < max.Pids {
		max.Pids = m.Pids
	}
	if m.Disk > 0 && m.Disk < max.Disk {
		max.Disk = m.Disk
	}
	if m.Inodes > 0 && m.Inodes < max.Inodes {
		max.Inodes = m.Inodes
	}
	if m.MaxOutput > 0 && m.MaxOutput < max.MaxOutput {
		max.MaxOutput = m.MaxOutput
	}
	if m.CPUs > 0 && m.CPUs < max.CPUs {
		max.CPUs = m.CPUs
	}
	if m.NoFile > 0 && m.NoFile < max.NoFile {
		max.NoFile = m.NoFile
	}
	return max
}

// Clamp returns l with every field above max lowered to it (defaults a
// tenant's ceiling is below).
func Clamp(l, max Limits) Limits { return Quotas{MaxLimits: max}.Cap(l) }

// Audit configures the audit log.
type Audit struct {
	// Enabled records every operation durably in data_dir.
	Enabled bool `json:"enabled"`
	// Code is what a record keeps of submitted code and commands: "full",
	// "sha256" (its SHA-256 and size) or "none".
	Code string `json:"code"`
	// MaxAge and MaxSize bound the log: older records, then past the
	// size the oldest records of the tenants using the most space (a
	// flood evicts its own tenant's records first), are removed (checked
	// every few minutes).
	MaxAge  Duration `json:"max_age"`
	MaxSize Size     `json:"max_size"`
	// Queue is how many records may wait for the writer; beyond it
	// records are dropped (and counted) rather than slow a request.
	Queue int `json:"queue"`
	// FlushInterval is how long the writer gathers records into one
	// commit: the most a kill -9 of the server can lose (0: a commit as
	// soon as a record arrives, which costs the hot path more).
	FlushInterval Duration `json:"flush_interval"`
	// OnFailure is what the server does while records cannot be written
	// (the data directory full or read-only): AuditRefuse answers work
	// with 503 audit_unavailable until they can, AuditContinue goes on
	// unrecorded. Either way the records are held and retried, and
	// /healthz and the metrics count them.
	OnFailure string `json:"on_failure"`
	// RefusalInterval is how long refused requests (failed
	// authentication, probes of another tenant's sessions) are counted
	// before they become records, one per reason, source and key.
	RefusalInterval Duration `json:"refusal_interval"`
}

// audit.on_failure values.
const (
	AuditRefuse   = "refuse"
	AuditContinue = "continue"
)

// Auth modes.
const (
	AuthKeys = "keys" // API keys (and server.token); the default
	AuthNone = "none" // no authentication: loopback listeners only
)

// loopback reports whether a listen address is on loopback only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
