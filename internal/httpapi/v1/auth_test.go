package v1

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/session"
)

// With a token configured, every request but the public paths (/healthz,
// /readyz, /v1/openapi.json) must carry it,
// except those that came over the unix socket (mode 0600: the server's
// own user).
func TestAuthentication(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Token = "s3cret"
	s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	unix := &net.UnixAddr{Name: "/run/airlock/airlock.sock", Net: "unix"}
	cases := []struct {
		name, path, auth string
		via              net.Addr
		want             int
	}{
		{"no token", "/v1/sessions", "", tcp, http.StatusUnauthorized},
		{"wrong token", "/v1/sessions", "Bearer nope", tcp, http.StatusUnauthorized},
		{"not a bearer token", "/v1/sessions", "Basic s3cret", tcp, http.StatusUnauthorized},
		{"right token plus more", "/v1/sessions", "Bearer s3cretX", tcp, http.StatusUnauthorized},
		{"prefix of the token", "/v1/sessions", "Bearer s3cre", tcp, http.StatusUnauthorized},
		{"right token", "/v1/sessions", "Bearer s3cret", tcp, http.StatusOK},
		{"health needs none", "/healthz", "", tcp, http.StatusOK},
		{"readiness needs none", "/readyz", "", tcp, http.StatusOK},
		{"the API's description needs none", "/v1/openapi.json", "", tcp, http.StatusOK},
		{"unix socket needs none", "/v1/sessions", "", unix, http.StatusOK},
		// MCP clients look for OAuth there after a 401: they must find
		// nothing (404) rather than another 401.
		{"OAuth resource metadata: none", "/.well-known/oauth-protected-resource", "", tcp, http.StatusNotFound},
		{"OAuth resource metadata of /mcp: none", "/.well-known/oauth-protected-resource/mcp", "", tcp, http.StatusNotFound},
		{"OAuth server metadata: none", "/.well-known/oauth-authorization-server", "", tcp, http.StatusNotFound},
		{"OpenID configuration: none", "/.well-known/openid-configuration", "Bearer nope", tcp, http.StatusNotFound},
	}
	for _, c := range cases {
		req := httptest.NewRequest("GET", c.path, nil)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, c.via))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: status %d, want %d", c.name, rec.Code, c.want)
		}
		if c.want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s: WWW-Authenticate %q, want Bearer (no resource_metadata to send clients into OAuth)", c.name, rec.Header().Get("WWW-Authenticate"))
		}
		if c.want == http.StatusUnauthorized && !strings.Contains(rec.Body.String(), "bad or missing API key") {
			t.Errorf("%s: %s", c.name, rec.Body)
		}
	}
}

// fakeKeys is an Authenticator over a fixed set of keys.
type fakeKeys map[string]identity.Identity

func (f fakeKeys) Authenticate(_ context.Context, secret string) (identity.Identity, string, error) {
	id, ok := f[secret]
	switch {
	case !ok:
		return identity.Identity{}, httpapi.RefusedUnknownKey, nil
	case strings.HasPrefix(secret, "alk_revoked"):
		return id, httpapi.RefusedRevokedKey, nil
	case strings.HasPrefix(secret, "alk_expired"):
		return id, httpapi.RefusedExpiredKey, nil
	}
	return id, "", nil
}

// The caller is resolved once, at the edge, and reaches the handler in the
// request's context: the key's tenant and id, admin for the token, the
// unix socket and auth "none"; nothing for a public path.
func TestIdentityAtTheEdge(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	unix := &net.UnixAddr{Name: "/run/airlock/airlock.sock", Net: "unix"}
	for _, c := range []struct {
		name, auth, bearer, path string
		via                      net.Addr
		status                   int
		want                     *identity.Identity
	}{
		{"a tenant's key", config.AuthKeys, "alk_a", "/x", tcp, 200, &identity.Identity{Tenant: "a", KeyID: "key_a"}},
		{"an admin key", config.AuthKeys, "alk_admin", "/x", tcp, 200, &identity.Identity{Tenant: "ops", KeyID: "key_ops", Admin: true}},
		{"the token", config.AuthKeys, "tok", "/x", tcp, 200, &identity.Identity{Admin: true}},
		{"an unknown key", config.AuthKeys, "alk_b", "/x", tcp, 401, nil},
		{"no key", config.AuthKeys, "", "/x", tcp, 401, nil},
		{"the socket", config.AuthKeys, "", "/x", unix, 200, &identity.Identity{Admin: true}},
		{"auth none", config.AuthNone, "", "/x", tcp, 200, &identity.Identity{Admin: true}},
		{"a public path", config.AuthKeys, "", "/healthz", tcp, 200, nil},
	} {
		cfg := config.Default()
		cfg.Server.Auth, cfg.Server.Token = c.auth, "tok"
		s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
		s.Keys = fakeKeys{"alk_a": {Tenant: "a", KeyID: "key_a"}, "alk_admin": {Tenant: "ops", KeyID: "key_ops", Admin: true}}
		var got *identity.Identity
		var reqID string
		h := func(w http.ResponseWriter, r *http.Request) {
			if id, ok := identity.From(r.Context()); ok {
				got = &id
			}
			reqID = identity.Request(r.Context())
		}
		s.Handle("GET /x", http.HandlerFunc(h))
		if c.path == "/healthz" {
			s.Public("/y")
			s.Handle("GET /y", http.HandlerFunc(h))
			c.path = "/y"
		}
		req := httptest.NewRequest("GET", c.path, nil)
		req.Host = "127.0.0.1:8080" // as a client of a loopback listener names it
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, c.via))
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		req.Header.Set("X-Request-Id", "req-42")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, rec.Code, c.status)
			continue
		}
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%s: identity %+v, want %+v", c.name, got, c.want)
		}
		if c.status == 200 && reqID != "req-42" {
			t.Errorf("%s: request id %q in the context", c.name, reqID)
		}
	}
}

