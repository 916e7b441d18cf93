package redact

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// Redacting a text streamed in chunks, cut anywhere, equals redacting it
// whole: the property that lets streamed NDJSON events be redacted.
func FuzzStreamEqualsWhole(f *testing.F) {
	r, err := New(Sets(), []Rule{{Name: "word", Pattern: `\bsecret\w{0,8}\b`}, {Name: "line", Pattern: `(?m)^TOKEN [0-9]{1,6}$`}})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"AKIAIOSFODNN7EXAMPLE", "x password=abc y", "10.0.0.1 ::1 fe80::1", "TOKEN 12\nTOKEN 3x\n", "secretive secret",
		"é/home/ü/x", pemKey, "pa\u017f\u017fword=x token", "api_\u212Aey: v secret", "Bearer aaaaaaaaaa==", "ghp_" + string(bytes.Repeat([]byte("z"), 40)),
	} {
		f.Add([]byte(s), uint16(3), uint16(7))
	}
	f.Fuzz(func(t *testing.T, text []byte, a, b uint16) {
		if !utf8.Valid(text) {
			return // session output is made valid UTF-8 before redaction
		}
		want, wantN := r.Bytes(text)
		// Chunks of sizes a, b, a, b, ... (at least 1).
		sizes := []int{int(a)%97 + 1, int(b)%13 + 1}
		var out bytes.Buffer
		s := r.Stream(func(p []byte) { out.Write(p) })
		for i, at := 0, 0; at < len(text); i++ {
			n := min(sizes[i%2], len(text)-at)
			s.Write(text[at : at+n])
			at += n
		}
		s.Flush()
		if !bytes.Equal(out.Bytes(), want) || s.Count() != wantN {
			t.Fatalf("streamed %q (%d)\nwhole    %q (%d)", out.Bytes(), s.Count(), want, wantN)
		}
	})
}
