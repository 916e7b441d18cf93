package errdefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// codes is the public error vocabulary, as documented in the API's Error
// schema (internal/httpapi/v1/openapi.json).
var codes = []struct {
	sentinel error
	code     string
	status   int
}{
	{ErrInvalidArgument, "invalid_argument", 400},
	{ErrUnauthenticated, "unauthorized", 401},
	{ErrNotFound, "not_found", 404},
	{ErrPermission, "permission_denied", 403},
	{ErrMethodNotAllowed, "method_not_allowed", 405},
	{ErrConflict, "conflict", 409},
	{ErrTooLarge, "too_large", 413},
	{ErrQuota, "quota_exceeded", 429},
	{ErrLimit, "limit_reached", 429},
	{ErrGone, "session_ended", 410},
	{ErrTimeout, "timeout", 504},
	{ErrBadGateway, "bad_gateway", 502},
	{ErrUnsupported, "unsupported", 501},
	{ErrUnavailable, "unavailable", 503},
	{ErrAuditUnavailable, "audit_unavailable", 503},
	{ErrMisdirected, "misdirected", 421},
	{ErrSessionLost, "session_lost", 410},
	{ErrNodeUnavailable, "node_unavailable", 503},
	{ErrPaused, "session_paused", 409},
	{ErrImageCorrupt, "pause_image_corrupt", 422},
}

// Every sentinel has its documented code and status, and Sentinels lists
// exactly the sentinels of that table.
func TestCodesAndStatuses(t *testing.T) {
	for _, c := range codes {
		err := fmt.Errorf("doing something: %w", c.sentinel)
		if got := Code(err); got != c.code {
			t.Errorf("Code(%v) = %q, want %q", err, got, c.code)
		}
		if got := HTTPStatus(err); got != c.status {
			t.Errorf("HTTPStatus(%v) = %d, want %d", err, got, c.status)
		}
	}
	for _, c := range []struct {
		err    error
		code   string
		status int
	}{
		{nil, "", 200},
		{errors.New("boom"), "internal", 500},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "timeout", 504},
	} {
		if got := Code(c.err); got != c.code {
			t.Errorf("Code(%v) = %q, want %q", c.err, got, c.code)
		}
		if got := HTTPStatus(c.err); got != c.status {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.status)
		}
	}
	all := Sentinels()
	if len(all) != len(codes) {
		t.Errorf("Sentinels() has %d errors, the table %d", len(all), len(codes))
	}
	for i, c := range codes {
		found := false
		for _, e := range all {
			found = found || e == c.sentinel
		}
		if !found {
			t.Errorf("Sentinels() lacks %v", c.sentinel)
		}
		for _, d := range codes[:i] {
			if d.code == c.code {
				t.Errorf("%v and %v share code %q", d.sentinel, c.sentinel, c.code)
			}
		}
	}
	all[0] = nil
	if Sentinels()[0] == nil {
		t.Error("Sentinels() returns its internal slice")
	}
}

// A private error matches its kind, maps to its kind's code and status,
// and shows clients its public message only; its detail stays in Error()
// for the log. An error of no kind shows clients nothing of its text.
func TestPrivateDetail(t *testing.T) {
	detail := errors.New("mount /run/airlock/root/s-7: permission denied; init stderr: boom")
	err := fmt.Errorf("configuring: %w", Private(ErrUnavailable, "the sandbox could not be started", detail))
	if !errors.Is(err, ErrUnavailable) || Code(err) != "unavailable" || HTTPStatus(err) != 503 {
		t.Errorf("%v: code %q status %d", err, Code(err), HTTPStatus(err))
	}
	if errors.Is(err, detail) {
		t.Error("the detail must not be matchable: it is not part of the error's contract")
	}
	if got, want := Message(err), "unavailable: the sandbox could not be started"; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	if !strings.Contains(err.Error(), detail.Error()) {
		t.Errorf("Error() = %q lacks the detail", err)
	}
	// The kind of a private error wins over a sentinel its detail wraps.
	inner := Private(ErrUnavailable, "no sandbox", fmt.Errorf("%w: gone", ErrGone))
	if Code(inner) != "unavailable" {
		t.Errorf("Code = %q, want unavailable", Code(inner))
	}
	internal := fmt.Errorf("open /sys/fs/cgroup/memory/airlock/s-1: %w", errors.New("EBUSY"))
	if got := Message(internal); strings.Contains(got, "/sys") || got == "" {
		t.Errorf("Message of an internal error = %q", got)
	}
	if got := Message(fmt.Errorf("%w: no session %q", ErrNotFound, "x")); got != `not found: no session "x"` {
		t.Errorf("Message of a sentinel error = %q", got)
	}
	if Message(nil) != "" {
		t.Error("Message(nil) is not empty")
	}
}

// Every row of the table is what KindFor finds for its code.
func TestKindsTable(t *testing.T) {
	all := Kinds()
	if all[len(all)-1].Code != "internal" {
		t.Error("Internal is not the last kind")
	}
	for _, k := range all {
		if got := KindFor(k.Code); got.Code != k.Code || got.HTTPStatus != k.HTTPStatus {
			t.Errorf("KindFor(%q) = %+v, want %+v", k.Code, got, k)
		}
	}
}
