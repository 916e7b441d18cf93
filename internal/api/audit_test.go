package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/session"
	"airlock/internal/store"
)

// fakeAudit records the query it was asked.
type fakeAudit struct{ q store.AuditQuery }

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
