package session

import (
	"context"
	"time"

	"airlock/internal/identity"

	"airlock/internal/apitype"
	"airlock/internal/config"
)

// Observer hears what sessions do: metrics, audit and quotas implement
// it. Its methods are called on the request's path, after the fact, and
// must return quickly; they must never block, panic or call back into the
// manager. Without observers nothing is built or called.
type Observer interface {
	// SessionCreated: a client's session is ready (one-shot and program
	// runs are executions only).
	SessionCreated(SessionEvent)
	// SessionEnded: a client's session ended, for End.
	SessionEnded(SessionEvent)
	// ExecutionStarted: code or a program was sent to a runtime.
	ExecutionStarted(ExecutionEvent)
	// ExecutionFinished: its result is known.
	ExecutionFinished(ExecutionEvent)
	// FileTransferred: a client read, wrote, listed or removed files of a
	// session's workspace.
	FileTransferred(FileEvent)
	// NetworkChanged: a client replaced a session's egress policy, or
	// was refused.
	NetworkChanged(NetworkEvent)
	// PortUsed: a session's port was opened or closed, or a connection
	// to it ended (see PortEvent).
	PortUsed(PortEvent)
	// ToolCalled: sandbox code called one of its session's tools (the
	// call was made, refused or failed).
	ToolCalled(ToolCallEvent)
}

// Caller is who an event acted for: the request's identity, resolved at
// the API's edge (see package identity), and its request id.
type Caller struct {
	// Tenant is whose the event is: the caller's, or in a client's
	// session the session owner's, whoever acted in it.
	Tenant    string
	KeyID     string
	RequestID string
	// Admin: the key that acted is an admin's. ActorTenant is its own
	// tenant when that is not Tenant (an admin acting in another
	// tenant's session).
	Admin       bool
	ActorTenant string
}

// callerOf is the caller ctx carries.
func callerOf(ctx context.Context) Caller {
	id, _ := identity.From(ctx)
	return Caller{Tenant: id.Tenant, KeyID: id.KeyID, RequestID: identity.Request(ctx), Admin: id.Admin}
}

// callerOf is the caller ctx carries acting in s: in a client's session
// what it does is the owner's tenant's (its records, quotas and metrics),
// with the key that did it as the actor, so that an admin's execution in
// a tenant's session is in that tenant's records. A one-shot's sandbox
// has no owner: the caller's own.
func (s *Session) callerOf(ctx context.Context) Caller {
	c := callerOf(ctx)
	if s.client && c.Tenant != s.owner.Tenant {
		c.ActorTenant, c.Tenant = c.Tenant, s.owner.Tenant
	}
	return c
}

// SessionEvent describes a session.
type SessionEvent struct {
	Caller
	Session  string
	Language string
	Sandbox  string
	Limits   config.Limits
	// Duration: how long the create took (created), or the session's
	// life (ended).
	Duration time.Duration
	// Executions and End: ended only.
	Executions int
	End        apitype.End
	// Egress: ended only, the egress decisions no execution carried
	// (made between executions, by a background process or a shell
	// command); EgressSummarized: how many are folded into counts.
	Egress           []apitype.EgressDecision
	EgressSummarized int64
	// Network: created only, the session's egress allowlist (nil: no
	// network).
	Network *apitype.AuditNetwork
}

// Kinds of execution.
const (
	ExecSession = "session" // code in a client's session
	ExecOneShot = "oneshot" // POST /v1/execute
	ExecProgram = "program" // POST /v1/run
	ExecCommand = "command" // a shell command in a session
)

// ExecutionEvent describes an execution; what it produced is set when it
// finished.
type ExecutionEvent struct {
	Caller
	Kind     string
	Session  string
	Language string
	// ID: the execution's ("e3") or command's ("c2") id in its session.
	ID string
	// Code: the code, the shell command, or a program's name.
	Code string
	// Error: the name of the error the code raised, if any.
	Error string
	// FilesChanged: workspace files the execution created, changed or
	// removed; InputBytes: bytes of files sent with a one-shot or program.
	FilesChanged int
	InputBytes   int64
	// Package: the requirements when the execution is a step of a
	// package install (the download in a sandbox of its own, then the
	// install in Session).
	Package string
	// Egress: what the execution tried on the network; EgressSummarized:
	// how many decisions are folded into counts.
	Egress           []apitype.EgressDecision
	EgressSummarized int64
	// Network: the allowlist of a one-shot's or program's sandbox (nil:
	// none, or a session's execution: its session's records say).
	Network *apitype.AuditNetwork
	// Redactions made in the output and the code rules that flagged the
	// code (output policy), for the audit: facts, never the secrets.
	Redactions int
	CodeFlags  []string

	Duration    time.Duration
	CPU         time.Duration
	PeakMemory  int64
	Killed      bool
	KillReason  apitype.KillReason
	ExitCode    int
	OutputBytes int64 // stdout and stderr captured
	// End: the execution ended its session (zero if it did not).
	End apitype.End
}

// File operations.
const (
	FileUpload   = "upload"
	FileDownload = "download"
	FileList     = "list"
	FileRemove   = "remove"
	// FileMove renames a file or directory (Path "from -> to"); audited
	// as a deletion of from and an upload of to would be, in one record.
	FileMove  = "move"
	FileMkdir = "mkdir"
)

// FileEvent describes a file operation of a client.
type FileEvent struct {
	Caller
	Session  string
	Op       string
	Path     string
	Bytes    int64
	Duration time.Duration
	Err      error
}

// NetworkEvent describes a change of a session's egress policy: Allow
// asked for, Previous the policy it replaced, Err why it was refused.
type NetworkEvent struct {
	Caller
	Session         string
	Allow, Previous []string
	Err             error
}

// observers calls each of several observers in turn.
type observers []Observer

func joinObservers(a, b Observer) Observer {
	if a == nil {
		return b
	}
	if os, ok := a.(observers); ok {
		return append(os[:len(os):len(os)], b)
	}
	return observers{a, b}
}

func (os observers) SessionCreated(e SessionEvent) {
	for _, o := range os {
		o.SessionCreated(e)
	}
}

func (os observers) SessionEnded(e SessionEvent) {
	for _, o := range os {
		o.SessionEnded(e)
	}
}

func (os observers) ExecutionStarted(e ExecutionEvent) {
	for _, o := range os {
		o.ExecutionStarted(e)
	}
}

func (os observers) ExecutionFinished(e ExecutionEvent) {
	for _, o := range os {
		o.ExecutionFinished(e)
	}
}

func (os observers) FileTransferred(e FileEvent) {
	for _, o := range os {
		o.FileTransferred(e)
	}
}

func (os observers) NetworkChanged(e NetworkEvent) {
	for _, o := range os {
		o.NetworkChanged(e)
	}
}

func (os observers) PortUsed(e PortEvent) {
	for _, o := range os {
		o.PortUsed(e)
	}
}

func (os observers) ToolCalled(e ToolCallEvent) {
	for _, o := range os {
		o.ToolCalled(e)
	}
}
