package apitype

import (
	"strings"
	"testing"
	"time"
)

// An audit query's kind is a kind of record or a group of them; anything
// else is an error that lists the valid ones, not an empty log.
func TestAuditKindFilter(t *testing.T) {
	for kind, group := range map[string]bool{"execution": false, "file.upload": false, "egress": false, "file": true, "file.": true, "session": true, "package": true} {
		if g, err := AuditKindFilter(kind); err != nil || g != group {
			t.Errorf("%q: group %v, %v; want group %v", kind, g, err, group)
		}
	}
	for _, kind := range []string{"executions", "file.uplaod", "sessions", "exec", ".", "file..", "%", "execution%"} {
		_, err := AuditKindFilter(kind)
		if err == nil || !strings.Contains(err.Error(), "session.create") || !strings.Contains(err.Error(), "file,") {
			t.Errorf("%q: %v, want an error listing the kinds", kind, err)
		}
	}
}

func TestParseAuditTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"": {}, "1h": now.Add(-time.Hour), "0s": now, "2026-01-01T00:00:00Z": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := ParseAuditTime(in, now); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-1h", "2026-01-01", strings.Repeat("x", 1000)} {
		if _, err := ParseAuditTime(in, now); err == nil || len(err.Error()) > 400 {
			t.Errorf("%q: %v, want a short error", in, err)
		}
	}
}
