package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// AppendAudit writes records in one transaction (one commit, one sync of
// the WAL; a few round trips to PostgreSQL): the writer's batch. It
// fills in each record's Seq.
func (d *DB) AppendAudit(ctx context.Context, recs []apitype.AuditRecord) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.audit.BeginTx(ctx, nil)
	if err != nil {
		return d.unavailable("writing the audit log", err)
	}
	defer tx.Rollback()
	// Rows of up to appendRows records a statement: one round trip
	// each, whatever the driver.
	const cols, appendRows = 8, 256
	for len(recs) > 0 {
		n := min(len(recs), appendRows)
		var q strings.Builder
		q.WriteString(`INSERT INTO audit (time, kind, tenant, key_id, session, request_id, record, size) VALUES `)
		args := make([]any, 0, n*cols)
		for i := range recs[:n] {
			r := &recs[i]
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, unixNano(r.Time), r.Kind, r.Tenant, r.KeyID, r.Session, r.RequestID, string(b), len(b))
		}
		q.WriteString(" RETURNING seq")
		rows, err := tx.QueryContext(ctx, d.q(q.String()), args...)
		if err != nil {
			return d.unavailable("writing the audit log", err)
		}
		var seqs []int64
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return d.unavailable("writing the audit log", err)
			}
			seqs = append(seqs, seq)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return d.unavailable("writing the audit log", err)
		}
		// Rows are numbered in the order they are given (sorted, in
		// case a driver returns them otherwise).
		slices.Sort(seqs)
		for i := range min(len(seqs), n) {
			recs[i].Seq = seqs[i]
		}
		recs = recs[n:]
	}
	return d.unavailable("writing the audit log", tx.Commit())
}

// AuditQuery selects audit records (the wire's, apitype's).
type AuditQuery = apitype.AuditQuery

// MaxAuditPage caps a page of records.
const MaxAuditPage = apitype.MaxAuditPage

// Audit returns the records q selects, oldest first, and the cursor of the
// next page ("" when this was the last).
func (d *DB) Audit(ctx context.Context, q AuditQuery) ([]apitype.AuditRecord, string, error) {
	if q.Limit <= 0 || q.Limit > MaxAuditPage {
		q.Limit = MaxAuditPage
	}
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if q.After > 0 {
		add("seq > ?", q.After)
	}
	if !q.Since.IsZero() {
		add("time >= ?", unixNano(q.Since))
	}
	if !q.Until.IsZero() {
		add("time < ?", unixNano(q.Until))
	}
	if q.Session != "" {
		add("session = ?", q.Session)
	}
	if q.Tenant != "" {
		add("tenant = ?", q.Tenant)
	}
	if q.Kind != "" {
		group, err := apitype.AuditKindFilter(q.Kind)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
		if group {
			add("kind LIKE ?", strings.TrimSuffix(q.Kind, ".")+".%") // "file": every file.*
		} else {
			add("kind = ?", q.Kind)
		}
	}
	sqlq := `SELECT seq, record FROM audit`
	if len(where) > 0 {
		sqlq += " WHERE " + strings.Join(where, " AND ")
	}
	sqlq += " ORDER BY seq LIMIT ?"
	args = append(args, q.Limit+1)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.audit.QueryContext(ctx, d.q(sqlq), args...)
	if err != nil {
		return nil, "", d.unavailable("reading the audit log", err)
	}
	defer rows.Close()
	out := []apitype.AuditRecord{}
	for rows.Next() {
		var seq int64
		var s string
		if err := rows.Scan(&seq, &s); err != nil {
			return nil, "", err
		}
		var r apitype.AuditRecord
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			continue
		}
		r.Seq = seq
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > q.Limit {
		out = out[:q.Limit]
		next = strconv.FormatInt(out[len(out)-1].Seq, 10)
	}
	return out, next, nil
}

