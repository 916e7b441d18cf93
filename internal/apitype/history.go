package apitype

import (
	"time"
)

// Usage is what a session's sandbox uses now, read from its cgroup.
type Usage struct {
	// MemoryBytes is the memory in use that reclaim cannot take back
	// (page cache of files read excluded); the limit is limits.memory.
	MemoryBytes int64 `json:"memory_bytes"`
	// CPUMs is the CPU time of every process of the sandbox so far;
	// CPUPercent the share of one CPU used between the two latest
	// readings at least a second apart (100: one CPU busy).
	CPUMs      float64 `json:"cpu_ms"`
	CPUPercent float64 `json:"cpu_percent"`
}

// CurrentExecution is the execution a session is running.
type CurrentExecution struct {
	ID        string    `json:"id"`
	StartedAt time.Time `json:"started_at"`
	// CodeHead is the code's first lines (at most CodeHeadBytes, redacted
	// as output is); CodeBytes its whole size.
	CodeHead  string `json:"code_head"`
	CodeBytes int    `json:"code_bytes"`
}

// CodeHeadBytes caps CurrentExecution.CodeHead.
const CodeHeadBytes = 256

// HistoryLimits bound a session's history: the newest Executions
// entries within Bytes.
type HistoryLimits struct {
	Executions int  `json:"executions,omitempty"`
	Bytes      Size `json:"bytes,omitempty"`
}

// Kinds of history entries.
const (
	HistoryExecution = "execution"
	HistoryCommand   = "command"
)

// HistoryEntry is one execution or shell command of a session.
type HistoryEntry struct {
	// Seq numbers the session's entries in the order they started, from 1.
	Seq int64 `json:"seq"`
	// Kind is HistoryExecution or HistoryCommand; ID the execution's
	// ("e3") or command's ("c2") id.
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Code is the code or command line, redacted as output is.
	Code      string    `json:"code"`
	StartedAt time.Time `json:"started_at"`
	// Running: it is under way, and Result or Command hold its output so
	// far.
	Running bool `json:"running,omitempty"`
	// Result is an execution's (Kind execution), Command a command's.
	Result  *Result        `json:"result,omitempty"`
	Command *CommandResult `json:"command,omitempty"`
	// Trimmed: the entry alone was larger than the history's bytes, and
	// its output was dropped (the code's head and how it ended are kept).
	Trimmed bool `json:"trimmed,omitempty"`
	// Bytes is what the entry counts against the history's bound.
	Bytes int64 `json:"bytes"`
}

// History is GET /v1/sessions/{id}/history: a session's executions and
// commands, oldest first.
type History struct {
	Session  string `json:"session"`
	Language string `json:"language"`
	// State is the session's (StateIdle, StateBusy or StateEnded), with
	// why it ended.
	State     string  `json:"state"`
	EndReason string  `json:"end_reason,omitempty"`
	EndCode   EndCode `json:"end_code,omitempty"`
	Tenant    string  `json:"tenant,omitempty"`
	// Entries are those after the query's seq ("after"), oldest first.
	Entries []HistoryEntry `json:"entries"`
	// Forgotten counts the entries dropped, oldest first, to stay within
	// Limits; Bytes is what the entries kept count.
	Forgotten int64         `json:"forgotten"`
	Bytes     int64         `json:"bytes"`
	Limits    HistoryLimits `json:"limits"`
}

// Whoami is GET /v1/whoami: who the request's credentials are.
type Whoami struct {
	// Tenant is the key's tenant (empty for the server's token, the unix
	// socket and a server without authentication).
	Tenant string `json:"tenant,omitempty"`
	KeyID  string `json:"key_id,omitempty"`
	// Admin: the caller sees every tenant's sessions and records.
	Admin bool `json:"admin"`
	// Auth is the server's server.auth ("keys" or "none").
	Auth string `json:"auth"`
	// Console: the web console is served at /ui/.
	Console bool `json:"console"`
}
