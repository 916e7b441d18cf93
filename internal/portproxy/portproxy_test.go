package portproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// seen is what the program saw of a request.
type seen struct {
	Method, Path, RawPath, Query, Host string
	Header                             http.Header
	Body                               string
}

// program is a stand-in for an app in a sandbox: it echoes what it saw,
// streams events, sets cookies, redirects, and echoes WebSocket messages.
func program(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		// Server-sent events, or (?ndjson) a chunked stream of another
		// type, which only a proxy that flushes every write passes on.
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Query().Has("ndjson") {
			w.Header().Set("Content-Type", "application/x-ndjson")
		}
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			// The next event only once the client has this one: a
			// buffering proxy would hang here.
			select {
			case <-r.Context().Done():
				return
			case <-step:
			}
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"), b...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "app=1; Domain=example.test; Path=/; HttpOnly")
		w.Header().Add("Set-Cookie", "__Host-airlock-port=stolen; Path=/; Secure")
		w.Header().Add("Set-Cookie", "airlock-port=stolen; Path=/")
		w.Header().Set("Clear-Site-Data", `"storage"`)
		w.Header().Set("Strict-Transport-Security", "max-age=1")
		w.Header().Set("Alt-Svc", `h3=":443"`)
		w.Header().Set("Location", "/login")
		w.WriteHeader(http.StatusFound)
	})
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "__Host-airlock-port=stolen; Path=/; Secure")
		h.Add("Set-Cookie", "app=1; Domain=example.test; Path=/")
		h.Set("Alt-Svc", `h3=":443"`)
		h.Set("Clear-Site-Data", `"cookies"`)
		h.Set("Link", "</app.js>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		io.WriteString(w, "final")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 10<<10))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(seen{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, r.Header, string(b)})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

var step = make(chan struct{})

// front serves the proxy in front of prog: the path form under
// /v1/sessions/s1/ports/8080 or the host form.
func front(t *testing.T, prog *httptest.Server, pathForm bool, o Options) *httptest.Server {
	t.Helper()
	addr := prog.Listener.Addr().String()
	segs := 0
	if pathForm {
		segs = 5
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Serve(w, r, Target{Port: 8080, Segments: segs,
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
			Fail: func(w http.ResponseWriter, err error) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(errdefs.HTTPStatus(err))
				json.NewEncoder(w).Encode(map[string]string{"code": errdefs.Code(err), "message": errdefs.Message(err)})
			},
		}, o)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func defaults() Options {
	return Options{MaxRequestBytes: 1 << 20, MaxResponseBytes: 1 << 20, ResponseTimeout: 5 * time.Second, IdleTimeout: time.Minute, Scheme: "https"}
}

func get(t *testing.T, req *http.Request) (*http.Response, seen) {
	t.Helper()
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s seen
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &s)
	return resp, s
}

// The program sees its own path and query, none of airlock's credentials
// (the API key on the path form, the token, the key header, the port's
// cookie, a link's code) and X-Forwarded-*; its own cookies and
// Authorization (host form) pass.
func TestRequestRewrite(t *testing.T) {
	prog := program(t)
	for _, pathForm := range []bool{true, false} {
		f := front(t, prog, pathForm, defaults())
		prefix := ""
		if pathForm {
			prefix = "/v1/sessions/s1/ports/8080"
		}
		req, _ := http.NewRequest("POST", f.URL+prefix+"/a%2Fb/c?x=1&"+apitype.PortLinkParam+"=alp_code", strings.NewReader("body"))
		req.Host = "8080-abc.ports.test"
		req.Header.Set("Authorization", "Bearer app-or-key")
		req.Header.Set(apitype.PortTokenHeader, "alp_secret")
		req.Header.Set(apitype.PortKeyHeader, "alk_secret")
		req.Header.Set("X-Forwarded-For", "6.6.6.6")
		req.Header.Set("Forwarded", "for=6.6.6.6")
		req.Header.Add("Cookie", "a=1; __Host-airlock-port=alp_secret")
		req.Header.Add("Cookie", "airlock-port=alp_secret; b=2")
		_, s := get(t, req)
		if s.Method != "POST" || s.Path != "/a/b/c" || s.RawPath != "/a%2Fb/c" || s.Query != "x=1" || s.Body != "body" {
			t.Errorf("path form %v: %+v", pathForm, s)
		}
		all := fmt.Sprint(s.Header)
		for _, secret := range []string{"alp_", "alk_", "6.6.6.6"} {
			if strings.Contains(all, secret) {
				t.Errorf("path form %v: the program saw %q: %v", pathForm, secret, s.Header)
			}
		}
		if got := s.Header.Get("Cookie"); got != "a=1; b=2" {
			t.Errorf("path form %v: Cookie %q", pathForm, got)
		}
		if s.Header.Get("X-Forwarded-For") != "127.0.0.1" || s.Header.Get("X-Forwarded-Host") != "8080-abc.ports.test" {
			t.Errorf("path form %v: X-Forwarded-* %v", pathForm, s.Header)
		}
		if pathForm {
			if s.Header.Get("Authorization") != "" || s.Host != "127.0.0.1:8080" || s.Header.Get("X-Forwarded-Prefix") != prefix {
				t.Errorf("path form: %+v", s)
			}
		} else if s.Header.Get("Authorization") != "Bearer app-or-key" || s.Host != "8080-abc.ports.test" || s.Header.Get("X-Forwarded-Proto") != "https" {
			t.Errorf("host form: %+v", s)
		}
	}
}

// The program's answer stays on the port's origin: on the path form (the
// API's origin) no cookie, site-data clearing or HSTS, a sandboxing CSP
// and redirects under the port; on the host form cookies lose their
// Domain and the port's own cookie cannot be set.
func TestResponseScope(t *testing.T) {
	prog := program(t)
	resp, _ := get(t, mustReq(t, "GET", front(t, prog, true, defaults()).URL+"/v1/sessions/s1/ports/8080/cookies"))
	h := resp.Header
	if len(h.Values("Set-Cookie")) != 0 || h.Get("Clear-Site-Data") != "" || h.Get("Strict-Transport-Security") != "" || h.Get("Alt-Svc") != "" {
		t.Errorf("path form: %v", h)
	}
	if h.Get("Content-Security-Policy") != pathCSP || strings.Contains(pathCSP, "allow-same-origin") {
		t.Errorf("path form CSP %q", h.Get("Content-Security-Policy"))
	}
	if h.Get("Location") != "/v1/sessions/s1/ports/8080/login" {
		t.Errorf("path form Location %q", h.Get("Location"))
	}
	resp, _ = get(t, mustReq(t, "GET", front(t, prog, false, defaults()).URL+"/cookies"))
	h = resp.Header
	if got := h.Values("Set-Cookie"); len(got) != 1 || got[0] != "app=1; Path=/; HttpOnly" {
		t.Errorf("host form Set-Cookie %q", got)
	}
	if h.Get("Content-Security-Policy") != "" || h.Get("Location") != "/login" || h.Get("Alt-Svc") != "" {
		t.Errorf("host form: %v", h)
	}
}

func mustReq(t *testing.T, method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Server-sent events and other chunked streams reach the client one by
// one, as they are written.
func TestStreaming(t *testing.T) {
	f := front(t, program(t), true, defaults())
	for _, q := range []string{"", "?ndjson"} {
		stream(t, f.URL+"/v1/sessions/s1/ports/8080/events"+q)
	}
}

func stream(t *testing.T, url string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		step <- struct{}{}
	}
}

// A WebSocket is upgraded through the proxy (both forms) and echoes; when
// the client closes it, nothing of it is left running.
func TestWebSocket(t *testing.T) {
	prog := program(t)
	before := runtime.NumGoroutine()
	for _, pathForm := range []bool{true, false} {
		f := front(t, prog, pathForm, defaults())
		u := "ws" + strings.TrimPrefix(f.URL, "http") + "/ws"
		if pathForm {
			u = "ws" + strings.TrimPrefix(f.URL, "http") + "/v1/sessions/s1/ports/8080/ws"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			msg := fmt.Sprint("hello ", i)
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, b, err := c.Read(ctx)
			if err != nil || string(b) != "echo:"+msg {
				t.Fatalf("%q %v", b, err)
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
		cancel()
		f.CloseClientConnections()
	}
	waitGoroutines(t, before)
}

// waitGoroutines waits for the goroutines to be back to n (a few of the
// test servers' own may come and go).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > n+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A WebSocket that moves nothing for the idle timeout is closed, both
// sides.
func TestIdleWebSocket(t *testing.T) {
	o := defaults()
	o.IdleTimeout = 300 * time.Millisecond
	f := front(t, program(t), false, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("read: %v (ctx %v)", err, ctx.Err())
	}
}

// Bodies past their caps are refused (request) or cut (response); a
// program that does not listen is the dial's error, as it said it.
func TestCaps(t *testing.T) {
	o := defaults()
	o.MaxRequestBytes, o.MaxResponseBytes = 1024, 4096
	prog := program(t)
	f := front(t, prog, true, o)
	resp, _ := get(t, mustReqBody(t, f.URL+"/v1/sessions/s1/ports/8080/", strings.Repeat("x", 2048)))
	if resp.StatusCode != 413 {
		t.Errorf("request over the cap: %d", resp.StatusCode)
	}
	resp, err := http.Get(f.URL + "/v1/sessions/s1/ports/8080/big")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && len(b) >= 10<<10 {
		t.Errorf("response over the cap: %d bytes, %v", len(b), err)
	}
	resp, err = http.Get(f.URL + "/v1/sessions/s1/ports/8080")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("no slash after the port: %d", resp.StatusCode)
	}
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Serve(w, r, Target{Port: 9, Dial: func(context.Context) (net.Conn, error) {
			return nil, fmt.Errorf("%w: nothing listens on port 9", errdefs.ErrBadGateway)
		}, Fail: func(w http.ResponseWriter, err error) { http.Error(w, errdefs.Message(err), errdefs.HTTPStatus(err)) }}, o)
	}))
	defer dead.Close()
	resp, err = http.Get(dead.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), "nothing listens on port 9") {
		t.Errorf("not listening: %d %s", resp.StatusCode, b)
	}
}

