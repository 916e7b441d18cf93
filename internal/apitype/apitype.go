// Package apitype owns airlock's wire types: every request and response
// body of the HTTP API (sessions, executions, one-shot and program runs,
// files, health, errors), the streamed events, the limit types they carry
// (sizes, durations, counts, Limits, Isolation) with their JSON forms,
// and the machine-readable vocabularies (kill reasons, end codes, event
// types). The server, the Go client, the command line, the benchmark and
// the end-to-end tests all use these types, the configuration's limits
// are these, and internal/httpapi/v1 checks them field by field against the
// OpenAPI document.
//
// It must never hold behaviour beyond naming and encoding values, and
// never import anything but the standard library, so that any client can
// use it without pulling in the server.
package apitype

import (
	"encoding/json"
	"slices"
	"time"
)

// Languages are the canonical language names responses carry.
const (
	Python     = "python"
	Bash       = "bash"
	JavaScript = "javascript"
)

// CreateSessionRequest asks for a new session (POST /v1/sessions). Every
// field is optional.
type CreateSessionRequest struct {
	Language    string            `json:"language,omitempty"`
	Limits      Limits            `json:"limits,omitzero"`
	Env         map[string]string `json:"env,omitempty"`
	IdleTimeout Duration          `json:"timeout_idle,omitempty"`
	// Isolation picks the kernel: "native" or "gvisor"; empty is the
	// server's own. The server's allow_isolation decides what may be
	// asked for.
	Isolation Isolation `json:"isolation,omitempty"`
	// Template names the root filesystem of the session's sandbox, a
	// template registered on the server (airlock template list); empty is the
	// server's templates.default (the host's root unless set).
	Template string `json:"template,omitempty"`
	// Network, when set, lets the session reach the names it allows;
	// without it the sandbox has loopback only. On gVisor, whose
	// sandboxes get a network only when they boot, a session created
	// without it cannot be given a policy later (an empty one can).
	Network *NetworkPolicy `json:"network,omitempty"`
	// History bounds what the session's history keeps (each bound 0: the
	// server's history.executions and history.bytes), up to the
	// server's history.max_executions and history.max_bytes.
	History *HistoryLimits `json:"history,omitempty"`
	// Tools opts the session in to tools by name (GET /v1/tools lists the
	// caller's): its code may call them through airlock, which attaches
	// their credentials on the host side. A name the caller's tenant does
	// not have is refused (400).
	Tools []string `json:"tools,omitempty"`
	// Secrets opts the session in to secrets by name (GET /v1/secrets
	// lists the caller's): each appears in the sandbox as an opaque
	// placeholder in its variable, which airlock's egress gate replaces
	// with the value only in requests to the secret's bound hosts. The
	// session's network must allow those hosts. A name the caller's
	// tenant does not have is refused (400).
	Secrets []string `json:"secrets,omitempty"`
	// Timeout is the session's lifetime: it ends (or pauses, OnTimeout)
	// this long after its creation or its resume, however busy, unless PUT
	// /v1/sessions/{id}/timeout sets it again. 0: no lifetime (the idle
	// timeout alone ends it). At most the server's
	// server.max_session_timeout. Not limits.timeout, which bounds each
	// execution.
	Timeout Duration `json:"timeout,omitempty"`
	// OnTimeout is what its lifetime's or idle timeout's end does: "end"
	// (the default) or "pause" (a server with persistence.enabled); a
	// timeout's pause that is refused or fails ends the session all the
	// same (its reason says why).
	OnTimeout string `json:"on_timeout,omitempty"`
	// AutoResume: a call naming the session while it is paused (execute,
	// files, commands...) resumes it first, instead of answering 409
	// session_paused. GET and DELETE never resume.
	AutoResume bool `json:"auto_resume,omitempty"`
	// OnTimeoutRestores is what a pause on the session's timeout keeps
	// (on_timeout "pause"): "files" keeps its files and settings only,
	// even where its memory could be kept (the interpreter restarts on
	// resume); "memory" asks for its memory too, refused (400, saying
	// why) when the session made cannot keep it; empty: what Restores
	// says. Other pauses (PauseRequest, a shutdown's) are not bound by it.
	OnTimeoutRestores string `json:"on_timeout_restores,omitempty"`
	// Metadata is the client's own labels for the session (kept through
	// pauses and restarts, returned in its description, and filtered on
	// by GET /v1/sessions?metadata.KEY=VALUE): at most
	// server.max_metadata entries, keys of 1-256 bytes without control
	// characters, values of at most 2 KiB, 32 KiB in all. Keys starting
	// with "airlock." are the server's own: a client's are refused.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// What a session's timeout does (CreateSessionRequest.OnTimeout).
const (
	OnTimeoutEnd   = "end"
	OnTimeoutPause = "pause"
)

// What a resume restores (Session.Restores, Session.Restored).
const (
	// RestoreFiles: the workspace's files, limits, environment, network
	// policy and lifecycle; the interpreter starts afresh (variables and
	// processes are gone).
	RestoreFiles = "files"
	// RestoreMemory: what RestoreFiles restores, and the memory of
	// every interpreter and process, which run on where they were
	// (variables, imports, background processes): gVisor sessions
	// without a network on a server with persistence (gvisor.checkpoint,
	// on by default there).
	RestoreMemory = "memory"
)

// PauseRequest is the optional body of POST /v1/sessions/{id}/pause.
type PauseRequest struct {
	// Restores is what the pause keeps: "files" keeps the files and
	// settings only, even where the memory could be kept (the
	// interpreter restarts on resume: restored "files"); "memory" asks
	// for the memory too, refused (400, saying why) where the session's
	// pause cannot keep it (its restores says "files"); empty: what the
	// session's restores says.
	Restores string `json:"restores,omitempty"`
}

// ResumeRequest is the optional body of POST /v1/sessions/{id}/resume.
type ResumeRequest struct {
	// Restores "files" restores the files only, the interpreters started
	// afresh (restored "files"), even where the pause kept the memory
	// (E2B's connect onResume "reboot"; the memory image goes with the
	// resume); empty: what the pause kept (the session's restores).
	Restores string `json:"restores,omitempty"`
}

// TimeoutRequest sets a session's lifetime again, from now
// (PUT /v1/sessions/{id}/timeout; E2B's set_timeout).
type TimeoutRequest struct {
	Timeout Duration `json:"timeout"`
}

// PausedInfo describes a paused session (state "paused").
type PausedInfo struct {
	PausedAt time.Time `json:"paused_at"`
	// Files and Dirs were kept, Bytes of the files' contents, DiskBytes
	// on the server's disk (what counts against quotas.max_paused_bytes).
	Files     int   `json:"files"`
	Dirs      int   `json:"dirs"`
	Bytes     int64 `json:"bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	// MemoryBytes is the memory image's share of DiskBytes (absent:
	// none; see Session.Restores).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// MemoryError says why a pause that was to keep the memory kept the
	// files only (the checkpoint failed, or the tenant's quota had no
	// room for it).
	MemoryError string `json:"memory_error,omitempty"`
	// Skipped are what the workspace held that a pause does not keep
	// (symlinks, FIFOs, sockets, devices: never followed or read).
	Skipped []PauseSkipped `json:"skipped,omitempty"`
	// ExpiresAt: when the server deletes it (persistence.keep).
	ExpiresAt time.Time `json:"expires_at"`
	// Error says why it cannot be resumed (a corrupt image, kept for
	// the operator; DELETE discards it).
	Error string `json:"error,omitempty"`
	// ExplicitResume: only a resume makes it live again; a call naming
	// it answers 409 session_paused even with auto_resume (an E2B pause
	// with keepMemory false).
	ExplicitResume bool `json:"explicit_resume,omitempty"`
	// ByShutdown: its server's shutdown paused it (persistence
	// on_shutdown "pause"), not its client nor a timeout: what the MCP
	// endpoint adopts after a restart.
	ByShutdown bool `json:"by_shutdown,omitempty"`
	// Recovered says the session was live when its server ended without
	// pausing it (kill -9, a crash, power loss), and what was recovered:
	// its workspace as of its last completed operation (an execution, a
	// command or a file change), at a time (its
	// resume's RestoredReason says it again).
	Recovered string `json:"recovered,omitempty"`
}

// RecoveryPoint is a live session's recovery point (persistence on):
// the copy of its workspace a server that ends without pausing it
// (kill -9, a crash, power loss) recovers it from, as of its last
// sealed operation (Session.RecoveryPointAt).
type RecoveryPoint struct {
	// DiskBytes is what it takes on the server's disk, with the image a
	// resume set aside until the first point (counted against
	// quotas.max_paused_bytes).
	DiskBytes int64 `json:"disk_bytes"`
	// Stale: the operations completed since StaleSince are not in it;
	// StaleReason says why (the tenant's quotas.max_paused_bytes, its
	// seal budget persistence.seal_bytes_per_second, the disk, a
	// workspace that cannot be kept whole). It stays at RecoveryPointAt until
	// a seal succeeds: after the next operation, or, deferred by the
	// budget, once that has refilled.
	Stale       bool       `json:"stale,omitempty"`
	StaleSince  *time.Time `json:"stale_since,omitempty"`
	StaleReason string     `json:"stale_reason,omitempty"`
}

// PauseSkipped is a workspace entry a pause left out.
type PauseSkipped struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// NetworkPolicy is an egress allowlist: DNS names ("pypi.org"), every name
// strictly below a suffix ("*.example.com"), each with an optional port
// (default 80 and 443: "api.example.com:8443"), carrying TLS or HTTP for
// that name, or anything when marked opaque ("git.example.com:22/opaque").
type NetworkPolicy struct {
	Allow []string `json:"allow"`
}

// NetworkState is a session's egress policy and counters
// (GET/PUT /v1/sessions/{id}/network).
type NetworkState struct {
	Allow           []string `json:"allow"`
	BytesUsed       int64    `json:"bytes_used"`
	BytesBudget     int64    `json:"bytes_budget"`
	OpenConnections int      `json:"open_connections"`
	// Connections counts every connection the gate decided, Denied every
	// denial (connections and DNS queries).
	Connections int64 `json:"connections"`
	Denied      int64 `json:"denied"`
	// ConnectionsAllowed counts the connections carried, against the
	// session's ConnectionBudget (network.connection_budget).
	ConnectionsAllowed int64 `json:"connections_allowed"`
	ConnectionBudget   int64 `json:"connection_budget"`
}

// PackagesRequest installs packages into a session
// (POST /v1/sessions/{id}/packages).
type PackagesRequest struct {
	// Manager is "pip" (Python sessions).
	Manager  string   `json:"manager"`
	Packages []string `json:"packages"`
}

// Package is one installed package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// PackagesResult is what an install put into the session.
type PackagesResult struct {
	Installed  []Package `json:"installed"`
	DurationMs float64   `json:"duration_ms"`
}

// Session states.
const (
	StateIdle  = "idle"
	StateBusy  = "busy"
	StateEnded = "ended"
	// StatePaused: its files and settings are on the server's disk and
	// it has no sandbox; POST .../resume (or auto_resume) brings it back.
	StatePaused = "paused"
)

// Session describes a session.
type Session struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	State    string `json:"state"` // StateIdle, StateBusy, StatePaused or StateEnded
	// EndReason and EndCode say why the session ended (state ended).
	EndReason   string    `json:"end_reason,omitempty"`
	EndCode     EndCode   `json:"end_code,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	LastUsedAt  time.Time `json:"last_used_at"`
	IdleTimeout Duration  `json:"timeout_idle"`
	Limits      Limits    `json:"limits"`
	Executions  int       `json:"executions"`
	// Isolation is the kernel the session's code runs on.
	Isolation Isolation `json:"isolation"`
	// Template and TemplateVersion name the template the session's root
	// was made from (absent: the host's root).
	Template        string `json:"template,omitempty"`
	TemplateVersion string `json:"template_version,omitempty"`
	// Sandbox names the session's cgroup under the server's cgroup
	// parent, for operators (and the benchmark's memory figures).
	Sandbox string `json:"sandbox"`
	// Tenant owns the session (the tenant of the API key that created
	// it; empty for the server's own callers).
	Tenant string `json:"tenant,omitempty"`
	// Network is the session's egress policy and counters (absent: no
	// network).
	Network *NetworkState `json:"network,omitempty"`
	// Pod is the server the session lives on (cluster.pod_name, or the
	// host's name), in a listing of a store several servers share.
	Pod string `json:"pod,omitempty"`
	// Usage is the sandbox's memory and CPU now (absent once ended, or
	// when its cgroup cannot be read).
	Usage *Usage `json:"usage,omitempty"`
	// Current is the execution running now (absent: none).
	Current *CurrentExecution `json:"current,omitempty"`
	// CommandsRunning counts the shell commands running now.
	CommandsRunning int `json:"commands_running,omitempty"`
	// History is the bounds of the session's history (absent: the
	// server keeps none, history.enabled).
	History *HistoryLimits `json:"history,omitempty"`
	// ExpiresAt is the end of the session's lifetime (absent: none);
	// OnTimeout, OnTimeoutRestores and AutoResume are as created.
	ExpiresAt         *time.Time `json:"expires_at,omitempty"`
	OnTimeout         string     `json:"on_timeout,omitempty"`
	OnTimeoutRestores string     `json:"on_timeout_restores,omitempty"`
	AutoResume        bool       `json:"auto_resume,omitempty"`
	// Restores is what a pause of the session would keep ("files" or
	// "memory"; "files" too while its tenant's quota has no room for its
	// memory as it is now), absent on a server that cannot pause; for a paused
	// session, what a resume will try to restore. Restored is what its
	// last resume (or, for a fork, its fork) restored (absent: never
	// paused nor forked); RestoredReason says
	// why that is less than its pause kept (a memory image that failed
	// its checks or did not restore, or that its server's end took
	// while the pause was keeping it: the files were restored instead),
	// or what a session recovered after its server's end kept
	// (PausedInfo.Recovered).
	Restores       string `json:"restores,omitempty"`
	Restored       string `json:"restored,omitempty"`
	RestoredReason string `json:"restored_reason,omitempty"`
	// RecoveryPointAt is, for a live session on a server with
	// persistence, the end of the operation its recovery point keeps:
	// what a kill -9 of the server now would recover its workspace as
	// of (absent: no point sealed yet, or no persistence). It trails
	// the last operation by the few ms its seal takes.
	RecoveryPointAt *time.Time `json:"recovery_point_at,omitempty"`
	// Reseeded says, for a fork restored with its memory (restored
	// "memory"), whether every interpreter confirmed that it reseeded
	// its random generators from the kernel (absent: not such a fork);
	// false: NotReseeded lists the code contexts whose runtime did not
	// (the session's own by its language), which draw what their source
	// draws (a runtime paused by an airlock older than the reseed, or
	// JavaScript, whose Math.random cannot be reseeded).
	Reseeded    *bool    `json:"reseeded,omitempty"`
	NotReseeded []string `json:"not_reseeded,omitempty"`
	// Paused describes a paused session (state "paused").
	Paused *PausedInfo `json:"paused,omitempty"`
	// RecoveryPoint describes a live session's recovery point (absent:
	// none, persistence off).
	RecoveryPoint *RecoveryPoint `json:"recovery_point,omitempty"`
	// Tools are those the session opted in to.
	Tools []string `json:"tools,omitempty"`
	// Metadata is the client's labels, as created.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Secrets are those the session opted in to (never their values).
	Secrets []SecretInfo `json:"secrets,omitempty"`
}

// SecretInfo describes a secret a session may opt in to: the variable
// its placeholder is in and the hosts it is substituted for. Never the
// value, never the placeholder.
type SecretInfo struct {
	Name   string   `json:"name"`
	EnvVar string   `json:"env_var"`
	Hosts  []string `json:"hosts"`
}

// SecretList is GET /v1/secrets.
type SecretList struct {
	Secrets []SecretInfo `json:"secrets"`
}

// SessionFilter selects sessions of a listing (GET /v1/sessions?state=
// paused&metadata.KEY=VALUE): any of States (none: every state), and
// every entry of Metadata.
type SessionFilter struct {
	States   []string
	Metadata map[string]string
}

// Match says whether s is selected.
func (f SessionFilter) Match(s Session) bool {
	if len(f.States) > 0 && !slices.Contains(f.States, s.State) {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := s.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Tool kinds (ToolInfo.Kind).
const (
	ToolHTTP    = "http"
	ToolCommand = "command"
)

// ToolInfo describes a tool sandbox code may call (GET /v1/tools, GET
// /v1/sessions/{id}/tools, and list_tools() inside the sandbox).
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Kind is "http" or "command".
	Kind string `json:"kind"`
	// Writable: the tool may change things (an HTTP method other than GET
	// and HEAD); tools are read-only unless declared so.
	Writable bool `json:"writable"`
	// Arguments is the JSON Schema the call's arguments must pass.
	Arguments json.RawMessage `json:"arguments"`
}

// ToolList is GET /v1/tools and GET /v1/sessions/{id}/tools.
type ToolList struct {
	Tools []ToolInfo `json:"tools"`
}

// Decisions of a tool call (ToolCall.Decision).
const (
	// ToolOK: airlock called the tool and it answered (an HTTP error
	// status is an answer: Status says it).
	ToolOK = "ok"
	// ToolRefused: airlock refused the call before making it (an
	// argument, a rate or a budget: Code, Reason, Field, Rule).
	ToolRefused = "refused"
	// ToolFailed: airlock made the call and it failed (a timeout, an
	// answer over its cap, an upstream that cannot be reached).
	ToolFailed = "failed"
)

// ToolCall is one call sandbox code made to a tool through airlock: in
// an execution's tool_calls, its streamed events and the audit log.
type ToolCall struct {
	Tool string `json:"tool"`
	// Context is the code context the call came from, as the session's
	// in-sandbox client says (advisory: code can name any context of
	// its own session, never another session's).
	Context string `json:"context,omitempty"`
	// Arguments as the call sent them after redaction (the tool's
	// redact_arguments and the output policy), at most 4 KiB (a longer
	// one is cut, and ArgumentsTruncated says so).
	Arguments          json.RawMessage `json:"arguments,omitempty"`
	ArgumentsTruncated bool            `json:"arguments_truncated,omitempty"`
	// Decision is "ok", "refused" or "failed".
	Decision string `json:"decision"`
	// Code, Reason: why it was refused or failed (an error code and a
	// sentence); Field and Rule: the argument and the rule it broke.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	Field  string `json:"field,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// Status is the HTTP status the tool answered with, or the command's
	// exit status (absent when it did not answer).
	Status     *int      `json:"status,omitempty"`
	DurationMs float64   `json:"duration_ms"`
	BytesIn    int64     `json:"bytes_in"`
	BytesOut   int64     `json:"bytes_out"`
	Time       time.Time `json:"time"`
}

// SessionList is GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// ExecuteRequest runs code in a session.
type ExecuteRequest struct {
	Code string `json:"code,omitempty"`
	// Timeout overrides the session's limits.timeout for this execution.
	Timeout Duration `json:"timeout,omitempty"`
	// Context names the code context to run in (CodeContext.ID); Language
	// runs in that language's default context, started on first use.
	// Neither: the session's default context. Both must agree.
	Context  string `json:"context,omitempty"`
	Language string `json:"language,omitempty"`
	// Env is set in the interpreter for this execution alone: afterwards
	// each variable is what it was before, or unset (E2B's runCode envs).
	Env map[string]string `json:"env,omitempty"`
}

// InterruptResult is POST /v1/sessions/{id}/interrupt.
type InterruptResult struct {
	Interrupted bool `json:"interrupted"`
}

// Output is one rich output, a Jupyter MIME bundle.
type Output struct {
	// Type is OutputResult (the value of the final expression) or
	// OutputDisplay.
	Type     string                     `json:"type"`
	Data     map[string]json.RawMessage `json:"data"`
	Metadata json.RawMessage            `json:"metadata,omitempty"`
}

// ExecError is an uncaught exception, or why an execution stopped.
type ExecError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// File change kinds.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)

// FileChange is a file an execution created, modified or deleted.
type FileChange struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Change string `json:"change"` // Created, Modified or Deleted
}

// Result is the outcome of one execution.
type Result struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// StdoutDroppedBytes and StderrDroppedBytes count what was dropped
	// past max_output (the code runs on; absent when nothing was).
	StdoutDroppedBytes int64      `json:"stdout_dropped_bytes,omitempty"`
	StderrDroppedBytes int64      `json:"stderr_dropped_bytes,omitempty"`
	Results            []Output   `json:"results"`
	ResultsDropped     int        `json:"results_dropped,omitempty"`
	Error              *ExecError `json:"error"`
	ExitCode           int        `json:"exit_code"`
	ExecutionCount     int        `json:"execution_count"`
	DurationMs         float64    `json:"duration_ms"`
	CPUMs              float64    `json:"cpu_ms"`
	PeakMemoryBytes    int64      `json:"peak_memory_bytes"`
	Killed             bool       `json:"killed"`
	KillReason         KillReason `json:"kill_reason"`
	// SessionEnded says the execution ended its session, ContextEnded
	// its code context alone (the session, its files and its other
	// contexts live on); EndReason and EndCode say why.
	SessionEnded bool         `json:"session_ended,omitempty"`
	ContextEnded bool         `json:"context_ended,omitempty"`
	EndReason    string       `json:"end_reason,omitempty"`
	EndCode      EndCode      `json:"end_code,omitempty"`
	FilesChanged []FileChange `json:"files_changed"`
	// FilesTruncated: the workspace holds more than a listing may, and
	// FilesChanged may miss some.
	FilesTruncated bool `json:"files_truncated,omitempty"`
	// Egress lists what the execution tried on the network (sessions
	// with a network policy only): DNS lookups and connections, allowed
	// or denied, and why. Every connection carried is an entry of its
	// own; denials and DNS lookups repeated for the same destination and
	// reason are one entry with a count.
	Egress []EgressDecision `json:"egress,omitempty"`
	// EgressSummarized counts the decisions not listed one by one (folded
	// into an entry's count); 0: every decision is an entry.
	EgressSummarized int64 `json:"egress_summarized,omitempty"`
	// Redacted counts what the server's output policy replaced in stdout,
	// stderr, text results and the error ([REDACTED:rule]).
	Redacted int `json:"redacted,omitempty"`
	// Flags name the operator's code rules that flagged the code.
	Flags []string `json:"flags,omitempty"`
	// ToolCalls are the calls the execution's code made to the
	// session's tools, in order; ToolCallsDropped counts those past the
	// first 256, which are in the audit log only.
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallsDropped int        `json:"tool_calls_dropped,omitempty"`
}

