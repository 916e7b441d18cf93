package apitype

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// APIKey is an API key as stored and as `airlock keys list --json` prints
// it: never its secret.
type APIKey struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Admin     bool       `json:"admin"`
	Name      string     `json:"name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// ExpiresAt, when set, is when the key stops authenticating, as a
	// revoked one does.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Key states: why a known key does or does not authenticate.
const (
	KeyLive    = ""
	KeyRevoked = "revoked"
	KeyExpired = "expired"
)

// State is the key's state at now: KeyLive, KeyRevoked or KeyExpired.
func (k APIKey) State(now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return KeyRevoked
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return KeyExpired
	}
	return KeyLive
}

// AuditQuery selects audit records (GET /v1/audit, `airlock audit`); zero
// fields select everything.
type AuditQuery struct {
	Since, Until time.Time
	Session      string
	Tenant       string
	// Kind is a kind of record or a group of them (see AuditKindFilter).
	Kind string
	// After: only records after this sequence number (a page's cursor).
	After int64
	Limit int
}

// MaxAuditPage caps a page of records.
const MaxAuditPage = 1000

// ParseAuditTime reads a time of an audit query: RFC 3339, or a duration
// meaning that long before now ("1h"); "" is the zero time.
func ParseAuditTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if len(v) > 256 {
		v = v[:256] + "..."
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration such as 1h", v)
}

// AuditKindFilter checks an audit query's kind: a kind of record
// (AuditKinds), or the group before a kind's dot ("file", or "file.")
// selecting all of its kinds. An unknown kind is an error listing the
// valid ones: a typo must not look like an empty log.
func AuditKindFilter(kind string) (group bool, err error) {
	var valid []string
	for _, k := range AuditKinds() {
		if k == kind {
			return false, nil
		}
		if g, _, ok := strings.Cut(k, "."); ok {
			if kind == g || kind == g+"." {
				return true, nil
			}
			if !slices.Contains(valid, g) {
				valid = append(valid, g)
			}
		}
		valid = append(valid, k)
	}
	return false, fmt.Errorf("unknown audit record kind %q: want one of %s", kind, strings.Join(valid, ", "))
}
