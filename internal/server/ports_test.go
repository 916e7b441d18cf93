package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/cluster"
	"airlock/internal/config"
)

// portsServer is a server with keys (and an admin token), ports on the
// host form under ports.test over http.
func portsServer(t *testing.T, withKernel func(*config.Config)) (*Server, string) {
	s, _ := testServer(t, newRecorder(), withKernel, func(c *config.Config) {
		c.Server.Auth = config.AuthKeys
		c.Server.Token = "admin-token"
		c.Ports.Domain = "ports.test"
		c.Ports.Scheme = "http"
	})
	return s, "http://" + s.Addr().String()
}

// portGet sends a request to the server with host as its Host header and
// the headers given (name, value, ...); it answers the status and body,
// and the response.
func portGet(t *testing.T, base, host, path string, hdr ...string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

// A web server in a session is reached from outside on both forms, on
// both kernels, through the sandbox's own network namespace: a listener
// on the host's loopback with the same port is never reached (the dial
// made on the host would reach it: checked against that mutant). Nothing
// listening is a 502 that says so; the token, the one-time link and its
// cookie open a private port, nothing else does; a gVisor session without
// a network says how to get one.
func TestPortsReachSandbox(t *testing.T) {
	kernels(t, func(t *testing.T, iso config.Isolation, withKernel func(*config.Config)) {
		s, base := portsServer(t, withKernel)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := client.New(base, client.WithToken("admin-token"))
		defer c.CloseIdleConnections()

		// The host's own listener on the port the sandbox will use.
		hostL, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer hostL.Close()
		go http.Serve(hostL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the host") }))
		port := hostL.Addr().(*net.TCPAddr).Port
		ps := strconv.Itoa(port)

		sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Network: &apitype.NetworkPolicy{Allow: []string{}}})
		if err != nil {
			t.Fatal(err)
		}
		path := "/v1/sessions/" + sess.ID + "/ports/" + ps + "/"
		admin := []string{"Authorization", "Bearer admin-token"}
		code, body, _ := portGet(t, base, "", path, admin...)
		if code != 502 || !strings.Contains(body, "bad_gateway") || !strings.Contains(body, "nothing listens on port "+ps) || strings.Contains(body, "the host") {
			t.Fatalf("nothing listening in the sandbox: %d %s", code, body)
		}
		// A web server in the sandbox, on the same port.
		if _, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Background: true,
			Command: "echo hello from the sandbox > index.html && exec python3 -m http.server " + ps + " --bind 127.0.0.1"}, nil); err != nil {
			t.Fatal(err)
		}
		for {
			code, body, _ = portGet(t, base, "", path+"index.html", admin...)
			if code != 502 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the server in the sandbox never answered: %d %s", code, body)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if code != 200 || body != "hello from the sandbox\n" {
			t.Fatalf("path form: %d %q", code, body)
		}

		// The host form: a private port wants its token.
		label, _ := cluster.HostLabel(sess.ID, 63)
		host := ps + "-" + label + ".ports.test"
		if code, body, _ := portGet(t, base, host, "/index.html"); code != 401 || !strings.Contains(body, "X-Airlock-Port-Token") {
			t.Fatalf("host form without a token: %d %s", code, body)
		}
		p, err := c.OpenPort(ctx, sess.ID, port, false)
		if err != nil {
			t.Fatal(err)
		}
		if p.Token == "" || p.Host != host || p.URL != "http://"+host+"/" || !strings.HasPrefix(p.Link, p.URL+"?airlock_token=alp_") || p.Path != path {
			t.Fatalf("open: %+v", p)
		}
		if code, body, _ := portGet(t, base, host, "/index.html", apitype.PortTokenHeader, p.Token); code != 200 || body != "hello from the sandbox\n" {
			t.Fatalf("host form with the token: %d %q", code, body)
		}
		if code, _, _ := portGet(t, base, "", path+"index.html", apitype.PortTokenHeader, p.Token); code != 200 {
			t.Fatalf("path form with the token: %d", code)
		}
		// Another port's host, a wrong token, the API key in the URL's
		// place: refused.
		for _, h := range [][]string{{"1-" + label + ".ports.test", apitype.PortTokenHeader, p.Token}, {host, apitype.PortTokenHeader, p.Token + "x"}, {host, "Authorization", "Bearer admin-token"}} {
			if code, _, _ := portGet(t, base, h[0], "/index.html", h[1:]...); code != 401 {
				t.Errorf("%v: %d", h, code)
			}
		}
		// The one-time link sets the host's cookie once.
		linkPath := strings.TrimPrefix(p.Link, "http://"+host)
		code, _, resp := portGet(t, base, host, linkPath)
		cookies := resp.Cookies()
		if code != 303 || resp.Header.Get("Location") != "/" || len(cookies) != 1 || cookies[0].Name != "airlock-port" || !cookies[0].HttpOnly || cookies[0].Domain != "" {
			t.Fatalf("link: %d %v %v", code, resp.Header, cookies)
		}
		if code, _, _ := portGet(t, base, host, "/index.html", "Cookie", "airlock-port="+cookies[0].Value); code != 200 {
			t.Errorf("with the link's cookie: %d", code)
		}
		if code, _, _ := portGet(t, base, host, linkPath); code != 401 {
			t.Errorf("the link twice: %d", code)
		}
		// A link's redirect never leaves the host (//host is another).
		p2, err := c.OpenPort(ctx, sess.ID, port, false)
		if err != nil || p2.Token != p.Token {
			t.Errorf("opened again: a new token")
		}
		code, _, resp = portGet(t, base, host, "//evil.test/x"+strings.TrimPrefix(p2.Link, p2.URL))
		if code != 303 || resp.Header.Get("Location") != "/" {
			t.Errorf("a link to //evil.test: %d %q", code, resp.Header.Get("Location"))
		}
		if code, _, _ := portGet(t, base, host, "/index.html", apitype.PortKeyHeader, "admin-token"); code != 200 {
			t.Errorf("host form with the API key: %d", code)
		}
		// What it carried is counted; closing the port revokes the token.
		if list, err := c.Ports(ctx, sess.ID); err != nil || len(list) != 1 || list[0].Requests < 5 || list[0].BytesOut == 0 || list[0].Token != "" {
			t.Errorf("ports: %+v %v", list, err)
		}
		if err := c.ClosePort(ctx, sess.ID, port); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := portGet(t, base, host, "/index.html", apitype.PortTokenHeader, p.Token); code != 401 {
			t.Errorf("a closed port's token: %d", code)
		}

		if iso == config.GVisor {
			bare, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
			if err != nil {
				t.Fatal(err)
			}
			code, body, _ := portGet(t, base, "", "/v1/sessions/"+bare.ID+"/ports/8000/", admin...)
			if code != 409 || !strings.Contains(body, `\"network\"`) {
				t.Errorf("gVisor without a network: %d %s", code, body)
			}
		}
		_ = s
	})
}

