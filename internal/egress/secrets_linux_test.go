package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"airlock/internal/secrets"
)

// The values of the test secrets: the sandbox must never see them.
const (
	valKey   = "sk-real-KEY-0123456789abcdef"
	valQuery = "real-QUERY-secret-9876543210"
	valOther = "real-OTHER-secret-5555555555"
)

// valLong is a long value: a body of its placeholders grows a hundredfold.
var valLong = strings.Repeat("L", 4096)

// seen is what the recording upstream received.
type seen struct {
	Host, Auth, Other, Query, Body string
}

type recorder struct {
	mu  sync.Mutex
	got []seen
}

func (rc *recorder) last(t *testing.T) seen {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.got) == 0 {
		t.Fatal("the upstream received no request")
	}
	return rc.got[len(rc.got)-1]
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

func (rc *recorder) handlers(mux *http.ServeMux) {
	mux.HandleFunc("/record", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, seen{Host: r.Host, Auth: r.Header.Get("Authorization"), Other: r.Header.Get("X-Other"), Query: r.URL.RawQuery, Body: string(b)})
		rc.mu.Unlock()
		fmt.Fprintf(w, "recorded %s", r.Proto)
	})
	// echo answers with the Authorization it got: in a header, the body,
	// gzipped when asked.
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		w.Header().Set("X-Echo", a)
		body := strings.Repeat("padding ", 5000) + "auth=" + a + " query=" + r.URL.RawQuery
		if r.URL.Query().Get("gzip") == "1" && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		io.WriteString(w, body)
	})
	// trailers echoes it in trailers: announced, unannounced, and in a
	// trailer's name.
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		w.Header().Set("Trailer", "X-Echo-Trailer")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Echo-Trailer", a)
		w.Header().Set(http.TrailerPrefix+"X-Late", a)
		w.Header().Set(http.TrailerPrefix+"X-"+strings.TrimPrefix(a, "Bearer "), "named")
	})
	// early echoes it in a 103 Early Hints head.
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		w.Header().Set("Link", "</x?k="+a+">; rel=preload")
		w.Header().Set("X-Hint", a)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Del("X-Hint")
		io.WriteString(w, "final")
	})
	// coded echoes it in a body under the Content-Encoding lines how
	// names (gzip applied as many times as they say).
	mux.HandleFunc("/coded", func(w http.ResponseWriter, r *http.Request) {
		lines := strings.Split(r.URL.Query().Get("how"), "|")
		body := []byte("auth=" + r.Header.Get("Authorization"))
		for _, l := range lines {
			for c := range strings.SplitSeq(l, ",") {
				if c := strings.TrimSpace(c); c == "gzip" || c == "x-gzip" {
					var b bytes.Buffer
					zw := gzip.NewWriter(&b)
					zw.Write(body)
					zw.Close()
					body = b.Bytes()
				}
			}
		}
		w.Header()["Content-Encoding"] = lines
		w.Write(body)
	})
	// b64 echoes it base64-encoded (enc) after off bytes.
	mux.HandleFunc("/b64", func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.Atoi(r.URL.Query().Get("off"))
		enc := map[string]*base64.Encoding{"std": base64.StdEncoding, "url": base64.URLEncoding,
			"rawstd": base64.RawStdEncoding, "rawurl": base64.RawURLEncoding}[r.URL.Query().Get("enc")]
		plain := strings.Repeat("~", off) + r.Header.Get("Authorization") + "?tail"
		io.WriteString(w, `{"data":"`+enc.EncodeToString([]byte(plain))+`"}`)
	})
	// range says what Range and If-Range it got.
	mux.HandleFunc("/range", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "range="+r.Header.Get("Range")+" if-range="+r.Header.Get("If-Range"))
	})
	mux.HandleFunc("/br", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		w.Write([]byte{0x0b, 0x02, 0x80, 'x', 0x03})
	})
}

