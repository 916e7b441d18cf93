package v1

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/session"
)

// /readyz is capacity: every pooled language warm, room, not shutting
// down; 503 says why; it needs no token.
func TestReadyz(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Token = "s3cret"
	m := session.NewManager(cfg, nil, slog.New(slog.DiscardHandler))
	s := New(m, cfg, slog.New(slog.DiscardHandler), "test")
	s.Pod = "airlock-2"
	stats := map[string]any{
		"python":            apitype.PoolStats{Ready: 3, Target: 8},
		"bash":              apitype.PoolStats{Ready: 1, Target: 2},
		"javascript":        apitype.PoolStats{Ready: 0, Target: 0}, // no pool: not waited for
		apitype.TemplateKey: apitype.TemplateStats{Running: true},
	}
	s.Stats = func() map[string]any { return stats }
	get := func() (int, apitype.Readiness) {
		req := httptest.NewRequest("GET", "/readyz", nil)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 8080}))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		var r apitype.Readiness
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%d %q: %v", w.Code, w.Body, err)
		}
		return w.Code, r
	}
	if code, r := get(); code != http.StatusOK || !r.Ready || len(r.Reasons) != 0 || r.Pod != "airlock-2" ||
		r.MaxSessions != cfg.Server.MaxSessions || r.Warm["python"] != 3 || r.Warm["bash"] != 1 || len(r.Warm) != 2 {
		t.Errorf("warm, with room, no token: %d %+v", code, r)
	}
	stats["bash"] = apitype.PoolStats{Ready: 0, Target: 2}
	if code, r := get(); code != http.StatusServiceUnavailable || r.Ready || strings.Join(r.Reasons, ";") != "no warm bash sandbox yet" {
		t.Errorf("bash pool empty: %d %+v", code, r)
	}
	stats["bash"] = apitype.PoolStats{Ready: 2, Target: 2}
	m.Close()
	if code, r := get(); code != http.StatusServiceUnavailable || !strings.Contains(strings.Join(r.Reasons, ";"), "shutting down") {
		t.Errorf("shutting down: %d %+v", code, r)
	}
}
