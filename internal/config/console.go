package config

import (
	"errors"
	"fmt"
)

// History configures what each session remembers of its executions and
// shell commands, for the web console's notebook view and for
// GET /v1/sessions/{id}/history and /notebook: the code, its output
// (already redacted as the client got it) and how it ended, the oldest
// forgotten first past Executions or Bytes.
type History struct {
	// Enabled keeps a history per session; off, nothing is kept or
	// copied and the history routes answer 501.
	Enabled bool `json:"enabled"`
	// Executions and Bytes bound a session's history unless its creator
	// asks for other bounds (history in POST /v1/sessions), which
	// MaxExecutions and MaxBytes cap. The server holds at most
	// server.max_sessions times MaxBytes for all of them.
	Executions    int  `json:"executions"`
	Bytes         Size `json:"bytes"`
	MaxExecutions int  `json:"max_executions"`
	MaxBytes      Size `json:"max_bytes"`
	// Ended is how many ended sessions' histories are kept (the newest),
	// so that the console shows how a session ended; 0 keeps none.
	Ended int `json:"ended"`
}

// Console configures the web console.
type Console struct {
	// Enabled serves the web console at /ui/ (static pages; every figure
	// in them comes from the API with the caller's key).
	Enabled bool `json:"enabled"`
}

// DefaultHistory is the built-in history configuration.
func DefaultHistory() History {
	return History{Enabled: true, Executions: 200, Bytes: 8 << 20, MaxExecutions: 2000, MaxBytes: 64 << 20, Ended: 32}
}

func (h History) validate() error {
	var errs []error
	if h.Executions < 1 || h.Executions > h.MaxExecutions || h.MaxExecutions > 1_000_000 {
		errs = append(errs, fmt.Errorf("history.executions %d must be at least 1 and at most history.max_executions %d (itself at most 1000000)", h.Executions, h.MaxExecutions))
	}
	if h.Bytes < 64<<10 || h.Bytes > h.MaxBytes || h.MaxBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("history.bytes %s must be at least 64K and at most history.max_bytes %s (itself at most 1G)", h.Bytes, h.MaxBytes))
	}
	if h.Ended < 0 || h.Ended > 10000 {
		errs = append(errs, errors.New("history.ended must be between 0 and 10000"))
	}
	return errors.Join(errs...)
}
