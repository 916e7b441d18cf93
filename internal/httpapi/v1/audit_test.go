package v1

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/session"
	"airlock/internal/store"
)

// fakeAudit records the query it was asked; check is what Check says.
type fakeAudit struct {
	q     store.AuditQuery
	check error
}

func (f *fakeAudit) Check() error { return f.check }

func (f *fakeAudit) Health() apitype.AuditHealth {
	if f.check != nil {
		return apitype.AuditHealth{Status: "failing"}
	}
	return apitype.AuditHealth{Status: "ok"}
}

func (f *fakeAudit) Query(_ context.Context, q store.AuditQuery) ([]apitype.AuditRecord, string, error) {
	f.q = q
	return []apitype.AuditRecord{}, "", nil
}

func auditServer() (*Server, *fakeAudit) {
	cfg := config.Default()
	s := New(session.NewManager(cfg, nil, slog.New(slog.DiscardHandler)), cfg, slog.New(slog.DiscardHandler), "test")
	s.Keys = fakeKeys{"alk_a": {Tenant: "a", KeyID: "key_a"}, "alk_admin": {Tenant: "ops", Admin: true}}
	f := &fakeAudit{}
	s.Audit = f
	return s, f
}

func getAudit(s *Server, key, query string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/v1/audit", nil)
	req.URL.RawQuery = query
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// A tenant's query is narrowed to its tenant, whatever it asks; an
// admin's is as asked.
func TestAuditQueryScope(t *testing.T) {
	s, f := auditServer()
	for _, c := range []struct {
		key, query, tenant string
		asked              bool // the log was queried
	}{
		{"alk_a", "", "a", true},
		{"alk_a", "tenant=a&session=x", "a", true},
		{"alk_a", "tenant=b", "", false}, // answered empty, never asked
		{"alk_admin", "", "", true},
		{"alk_admin", "tenant=b", "b", true},
	} {
		f.q = store.AuditQuery{Tenant: "untouched"}
		rec := getAudit(s, c.key, c.query)
		var l apitype.AuditList
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &l) != nil || l.Records == nil {
			t.Errorf("%s %q: %d %s", c.key, c.query, rec.Code, rec.Body)
			continue
		}
		if c.asked && f.q.Tenant != c.tenant {
			t.Errorf("%s %q: queried tenant %q, want %q", c.key, c.query, f.q.Tenant, c.tenant)
		}
		if !c.asked && f.q.Tenant != "untouched" {
			t.Errorf("%s %q: the log was queried (%+v)", c.key, c.query, f.q)
		}
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "cursor=-1", "cursor=x", "since=yesterday", "until=-1h"} {
		if rec := getAudit(s, "alk_admin", bad); rec.Code != 400 {
			t.Errorf("%s: %d", bad, rec.Code)
		}
	}
	if rec := getAudit(s, "", ""); rec.Code != 401 {
		t.Errorf("no key: %d", rec.Code)
	}
}

// Whatever the query string, the audit endpoint answers 200 or 400, never
// a 500, and a tenant's query never leaves its tenant.
func FuzzAuditQuery(f *testing.F) {
	for _, q := range []string{"", "since=1h", "since=2026-11-25T00:00:00Z&until=1m", "tenant=a&kind=file&limit=5&cursor=10", "session=%00", "limit=99999999999999999999", "since=-1h"} {
		f.Add(q)
	}
	s, fa := auditServer()
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := url.ParseQuery(q); err != nil {
			return
		}
		fa.q = store.AuditQuery{}
		rec := getAudit(s, "alk_a", q)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("%q: %d %s", q, rec.Code, rec.Body)
		}
		if rec.Code == 200 && fa.q.Tenant != "a" && fa.q.Tenant != "" {
			t.Fatalf("%q: a tenant's query for %q", q, fa.q.Tenant)
		}
	})
}

// While the audit log cannot write, every route that does work is
// refused with 503 audit_unavailable before its handler runs (the
// manager has no sandbox source: a handler that ran would fail
// otherwise), and no other route is; /healthz says degraded and /readyz
// not ready. The table of routes is the API's own, so a route added
// later is checked too.
func TestAuditFailureRefusesWork(t *testing.T) {
	s, f := auditServer()
	f.check = &errdefs.RetryError{After: 5 * time.Second, Err: fmt.Errorf("%w: cannot write", errdefs.ErrAuditUnavailable)}
	work := 0
	for _, rt := range routes {
		path := strings.NewReplacer("{id}", "s1", "{cid}", "c1", "{path...}", "a.txt", "{port}", "8080").Replace(rt.pattern)
		req := httptest.NewRequest(rt.method, path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer alk_admin")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var body apitype.ErrorBody
		json.Unmarshal(rec.Body.Bytes(), &body)
		refused := rec.Code == 503 && body.Error.Code == "audit_unavailable"
		if refused != rt.work {
			t.Errorf("%s %s: %d %s; work %v", rt.method, rt.pattern, rec.Code, body.Error.Code, rt.work)
		}
		if refused {
			work++
			if rec.Header().Get("Retry-After") != "5" {
				t.Errorf("%s %s: Retry-After %q", rt.method, rt.pattern, rec.Header().Get("Retry-After"))
			}
		}
	}
	// What does work: sessions (and resumes and forks), code contexts
	// (and their restart), executions, commands and their input (a
	// terminal's socket too), installs, one-shot and program runs, the
	// network policy and file transfers (MCP's tools reach them through
	// this API), opening a port and requests to it. A pause, like a
	// delete, stops work.
	if work != 18 {
		t.Errorf("%d routes refused, want 18", work)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	var h apitype.Health
	if json.Unmarshal(rec.Body.Bytes(), &h); rec.Code != 200 || h.Status != "degraded" || h.Audit == nil || h.Audit.Status != "failing" {
		t.Errorf("/healthz %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "audit") {
		t.Errorf("/readyz %d %s", rec.Code, rec.Body)
	}
	f.check = nil
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if json.Unmarshal(rec.Body.Bytes(), &h); h.Status != "ok" || h.Audit.Status != "ok" {
		t.Errorf("/healthz after recovery: %s", rec.Body)
	}
}
