// Package errdefs owns airlock's error vocabulary: a small set of sentinel
// errors that every other package wraps with %w, the one table that gives
// each a stable machine-readable code, an HTTP status and a command's exit
// status, and Error, which keeps what a client may read apart from detail
// that only the server's log may see. Transports (the HTTP API, MCP, the
// command line) adapt this table; they never map errors themselves.
//
// It must never import another airlock package, so that every package can
// use it.
package errdefs

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"
)

// Sentinel errors. Wrap them with fmt.Errorf("...: %w", ErrX) and add a
// message a user can act on.
var (
	// ErrInvalidArgument: the caller sent something malformed or out of range.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnauthenticated: the request lacks the credentials the server wants.
	ErrUnauthenticated = errors.New("unauthorized")
	// ErrNotFound: the named session, file or route does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPermission: not allowed: the sandbox user may not access the
	// file, or the server refuses what was asked (an isolation it does
	// not allow, egress beyond the tenant's).
	ErrPermission = errors.New("permission denied")
	// ErrMethodNotAllowed: the route exists, but not with this method.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrConflict: the resource is busy (e.g. a session already executing).
	ErrConflict = errors.New("conflict")
	// ErrTooLarge: a body, file or workspace exceeds a configured size.
	ErrTooLarge = errors.New("too large")
	// ErrQuota: a tenant's quota is used up for now; a *RetryError
	// around it says when to come back (Retry-After).
	ErrQuota = errors.New("quota exceeded")
	// ErrLimit: a server-wide capacity limit (sessions, concurrency) is reached.
	ErrLimit = errors.New("capacity limit reached")
	// ErrUnavailable: the host cannot build a jail with the configured
	// protections; see `airlock doctor`.
	ErrUnavailable = errors.New("unavailable")
	// ErrAuditUnavailable: the audit log cannot record work now (its
	// data directory is full or read-only), and the server refuses work
	// until it can (audit.on_failure "refuse").
	ErrAuditUnavailable = errors.New("audit log unavailable")
	// ErrGone: the session ended (out of memory, killed, deleted).
	ErrGone = errors.New("session ended")
	// ErrTimeout: an operation ran out of time.
	ErrTimeout = errors.New("timeout")
	// ErrBadGateway: a program inside a session, reached through one of
	// its ports, did not answer: nothing listens on the port, or the
	// program closed the connection or sent no valid HTTP.
	ErrBadGateway = errors.New("bad gateway")
	// ErrUnsupported: a feature this build or request does not support.
	ErrUnsupported = errors.New("unsupported")
	// ErrMisdirected: in a cluster, the session id names another server
	// (pod): the request reached the wrong one.
	ErrMisdirected = errors.New("misdirected")
	// ErrSessionLost: in a cluster, the session id names this server but
	// an earlier run of it; the session ended when that run did.
	ErrSessionLost = errors.New("session lost")
	// ErrNodeUnavailable: the server holding the session does not answer.
	// Only the cluster's router answers it (airlock itself never does);
	// it is in the table so that clients know it.
	ErrNodeUnavailable = errors.New("node unavailable")
	// ErrPaused: the session is paused; resume it (POST
	// /v1/sessions/{id}/resume), or create it with auto_resume.
	ErrPaused = errors.New("session paused")
	// ErrImageCorrupt: a paused session's image failed its checks on
	// resume (truncated, altered); it is kept for the operator to
	// inspect, and deleting the session discards it.
	ErrImageCorrupt = errors.New("pause image corrupt")
)

// Kind is one row of the error table.
type Kind struct {
	// Err is the sentinel (nil for Internal).
	Err error
	// Code is the stable, machine-readable name clients see.
	Code string
	// HTTPStatus is the status the HTTP API answers with.
	HTTPStatus int
	// Exit is the exit status of an airlock command that fails with it
	// (sysexits.h; docs/guides/run-and-one-shots.md lists them).
	Exit int
}

// Exit statuses of airlock's commands (sysexits.h). ExitConfig,
// ExitNoInput and ExitCantCreate are the commands' own (a configuration
// that cannot be built, an input or output file): no kind maps to them.
const (
	ExitUsage       = 64 // EX_USAGE: bad flags or arguments
	ExitNoInput     = 66 // EX_NOINPUT: an input cannot be read
	ExitUnavailable = 69 // EX_UNAVAILABLE: cannot run as asked here
	ExitSoftware    = 70 // EX_SOFTWARE: an internal error
	ExitCantCreate  = 73 // EX_CANTCREAT: an output file cannot be written
	ExitTempFail    = 75 // EX_TEMPFAIL: try again later
	ExitNoPerm      = 77 // EX_NOPERM: the server refused the credentials
	ExitConfig      = 78 // EX_CONFIG: the configuration is invalid
)

// Internal is the kind of every error that wraps no sentinel: the
// server's own failure, whose text clients never see.
var Internal = Kind{Code: "internal", HTTPStatus: http.StatusInternalServerError, Exit: ExitSoftware}

