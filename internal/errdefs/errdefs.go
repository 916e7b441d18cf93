// Package errdefs owns airlock's error vocabulary: a small set of sentinel
// errors that every other package wraps with %w, and the one place where an
// error is mapped to an HTTP status and a stable machine-readable code.
//
// It must never import another airlock package, so that every package can
// use it.
package errdefs

import (
	"context"
	"errors"
	"net/http"
	"slices"
)

// Sentinel errors. Wrap them with fmt.Errorf("...: %w", ErrX) and add a
// message a user can act on.
var (
	// ErrInvalidArgument: the caller sent something malformed or out of range.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the named session, file or route does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPermission: the sandbox user may not access the file.
	ErrPermission = errors.New("permission denied")
	// ErrConflict: the resource is busy (e.g. a session already executing).
	ErrConflict = errors.New("conflict")
	// ErrTooLarge: a body, file or workspace exceeds a configured size.
	ErrTooLarge = errors.New("too large")
	// ErrLimit: a server-wide capacity limit (sessions, concurrency) is reached.
	ErrLimit = errors.New("capacity limit reached")
	// ErrUnavailable: the host cannot build a jail with the configured
	// protections; see `airlock doctor`.
	ErrUnavailable = errors.New("unavailable")
	// ErrGone: the session ended (out of memory, killed, deleted).
	ErrGone = errors.New("session ended")
	// ErrTimeout: an operation ran out of time.
	ErrTimeout = errors.New("timeout")
	// ErrUnsupported: a feature this build or request does not support.
	ErrUnsupported = errors.New("unsupported")
)

// sentinels lists every sentinel error above.
var sentinels = []error{ErrInvalidArgument, ErrNotFound, ErrPermission, ErrConflict,
	ErrTooLarge, ErrLimit, ErrGone, ErrTimeout, ErrUnsupported, ErrUnavailable}

// Sentinels returns every sentinel error, each of which has its own Code.
func Sentinels() []error { return slices.Clone(sentinels) }

// Code returns the stable, machine-readable code for err.
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrPermission):
		return "permission_denied"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrLimit):
		return "limit_reached"
	case errors.Is(err, ErrGone):
		return "session_ended"
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	default:
		return "internal"
	}
}

// HTTPStatus maps err to the HTTP status the API answers with.
func HTTPStatus(err error) int {
	switch Code(err) {
	case "":
		return http.StatusOK
	case "invalid_argument":
		return http.StatusBadRequest
	case "not_found":
		return http.StatusNotFound
	case "permission_denied":
		return http.StatusForbidden
	case "conflict":
		return http.StatusConflict
	case "too_large":
		return http.StatusRequestEntityTooLarge
	case "limit_reached":
		return http.StatusTooManyRequests
	case "session_ended":
		return http.StatusGone
	case "timeout":
		return http.StatusGatewayTimeout
	case "unsupported":
		return http.StatusNotImplemented
	case "unavailable":
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// FromCode rebuilds an error from a code that Code returned (as an API
// client receives it), so that errors.Is works on the client side too.
func FromCode(code, msg string) error {
	for _, sentinel := range sentinels {
		if Code(sentinel) == code {
			return &remoteError{sentinel: sentinel, msg: msg}
		}
	}
	return errors.New(msg)
}

// remoteError carries a peer's message verbatim (it already names its
// sentinel) while matching that sentinel.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }
