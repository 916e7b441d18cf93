package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"airlock/internal/errdefs"
)

const (
	kib = 1 << 10
	gib = 1 << 30
)

// Flags and query parameters are parsed by config's Parse functions: a
// bad value is the caller's mistake (400, exit 64).
func TestParseErrorsAreInvalidArgument(t *testing.T) {
	for _, in := range []string{"", "-1", "abc", "1e400", "NaN"} {
		_, es := ParseSize(in)
		_, ed := ParseDuration(in)
		_, ec := ParseCount(in)
		for name, err := range map[string]error{"ParseSize": es, "ParseDuration": ed, "ParseCount": ec} {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s(%q) = %v, want ErrInvalidArgument", name, in, err)
			}
		}
	}
	if _, err := ParseSize("256M"); err != nil {
		t.Errorf("ParseSize(256M): %v", err)
	}
}

// Request bodies are decoded by Decode: a limit that does not parse is
// the caller's mistake.
func TestJSONErrorsAreInvalidArgument(t *testing.T) {
	for _, in := range []string{`-1`, `"x"`, `true`, `null`, `1.5`} {
		for _, field := range []string{"memory", "timeout", "pids"} {
			var l Limits
			err := Decode([]byte(`{"`+field+`": `+in+`}`), &l)
			if field != "pids" && in == "1.5" {
				if err != nil {
					t.Errorf("%s: %s: %v", field, in, err)
				}
				continue
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: %s: %v, want ErrInvalidArgument", field, in, err)
			}
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	l := Limits{Timeout: Duration(1500 * time.Millisecond), CPUTime: Duration(time.Hour), Memory: 3 * gib / 2,
		Pids: 77, Disk: 12345, Inodes: 999, MaxOutput: kib, CPUs: 0.25, NoFile: 2048}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back Limits
	if err := Decode(b, &back); err != nil || back != l {
		t.Errorf("round trip of %s: %+v, %v; want %+v", b, back, err, l)
	}
	if !strings.Contains(string(b), `"timeout":"1.5s"`) || !strings.Contains(string(b), `"memory":1610612736`) {
		t.Errorf("marshalled as %s", b)
	}
	// Zero fields are left out, so that they mean "the default".
	if b, _ := json.Marshal(Limits{}); string(b) != "{}" {
		t.Errorf("empty limits marshal as %s", b)
	}
}

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"30d": now.AddDate(0, 0, 30), "12h": now.Add(12 * time.Hour), "90s": now.Add(90 * time.Second),
		"2026-02-01T00:00:00Z": time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := ParseExpiry(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-1d", "1.5d", "0s", "2025-01-01T00:00:00Z", "soon", "d"} {
		if _, err := ParseExpiry(bad, now); err == nil {
			t.Errorf("ParseExpiry(%q): no error", bad)
		}
	}
}
