package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"airlock/internal/config"
	"airlock/internal/session"
)

// With a token configured, every request but /healthz must carry it,
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
		{"unix socket needs none", "/v1/sessions", "", unix, http.StatusOK},
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
			t.Errorf("%s: no WWW-Authenticate: Bearer", c.name)
		}
	}
}
