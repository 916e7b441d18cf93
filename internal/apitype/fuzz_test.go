package apitype

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// The fuzz tests check invariants of the parsers on any input: they never
// panic, accept only values within their bounds, and read back what they
// write. Run one with e.g. `go test -fuzz FuzzParseSize ./internal/apitype`;
// plain `go test` replays the seeds.

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1", "256M", "1.5G", "512KiB", "1T", "1024T", "1025T", "-1", "1e3", "NaN",
		"Inf", " 64 M ", "0x10", "1_000", "ıB", "1kı", "\u212a", "ɐK", ".5K", "5.", "", "99999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			if v != 0 {
				t.Errorf("ParseSize(%q) returned %d with an error", s, v)
			}
			return
		}
		if v < 0 || v > maxSize {
			t.Fatalf("ParseSize(%q) = %d, out of [0, %d]", s, v, int64(maxSize))
		}
		back, err := ParseSize(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseSize(%q) = %d, but its String %q reads back as %d, %v", s, v, v.String(), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "5", "0.25", "5s", "1m30s", "250ms", "8760h", "8761h", "-1s", "1e10", "NaN",
		"Inf", "-0", "9223372036854775807ns", "1.000000001s", "", " 2 ", "1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if d != 0 {
				t.Errorf("ParseDuration(%q) returned %v with an error", s, d)
			}
			return
		}
		if d < 0 || d > maxDuration {
			t.Fatalf("ParseDuration(%q) = %v, out of [0, %v]", s, d, maxDuration)
		}
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, but %q reads back as %v, %v", s, d, d.String(), back, err)
		}
	})
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"0", "1", "+5", "-1", "1.5", "1099511627776", "1099511627777", " 7 ", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCount(s)
		if err != nil {
			if c != 0 {
				t.Errorf("ParseCount(%q) returned %d with an error", s, c)
			}
			return
		}
		if c < 0 || c > maxCount {
			t.Fatalf("ParseCount(%q) = %d, out of [0, %d]", s, c, int64(maxCount))
		}
		back, err := ParseCount(strconv.FormatInt(int64(c), 10))
		if err != nil || back != c {
			t.Fatalf("ParseCount(%q) = %d, but %d reads back as %d, %v", s, c, c, back, err)
		}
	})
}

// jsonSeeds are inputs for the JSON unmarshallers.
var jsonSeeds = []string{`0`, `1024`, `1.5`, `-1`, `-0`, `1e3`, `1e400`, `1125899906842625`, `"256M"`, `"5s"`,
	`"NaN"`, `NaN`, `null`, `true`, `[]`, `{}`, `"`, `""`, `"\u0031M"`, `9223372036854775808`, ` 5 `, `5 5`, `0.5`}

func FuzzSizeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v Size
		if err := v.UnmarshalJSON(b); err != nil {
			if v != 0 {
				t.Errorf("UnmarshalJSON(%q) changed the value to %d despite an error", b, v)
			}
			return
		}
		if v < 0 || v > maxSize {
			t.Fatalf("UnmarshalJSON(%q) = %d", b, v)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back Size
		if err := json.Unmarshal(out, &back); err != nil || back != v {
			t.Fatalf("%q decoded as %d, marshalled as %s, read back as %d, %v", b, v, out, back, err)
		}
	})
}

func FuzzDurationJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if err := d.UnmarshalJSON(b); err != nil {
			if d != 0 {
				t.Errorf("UnmarshalJSON(%q) changed the value to %v despite an error", b, d)
			}
			return
		}
		if d < 0 || d > maxDuration {
			t.Fatalf("UnmarshalJSON(%q) = %v", b, time.Duration(d))
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := json.Unmarshal(out, &back); err != nil || back != d {
			t.Fatalf("%q decoded as %v, marshalled as %s, read back as %v, %v", b, d, out, back, err)
		}
	})
}

func FuzzCountJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Count
		if err := c.UnmarshalJSON(b); err != nil {
			if c != 0 {
				t.Errorf("UnmarshalJSON(%q) changed the value to %d despite an error", b, c)
			}
			return
		}
		if c < 0 || c > maxCount {
			t.Fatalf("UnmarshalJSON(%q) = %d", b, c)
		}
		var back Count
		if err := json.Unmarshal([]byte(json.Number(formatInt(int64(c)))), &back); err != nil || back != c {
			t.Fatalf("%q decoded as %d, read back as %d, %v", b, c, back, err)
		}
	})
}

func formatInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