// A server without authentication answers no web page: a DNS-rebinding
// page (a foreign Host on the loopback listener) and a cross-site request
// (a foreign Origin, Sec-Fetch-Site: cross-site) get 403, whereas local
// clients, the unix socket and this process's in-process client pass. With
// keys the guard is off: a page has no key to send. (Red team: without it
// any page the operator visited could list, read and run code in every
// session of an auth "none" server.)
func TestBrowserGuard(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	tcp6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}
	unix := &net.UnixAddr{Name: "/run/airlock/airlock.sock", Net: "unix"}
	for _, c := range []struct {
		name, auth, host string
		hdr              map[string]string
		via              net.Addr
		remote           string
		status           int
	}{
		{"curl", config.AuthNone, "127.0.0.1:8080", nil, tcp, "", 200},
		{"localhost", config.AuthNone, "localhost:8080", nil, tcp, "", 200},
		{"IPv6", config.AuthNone, "[::1]:8080", nil, tcp6, "", 200},
		{"same-origin page", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"}, tcp, "", 200},
		{"rebinding", config.AuthNone, "evil.example:8080", nil, tcp, "", 403},
		{"rebinding, no port", config.AuthNone, "evil.example", nil, tcp, "", 403},
		{"cross-site POST", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "https://evil.example"}, tcp, "", 403},
		{"null origin", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "null"}, tcp, "", 403},
		{"cross-site fetch", config.AuthNone, "127.0.0.1:8080", map[string]string{"Sec-Fetch-Site": "cross-site"}, tcp, "", 403},
		// Only the server's own origin: a page on another port of the
		// same loopback host is another origin (and the same site).
		{"own origin, 127.0.0.1", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "http://127.0.0.1:8080"}, tcp, "", 200},
		{"own origin, IPv6", config.AuthNone, "[::1]:8080", map[string]string{"Origin": "http://[::1]:8080"}, tcp6, "", 200},
		{"own origin, case", config.AuthNone, "LocalHost:8080", map[string]string{"Origin": "http://localhost:8080"}, tcp, "", 200},
		{"own origin, default port", config.AuthNone, "localhost", map[string]string{"Origin": "http://localhost"}, tcp, "", 200},
		{"other port", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://localhost:3000"}, tcp, "", 403},
		{"other port, 127.0.0.1", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "http://127.0.0.1:3000"}, tcp, "", 403},
		{"default port vs 8080", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://localhost"}, tcp, "", 403},
		{"other loopback host", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://127.0.0.1:8080"}, tcp, "", 403},
		{"other loopback address", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "http://127.0.0.2:8080"}, tcp, "", 403},
		{"IPv6 page, IPv4 host", config.AuthNone, "127.0.0.1:8080", map[string]string{"Origin": "http://[::1]:8080"}, tcp, "", 403},
		{"https page", config.AuthNone, "localhost:8080", map[string]string{"Origin": "https://localhost:8080"}, tcp, "", 403},
		{"other host, same port", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://evil.example:8080"}, tcp, "", 403},
		{"origin with a path", config.AuthNone, "localhost:8080", map[string]string{"Origin": "http://localhost:8080/x"}, tcp, "", 403},
		{"null origin, localhost", config.AuthNone, "localhost:8080", map[string]string{"Origin": "null"}, tcp, "", 403},
		{"same-site fetch", config.AuthNone, "localhost:8080", map[string]string{"Sec-Fetch-Site": "same-site"}, tcp, "", 403},
		{"user-typed URL", config.AuthNone, "localhost:8080", map[string]string{"Sec-Fetch-Site": "none"}, tcp, "", 200},
		{"socket", config.AuthNone, "evil.example", map[string]string{"Origin": "https://evil.example"}, unix, "", 200},
		{"in-process", config.AuthNone, "airlock", nil, tcp, "in-process", 200},
		{"keys: no guard", config.AuthKeys, "evil.example", map[string]string{"Origin": "https://evil.example"}, tcp, "", 200},
	} {
		cfg := config.Default()
		cfg.Server.Auth, cfg.Server.Token = c.auth, "tok"
		s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
		s.Handle("POST /x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := httptest.NewRequest("POST", "/x", nil)
		req.Host = c.host
		if c.remote != "" {
			req.RemoteAddr = c.remote
		}
		if c.auth == config.AuthKeys {
			req.Header.Set("Authorization", "Bearer tok")
		}
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, c.via))
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, rec.Code, c.status, rec.Body.String())
		}
	}
}

