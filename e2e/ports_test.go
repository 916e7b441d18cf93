package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"airlock/internal/apitype"
	"airlock/internal/cluster"
)

// portsApp is a program a session runs: a threaded WSGI app on 8000
// (hello, an echo of the request, a stream that waits for /next between
// its lines) and a WebSocket echo on 8001, written against the standard
// library only (RFC 6455's handshake and frames).
const portsApp = `
import base64, hashlib, json, socket, socketserver, struct, threading
from wsgiref.simple_server import WSGIServer, make_server, WSGIRequestHandler

step = threading.Semaphore(0)

def app(environ, start):
    path = environ["PATH_INFO"]
    if path == "/stream":
        start("200 OK", [("Content-Type", "text/event-stream")])
        def gen():
            for i in range(3):
                yield ("data: %d\n\n" % i).encode()
                step.acquire(timeout=30)
        return gen()
    if path == "/next":
        step.release()
        start("204 No Content", [])
        return [b""]
    if path == "/hostile":
        # What a hostile app answers to take the API's origin, the
        # port's cookie or its siblings'.
        start("302 Found", [("Location", "/elsewhere"),
            ("Set-Cookie", "airlock-port=stolen; Path=/"), ("Set-Cookie", "__Host-airlock-port=stolen; Secure; Path=/"),
            ("Set-Cookie", "evil=1; Domain=.ports.test; Path=/"), ("Clear-Site-Data", '"*"'),
            ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"), ("Service-Worker-Allowed", "/"),
            ("Alt-Svc", 'h2="evil.test:443"')])
        return [b""]
    n = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(n).decode() if n else ""
    seen = {"method": environ["REQUEST_METHOD"], "path": path, "query": environ.get("QUERY_STRING", ""), "body": body,
            "headers": {k: v for k, v in environ.items() if k.startswith("HTTP_")}}
    start("200 OK", [("Content-Type", "application/json"), ("Set-Cookie", "app=1; Domain=ports.test; Path=/")])
    return [json.dumps(seen).encode()]

class Threaded(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

class Quiet(WSGIRequestHandler):
    def log_message(self, *a):
        pass

class WS(socketserver.StreamRequestHandler):
    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.request.recv(4096)
            if not b:
                return
            head += b
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
        acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        self.request.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        f = self.request.makefile("rb")
        while True:
            h = f.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", f.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", f.read(8))[0]
            mask = f.read(4)
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(f.read(n)))
            if op == 8:
                self.request.sendall(b"\x88\x00")
                return
            if op == 1:
                out = b"echo:" + data
                self.request.sendall(bytes([0x81, len(out)]) + out)

class WSServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

threading.Thread(target=WSServer(("0.0.0.0", 8001), WS).serve_forever, daemon=True).start()
make_server("127.0.0.1", 8000, app, server_class=Threaded, handler_class=Quiet).serve_forever()
`

// portReq sends a request to the server, to host when set (the host
// form), with the headers given.
func portReq(t *testing.T, s *server, method, host, path, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// openFDs counts the server process's open descriptors.
func (s *server) openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// listening is what TCP ports the server process listens on in its own
// (the host's) network namespace: its sockets' inodes matched with the
// namespace's listening sockets.
func (s *server) listening(t *testing.T) []string {
	t.Helper()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	mine := map[string]bool{}
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/" + pid + "/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + pid + "/net/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" && mine[fs[9]] {
				out = append(out, f+" "+fs[1])
			}
		}
	}
	slices.Sort(out)
	return out
}