// secretsFixture is a gate whose session has three secrets: KEY bound
// to example.com (headers), QKEY bound to example.com (headers, query
// and body, plain HTTP too) and OTHER bound to b.test.
type secretsFixture struct {
	*fixture
	rec    *recorder
	ss     *secrets.Session
	ph     map[string]string // placeholder by variable
	anchor *x509.CertPool    // what the sandbox trusts
}

func newSecretsFixture(t *testing.T, allow []string, proxy bool) *secretsFixture {
	return newSecretsFixtureWith(t, allow, Limits{}, proxy, nil)
}

// newSecretsFixtureWith is newSecretsFixture with limits lim and more
// handlers on the upstreams' mux.
func newSecretsFixtureWith(t *testing.T, allow []string, lim Limits, proxy bool, more func(*http.ServeMux)) *secretsFixture {
	ca, err := secrets.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.New([]secrets.Spec{
		{Name: "KEY", Env: "V1", Hosts: []string{"example.com"}},
		{Name: "QKEY", Env: "V2", Hosts: []string{"example.com", "a.test"}, Query: true, Body: true, PlainHTTP: true, Headers: []string{"X-Other"}},
		{Name: "OTHER", Env: "V3", Hosts: []string{"b.test"}},
		{Name: "LONG", Env: "V4", Hosts: []string{"a.test"}, Body: true, PlainHTTP: true, Headers: []string{"X-Long"}},
	}, nil, ca, []string{"V1=" + valKey, "V2=" + valQuery, "V3=" + valOther, "V4=" + valLong})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := set.NewSession("", []string{"KEY", "OTHER", "QKEY", "LONG"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	f := newFixtureWith(t, allow, lim, Options{Proxy: proxy, Secrets: ss}, func(mux *http.ServeMux) {
		rec.handlers(mux)
		if more != nil {
			more(mux)
		}
	})
	pem, err := ca.Anchor(set.Hosts())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// The gate verifies the upstream against the test server's root.
	prev := RootCAs
	RootCAs = f.tlsConf.RootCAs
	t.Cleanup(func() { RootCAs = prev })
	return &secretsFixture{fixture: f, rec: rec, ss: ss, ph: ss.Env(), anchor: pool}
}

// do sends a request from inside the sandbox with header h.
func do(t *testing.T, c *http.Client, method, u string, h map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// noValue fails t if any secret value is in s.
func noValue(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range []string{valKey, valQuery, valOther} {
		for _, f := range secrets.Forms(v) {
			if strings.Contains(s, f) {
				t.Fatalf("%s holds a secret value (%q...)", what, f[:6])
			}
		}
	}
}

func TestGateSecretsSubstituted(t *testing.T) {
	f := newSecretsFixture(t, []string{"example.com:TLS", "a.test:PORT", "b.test:PORT", "example.com:PORT"}, false)
	key, qkey, other := f.ph["KEY"], f.ph["QKEY"], f.ph["OTHER"]
	if !strings.HasPrefix(key, secrets.PlaceholderPrefix) || key == qkey {
		t.Fatalf("placeholders %q %q", key, qkey)
	}
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			tc := &tls.Config{RootCAs: f.anchor, NextProtos: []string{proto}}
			c := f.ns.client(tc)
			c.Transport.(*http.Transport).ForceAttemptHTTP2 = proto == "h2"
			// The bound host gets the value; the other secrets'
			// placeholders, and QKEY's outside X-Other, stay.
			resp, body := do(t, c, "GET", f.url("https", "example.com")+"record?k="+qkey+"&o="+other,
				map[string]string{"Authorization": "Bearer " + key, "X-Other": qkey + "," + other}, "")
			wantProto := map[string]string{"http/1.1": "HTTP/1.1", "h2": "HTTP/2.0"}[proto]
			if resp.StatusCode != 200 || resp.Proto != wantProto || !strings.HasPrefix(body, "recorded") {
				t.Fatalf("status %d %s %q", resp.StatusCode, resp.Proto, body)
			}
			got := f.rec.last(t)
			if got.Auth != "Bearer "+valKey {
				t.Errorf("the bound host received Authorization %q, want the value", got.Auth)
			}
			if got.Other != valQuery+","+other {
				t.Errorf("X-Other = %q: want QKEY's value and OTHER's placeholder", got.Other)
			}
			if got.Query != "k="+url.QueryEscape(valQuery)+"&o="+other {
				t.Errorf("query = %q: want QKEY's value (escaped) and OTHER's placeholder", got.Query)
			}
			noValue(t, "the answer", body)
		})
	}
	c := f.ns.client(&tls.Config{RootCAs: f.anchor})
	// A host a secret is not bound to receives the placeholder.
	do(t, c, "GET", f.url("http", "b.test")+"record", map[string]string{"Authorization": "Bearer " + key}, "")
	if got := f.rec.last(t); got.Auth != "Bearer "+key {
		t.Errorf("an unbound host received %q, want the placeholder", got.Auth)
	}
	// OTHER's own host gets nothing over plain HTTP (its secret is for
	// HTTPS only): the connection is not even terminated.
	do(t, c, "GET", f.url("http", "b.test")+"record", map[string]string{"Authorization": other}, "")
	if got := f.rec.last(t); got.Auth != other {
		t.Errorf("plain HTTP to a host bound for HTTPS only received %q, want the placeholder", got.Auth)
	}
	// QKEY may go in plain HTTP, in its body too.
	do(t, c, "POST", f.url("http", "a.test")+"record", map[string]string{"X-Other": qkey, "Authorization": key}, "body "+qkey)
	if got := f.rec.last(t); got.Other != valQuery || got.Body != "body "+valQuery || got.Auth != key {
		t.Errorf("plain HTTP to a.test received %+v", got)
	}
	// A request without a placeholder passes unchanged.
	do(t, c, "GET", f.url("https", "example.com")+"record?x=1", map[string]string{"Authorization": "Bearer mine"}, "")
	if got := f.rec.last(t); got.Auth != "Bearer mine" || got.Query != "x=1" {
		t.Errorf("an untouched request arrived as %+v", got)
	}
}

