package apitype

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Size
	}{
		{"0", 0}, {"1", 1}, {"1024", 1024}, {"  4096  ", 4096},
		{"1K", kib}, {"1k", kib}, {"1KB", kib}, {"1kb", kib}, {"1KiB", kib}, {"1kib", kib}, {"1Ki", kib},
		{"256M", 256 * mib}, {"256m", 256 * mib}, {"256MB", 256 * mib}, {"256MiB", 256 * mib}, {"256Mi", 256 * mib},
		{"2G", 2 * gib}, {"2GiB", 2 * gib}, {"1T", tib}, {"1TiB", tib},
		{"512B", 512}, {"512b", 512}, {"64 M", 64 * mib}, {" 64M ", 64 * mib},
		{"1.5G", 3 * gib / 2}, {"0.5K", 512}, {".5K", 512}, {"5.", 5},
		{"1.5", 1},                    // fractions of a byte are truncated
		{"1024T", maxSize},            // exactly the maximum
		{"0.0000001", 0},              // rounds down to nothing
		{"00012", 12},                 // leading zeros
		{"1099511627776K", tib * kib}, // = 1 PiB = the maximum
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		"", " ", "M", "KiB", "B", "-1", "-1M", "-0", "+1", "+1M", "1e3", "1E3", "1e-3", "0x10", "0X10", "0b1", "0o7",
		"1_000", "1,000", "NaN", "nan", "Inf", "inf", "+Inf", "Infinity", "infinityK", "1P", "1PB", "1EB", "1Z",
		"abc", "1MM", "1 K B", "1KiBB", "M1", "1M1", "1..5", "1.5.5", "\x001", "1\x00", "１", "٣M",
		"1025T", "1024.0001T", "2048T", "99999999999999999999999", "1" + strings.Repeat("0", 400),
		"0x1p3", "1p3", "ıB", "1ıB", "1kı", "1Kı", "1\u212a", // non-ASCII that upper-cases to a suffix letter
	} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestSizeString(t *testing.T) {
	for _, c := range []struct {
		in   Size
		want string
	}{
		{0, "0"}, {1, "1"}, {1023, "1023"}, {kib, "1K"}, {1536, "1536"}, {3 * mib / 2, "1536K"},
		{256 * mib, "256M"}, {gib, "1G"}, {3 * gib / 2, "1536M"}, {tib, "1T"}, {maxSize, "1024T"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("Size(%d).String() = %q, want %q", c.in, got, c.want)
		}
		// What String writes, ParseSize reads back.
		if back, err := ParseSize(c.in.String()); err != nil || back != c.in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in.String(), back, err, c.in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0}, {"5", 5 * time.Second}, {"0.25", 250 * time.Millisecond}, {" 2 ", 2 * time.Second},
		{"5s", 5 * time.Second}, {"1m30s", 90 * time.Second}, {"250ms", 250 * time.Millisecond},
		{"1.5h", 90 * time.Minute}, {"1us", time.Microsecond}, {"1ns", 1}, {"0s", 0}, {"-0", 0},
		{"1e3", 1000 * time.Second}, {"8760h", 365 * 24 * time.Hour}, {"31536000", 365 * 24 * time.Hour},
	} {
		got, err := ParseDuration(c.in)
		if err != nil || got.D() != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		"", " ", "s", "-1", "-1s", "-1ms", "-0.5", "abc", "5 s", "5x", "1d", "NaN", "nan", "Inf", "-Inf", "+Inf",
		"1e10", "1e400", "8761h", "8760h1ns", "31536000.001", "9223372036854775807ns", "99999999999h",
		"2562047h47m16.854775808s", "\x005s", "5s\x00", "５s",
	} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseCount(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Count
	}{{"0", 0}, {"1", 1}, {" 256 ", 256}, {"+5", 5}, {"007", 7}, {"1099511627776", maxCount}} {
		got, err := ParseCount(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "-1", "1.5", "1e3", "0x10", "1_000", "NaN", "1099511627777", "9223372036854775808", "abc", "1 2"} {
		if got, err := ParseCount(in); err == nil {
			t.Errorf("ParseCount(%q) = %d, want an error", in, got)
		}
	}
}

// jsonCase is one JSON value and what it must decode to, or fail.
type jsonCase struct {
	in   string
	want int64 // ignored when bad
	bad  bool
}

// wrongTypes are JSON values of other types, malformed numbers and
// values JSON cannot hold: every unmarshaller must refuse them.
var wrongTypes = []string{
	`true`, `false`, `null`, `[]`, `[1]`, `{}`, `{"a":1}`, `NaN`, `Infinity`, `-Infinity`, `+1`, `0x10`,
	`.5`, `1.`, `01`, `1e`, `--1`, `"`, `"unterminated`, `'5'`, ``, ` `, `1 2`, `"5" "6"`, `5,`,
}

