package session

import (
	"time"

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
}

// SessionEvent describes a session.
type SessionEvent struct {
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
	Kind     string
	Session  string
	Language string

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
)

// FileEvent describes a file operation of a client.
type FileEvent struct {
	Session  string
	Op       string
	Path     string
	Bytes    int64
	Duration time.Duration
	Err      error
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
