package apitype

import "time"

// CreateContextRequest is POST /v1/sessions/{id}/contexts: a new code
// context (an interpreter with its own state and working directory) in
// the session's sandbox, sharing its files, limits and network.
type CreateContextRequest struct {
	// Language is the context's language; the session's when empty.
	Language string `json:"language,omitempty"`
	// Cwd is the directory its code runs in: relative to /workspace like
	// a file's path, or absolute; /workspace when empty. It must exist.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the session's environment for this context's
	// interpreter.
	Env map[string]string `json:"env,omitempty"`
}

// Context states.
const (
	ContextIdle  = StateIdle
	ContextBusy  = StateBusy
	ContextEnded = StateEnded
)

// CodeContext describes one code context of a session.
type CodeContext struct {
	// ID names the context in executions (ExecuteRequest.Context). A
	// language's default context is named after the language
	// ("python"): the session's default context, or one started the
	// first time an execution asked for the language.
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// Default marks the session's default context: executions naming
	// neither a context nor a language run there, and it ends with the
	// session (it cannot be deleted alone).
	Default bool   `json:"default,omitempty"`
	State   string `json:"state"` // ContextIdle, ContextBusy or ContextEnded
	// EndReason and EndCode say why the context ended (state ended):
	// its interpreter exited or was killed. A language's default context
	// that ended is started anew by the next execution naming the
	// language; another is deleted by the client.
	EndReason  string    `json:"end_reason,omitempty"`
	EndCode    EndCode   `json:"end_code,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	Executions int       `json:"executions"`
	// Current is the execution running in it now (absent: none).
	Current *CurrentExecution `json:"current,omitempty"`
}

// ContextList is GET /v1/sessions/{id}/contexts.
type ContextList struct {
	Contexts []CodeContext `json:"contexts"`
}