func runJSONCases[T any](t *testing.T, name string, cases []jsonCase, get func(*T) int64) {
	t.Helper()
	for _, c := range cases {
		var v T
		err := json.Unmarshal([]byte(c.in), &v)
		if c.bad {
			if err == nil {
				t.Errorf("%s %s: decoded %d, want an error", name, c.in, get(&v))
			}
			continue
		}
		if err != nil || get(&v) != c.want {
			t.Errorf("%s %s: got %d, %v; want %d", name, c.in, get(&v), err, c.want)
		}
	}
	for _, in := range wrongTypes {
		var v T
		if err := json.Unmarshal([]byte(in), &v); err == nil {
			t.Errorf("%s %s: decoded %d, want an error", name, in, get(&v))
		}
	}
}

func TestSizeJSON(t *testing.T) {
	runJSONCases(t, "Size", []jsonCase{
		{in: `0`, want: 0}, {in: `1024`, want: 1024}, {in: ` 1024 `, want: 1024}, {in: `1.5`, want: 1},
		{in: `1e3`, want: 1000}, {in: `1E3`, want: 1000}, {in: `-0`, want: 0}, {in: `0.0`, want: 0},
		{in: `"256M"`, want: 256 * mib}, {in: `"1.5G"`, want: 3 * gib / 2}, {in: `"\u0031M"`, want: mib},
		{in: `"1024T"`, want: maxSize}, {in: `1125899906842624`, want: maxSize},
		{in: `-1`, bad: true}, {in: `-0.5`, bad: true}, {in: `-1e3`, bad: true}, {in: `1125899906842625`, bad: true},
		{in: `1e16`, bad: true}, {in: `1e400`, bad: true}, {in: `9223372036854775807`, bad: true},
		{in: `18446744073709551616`, bad: true}, {in: `"-1M"`, bad: true}, {in: `"NaN"`, bad: true},
		{in: `"Inf"`, bad: true}, {in: `"1P"`, bad: true}, {in: `""`, bad: true}, {in: `"1025T"`, bad: true},
		{in: `"\u0000"`, bad: true}, {in: `"5` + "\xff" + `"`, bad: true},
	}, func(s *Size) int64 { return int64(*s) })
}

func TestDurationJSON(t *testing.T) {
	runJSONCases(t, "Duration", []jsonCase{
		{in: `0`, want: 0}, {in: `5`, want: int64(5 * time.Second)}, {in: `0.25`, want: int64(250 * time.Millisecond)},
		{in: `1e2`, want: int64(100 * time.Second)}, {in: `"5s"`, want: int64(5 * time.Second)},
		{in: `"1m30s"`, want: int64(90 * time.Second)}, {in: `"250ms"`, want: int64(250 * time.Millisecond)},
		{in: `"7"`, want: int64(7 * time.Second)}, {in: `31536000`, want: int64(365 * 24 * time.Hour)},
		{in: `-1`, bad: true}, {in: `-0.001`, bad: true}, {in: `"-5s"`, bad: true}, {in: `1e10`, bad: true},
		{in: `1e400`, bad: true}, {in: `31536001`, bad: true}, {in: `"8761h"`, bad: true}, {in: `"abc"`, bad: true},
		{in: `"NaN"`, bad: true}, {in: `"Inf"`, bad: true}, {in: `""`, bad: true}, {in: `"5 s"`, bad: true},
	}, func(d *Duration) int64 { return int64(*d) })
}

func TestCountJSON(t *testing.T) {
	runJSONCases(t, "Count", []jsonCase{
		{in: `0`, want: 0}, {in: `256`, want: 256}, {in: `"256"`, want: 256}, {in: `" 7 "`, want: 7},
		{in: `1e3`, want: 1000}, {in: `2.0`, want: 2}, {in: `1099511627776`, want: maxCount},
		// A count has no fractions.
		{in: `1.5`, bad: true}, {in: `0.5`, bad: true}, {in: `1e-3`, bad: true}, {in: `"1.5"`, bad: true},
		{in: `-1`, bad: true}, {in: `-0.5`, bad: true}, {in: `1099511627777`, bad: true}, {in: `1e300`, bad: true},
		{in: `1e400`, bad: true}, {in: `"-1"`, bad: true}, {in: `"1e3"`, bad: true}, {in: `""`, bad: true},
		{in: `"NaN"`, bad: true}, {in: `"0x10"`, bad: true},
	}, func(c *Count) int64 { return int64(*c) })
}

func TestHugeNumbersDoNotWrap(t *testing.T) {
	// Values that would wrap int64 if converted without checks.
	for _, in := range []string{`9223372036854775808`, `1e19`, `1.8446744073709552e19`, `"9223372036854775807"`, `"8388608T"`} {
		var s Size
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("Size %s = %d", in, s)
		}
		var c Count
		if err := json.Unmarshal([]byte(in), &c); err == nil {
			t.Errorf("Count %s = %d", in, c)
		}
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Duration %s = %v", in, d)
		}
	}
	if v, err := ParseSize("1e3"); err == nil {
		t.Errorf("ParseSize(1e3) = %d", v)
	}
}