// kinds is the one table from error kind to code, status and exit
// status. An error takes the first row it matches.
var kinds = []Kind{
	{ErrInvalidArgument, "invalid_argument", http.StatusBadRequest, ExitUsage},
	{ErrUnauthenticated, "unauthorized", http.StatusUnauthorized, ExitNoPerm},
	// On the command line, an argument that names nothing (airlock keys
	// revoke ID).
	{ErrNotFound, "not_found", http.StatusNotFound, ExitUsage},
	// A request the server refuses (an isolation it does not allow, egress
	// beyond the tenant's): it cannot run as asked, like a jail this host
	// cannot build.
	{ErrPermission, "permission_denied", http.StatusForbidden, ExitUnavailable},
	{ErrMethodNotAllowed, "method_not_allowed", http.StatusMethodNotAllowed, ExitSoftware},
	{ErrConflict, "conflict", http.StatusConflict, ExitTempFail},
	{ErrTooLarge, "too_large", http.StatusRequestEntityTooLarge, ExitUsage},
	{ErrQuota, "quota_exceeded", http.StatusTooManyRequests, ExitTempFail},
	{ErrLimit, "limit_reached", http.StatusTooManyRequests, ExitTempFail},
	{ErrGone, "session_ended", http.StatusGone, ExitSoftware},
	{ErrTimeout, "timeout", http.StatusGatewayTimeout, ExitTempFail},
	{ErrBadGateway, "bad_gateway", http.StatusBadGateway, ExitUnavailable},
	{ErrUnsupported, "unsupported", http.StatusNotImplemented, ExitUnavailable},
	{ErrUnavailable, "unavailable", http.StatusServiceUnavailable, ExitUnavailable},
	{ErrAuditUnavailable, "audit_unavailable", http.StatusServiceUnavailable, ExitUnavailable},
	{ErrMisdirected, "misdirected", http.StatusMisdirectedRequest, ExitUnavailable},
	{ErrSessionLost, "session_lost", http.StatusGone, ExitUnavailable},
	{ErrNodeUnavailable, "node_unavailable", http.StatusServiceUnavailable, ExitUnavailable},
	{ErrPaused, "session_paused", http.StatusConflict, ExitTempFail},
	{ErrImageCorrupt, "pause_image_corrupt", http.StatusUnprocessableEntity, ExitSoftware},
}

// Kinds returns every row of the table, Internal last.
func Kinds() []Kind { return append(slices.Clone(kinds), Internal) }

// Sentinels returns every sentinel error, each of which has its own Code.
func Sentinels() []error {
	out := make([]error, len(kinds))
	for i, k := range kinds {
		out[i] = k.Err
	}
	return out
}

// KindOf returns the row err belongs to: the kind of an *Error, else the
// first sentinel err wraps, else Internal. A deadline that ran out is a
// timeout. nil has the zero Kind.
func KindOf(err error) Kind {
	if err == nil {
		return Kind{}
	}
	var e *Error
	if errors.As(err, &e) && e.Kind != nil {
		err = e.Kind
	}
	for _, k := range kinds {
		if errors.Is(err, k.Err) {
			return k
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return kindOf(ErrTimeout)
	}
	return Internal
}

func kindOf(sentinel error) Kind {
	for _, k := range kinds {
		if k.Err == sentinel {
			return k
		}
	}
	return Internal
}

// Code returns the stable, machine-readable code for err ("" for nil).
func Code(err error) string { return KindOf(err).Code }

// HTTPStatus maps err to the HTTP status the API answers with (200 for
// nil).
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return KindOf(err).HTTPStatus
}

// ExitCode maps err to the exit status of a command that fails with it
// (0 for nil).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	return KindOf(err).Exit
}

// Error is an error of a kind whose message for clients (Public) is kept
// apart from detail that may carry host internals (host paths, the init's
// stderr, errors of the host's own calls): transports send Public and log
// Detail. Error() has both, for logs and for the operator's command line.
type Error struct {
	Kind   error // a sentinel
	Public string
	Detail error
}

// Private returns an error of kind whose clients read only public; detail
// goes to the server's log.
func Private(kind error, public string, detail error) error {
	return &Error{Kind: kind, Public: public, Detail: detail}
}

func (e *Error) Error() string {
	msg := e.Public
	if e.Kind != nil {
		msg = e.Kind.Error() + ": " + msg
	}
	if e.Detail != nil {
		msg += ": " + e.Detail.Error()
	}
	return msg
}

// Unwrap gives the kind only: the detail is not part of what callers may
// match on.
func (e *Error) Unwrap() error { return e.Kind }

// Message returns what a client may read about err: the public part of an
// *Error, nothing of an internal error's text, else the error's own
// message (which, for a sentinel-wrapped error, was written for clients).
func Message(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Kind != nil {
			return e.Kind.Error() + ": " + e.Public
		}
		return e.Public
	}
	if KindOf(err).Err == nil {
		return "internal error"
	}
	return err.Error()
}

// RetryError is an error the client may retry after a while (a quota's
// window): transports send After (HTTP: Retry-After).
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter says when err may be retried, if it says.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RetryError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// KindFor returns the row of code; Internal for a code it does not know.
func KindFor(code string) Kind {
	for _, k := range kinds {
		if k.Code == code {
			return k
		}
	}
	return Internal
}
