package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// The largest tenants are cut to one level that frees what is asked;
// smaller ones lose nothing.
func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		name string
		use  []tenantUse
		cut  int64
		want map[string]int64
	}{
		{"one floods", []tenantUse{{"b", 100, 10}, {"a", 10000, 1000}}, 5000, map[string]int64{"a": 500}},
		{"two flood, one is quiet", []tenantUse{{"a", 6000, 600}, {"b", 100, 10}, {"c", 6000, 60}}, 6000, map[string]int64{"a": 300, "c": 30}},
		{"down to the next one's level", []tenantUse{{"a", 1000, 100}, {"b", 600, 60}, {"c", 100, 10}}, 600, map[string]int64{"a": 50, "b": 10}},
		{"fat records count by bytes", []tenantUse{{"a", 8000, 10}, {"b", 1000, 100}}, 4000, map[string]int64{"a": 5}},
		{"more than there is", []tenantUse{{"a", 100, 10}, {"b", 50, 5}}, 1000, map[string]int64{"a": 10, "b": 5}},
		{"at least one record", []tenantUse{{"a", 1000, 10}}, 1, map[string]int64{"a": 1}},
		{"the operator is a tenant like any", []tenantUse{{"", 5000, 50}, {"a", 100, 1}}, 1000, map[string]int64{"": 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fairShares(tc.use, tc.cut); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fairShares(%v, %d) = %v, want %v", tc.use, tc.cut, got, tc.want)
			}
		})
	}
}

// One tenant's flood past audit.max_size removes its own oldest records,
// not the few of a quiet tenant (written before the flood, so the oldest
// of all); fat records weigh by their bytes, not their number.
func TestRetentionPerTenant(t *testing.T) {
	small := func(tenant string, n int) []apitype.AuditRecord {
		var out []apitype.AuditRecord
		for i := 0; i < n; i++ {
			out = append(out, apitype.AuditRecord{Time: time.Now(), Kind: "execution", Tenant: tenant, Session: fmt.Sprint(tenant, i), CodeSHA256: strings.Repeat("ab", 32)})
		}
		return out
	}
	fat := func(tenant string, n int) []apitype.AuditRecord {
		out := small(tenant, n)
		for i := range out {
			out[i].Code = strings.Repeat("x", 8000)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		batches [][]apitype.AuditRecord // written in order
		max     int64
		quiet   map[string]int // tenant -> records that must all survive
		cut     []string       // tenants that must lose some, not all
	}{
		{"one tenant floods", [][]apitype.AuditRecord{small("b", 20), small("a", 6000)}, 1 << 20, map[string]int{"b": 20}, []string{"a"}},
		{"two flood", [][]apitype.AuditRecord{small("b", 20), small("a", 3000), small("c", 3000)}, 1 << 20, map[string]int{"b": 20}, []string{"a", "c"}},
		{"few fat records", [][]apitype.AuditRecord{small("b", 1000), fat("a", 250)}, 1 << 20, map[string]int{"b": 1000}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := OpenSQLite(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			for _, b := range tc.batches {
				for len(b) > 0 {
					n := min(len(b), 500)
					if err := db.AppendAudit(ctx, b[:n]); err != nil {
						t.Fatal(err)
					}
					b = b[n:]
				}
			}
			if used := db.auditBytes(t); used <= tc.max {
				t.Fatalf("the log uses %d bytes, not over %d: nothing to test", used, tc.max)
			}
			n, err := db.RetainAudit(ctx, 0, tc.max)
			if err != nil || n == 0 {
				t.Fatalf("removed %d: %v", n, err)
			}
			if used := db.auditBytes(t); used > tc.max {
				t.Errorf("%d bytes left, over %d", used, tc.max)
			}
			use, err := db.auditUse(ctx)
			if err != nil {
				t.Fatal(err)
			}
			left := map[string]int64{}
			for _, u := range use {
				left[u.tenant] = u.records
			}
			for tenant, want := range tc.quiet {
				if left[tenant] != int64(want) {
					t.Errorf("quiet tenant %s has %d of its %d records left", tenant, left[tenant], want)
				}
			}
			for _, tenant := range tc.cut {
				if left[tenant] == 0 {
					t.Errorf("tenant %s lost every record", tenant)
				}
			}
			// What is left of a flooding tenant is its newest.
			last := tc.batches[len(tc.batches)-1]
			recs, _, err := db.Audit(ctx, AuditQuery{Tenant: last[0].Tenant, Limit: MaxAuditPage})
			if err != nil || len(recs) == 0 || recs[0].Seq <= last[0].Seq {
				t.Errorf("the flooding tenant's oldest record was kept: %v", err)
			}
		})
	}
}

// auditBytes is the audit file's pages in use, as retention measures it.
func (d *DB) auditBytes(t *testing.T) int64 {
	t.Helper()
	var pages, free, size int64
	for q, v := range map[string]*int64{`PRAGMA page_count`: &pages, `PRAGMA freelist_count`: &free, `PRAGMA page_size`: &size} {
		if err := d.audit.QueryRow(q).Scan(v); err != nil {
			t.Fatal(err)
		}
	}
	return (pages - free) * size
}

// The tenants' use is read from their index alone, however large the log.
func TestAuditUseIsIndexOnly(t *testing.T) {
	db, err := OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.audit.Query(`EXPLAIN QUERY PLAN SELECT tenant, SUM(size), COUNT(*) FROM audit INDEXED BY audit_tenant GROUP BY tenant`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		rows.Scan(&id, &parent, &unused, &detail)
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "COVERING INDEX audit_tenant") {
		t.Errorf("plan: %s", p)
	}
}

// A log written before records had a size gets theirs at the migration.
func TestAuditSizeMigration(t *testing.T) {
	dir := t.TempDir()
	old, err := openFile(filepath.Join(dir, AuditFileName), auditMigrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"kind":"execution","tenant":"a"}`
	if _, err := old.Exec(`INSERT INTO audit (time, kind, tenant, record) VALUES (1, 'execution', 'a', ?)`, rec); err != nil {
		t.Fatal(err)
	}
	old.Close()
	db, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	use, err := db.auditUse(context.Background())
	if err != nil || len(use) != 1 || use[0].bytes != int64(len(rec)) || use[0].records != 1 {
		t.Errorf("use after the migration: %+v %v", use, err)
	}
}

// A query of an unknown kind is the caller's mistake (see
// apitype.AuditKindFilter), not an empty log.
func TestAuditUnknownKind(t *testing.T) {
	db, err := OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := db.Audit(context.Background(), AuditQuery{Kind: "executions"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a query of an unknown kind: %v", err)
	}
}