func mustReqBody(t *testing.T, url, body string) *http.Request {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestParseHost(t *testing.T) {
	const d = "ports.example.com"
	for _, c := range []struct {
		host  string
		port  int
		label string
		under bool
	}{
		{"8080-0123456789abcdef01234567.ports.example.com", 8080, "0123456789abcdef01234567", true},
		{"8080-0123456789ABCDEF01234567.PORTS.example.com:443", 8080, "0123456789abcdef01234567", true},
		{"1-airlock-0-k2f9x1-abc.ports.example.com", 1, "airlock-0-k2f9x1-abc", true},
		{"65535-a.ports.example.com", 65535, "a", true},
		{"65536-a.ports.example.com", 0, "", true},
		{"0-a.ports.example.com", 0, "", true},
		{"080-a.ports.example.com", 0, "", true},
		{"+80-a.ports.example.com", 0, "", true},
		{"8080-.ports.example.com", 0, "", true},
		{"8080-a-.ports.example.com", 0, "", true},
		{"8080.ports.example.com", 0, "", true},
		{"x.8080-a.ports.example.com", 0, "", true},
		{"8080-a_b.ports.example.com", 0, "", true},
		{"8080-a.ports.example.com.", 0, "", true},
		{"8080-a.ports.example.com:x", 0, "", true},
		{"8080-" + strings.Repeat("a", 60) + ".ports.example.com", 0, "", true},
		{"ports.example.com", 0, "", false},
		{"api.example.com", 0, "", false},
		{"8080-a.ports.example.com.evil.test", 0, "", false},
		{"8080-aports.example.com", 0, "", false},
		{"[::1]:8080", 0, "", false},
		{"", 0, "", false},
	} {
		port, label, under, err := ParseHost(c.host, d)
		if port != c.port || label != c.label || under != c.under || (err == nil) != (c.port != 0) {
			t.Errorf("ParseHost(%q) = %d %q %v %v", c.host, port, label, under, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("ParseHost(%q): %v", c.host, err)
		}
	}
}

func FuzzParseHost(f *testing.F) {
	f.Add("8080-0123456789abcdef01234567.ports.example.com:443")
	f.Add("1-airlock-0-k2f9x1-abc.PORTS.example.com")
	f.Fuzz(func(t *testing.T, host string) {
		port, label, under, err := ParseHost(host, "ports.example.com")
		if err != nil {
			return
		}
		if !under || port < 1 || port > 65535 || label == "" {
			t.Fatalf("%q: %d %q %v", host, port, label, under)
		}
		if again := HostName(port, label, "ports.example.com"); !strings.EqualFold(again, strings.Split(host, ":")[0]) {
			t.Fatalf("%q gives %q back", host, again)
		}
	})
}

// A program's informational answers (a 103 Early Hints with Set-Cookie,
// Alt-Svc, Clear-Site-Data) never reach the client: ReverseProxy passes
// 1xx headers on without ModifyResponse. Checked against a mutant that
// lets them through.
func TestInformationalDropped(t *testing.T) {
	prog := program(t)
	for _, pathForm := range []bool{true, false} {
		url := front(t, prog, pathForm, defaults()).URL + "/early"
		if pathForm {
			url = strings.Replace(url, "/early", "/v1/sessions/s1/ports/8080/early", 1)
		}
		var got []string
		req := mustReq(t, "GET", url)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got = append(got, fmt.Sprint(code, h))
				return nil
			},
		}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(got) != 0 || resp.StatusCode != 200 || string(b) != "final" || len(resp.Header.Values("Set-Cookie")) != 0 || resp.Header.Get("Alt-Svc") != "" {
			t.Errorf("path form %v: 1xx %q, final %d %q %v", pathForm, got, resp.StatusCode, b, resp.Header)
		}
	}
}