func TestGateSecretsEchoRedacted(t *testing.T) {
	f := newSecretsFixture(t, []string{"example.com:TLS"}, false)
	c := f.ns.client(&tls.Config{RootCAs: f.anchor})
	key := f.ph["KEY"]
	for _, q := range []string{"", "?gzip=1"} {
		resp, body := do(t, c, "GET", f.url("https", "example.com")+"echo"+q, map[string]string{"Authorization": "Bearer " + key, "Accept-Encoding": "gzip"}, "")
		if resp.StatusCode != 200 || !strings.HasSuffix(body, "auth=Bearer "+key+" query="+strings.TrimPrefix(q, "?")) {
			t.Fatalf("echo%s: %d %q", q, resp.StatusCode, body[max(0, len(body)-100):])
		}
		noValue(t, "the echoed body", body)
		if h := resp.Header.Get("X-Echo"); h != "Bearer "+key {
			t.Errorf("echo%s: X-Echo = %q, want the placeholder", q, h)
		}
	}
	// An encoding airlock cannot read is refused, never passed.
	resp, body := do(t, c, "GET", f.url("https", "example.com")+"br", map[string]string{"Authorization": "Bearer " + key}, "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Content-Encoding") {
		t.Errorf("br answer: %d %q", resp.StatusCode, body)
	}
}

