package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

// An error that crossed the API (as code and message) still matches its
// sentinel on the client side, keeps its message, and maps to the same
// status.
func TestFromCodeRoundTrip(t *testing.T) {
	for _, sentinel := range []error{ErrInvalidArgument, ErrNotFound, ErrPermission, ErrConflict, ErrTooLarge,
		ErrLimit, ErrUnavailable, ErrGone, ErrTimeout, ErrUnsupported} {
		sent := fmt.Errorf("%w: details", sentinel)
		got := FromCode(Code(sent), sent.Error())
		if !errors.Is(got, sentinel) || got.Error() != sent.Error() || HTTPStatus(got) != HTTPStatus(sent) {
			t.Errorf("%v: came back as %v (status %d, want %d)", sent, got, HTTPStatus(got), HTTPStatus(sent))
		}
	}
	for _, code := range []string{"internal", "", "no_such_code"} {
		got := FromCode(code, "boom")
		if got.Error() != "boom" || Code(got) != "internal" {
			t.Errorf("code %q: %v is %q", code, got, Code(got))
		}
	}
}