// Apps in a session reached from outside through a real server with
// keys: a WSGI app (requests, a body, a stream of server-sent events that
// arrive one by one) and a WebSocket echo, on the path form and the host
// form; what the app sees carries none of airlock's credentials; another
// tenant's key finds nothing (404), a port's token opens that port of
// that session only; a public port needs nothing; WebSockets closed leave
// no descriptor behind in the server.
func TestPorts(t *testing.T) {
	s := keysServer(t, map[string]any{
		"ports": map[string]any{"domain": "ports.test", "scheme": "http", "allow_public": true},
		"pool":  map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	a, b := s.newKey("a"), s.newKey("b")
	listeners := s.listening(t)
	if api := s.URL[strings.LastIndexByte(s.URL, ':')+1:]; !slices.ContainsFunc(listeners, func(l string) bool {
		n, _ := strconv.Atoi(api)
		return strings.HasSuffix(l, fmt.Sprintf(":%04X", n))
	}) {
		t.Fatalf("the server's listeners %v miss the API's port %s", listeners, api)
	}
	authA := map[string]string{"Authorization": "Bearer " + a}
	authB := map[string]string{"Authorization": "Bearer " + b}
	code, body := s.raw("POST", "/v1/sessions", map[string]any{"language": "python"}, authA)
	var sess apitype.Session
	if code != 201 || json.Unmarshal(body, &sess) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	other := ""
	if code, body := s.raw("POST", "/v1/sessions", map[string]any{"language": "python"}, authA); code == 201 {
		var o apitype.Session
		json.Unmarshal(body, &o)
		other = o.ID
	}
	if code, body := s.raw("PUT", "/v1/sessions/"+sess.ID+"/files/app.py", portsApp, authA); code != 201 && code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := s.raw("POST", "/v1/sessions/"+sess.ID+"/commands", map[string]any{"command": "exec python3 app.py", "background": true}, authA); code != 201 {
		t.Fatalf("start the app: %d %s", code, body)
	}
	base := "/v1/sessions/" + sess.ID + "/ports/"
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, _ := portReq(t, s, "GET", "", base+"8000/hello", "", authA)
		if code == 200 {
			break
		}
		if code != 502 || time.Now().After(deadline) {
			t.Fatalf("the app never answered: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The path form: what the app sees.
	code, body2, hdr := portReq(t, s, "POST", "", base+"8000/echo/a%20b?x=1", "payload", map[string]string{"Authorization": "Bearer " + a, "Cookie": "c=1"})
	var seen struct {
		Method, Path, Query, Body string
		Headers                   map[string]string
	}
	if code != 200 || json.Unmarshal([]byte(body2), &seen) != nil || seen.Method != "POST" || seen.Path != "/echo/a b" || seen.Query != "x=1" || seen.Body != "payload" {
		t.Fatalf("path form: %d %s", code, body2)
	}
	if strings.Contains(body2, a) || seen.Headers["HTTP_AUTHORIZATION"] != "" || seen.Headers["HTTP_X_FORWARDED_PREFIX"] != strings.TrimSuffix(base, "/")+"/8000" || seen.Headers["HTTP_COOKIE"] != "c=1" {
		t.Errorf("the app saw %v", seen.Headers)
	}
	if hdr.Get("Set-Cookie") != "" || !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("path form answer headers: %v", hdr)
	}

	// What the client claims of where it is, the app does not get.
	code, body2, _ = portReq(t, s, "GET", "", base+"8000/echo", "", map[string]string{"Authorization": "Bearer " + a,
		"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "evil.test", "Forwarded": "for=6.6.6.6", "X-Real-Ip": "6.6.6.6"})
	if code != 200 || strings.Contains(body2, "6.6.6.6") || strings.Contains(body2, "evil.test") || !strings.Contains(body2, `"HTTP_X_FORWARDED_FOR": "127.0.0.1"`) {
		t.Errorf("forwarded headers: %d %s", code, body2)
	}

	// A port nothing listens on, and a program that answers no HTTP
	// (the WebSocket echo drops a plain request): a 502 that says so.
	for _, c := range []struct{ port, want string }{
		{"8002", "nothing listens on port 8002 inside the session"},
		{"8001", "the program on port 8001 closed the connection or answered no valid HTTP"},
	} {
		code, body, _ := portReq(t, s, "GET", "", base+c.port+"/", "", authA)
		if code != 502 || !strings.Contains(body, `"bad_gateway"`) || !strings.Contains(body, c.want) {
			t.Errorf("port %s: %d %s, want 502 %q", c.port, code, body, c.want)
		}
	}
	s.raw("DELETE", base+"8002", nil, authA) // it was opened by that request

	// A hostile answer: on the API's origin it sets nothing and its
	// redirect stays under the port.
	code, _, hdr = portReq(t, s, "GET", "", base+"8000/hostile", "", authA)
	for _, k := range []string{"Set-Cookie", "Clear-Site-Data", "Strict-Transport-Security", "Service-Worker-Allowed", "Alt-Svc"} {
		if hdr.Get(k) != "" {
			t.Errorf("path form: the app's %s: %q reached the client", k, hdr.Get(k))
		}
	}
	if code != 302 || hdr.Get("Location") != base+"8000/elsewhere" || !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("path form hostile answer: %d %v", code, hdr)
	}

	// Another tenant finds nothing; nor does a request without a key
	// to a private port.
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		want         int
	}{
		{"GET", base + "8000/hello", authB, 404},
		{"POST", base + "8000", authB, 404},
		{"GET", base[:len(base)-1], authB, 404},
		{"GET", base + "8000/hello", nil, 401},
	} {
		if code, body, _ := portReq(t, s, c.method, "", c.path, "", c.hdr); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
	}

	// The token opens that port of that session only.
	var p apitype.Port
	code, body = s.raw("POST", base+"8000", map[string]any{}, authA)
	if code != 200 || json.Unmarshal(body, &p) != nil || p.Token == "" {
		t.Fatalf("open: %d %s", code, body)
	}
	tok := map[string]string{apitype.PortTokenHeader: p.Token}
	label, _ := cluster.HostLabel(sess.ID, 63)
	host := "8000-" + label + ".ports.test"
	if p.Host != host {
		t.Errorf("host %q, want %q", p.Host, host)
	}
	if code, _, _ := portReq(t, s, "GET", "", base+"8000/hello", "", tok); code != 200 {
		t.Errorf("path form with the token: %d", code)
	}
	code, body2, hdr = portReq(t, s, "GET", host, "/hello", "", map[string]string{apitype.PortTokenHeader: p.Token, "Authorization": "Bearer app-own"})
	if code != 200 || !strings.Contains(body2, `"HTTP_AUTHORIZATION": "Bearer app-own"`) || strings.Contains(body2, p.Token) {
		t.Errorf("host form with the token: %d %s", code, body2)
	}
	if got := hdr.Values("Set-Cookie"); len(got) != 1 || got[0] != "app=1; Path=/" {
		t.Errorf("host form Set-Cookie %q", got)
	}
	// On the host form the app's cookies are its host's only, never the
	// port's own, and it pins nothing on other hosts.
	code, _, hdr = portReq(t, s, "GET", host, "/hostile", "", tok)
	if got := hdr.Values("Set-Cookie"); code != 302 || len(got) != 1 || got[0] != "evil=1; Path=/" || hdr.Get("Alt-Svc") != "" || hdr.Get("Location") != "/elsewhere" {
		t.Errorf("host form hostile answer: %d %v", code, hdr)
	}
	for _, c := range []struct{ host, path string }{{"", base + "8001/"}, {"8001-" + label + ".ports.test", "/"}} {
		if code, _, _ := portReq(t, s, "GET", c.host, c.path, "", tok); code != 401 {
			t.Errorf("the token on port 8001 (%q %s): %d", c.host, c.path, code)
		}
	}
	if other != "" {
		ol, _ := cluster.HostLabel(other, 63)
		if code, _, _ := portReq(t, s, "GET", "8000-"+ol+".ports.test", "/", "", tok); code != 401 {
			t.Errorf("the token on another session: %d", code)
		}
	}

	// Server-sent events arrive one by one, on the host form.
	streamed := func() {
		req, _ := http.NewRequest("GET", s.URL+"/stream", nil)
		req.Host = host
		req.Header.Set(apitype.PortTokenHeader, p.Token)
		resp, err := http.DefaultClient.Do(req)
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
			if code, _, _ := portReq(t, s, "GET", "", base+"8000/next", "", tok); code != 204 {
				t.Fatalf("next: %d", code)
			}
		}
	}
	streamed()

	// WebSockets, both forms; the server's descriptors come back to
	// where they were once they are closed.
	before := s.openFDs(t)
	wsBase := "ws" + strings.TrimPrefix(s.URL, "http")
	for _, c := range []struct {
		url, host string
		hdr       http.Header
	}{
		{wsBase + base + "8001/", "", http.Header{"Authorization": {"Bearer " + a}}},
		{wsBase + base + "8001/", "", nil}, // made public below
		{wsBase + "/", "8001-" + label + ".ports.test", http.Header{apitype.PortKeyHeader: {a}}},
	} {
		if c.hdr == nil {
			if code, body := s.raw("POST", base+"8001", map[string]any{"public": true}, authA); code != 200 {
				t.Fatalf("public: %d %s", code, body)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ws, _, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{HTTPHeader: c.hdr, Host: c.host})
		if err != nil {
			cancel()
			t.Fatalf("%s %s: %v", c.url, c.host, err)
		}
		for i := range 3 {
			msg := fmt.Sprint("hello ", i)
			if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if _, got, err := ws.Read(ctx); err != nil || string(got) != "echo:"+msg {
				t.Fatalf("%s: %q %v", c.url, got, err)
			}
		}
		ws.Close(websocket.StatusNormalClosure, "")
		cancel()
	}
	http.DefaultClient.CloseIdleConnections()
	deadline = time.Now().Add(20 * time.Second)
	for s.openFDs(t) > before {
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d descriptors, %d before the WebSockets", s.openFDs(t), before)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Nothing of this bound a port of the host's.
	if got := s.listening(t); !slices.Equal(got, listeners) {
		t.Errorf("the server listens on %v, %v before the ports were used", got, listeners)
	}

	// What each port carried is counted, and the audit log has it.
	code, body = s.raw("GET", base[:len(base)-1], nil, authA)
	var list apitype.PortList
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Ports) != 2 || list.Ports[0].Requests == 0 || list.Ports[0].BytesOut == 0 || list.Ports[1].BytesIn == 0 {
		t.Errorf("ports: %d %s", code, body)
	}
	s.raw("DELETE", "/v1/sessions/"+sess.ID, nil, authA)
	// The log writes in batches: wait for the session's end, then look.
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, body = s.raw("GET", "/v1/audit?kind=port.close&session="+sess.ID, nil, authA)
		var recs apitype.AuditList
		closed := map[int]apitype.AuditRecord{}
		if code == 200 && json.Unmarshal(body, &recs) == nil {
			for _, r := range recs.Records {
				closed[r.Port] = r
			}
		}
		if r8000, ok := closed[8000]; ok && closed[8001].Public {
			if r8000.BytesIn == 0 || r8000.BytesOut == 0 || r8000.Tenant != "a" {
				t.Errorf("audit: %+v", r8000)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit: %d %s, want port.close records of 8000 and 8001 (public)", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
