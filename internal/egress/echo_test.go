package egress

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"airlock/internal/secrets"
)

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// Every Content-Encoding field line and every item of a list is read:
// gzip (any number of times) and identity are decoded, anything else is
// refused.
func TestDecodedEveryCoding(t *testing.T) {
	const text = "the answer"
	for _, tc := range []struct {
		lines []string
		body  []byte
		ok    bool
	}{
		{nil, []byte(text), true},
		{[]string{"identity"}, []byte(text), true},
		{[]string{"gzip"}, gz([]byte(text)), true},
		{[]string{"GZIP"}, gz([]byte(text)), true},
		{[]string{"x-gzip"}, gz([]byte(text)), true},
		{[]string{"identity", "gzip"}, gz([]byte(text)), true},
		{[]string{"gzip", "gzip"}, gz(gz([]byte(text))), true},
		{[]string{"gzip, gzip"}, gz(gz([]byte(text))), true},
		{[]string{" identity ,, gzip "}, gz([]byte(text)), true},
		{[]string{"br"}, nil, false},
		{[]string{"identity", "br"}, nil, false},
		{[]string{"identity, br"}, nil, false},
		{[]string{"gzip", "deflate"}, nil, false},
		{[]string{"gzip;q=1"}, nil, false},
		{[]string{"zstd"}, nil, false},
		{[]string{"gzip", "gzip, gzip"}, gz(gz(gz([]byte(text)))), false},
	} {
		h := http.Header{"Content-Encoding": tc.lines}
		r, err := decoded(h, bytes.NewReader(tc.body))
		if !tc.ok {
			if err != errEncoding {
				t.Errorf("%q: err %v, want a refusal", tc.lines, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.lines, err)
			continue
		}
		if got, err := io.ReadAll(r); err != nil || string(got) != text {
			t.Errorf("%q: %q, %v", tc.lines, got, err)
		}
		if len(h.Values("Content-Encoding")) != 0 {
			t.Errorf("%q: Content-Encoding left: %q", tc.lines, h.Values("Content-Encoding"))
		}
	}
}

// Header fields lose every echo of a value; a field named after one is
// dropped.
func TestRedactHeader(t *testing.T) {
	const v = "sk-header-VALUE-0123"
	ca, err := secrets.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.New([]secrets.Spec{{Name: "K", Env: "V", Hosts: []string{"h.test"}}}, nil, ca, []string{"V=" + v})
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := set.NewSession("", []string{"K"})
	ph := ss.Env()["K"]
	h := http.Header{
		"X-Echo":      {"Bearer " + v, "fine"},
		"X-" + v:      {"1"},
		"Link":        {"</a?k=" + v + ">; rel=preload"},
		"X-Untouched": {"plain"},
	}
	redactHeader(ss, h)
	want := http.Header{"X-Echo": {"Bearer " + ph, "fine"}, "Link": {"</a?k=" + ph + ">; rel=preload"}, "X-Untouched": {"plain"}}
	if len(h) != len(want) {
		t.Fatalf("fields %v, want %v", h, want)
	}
	for k, vs := range want {
		if strings.Join(h[k], "|") != strings.Join(vs, "|") {
			t.Errorf("%s = %q, want %q", k, h[k], vs)
		}
	}
}

// A request whose handler starts after its connection is over (HTTP/2
// runs each on a goroutine of its own) is not served: counting it then
// would race the interception's wait for its requests.
func TestInterceptionEndedServesNothing(t *testing.T) {
	g := &Gate{session: "s1", log: slog.New(slog.DiscardHandler)}
	ic := &interception{g: g, name: "api.example.com", port: 443, tls: true}
	ic.hmu.Lock()
	ic.ended = true
	ic.hmu.Unlock()
	ic.handlers.Wait()
	rec := httptest.NewRecorder()
	ic.ServeHTTP(rec, httptest.NewRequest("GET", "https://other.example/", nil))
	if n := ic.requests.Load(); n != 0 || g.denied.Load() != 0 || rec.Body.Len() != 0 {
		t.Errorf("served after the end: %d requests, %d denied, %q", n, g.denied.Load(), rec.Body.String())
	}
}