// InputFile is a file placed in /workspace before a one-shot or program
// run. Content (text) or ContentBase64 (bytes), not both.
type InputFile struct {
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// OneShotRequest runs code once in a fresh sandbox (POST /v1/execute).
type OneShotRequest struct {
	Language string            `json:"language,omitempty"`
	Code     string            `json:"code,omitempty"`
	Files    []InputFile       `json:"files,omitempty"`
	Limits   Limits            `json:"limits,omitzero"`
	Env      map[string]string `json:"env,omitempty"`
	// Network, when set, is the run's egress allowlist.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Packages are installed before the run (pip for Python, npm for
	// JavaScript), as POST /v1/sessions/{id}/packages does.
	Packages []string `json:"packages,omitempty"`
	// Isolation as in CreateSessionRequest.
	Isolation Isolation `json:"isolation,omitempty"`
	// Template as in CreateSessionRequest.
	Template string `json:"template,omitempty"`
	// Tools and Secrets as in CreateSessionRequest.
	Tools   []string `json:"tools,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
}

// ProgramRequest runs a program file once in a fresh sandbox, as `airlock
// run` does (POST /v1/run).
type ProgramRequest struct {
	Language string `json:"language,omitempty"`
	// Code is the program's text, written to /workspace/Filename.
	Code string `json:"code,omitempty"`
	// Filename defaults to main.py, main.sh or main.js.
	Filename string            `json:"filename,omitempty"`
	Args     []string          `json:"args,omitempty"`
	Files    []InputFile       `json:"files,omitempty"`
	Limits   Limits            `json:"limits,omitzero"`
	Env      map[string]string `json:"env,omitempty"`
	// Network, when set, is the run's egress allowlist.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Packages are installed before the run (pip for Python, npm for
	// JavaScript), as POST /v1/sessions/{id}/packages does.
	Packages []string `json:"packages,omitempty"`
	// FileContents false lists output files without their content.
	FileContents *bool `json:"file_contents,omitempty"`
	// Isolation as in CreateSessionRequest.
	Isolation Isolation `json:"isolation,omitempty"`
	// Template as in CreateSessionRequest.
	Template string `json:"template,omitempty"`
	// Tools and Secrets as in CreateSessionRequest.
	Tools   []string `json:"tools,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
}

// MaxOneShotFiles caps the total content of the output files a one-shot
// or program run returns inline; past it, a file is Omitted.
const MaxOneShotFiles = 16 << 20

// OutputFile is a file a one-shot or program run created or modified.
type OutputFile struct {
	Path          string `json:"path"`
	Size          int64  `json:"size"`
	ContentBase64 string `json:"content_base64,omitempty"`
	// Omitted says the content was left out: the files together exceed
	// the response's cap.
	Omitted bool `json:"omitted,omitempty"`
}

// OneShotResult is a Result plus the output files and the limits that
// applied (the request's, completed by the server's defaults).
type OneShotResult struct {
	*Result
	Files  []OutputFile `json:"files"`
	Limits *Limits      `json:"limits"`
}

// Event types of a streamed execution.
const (
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventResult  = "result"
	EventDisplay = "display"
	EventError   = "error"
	EventEnd     = "end"
	// EventTruncated says, once per stream, that Stream reached
	// max_output: later output of it is dropped (and counted in the end
	// event's result); the code runs on.
	EventTruncated = "truncated"
	// EventFailed ends a stream whose request failed after it started:
	// Error.Name is the error code, Error.Value the message.
	EventFailed = "failed"
	// EventRejected answers a message of a command's WebSocket client
	// that was refused (its error says why); the command runs on.
	EventRejected = "rejected"
	// EventToolCall: the code called one of the session's tools
	// (ToolCall says what was decided).
	EventToolCall = "tool_call"
)

// EventTypes lists every event type.
func EventTypes() []string {
	return []string{EventStdout, EventStderr, EventResult, EventDisplay, EventError, EventEnd, EventFailed, EventTruncated, EventRejected, EventToolCall}
}

// Output types (Output.Type).
const (
	OutputResult  = EventResult
	OutputDisplay = EventDisplay
)

// Event is one streamed step of an execution, in the order it happened.
type Event struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Stream names the stream of a truncated event ("stdout", "stderr").
	Stream   string                     `json:"stream,omitempty"`
	Data     map[string]json.RawMessage `json:"data,omitempty"`
	Metadata json.RawMessage            `json:"metadata,omitempty"`
	Error    *ExecError                 `json:"error,omitempty"`
	Result   *Result                    `json:"result,omitempty"`
	// Command is the end event's result of a shell command (commands).
	Command *CommandResult `json:"command,omitempty"`
	Files   []OutputFile   `json:"files,omitempty"`  // one-shot and program end only
	Limits  *Limits        `json:"limits,omitempty"` // one-shot and program end only
	// DataBase64 replaces Text for a program's output that is not valid
	// UTF-8 (program runs only), so streamed bytes arrive unchanged.
	DataBase64 string `json:"data_base64,omitempty"`
	// ToolCall is a tool_call event's call.
	ToolCall *ToolCall `json:"tool_call,omitempty"`
}

// Entry is a file or directory in /workspace.
type Entry struct {
	Path    string    `json:"path"`
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mtime"`
}

// FileList is GET /v1/sessions/{id}/files.
type FileList struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

// UploadResult is PUT /v1/sessions/{id}/files/{path}.
type UploadResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Health is GET /healthz.
type Health struct {
	Status   string `json:"status"`
	Version  string `json:"version"`
	Sessions int    `json:"sessions"`
	// Transfers are the file uploads and downloads in progress.
	Transfers int `json:"transfers"`
	// Pool has one PoolStats per language and, under "python_template"
	// when the template is configured, a TemplateStats; absent without
	// warm pools.
	Pool map[string]json.RawMessage `json:"pool,omitempty"`
	// Audit is the audit log's state (absent when it is off).
	Audit *AuditHealth `json:"audit,omitempty"`
}

// AuditHealth is the audit log's state: whether records are being
// written ("ok") or cannot be ("failing": the data directory is full or
// read-only; with on_failure "refuse" work is refused meanwhile), and
// its counters since the server started.
type AuditHealth struct {
	Status    string `json:"status"`
	OnFailure string `json:"on_failure"`
	Written   uint64 `json:"written"`
	// Dropped records are lost: a full queue, more held than
	// audit.queue, or held at shutdown.
	Dropped uint64 `json:"dropped"`
	// FailedWrites counts commits that failed; Held the records waiting
	// for the next try.
	FailedWrites uint64 `json:"failed_writes"`
	Held         int64  `json:"held"`
}

// Readiness is GET /readyz: whether the server can take a new session
// now (200) or not (503). It is capacity, not health (that is /healthz):
// a load balancer sends creations only to ready servers, while a server
// that is not ready goes on serving the sessions it holds.
type Readiness struct {
	Ready bool `json:"ready"`
	// Reasons say why not, one sentence each (none when ready).
	Reasons []string `json:"reasons,omitempty"`
	// Pod is the server's name in a cluster.
	Pod string `json:"pod,omitempty"`
	// Sessions counts those open and being created; MaxSessions is
	// server.max_sessions.
	Sessions    int `json:"sessions"`
	MaxSessions int `json:"max_sessions"`
	// Warm is the number of ready sandboxes of each language with a
	// warm pool.
	Warm map[string]int `json:"warm,omitempty"`
}

// PoolStats are one language's warm-pool figures.
type PoolStats struct {
	Ready int `json:"ready"`
	// Target is the number it keeps now: Min, or more (up to Max) while
	// the demand of the last seconds asks for more.
	Target int `json:"target"`
	// Size is pool.size; Min what the pool keeps whatever the demand:
	// Size, or fewer when the pools' sizes together exceed the memory
	// budget.
	Size int `json:"size"`
	Min  int `json:"min"`
	Max  int `json:"max"`
	// BudgetCut is how many fewer it keeps now than its size and its
	// demand ask (within Max), for the memory budget: the pressure the
	// budget puts on it.
	BudgetCut int `json:"budget_cut"`
	// Building are being built to reach the target.
	Building int `json:"building"`
	// Waiting are requests building a sandbox themselves now, none being
	// ready: the pool's pressure.
	Waiting    int     `json:"waiting"`
	Hits       uint64  `json:"hits"`
	Misses     uint64  `json:"misses"`
	Built      uint64  `json:"built"`
	Discarded  uint64  `json:"discarded"`
	AvgBuildMs float64 `json:"avg_build_ms"`
	// AvgRefillMs is the mean time from the refill deciding to build one
	// to its being ready, the wait for a build slot included.
	AvgRefillMs float64 `json:"avg_refill_ms"`
	// MemoryBytes is the memory one ready sandbox holds (its processes'
	// PSS, measured once the pool is full; an estimate until then), what
	// the budget counts.
	MemoryBytes int64 `json:"memory_bytes"`
	// HeldBytes is what its ready sandboxes hold (Ready × MemoryBytes).
	HeldBytes int64 `json:"held_bytes"`
	// MemoryBudget is pool.memory_budget as resolved, in bytes: what the
	// ready sandboxes of every language together may hold (0: none, a
	// template's pools).
	MemoryBudget int64 `json:"memory_budget"`
	// Cold counts sandboxes handed out whose runtime the template could
	// have forked but that started without it (the template was not up
	// or could not fork); always 0 for languages it does not start.
	Cold uint64 `json:"cold"`
}

// TemplateStats describe the Python template interpreter.
type TemplateStats struct {
	Running  bool `json:"running"`
	Failures int  `json:"failures"`
	// Restarts: times it died and was started again.
	Restarts int `json:"restarts"`
	// Lean describes the lean template beside it, which preloads nothing
	// (pool.lean_size); absent without one.
	Lean *TemplateStats `json:"lean,omitempty"`
}

// TemplateKey is the key of TemplateStats in Health.Pool.
const TemplateKey = "python_template"

// NetworkPoolSuffix ends the Health.Pool key of a language's pool of
// sandboxes booted with a network ("python+network"; gVisor's
// pool.network_size).
const NetworkPoolSuffix = "+network"

// LeanPoolSuffix ends the Health.Pool key of a language's pool of
// sandboxes forked from the lean template ("python+lean";
// pool.lean_size), kept for one-shots whose code needs none of the
// preloaded modules.
const LeanPoolSuffix = "+lean"

// Warm reports whether every pool is full and the template runs (true
// without pools).
func (h *Health) Warm() bool {
	for k, raw := range h.Pool {
		if k == TemplateKey {
			var t TemplateStats
			if json.Unmarshal(raw, &t) != nil || !t.Running || t.Lean != nil && !t.Lean.Running {
				return false
			}
			continue
		}
		var q PoolStats
		if json.Unmarshal(raw, &q) != nil || q.Ready < q.Target {
			return false
		}
	}
	return true
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what an error response says.
type ErrorDetail struct {
	// Code is machine-readable (see errdefs); Message is for people and
	// never carries host internals.
	Code    string `json:"code"`
	Message string `json:"message"`
	// EndCode says why the session ended (code session_ended).
	EndCode EndCode `json:"end_code,omitempty"`
	// RequestID names the request in the server's log.
	RequestID string `json:"request_id,omitempty"`
}

// RequestIDHeader carries a request's id, both ways.
const RequestIDHeader = "X-Request-Id"

// RunOutput is what `airlock run --json` prints.
type RunOutput struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// As in Result: what was dropped past --max-output.
	StdoutDroppedBytes int64      `json:"stdout_dropped_bytes,omitempty"`
	StderrDroppedBytes int64      `json:"stderr_dropped_bytes,omitempty"`
	DurationMs         float64    `json:"duration_ms"`
	CPUMs              float64    `json:"cpu_ms"`
	PeakMemoryBytes    int64      `json:"peak_memory_bytes"`
	Killed             bool       `json:"killed"`
	KillReason         KillReason `json:"kill_reason"`
	// Files are what the program created or modified in /workspace.
	Files          []RunFile `json:"files"`
	FilesTruncated bool      `json:"files_truncated,omitempty"`
	// Egress: what the program tried on the network (with --allow-host),
	// as in Result.
	Egress []EgressDecision `json:"egress,omitempty"`
}

// RunFile is a file of RunOutput.
type RunFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// CommandRequest is POST /v1/sessions/{id}/commands: a shell command run
// with `bash -c` (or a program run with its arguments) as a new process
// in the session's sandbox, beside its interpreter.
type CommandRequest struct {
	// Command is a shell command line, run with `bash -c`.
	Command string `json:"command,omitempty"`
	// Argv, instead of Command, is a program and its arguments, run as
	// they are with no shell (the program looked up in PATH): E2B's
	// process model (cmd and args).
	Argv []string `json:"argv,omitempty"`
	// Tag names the command for those who look for it (E2B's process
	// tag); it is listed with the command.
	Tag string `json:"tag,omitempty"`
	// Timeout bounds the command; the session's limits.timeout when absent
	// (none for a background command).
	Timeout Duration          `json:"timeout,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Cwd is the directory it starts in: relative to /workspace like a
	// file's path, or absolute; /workspace when empty.
	Cwd string `json:"cwd,omitempty"`
	// Background returns at once with the command's id; its output and
	// status are read with GET .../commands/{cid}.
	Background bool `json:"background,omitempty"`
	// Stdin is written to the command's standard input, which is then
	// closed unless the command runs in the background or has a terminal.
	Stdin string `json:"stdin,omitempty"`
	// PTY runs the command under a pseudo-terminal of this size (its
	// controlling terminal, and its stdin, stdout and stderr: the output
	// is one stream, stdout, with the terminal's escape sequences).
	// Without it the command's streams are pipes.
	PTY *PTYSize `json:"pty,omitempty"`
}

// PTYSize is a terminal's size in characters; POST
// .../commands/{cid}/resize takes one.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// MaxPTYSide caps a terminal's cols and rows.
const MaxPTYSide = 1000

// Command states.
const (
	CommandRunning = "running"
	CommandExited  = "exited"
)

// CommandResult describes a command: running, or how it ended.
type CommandResult struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	// Argv, Tag and Cwd are the request's (Argv only when it gave one;
	// Cwd as the sandbox sees it).
	Argv  []string `json:"argv,omitempty"`
	Tag   string   `json:"tag,omitempty"`
	Cwd   string   `json:"cwd,omitempty"`
	State string   `json:"state"` // running or exited
	Pid   int      `json:"pid"`   // inside the sandbox
	// ExitCode is null while it runs.
	ExitCode        *int   `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// As in Result: what was dropped past max_output.
	StdoutDroppedBytes int64      `json:"stdout_dropped_bytes,omitempty"`
	StderrDroppedBytes int64      `json:"stderr_dropped_bytes,omitempty"`
	StartedAt          time.Time  `json:"started_at"`
	DurationMs         float64    `json:"duration_ms"`
	CPUMs              float64    `json:"cpu_ms"`
	Killed             bool       `json:"killed"`
	KillReason         KillReason `json:"kill_reason"`
	// Signal names the signal that ended it, if one did ("SIGTERM").
	Signal string `json:"signal,omitempty"`
	// Redacted and Flags: as in Result (output policy, code rules).
	Redacted int      `json:"redacted,omitempty"`
	Flags    []string `json:"flags,omitempty"`
	// PTY is the size of its terminal now (absent: it has none).
	PTY *PTYSize `json:"pty,omitempty"`
	// Background: it outlives the request that started it (and a
	// terminal's); a foreground command ends when its client leaves.
	Background bool `json:"background,omitempty"`
}

// CommandList is GET /v1/sessions/{id}/commands.
type CommandList struct {
	Commands []CommandResult `json:"commands"`
}

// SignalRequest is POST .../commands/{cid}/signal.
type SignalRequest struct {
	// Signal is a name ("SIGTERM", "TERM") or a number; SIGTERM when empty.
	Signal string `json:"signal,omitempty"`
}

// StdinRequest is POST .../commands/{cid}/stdin.
type StdinRequest struct {
	Data string `json:"data,omitempty"`
	// DataBase64 is written after Data: bytes that are not UTF-8.
	DataBase64 string `json:"data_base64,omitempty"`
	// Close closes the command's standard input after the data; for a
	// command with a terminal it sends end-of-file (Ctrl-D) instead.
	Close bool `json:"close,omitempty"`
}

// TerminalInput is a message a client sends on a command's WebSocket
// (GET .../commands/{cid}/ws): stdin (Data, DataBase64, Close as in
// StdinRequest), resize (Cols, Rows) or signal (Signal).
type TerminalInput struct {
	Type       string `json:"type"`
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"data_base64,omitempty"`
	Close      bool   `json:"close,omitempty"`
	Cols       int    `json:"cols,omitempty"`
	Rows       int    `json:"rows,omitempty"`
	Signal     string `json:"signal,omitempty"`
}

// Types of TerminalInput.
const (
	InputStdin  = "stdin"
	InputResize = "resize"
	InputSignal = "signal"
)

// Kinds of audit records.
const (
	AuditSessionCreate = "session.create"
	AuditSessionEnd    = "session.end"
	AuditExecution     = "execution"
	AuditCommand       = "command"
	AuditOneShot       = "oneshot"
	AuditProgram       = "program"
	AuditFileUpload    = "file.upload"
	AuditFileDownload  = "file.download"
	AuditFileDelete    = "file.delete"
	AuditPackage       = "package.install"
	AuditEgress        = "egress"
	// Refused requests, aggregated per interval (see AuditRecord.Count):
	// failed authentication, and requests for what the caller may not
	// see (another tenant's session, an admin's route). The operator's
	// records (no tenant): a prober never reads what it learnt.
	AuditAuthFailure  = "auth.failure"
	AuditAccessDenied = "access.denied"
	// AuditSessionNetwork: a session's egress policy was replaced (PUT
	// /v1/sessions/{id}/network), or the attempt was refused.
	AuditSessionNetwork = "session.network"
	// AuditPortOpen: a session's port was opened (POST
	// /v1/sessions/{id}/ports/{port}, or a first request with an API
	// key), or made public or private; AuditPortClose: it was closed (by
	// a client, or with its session), with what it carried.
	AuditPortOpen  = "port.open"
	AuditPortClose = "port.close"
	// AuditToolCall: sandbox code called a tool (ToolCall says which,
	// with what and what was decided).
	AuditToolCall = "tool.call"
)

// AuditKinds lists every kind of audit record (a test checks that each
// Audit constant is here).
func AuditKinds() []string {
	return []string{AuditSessionCreate, AuditSessionEnd, AuditExecution, AuditCommand, AuditOneShot, AuditProgram,
		AuditFileUpload, AuditFileDownload, AuditFileDelete, AuditPackage, AuditEgress, AuditAuthFailure, AuditAccessDenied,
		AuditSessionNetwork, AuditPortOpen, AuditPortClose, AuditToolCall}
}

// AuditRecord is one operation of the audit log (GET /v1/audit).
type AuditRecord struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Tenant    string    `json:"tenant,omitempty"`
	KeyID     string    `json:"key_id,omitempty"`
	Session   string    `json:"session,omitempty"`
	RequestID string    `json:"request_id,omitempty"`

	// Admin: the key that acted (KeyID; none for the unix socket and
	// server.token) is an admin's; ActorTenant is its tenant when that
	// is not Tenant, the tenant whose session it acted in.
	Admin       bool   `json:"admin,omitempty"`
	ActorTenant string `json:"actor_tenant,omitempty"`

	// ID: the execution's or command's id within its session.
	ID       string `json:"id,omitempty"`
	Language string `json:"language,omitempty"`
	// The code, command or program: whole (audit.code "full"), or its
	// SHA-256 and size ("sha256"), or nothing ("none").
	Code       string `json:"code,omitempty"`
	CodeSHA256 string `json:"code_sha256,omitempty"`
	CodeSize   int    `json:"code_size,omitempty"`
	// Outcome: ok, error (the code raised or exited non-zero), killed
	// (airlock stopped it), failed (the operation failed), denied (an
	// egress decision or a tool call airlock refused).
	Outcome    string     `json:"outcome,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	KillReason KillReason `json:"kill_reason,omitempty"`
	EndReason  string     `json:"end_reason,omitempty"`
	DurationMs float64    `json:"duration_ms,omitempty"`
	CPUMs      float64    `json:"cpu_ms,omitempty"`
	PeakMemory int64      `json:"peak_memory_bytes,omitempty"`
	// FilesChanged: workspace files the execution changed.
	FilesChanged int    `json:"files_changed,omitempty"`
	BytesIn      int64  `json:"bytes_in,omitempty"`
	BytesOut     int64  `json:"bytes_out,omitempty"`
	Path         string `json:"path,omitempty"`
	// Egress decisions (host, allowed) and a package installed, when the
	// operation was one.
	Egress []EgressDecision `json:"egress,omitempty"`
	// EgressSummarized: decisions folded into an Egress entry's count.
	EgressSummarized int64  `json:"egress_summarized,omitempty"`
	Package          string `json:"package,omitempty"`
	// Network: the egress allowlist a session was created with
	// (session.create), a one-shot or program ran with, or a change
	// (session.network: Allow asked for, Previous replaced).
	Network *AuditNetwork `json:"network,omitempty"`
	// Redactions made in what went back to the caller, and the advisory
	// code rules that matched (the fact, never the secret).
	Redactions int      `json:"redactions,omitempty"`
	CodeFlags  []string `json:"code_flags,omitempty"`
	// Refused requests (auth.failure, access.denied): why (Reason: the
	// key was missing, unknown, revoked or expired; cross_tenant,
	// admin_only, browser), from where (Source: the client's address,
	// an IPv6 one by its /64; "*" for the sources past the distinct
	// ones an interval keeps), how many (Count) from Time to Until.
	Reason string `json:"reason,omitempty"`
	Source string `json:"source,omitempty"`
	// Port and Public: the port of a port.open or port.close record
	// (BytesIn went to the program, BytesOut came from it).
	Port   int       `json:"port,omitempty"`
	Public bool      `json:"public,omitempty"`
	Count  int       `json:"count,omitempty"`
	Until  time.Time `json:"until,omitzero"`
	// ToolCall: the call of a tool.call record (its ID is the execution
	// it happened in, if any).
	ToolCall *ToolCall `json:"tool_call,omitempty"`
}

// AuditNetwork is an egress allowlist in an audit record.
type AuditNetwork struct {
	Allow []string `json:"allow"`
	// Previous: the allowlist a change replaced (session.network).
	Previous []string `json:"previous,omitempty"`
}

// EgressDecision is one network destination a sandbox asked for (the
// egress gate's decision, as the audit keeps it).
type EgressDecision struct {
	// Kind is "dns" (a lookup) or "connect" (a connection).
	Kind    string `json:"kind,omitempty"`
	Host    string `json:"host"`
	Port    int    `json:"port,omitempty"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	// Dest is what the sandbox connected to (a fake address or an IP
	// literal), Address what airlock dialled for it.
	Dest       string  `json:"dest,omitempty"`
	Address    string  `json:"address,omitempty"`
	BytesUp    int64   `json:"bytes_up,omitempty"`
	BytesDown  int64   `json:"bytes_down,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	// Count: how many decisions the entry stands for (absent: one);
	// First and Last: when the first and the last of them were made.
	// Denials and DNS lookups with the same kind, host, destination,
	// port and reason share an entry; connections carried never do.
	Count int64     `json:"count,omitempty"`
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
}

// AuditList is a page of GET /v1/audit, oldest first; NextCursor, when
// set, is the cursor of the next page.
type AuditList struct {
	Records    []AuditRecord `json:"records"`
	NextCursor string        `json:"next_cursor,omitempty"`
}
