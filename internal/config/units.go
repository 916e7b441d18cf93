package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// The limit types of flags, the configuration file and API requests are
// the wire's.
type (
	Size     = apitype.Size
	Duration = apitype.Duration
	Count    = apitype.Count
)

// invalid marks a parse error as the caller's: errdefs.ErrInvalidArgument.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
}

// ParseSize is apitype.ParseSize; its errors are ErrInvalidArgument.
func ParseSize(s string) (Size, error) { v, err := apitype.ParseSize(s); return v, invalid(err) }

// ParseDuration is apitype.ParseDuration; its errors are
// ErrInvalidArgument.
func ParseDuration(s string) (Duration, error) {
	v, err := apitype.ParseDuration(s)
	return v, invalid(err)
}

// ParseCount is apitype.ParseCount; its errors are ErrInvalidArgument.
func ParseCount(s string) (Count, error) { v, err := apitype.ParseCount(s); return v, invalid(err) }

// ParseExpiry reads when something expires: a duration from now in days
// ("30d") or as ParseDuration takes it ("12h"), or an RFC 3339 time. It
// must be in the future.
func ParseExpiry(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	var t time.Time
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 100*365 {
			return time.Time{}, fmt.Errorf("%w: %q: want a whole number of days, 1 to 36500 (30d)", errdefs.ErrInvalidArgument, s)
		}
		t = now.AddDate(0, 0, n)
	} else if at, err := time.Parse(time.RFC3339, s); err == nil {
		t = at
	} else {
		d, err := ParseDuration(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %q: want a duration (30d, 12h) or an RFC 3339 time", errdefs.ErrInvalidArgument, s)
		}
		t = now.Add(d.D())
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("%w: %q is not in the future", errdefs.ErrInvalidArgument, s)
	}
	return t, nil
}
