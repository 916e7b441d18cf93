package broker

import (
	"encoding/base64"
	"strings"
	"testing"

	"airlock/internal/secrets"
)

// A tool's answer loses its credential in base64 at every offset of a
// larger encoded text, both alphabets, as the gate's echo redaction does.
func TestScrubBase64AnyOffset(t *testing.T) {
	tl := &tool{scrubber: secrets.NewScrubber(testSecret, redacted)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		for pre := range 3 {
			text := enc.EncodeToString([]byte(strings.Repeat("~", pre) + testSecret + "?"))
			got := tl.scrub(`{"data":"` + text + `"}`)
			lo, hi := 8*pre/6, (8*(pre+len(testSecret))+5)/6
			if want := `{"data":"` + text[:lo] + redacted + text[hi:] + `"}`; got != want {
				t.Errorf("offset %d: %q, want %q", pre, got, want)
			}
		}
	}
	if got := (&tool{}).scrub("no credential"); got != "no credential" {
		t.Errorf("a tool without a credential changed its answer: %q", got)
	}
}