func TestGateSecretsAttacks(t *testing.T) {
	f := newSecretsFixture(t, []string{"example.com:TLS", "a.test:PORT"}, true)
	key := f.ph["KEY"]
	c := f.ns.client(&tls.Config{RootCAs: f.anchor})

	// Host (or :authority) other than the name the connection was
	// opened for: refused, never forwarded.
	before := f.rec.count()
	resp, body := do(t, c, "GET", f.url("https", "example.com")+"record", map[string]string{"Host": "a.test", "Authorization": key}, "")
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "does not match") || f.rec.count() != before {
		t.Errorf("Host a.test over example.com's connection: %d %q", resp.StatusCode, body)
	}

	// A placeholder split across writes still arrives whole.
	_, addr, _ := f.ns.lookup("example.com")
	raw, err := f.ns.dial(net.JoinHostPort(addr.String(), fmt.Sprint(f.tlsPort)))
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: f.anchor, ServerName: "example.com"})
	req := "GET /record HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer " + key + "\r\nConnection: close\r\n\r\n"
	for i := 0; i < len(req); i += 3 {
		if _, err := tc.Write([]byte(req[i:min(i+3, len(req))])); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := io.ReadAll(tc)
	tc.Close()
	if !strings.Contains(string(out), "200 OK") || f.rec.last(t).Auth != "Bearer "+valKey {
		t.Errorf("split placeholder: %q, upstream got %q", out, f.rec.last(t).Auth)
	}

	// Header injection: a bare CR after the placeholder is refused by
	// the parser, nothing goes upstream.
	before = f.rec.count()
	raw, _ = f.ns.dial(net.JoinHostPort(addr.String(), fmt.Sprint(f.tlsPort)))
	tc = tls.Client(raw, &tls.Config{RootCAs: f.anchor, ServerName: "example.com"})
	fmt.Fprintf(tc, "GET /record HTTP/1.1\r\nHost: example.com\r\nAuthorization: %s\rX-Evil: 1\r\n\r\n", key)
	st, _ := bufio.NewReader(tc).ReadString('\n')
	tc.Close()
	if !strings.Contains(st, "400") || f.rec.count() != before {
		t.Errorf("CR in a header: %q, upstream requests %d -> %d", st, before, f.rec.count())
	}

	// An oversized head: 431, nothing upstream.
	resp, body = do(t, c, "GET", f.url("https", "example.com")+"record", map[string]string{"X-Big": strings.Repeat("a", 20<<10), "Authorization": key}, "")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || f.rec.count() != before {
		t.Errorf("oversized head: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// A head that would grow past its cap once substituted: 431.
	resp, body = do(t, c, "GET", f.url("http", "a.test")+"record", map[string]string{"X-Long": strings.Repeat(f.ph["LONG"], 300)}, "")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(body, "once its placeholders are replaced") || f.rec.count() != before {
		t.Errorf("head grown by substitution: %d %q %d %d", resp.StatusCode, body, f.rec.count(), before)
	}
	// A body toward a host whose secret may go in bodies is read whole,
	// up to 1 MiB: a larger one is refused.
	resp, body = do(t, c, "POST", f.url("http", "a.test")+"record", nil, strings.Repeat("b", maxSubstBody+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than") || f.rec.count() != before {
		t.Errorf("oversized body: %d %q %d %d", resp.StatusCode, body, f.rec.count(), before)
	}
	// So is one that would grow past it once its placeholders are
	// replaced (about 20 KiB of placeholders for a 4 KiB value).
	resp, body = do(t, c, "POST", f.url("http", "a.test")+"record", nil, strings.Repeat(f.ph["LONG"]+" ", 400))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "once its placeholders are replaced") || f.rec.count() != before {
		t.Errorf("body grown by substitution: %d %q %d %d", resp.StatusCode, body, f.rec.count(), before)
	}
	// A WebSocket upgrade to a bound host is refused.
	resp, _ = do(t, c, "GET", f.url("https", "example.com")+"record", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, "")
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("upgrade: %d", resp.StatusCode)
	}

	// Through the proxy: CONNECT to the bound host by its IP is refused;
	// by name the secret goes in.
	pc := f.proxyClient(&tls.Config{RootCAs: f.anchor})
	if _, err := pc.Get(fmt.Sprintf("https://127.0.0.2:%d/record", f.tlsPort)); err == nil {
		t.Error("CONNECT to an IP address went through")
	}
	do(t, pc, "GET", f.url("https", "example.com")+"record", map[string]string{"Authorization": key}, "")
	if got := f.rec.last(t).Auth; got != valKey {
		t.Errorf("through the proxy the bound host received %q", got)
	}

	// A client that does not trust airlock's anchor gets no answer and
	// the upstream no request.
	before = f.rec.count()
	if _, err := f.ns.client(f.tlsConf).Get(f.url("https", "example.com") + "record"); err == nil {
		t.Error("a client trusting only the real root reached a bound host")
	}
	if f.rec.count() != before {
		t.Error("the upstream received a request from a client that refused airlock's certificate")
	}

	// No log line, no record holds a value.
	f.gate.Close()
	f.log.mu.Lock()
	logText := f.log.b.String()
	f.log.mu.Unlock()
	noValue(t, "the log", logText)
	if !strings.Contains(logText, "TLS terminated by airlock for secrets") || !strings.Contains(logText, "refused airlock's certificate") {
		t.Errorf("the log does not say what the interception did:\n%s", logText)
	}
	for _, r := range f.gate.TakeAll() {
		noValue(t, "a record", fmt.Sprintf("%+v", r))
	}
}

// Nothing the bound host sends reaches the sandbox with a value in it:
// not a trailer (announced or not, in its value or its name), not an
// informational head, not a body under any list of codings airlock
// reads, nor base64 of the value at any offset, in either alphabet,
// padded or not. A coding it cannot read, in any field line or list
// item, is refused.
func TestGateSecretsEchoEverywhere(t *testing.T) {
	f := newSecretsFixture(t, []string{"example.com:TLS"}, false)
	key := f.ph["KEY"]
	auth := map[string]string{"Authorization": "Bearer " + key}
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			c := f.ns.client(&tls.Config{RootCAs: f.anchor, NextProtos: []string{proto}})
			c.Transport.(*http.Transport).ForceAttemptHTTP2 = proto == "h2"
			base := f.url("https", "example.com")

			resp, body := do(t, c, "GET", base+"trailers", auth, "")
			tr := fmt.Sprint(resp.Trailer)
			noValue(t, "the trailers", tr)
			if body != "body" || resp.Trailer.Get("X-Echo-Trailer") != "Bearer "+key || resp.Trailer.Get("X-Late") != "Bearer "+key {
				t.Errorf("trailers: %q %v", body, resp.Trailer)
			}

			var hints []textproto.MIMEHeader
			var mu sync.Mutex
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				mu.Lock()
				defer mu.Unlock()
				hints = append(hints, h)
				return nil
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", base+"early", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			noValue(t, "a 103 head", fmt.Sprint(hints))
			if len(hints) != 1 || hints[0].Get("X-Hint") != "Bearer "+key || !strings.Contains(hints[0].Get("Link"), key) {
				t.Errorf("103 heads: %v", hints)
			}
			mu.Unlock()

			for how, ok := range map[string]bool{
				"identity|gzip": true, "gzip|gzip": true, "gzip, gzip": true, "x-gzip|identity": true,
				"identity|br": false, "identity, br": false, "gzip|br": false, "br|gzip": false,
			} {
				resp, body := do(t, c, "GET", base+"coded?how="+url.QueryEscape(how), auth, "")
				noValue(t, "a coded body", body)
				switch {
				case ok && (resp.StatusCode != 200 || body != "auth=Bearer "+key):
					t.Errorf("Content-Encoding %q: %d %q", how, resp.StatusCode, body)
				case !ok && (resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Content-Encoding")):
					t.Errorf("Content-Encoding %q passed: %d %q", how, resp.StatusCode, body)
				}
			}

			// A range could cut an echo into pieces: asked whole.
			if _, body := do(t, c, "GET", base+"range", map[string]string{"Range": "bytes=0-3", "If-Range": "x"}, ""); body != "range= if-range=" {
				t.Errorf("the bound host got %q", body)
			}

			for _, enc := range []string{"std", "url", "rawstd", "rawurl"} {
				for off := range 3 {
					resp, body := do(t, c, "GET", fmt.Sprintf("%sb64?enc=%s&off=%d", base, enc, off), auth, "")
					noValue(t, "a base64 echo", body)
					if resp.StatusCode != 200 || !strings.Contains(body, key) {
						t.Errorf("base64 %s at %d: %d %q", enc, off, resp.StatusCode, body)
					}
				}
			}
		})
	}
}