// RetainAudit removes records older than maxAge, then, while the audit
// log is over maxSize bytes (0: no bound; SQLite measures its file's
// pages in use, PostgreSQL the records' bytes), the oldest records of
// the tenants using the most space: one tenant's flood removes its own
// records, never another's while it uses more than they do (see
// fairShares). One server of a cluster runs it at a time. It returns how
// many it removed.
func (d *DB) RetainAudit(ctx context.Context, maxAge time.Duration, maxSize int64) (int64, error) {
	var removed int64
	// Bounded, as every call is, more loosely: it deletes in bulk.
	ctx, cancel := context.WithTimeout(ctx, 12*d.cfg.Timeout.D())
	defer cancel()
	_, err := d.drv.exclusive(ctx, "audit retention", func(ctx context.Context) error {
		var err error
		removed, err = d.retainAudit(ctx, maxAge, maxSize)
		return err
	})
	return removed, err
}

func (d *DB) retainAudit(ctx context.Context, maxAge time.Duration, maxSize int64) (int64, error) {
	var removed int64
	if maxAge > 0 {
		res, err := d.audit.ExecContext(ctx, d.q(`DELETE FROM audit WHERE time < ?`), unixNano(time.Now().Add(-maxAge)))
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		removed += n
	}
	if maxSize > 0 {
		for i := 0; i < 64; i++ {
			bytes, err := d.drv.auditBytes(ctx)
			if err != nil {
				return removed, err
			}
			if bytes <= maxSize {
				break
			}
			use, err := d.auditUse(ctx)
			if err != nil || len(use) == 0 {
				return removed, err
			}
			// Remove the share of the records' bytes beyond the bound
			// (and 5 % more), at least one record.
			var total int64
			for _, u := range use {
				total += u.bytes
			}
			cut := total*(bytes-maxSize)/bytes + total/20
			k, err := d.removeShares(ctx, fairShares(use, max(cut, 1)))
			removed += k
			if err != nil {
				return removed, err
			}
			if k == 0 {
				break
			}
		}
	}
	return removed, nil
}

// tenantUse is the space a tenant's audit records take.
type tenantUse struct {
	tenant         string
	bytes, records int64
}

// auditUse is every tenant's use (the operator's records are tenant
// ""), read from the tenant index alone.
func (d *DB) auditUse(ctx context.Context) ([]tenantUse, error) {
	rows, err := d.audit.QueryContext(ctx, d.drv.auditUse())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tenantUse
	for rows.Next() {
		var u tenantUse
		if err := rows.Scan(&u.tenant, &u.bytes, &u.records); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// fairShares decides how many of each tenant's oldest records to remove
// to free cut bytes: the largest tenants are cut down to one level, the
// highest that frees cut (water-filling), and those below it lose
// nothing. A tenant's bytes become records at its own average size.
func fairShares(use []tenantUse, cut int64) map[string]int64 {
	sort.Slice(use, func(i, j int) bool { return use[i].bytes > use[j].bytes })
	// The top k are cut to level: sum(top k) - k*level = cut, with level
	// not below the next tenant's use (nor below zero).
	var sum, level int64
	k := 0
	for k < len(use) {
		sum += use[k].bytes
		k++
		level = (sum - cut) / int64(k)
		if level < 0 {
			level = 0
		}
		if k == len(use) || level >= use[k].bytes {
			break
		}
	}
	out := map[string]int64{}
	for _, u := range use[:k] {
		if u.bytes <= level || u.records == 0 {
			continue
		}
		avg := max(u.bytes/u.records, 1)
		n := (u.bytes - level + avg - 1) / avg
		out[u.tenant] = min(max(n, 1), u.records)
	}
	return out
}

// removeShares removes each tenant's n oldest records.
func (d *DB) removeShares(ctx context.Context, shares map[string]int64) (int64, error) {
	var removed int64
	for tenant, n := range shares {
		res, err := d.audit.ExecContext(ctx, d.q(`DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE tenant = ? ORDER BY seq LIMIT ?)`), tenant, n)
		if err != nil {
			return removed, err
		}
		k, _ := res.RowsAffected()
		removed += k
	}
	return removed, nil
}