// Every request refused for who sent it is reported, by reason, with the
// client's address and the key's identity when it is known (a revoked or
// expired key), and answered as before: authentication failures 401
// (an expired key says so), an admin's route 403, another tenant's
// records an empty list, a page the browser guard refuses 403.
func TestRefusalsReported(t *testing.T) {
	for _, c := range []struct {
		name, auth, method, path, bearer, origin string
		status                                   int
		want                                     httpapi.Refusal
	}{
		{"no key", config.AuthKeys, "GET", "/v1/sessions", "", "", 401, httpapi.Refusal{Kind: apitype.AuditAuthFailure, Reason: httpapi.RefusedMissingKey}},
		{"unknown key", config.AuthKeys, "GET", "/v1/sessions", "alk_nope", "", 401, httpapi.Refusal{Kind: apitype.AuditAuthFailure, Reason: httpapi.RefusedUnknownKey}},
		{"revoked key", config.AuthKeys, "GET", "/v1/sessions", "alk_revoked", "", 401, httpapi.Refusal{Kind: apitype.AuditAuthFailure, Reason: httpapi.RefusedRevokedKey, Tenant: "a", KeyID: "key_r"}},
		{"expired key", config.AuthKeys, "GET", "/v1/sessions", "alk_expired", "", 401, httpapi.Refusal{Kind: apitype.AuditAuthFailure, Reason: httpapi.RefusedExpiredKey, Tenant: "a", KeyID: "key_e"}},
		{"admin only", config.AuthKeys, "GET", "/admin", "alk_a", "", 403, httpapi.Refusal{Kind: apitype.AuditAccessDenied, Reason: httpapi.RefusedAdminOnly, Tenant: "a", KeyID: "key_a"}},
		{"other tenant's records", config.AuthKeys, "GET", "/v1/audit?tenant=b", "alk_a", "", 200, httpapi.Refusal{Kind: apitype.AuditAccessDenied, Reason: httpapi.RefusedCrossTenant, Tenant: "a", KeyID: "key_a"}},
		{"browser", config.AuthNone, "POST", "/v1/sessions", "", "http://localhost:3000", 403, httpapi.Refusal{Kind: apitype.AuditAuthFailure, Reason: httpapi.RefusedBrowser}},
		{"live key", config.AuthKeys, "GET", "/v1/sessions", "alk_a", "", 200, httpapi.Refusal{}},
	} {
		cfg := config.Default()
		cfg.Server.Auth = c.auth
		s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
		s.Keys = fakeKeys{"alk_a": {Tenant: "a", KeyID: "key_a"}, "alk_revoked": {Tenant: "a", KeyID: "key_r"}, "alk_expired": {Tenant: "a", KeyID: "key_e"}}
		s.Audit = &fakeAudit{}
		s.HandleAdmin("GET /admin", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var got []httpapi.Refusal
		s.Refused = func(r httpapi.Refusal) { got = append(got, r) }
		req := httptest.NewRequest(c.method, c.path, nil)
		req.RemoteAddr = "192.0.2.7:41000"
		req.Host = "localhost:8080"
		req.Header.Set(apitype.RequestIDHeader, "req-1")
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, rec.Code, c.status, rec.Body)
		}
		if c.want == (httpapi.Refusal{}) {
			if len(got) != 0 {
				t.Errorf("%s: refusals %+v, want none", c.name, got)
			}
			continue
		}
		c.want.Source, c.want.RequestID = "192.0.2.7", "req-1"
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: refusals %+v, want %+v", c.name, got, c.want)
		}
		if c.want.Reason == httpapi.RefusedExpiredKey && !strings.Contains(rec.Body.String(), "expired") {
			t.Errorf("%s: %s; want the client told the key expired", c.name, rec.Body)
		}
	}
}

// Only a port's path form is served without an API key (the port judges
// the request): no other path, however it is spelled, skips
// authentication.
func TestAnonymousOnlyOnPorts(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Token = "secret"
	s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/sessions/s1/ports/8080/", 401},        // the port's own 401: no such session
		{"/v1/sessions/s1/ports/8080/x/y?z=1", 401}, // the same
		{"/v1/sessions/s1/ports/8080", 401},
		{"/v1/sessions/s1/ports%2F8080/x", 401},
		{"/v1/sessions/s1/files/ports/8080/x", 401},
		{"/v1/sessions/s1/ports/8080/../../s2", 400}, // refused as it is
		{"/v1/sessions", 401},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
		want := "bad or missing API key"
		switch {
		case strings.Contains(c.path, ".."):
			want = "segments"
		case strings.HasPrefix(c.path, "/v1/sessions/s1/ports/8080/"):
			want = "the port is private"
		}
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d %s, want %d %q", c.path, rec.Code, rec.Body, c.code, want)
		}
	}
}
