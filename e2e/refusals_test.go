package e2e

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// metric reads one sample of the server's /metrics (0 when absent).
func (s *server) metric(token, name string) float64 {
	s.t.Helper()
	_, body := s.raw("GET", "/metrics", nil, bearer(token))
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+]+)$`).FindStringSubmatch(string(body))
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// refusals sums the counts of the refusal records (kind, reason) the
// admin reads, waiting until they reach at least n.
func (s *server) refusals(admin, kind, reason string, n int) []apitype.AuditRecord {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, err := s.as(admin).Audit(context.Background(), url.Values{"kind": {kind}})
		if err != nil {
			s.t.Fatal(err)
		}
		var recs []apitype.AuditRecord
		sum := 0
		for _, r := range l.Records {
			if r.Reason == reason {
				recs = append(recs, r)
				sum += r.Count
			}
		}
		if sum >= n || time.Now().After(deadline) {
			if sum != n {
				s.t.Errorf("%s %s: records count %d requests, want %d: %+v", kind, reason, sum, n, recs)
			}
			return recs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Failed authentication and probes of another tenant's sessions leave a
// trace: counted by reason in /metrics, and recorded in the audit log in
// aggregate (a flood of 200 bad keys is a record or two with its count,
// not 200 records), in the operator's records only — the prober, reading
// its own, learns nothing, and its probe was answered exactly like an
// unknown id. A key with an expiry (keys create --expires) works until
// then and is refused after, like a revoked one, and keys list says so.
// An admin acting in a tenant's session is recorded under that tenant,
// with the admin's key as the actor. (Review: none of this left a trace;
// an admin's execution was recorded under the admin's tenant.)
func TestRefusalsAndActors(t *testing.T) {
	s := keysServer(t, map[string]any{"server": map[string]any{"token": "admin-token"}, "audit": map[string]any{"refusal_interval": "1s"}})
	ctx := context.Background()
	keyA, keyB := s.newKey("team-a"), s.newKey("team-b")
	idB := s.keyID("team-b")
	admin := s.newKey("ops", "--admin")
	idAdmin := s.keyID("ops")
	a := s.as(keyA)
	sess, err := a.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}

	// Tenant B probes A's session: the very answer of an unknown id.
	unknown := strings.Repeat("0", len(sess.ID))
	for _, path := range []string{"/v1/sessions/%s", "/v1/sessions/%s/files"} {
		c1, b1 := s.raw("GET", strings.Replace(path, "%s", sess.ID, 1), nil, bearer(keyB))
		c2, b2 := s.raw("GET", strings.Replace(path, "%s", unknown, 1), nil, bearer(keyB))
		norm := func(b []byte, id string) string {
			return regexp.MustCompile(`"request_id":"[^"]*"`).ReplaceAllString(strings.ReplaceAll(string(b), id, "ID"), "")
		}
		if c1 != 404 || c1 != c2 || norm(b1, sess.ID) != norm(b2, unknown) {
			t.Errorf("%s: A's session %d %s, an unknown one %d %s: want the same 404", path, c1, b1, c2, b2)
		}
	}
	// A flood of bad keys, requests without one, a revoked key.
	for range 200 {
		s.raw("GET", "/v1/sessions", nil, bearer("alk_"+strings.Repeat("f", 64)))
	}
	for range 3 {
		s.raw("GET", "/v1/sessions", nil, nil)
	}
	keyR := s.newKey("team-r")
	if _, err := s.airlockCLI("keys", "revoke", s.keyID("team-r")); err != nil {
		t.Fatal(err)
	}
	if code, _ := s.raw("GET", "/v1/sessions", nil, bearer(keyR)); code != 401 {
		t.Errorf("revoked key: %d", code)
	}

	// A key that expires: it works, then it does not, and says why. Its
	// expiry leaves a loaded host time for a CLI run and a request before
	// it (at least 9 s: expiries are truncated to the second).
	keyE := s.newKey("team-e", "--expires", "10s")
	if code, body := s.raw("GET", "/v1/sessions", nil, bearer(keyE)); code != 200 {
		t.Fatalf("a key before its expiry: %d %s", code, body)
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		code, body := s.raw("GET", "/v1/sessions", nil, bearer(keyE))
		if code == 401 {
			if !strings.Contains(string(body), "expired") {
				t.Errorf("expired key: %s, want it said", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key still works 40s after a 10s expiry")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _ := s.airlockCLI("keys", "list"); !regexp.MustCompile(`(?m)^key_\S+\s+team-e\s+false\s+\S+\s+-\s+\S+Z?\S*\s+expired\b`).MatchString(out) {
		t.Errorf("keys list does not show team-e's key expired:\n%s", out)
	}

	// An admin acts in A's session.
	if _, err := s.as(admin).Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "1"}, nil); err != nil {
		t.Fatal(err)
	}

	// Metrics, by reason.
	for reason, want := range map[string]float64{"cross_tenant": 2, "unknown_key": 200, "missing_key": 3, "revoked_key": 1, "expired_key": 1} {
		got := s.metric("admin-token", `airlock_access_refused_total{reason="`+reason+`"}`)
		if reason == "expired_key" && got >= 1 {
			continue // the wait above may have seen several
		}
		if got != want {
			t.Errorf("airlock_access_refused_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	// The audit log, aggregated, the operator's.
	probes := s.refusals(admin, apitype.AuditAccessDenied, "cross_tenant", 2)
	for _, r := range probes {
		if r.Tenant != "" || r.ActorTenant != "team-b" || r.KeyID != idB || r.Source != "127.0.0.1" {
			t.Errorf("probe record %+v: want no tenant, actor team-b with its key, from 127.0.0.1", r)
		}
	}
	if flood := s.refusals(admin, apitype.AuditAuthFailure, "unknown_key", 200); len(flood) > 3 {
		t.Errorf("200 bad keys made %d records, want them aggregated", len(flood))
	}
	s.refusals(admin, apitype.AuditAuthFailure, "missing_key", 3)
	if r := s.refusals(admin, apitype.AuditAuthFailure, "revoked_key", 1); len(r) == 1 && r[0].ActorTenant != "team-r" {
		t.Errorf("revoked key record %+v: want its tenant", r[0])
	}
	if l, err := s.as(keyB).Audit(ctx, url.Values{"kind": {apitype.AuditAccessDenied}}); err != nil || len(l.Records) != 0 {
		t.Errorf("the prober reads its probes: %+v %v", l, err)
	}
	// The admin's execution is in A's records, the admin as the actor.
	recs := s.waitAudit(keyA, url.Values{"kind": {apitype.AuditExecution}, "session": {sess.ID}}, 1)
	if len(recs) != 1 || recs[0].Tenant != "team-a" || recs[0].KeyID != idAdmin || !recs[0].Admin || recs[0].ActorTenant != "ops" {
		t.Errorf("the admin's execution in A's session: %+v; want tenant team-a, key %s, admin, actor_tenant ops", recs, idAdmin)
	}
}
