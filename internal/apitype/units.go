package apitype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count. In flags and JSON it is written "256M", "1.5G",
// "512KiB" or as a plain number of bytes. K, M, G and T are binary
// (1024-based) with or without "i" and "B", as in docker and kubectl.
type Size int64

// maxSize keeps sizes far from int64 overflow when they are added up.
const maxSize = 1 << 50 // 1 PiB

// ParseSize parses s as a Size.
func ParseSize(s string) (Size, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty size")
	}
	upper := strings.ToUpper(s)
	mult := float64(1)
	for _, suf := range []struct {
		s string
		m float64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"KI", 1 << 10}, {"MI", 1 << 20}, {"GI", 1 << 30}, {"TI", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
		{"B", 1},
	} {
		if strings.HasSuffix(upper, suf.s) {
			mult = suf.m
			s = strings.TrimSpace(s[:len(s)-len(suf.s)])
			break
		}
	}
	if s == "" || strings.ContainsAny(s, "+-eExXpP_") {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional K, M, G or T suffix", orig)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional K, M, G or T suffix", orig)
	}
	v := f * mult
	if v > maxSize {
		return 0, fmt.Errorf("size %q is too large", orig)
	}
	return Size(v), nil
}

// String formats the size in the largest unit that divides it exactly.
func (s Size) String() string {
	n := int64(s)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.suf
		}
	}
	return strconv.FormatInt(n, 10)
}

// MarshalJSON writes the size as a number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return []byte(strconv.FormatInt(int64(s), 10)), nil }

// UnmarshalJSON accepts a number of bytes or a string such as "256M".
func (s *Size) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("size: %v", err)
		}
		v, err := ParseSize(str)
		if err != nil {
			return err
		}
		*s = v
		return nil
	}
	n, err := parseJSONNumber(b, maxSize)
	if err != nil {
		return fmt.Errorf("size %s: want bytes as a non-negative number or a string like \"256M\"", truncate(b))
	}
	*s = Size(n)
	return nil
}

// Duration is a time span. In flags and JSON it is written "5s", "1m30s",
// "250ms" or, in JSON, as a number of seconds.
type Duration time.Duration

const maxDuration = Duration(365 * 24 * time.Hour)

// ParseDuration parses s as a Duration. A bare number means seconds.
func ParseDuration(s string) (Duration, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return secondsToDuration(f, orig)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want e.g. 5s, 1m30s or 250ms", orig)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", orig)
	}
	if Duration(d) > maxDuration {
		return 0, fmt.Errorf("duration %q is too long", orig)
	}
	return Duration(d), nil
}

func secondsToDuration(f float64, orig string) (Duration, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("duration %q: want a non-negative number of seconds", orig)
	}
	if f > float64(maxDuration/Duration(time.Second)) {
		return 0, fmt.Errorf("duration %q is too long", orig)
	}
	return Duration(f * float64(time.Second)), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts "5s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("duration: %v", err)
		}
		v, err := ParseDuration(str)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
	if !json.Valid(b) || len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return fmt.Errorf("duration %s: want a string like \"5s\" or a number of seconds", truncate(b))
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string like \"5s\" or a number of seconds", truncate(b))
	}
	v, err := secondsToDuration(f, string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// parseJSONNumber parses a JSON number that must be a non-negative integer
// no larger than max. Fractions of a unit are truncated.
func parseJSONNumber(b []byte, max float64) (int64, error) {
	if len(b) == 0 || !json.Valid(b) || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return 0, fmt.Errorf("not a number")
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > max {
		return 0, fmt.Errorf("out of range")
	}
	return int64(f), nil
}

// integral reports whether the JSON number b has no fractional part.
func integral(b []byte) bool {
	f, err := strconv.ParseFloat(string(b), 64)
	return err == nil && f == math.Trunc(f)
}

// Count is a non-negative integer limit (pids, open files) that rejects
// negative, fractional-overflow and absurd values in JSON with a clear error.
type Count int64

const maxCount = 1 << 40

// UnmarshalJSON accepts a non-negative integer.
func (c *Count) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("count: %v", err)
		}
		v, err := ParseCount(str)
		if err != nil {
			return err
		}
		*c = v
		return nil
	}
	n, err := parseJSONNumber(b, maxCount)
	if err == nil && !integral(b) {
		// A count has no fractions: 1.5 must not quietly become 1 (nor
		// 0.5 become 0, which means "the default").
		err = fmt.Errorf("not an integer")
	}
	if err != nil {
		return fmt.Errorf("%s: want a non-negative integer", truncate(b))
	}
	*c = Count(n)
	return nil
}

// ParseCount parses a non-negative integer.
func ParseCount(s string) (Count, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > maxCount {
		return 0, fmt.Errorf("%q: want a non-negative integer", s)
	}
	return Count(n), nil
}

func truncate(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}