// Airlock's own ports inside a sandbox are never a port link's: the
// tool endpoint (3129), the egress proxy (3128), DNS (53) and the egress
// gate's ports (here 443, from the session's policy) are refused with a
// 403 that says why, on every way in: opening one (private or public),
// the path form with the API key, the host form with the key. (A token
// or a public port cannot exist for them: opening is refused.) Checked
// against a mutant that lets 3129 through.
func TestPortsRefuseAirlockPorts(t *testing.T) {
	s, base := portsServer(t, func(c *config.Config) { c.Ports.AllowPublic = true })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(base, client.WithToken("admin-token"))
	defer c.CloseIdleConnections()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Network: &apitype.NetworkPolicy{Allow: []string{"example.com:443"}}})
	if err != nil {
		t.Fatal(err)
	}
	label, _ := cluster.HostLabel(sess.ID, 63)
	admin := []string{"Authorization", "Bearer admin-token"}
	for _, port := range []int{3129, 3128, 53, 443} {
		ps := strconv.Itoa(port)
		for _, public := range []bool{false, true} {
			if _, err := c.OpenPort(ctx, sess.ID, port, public); err == nil || !strings.Contains(err.Error(), "airlock's") {
				t.Errorf("open %d (public %v): %v", port, public, err)
			}
		}
		if code, body, _ := portGet(t, base, "", "/v1/sessions/"+sess.ID+"/ports/"+ps+"/", admin...); code != 403 || !strings.Contains(body, "airlock's") {
			t.Errorf("path form with the key, port %d: %d %s", port, code, body)
		}
		if code, body, _ := portGet(t, base, ps+"-"+label+".ports.test", "/", apitype.PortKeyHeader, "admin-token"); code != 403 || !strings.Contains(body, "airlock's") {
			t.Errorf("host form with the key, port %d: %d %s", port, code, body)
		}
		if code, _, _ := portGet(t, base, ps+"-"+label+".ports.test", "/"); code != 401 {
			t.Errorf("host form without anything, port %d: %d", port, code)
		}
	}
	if list, err := c.Ports(ctx, sess.ID); err != nil || len(list) != 0 {
		t.Errorf("ports: %+v %v", list, err)
	}
	_ = s
}

// A private port's cookie (set by its link) is refused on a WebSocket
// or a state-changing request that another tenant's port page (one
// site: ports.domain) or another site made; the port's own page and the
// token header still get through. Checked against a mutant without the
// guard in serveHost.
func TestPortsCookieCrossOrigin(t *testing.T) {
	_, base := portsServer(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(base, client.WithToken("admin-token"))
	defer c.CloseIdleConnections()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Network: &apitype.NetworkPolicy{Allow: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Background: true,
		Command: "echo hi > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := c.OpenPort(ctx, sess.ID, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _, resp := portGet(t, base, p.Host, strings.TrimPrefix(p.Link, "http://"+p.Host))
	if len(resp.Cookies()) != 1 {
		t.Fatalf("link: %v", resp.Header)
	}
	cookie := "airlock-port=" + resp.Cookies()[0].Value
	for {
		code, _, _ := portGet(t, base, p.Host, "/index.html", "Cookie", cookie)
		if code == 200 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server in the sandbox never answered: %d", code)
		case <-time.After(50 * time.Millisecond):
		}
	}
	send := func(method string, hdr ...string) (int, string) {
		req, err := http.NewRequest(method, base+"/index.html", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = p.Host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	evil := "http://8000-other.ports.test"
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, h := range [][]string{
		append([]string{"Cookie", cookie, "Origin", evil}, ws...),
		{"Cookie", cookie, "Origin", evil, "Sec-Fetch-Site", "same-site"},
		{"Cookie", cookie, "Sec-Fetch-Site", "cross-site"},
	} {
		method := "POST"
		if len(h) > 6 {
			method = "GET"
		}
		if code, body := send(method, h...); code != 403 || !strings.Contains(body, "port's cookie") {
			t.Errorf("%s %v: %d %s", method, h, code, body)
		}
	}
	// The port's own page, and the token from anywhere: the program
	// answers (http.server has no POST: 501).
	for _, h := range [][]string{
		{"Cookie", cookie, "Origin", "http://" + p.Host, "Sec-Fetch-Site", "same-origin"},
		{apitype.PortTokenHeader, p.Token, "Origin", evil, "Sec-Fetch-Site", "same-site"},
	} {
		if code, body := send("POST", h...); code != 501 {
			t.Errorf("POST %v: %d %s", h, code, body)
		}
	}
}
