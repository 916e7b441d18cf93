package server

import (
	"context"
	"fmt"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/session"
	"airlock/internal/store"
)

// Admin is the local administration of what servers keep (`airlock keys`,
// `airlock audit`): the store the configuration names, opened on this
// host as a server opens it, whether one runs or not.
type Admin struct{ db *store.DB }

// StoreExists reports whether the configuration's store may hold data:
// SQLite's file exists in data_dir (a shared store always may).
func StoreExists(cfg config.Config) bool { return store.Exists(cfg.Store, cfg.DataDir) }

// OpenAdmin opens the configuration's store (creating SQLite's file).
func OpenAdmin(ctx context.Context, cfg config.Config) (*Admin, error) {
	db, err := store.Open(ctx, cfg.Store, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return &Admin{db: db}, nil
}

// Close closes the store.
func (a *Admin) Close() error { return a.db.Close() }

// Where names the store (its file, or its server) for messages.
func (a *Admin) Where() string { return a.db.Where() }

// Served reports whether a running server uses the store: keys written
// where none looks are the usual slip.
func (a *Admin) Served(ctx context.Context) bool { return a.db.Served(ctx) }

// Quotas are tenant's own quotas (its name checked first).
func (a *Admin) Quotas(ctx context.Context, tenant string) (config.Quotas, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return config.Quotas{}, err
	}
	return a.db.Quotas(ctx, tenant)
}

// SetQuotas replaces tenant's own quotas.
func (a *Admin) SetQuotas(ctx context.Context, tenant string, q config.Quotas) error {
	return a.db.SetQuotas(ctx, tenant, q)
}

// CreateKey creates a key for tenant, expiring at until (zero: never); it
// returns the secret, which is not stored, and the key.
func (a *Admin) CreateKey(ctx context.Context, tenant string, admin bool, name string, until time.Time) (string, apitype.APIKey, error) {
	return a.db.CreateKeyUntil(ctx, tenant, admin, name, until)
}

// Keys lists every key (never nil) and every tenant's own quotas.
func (a *Admin) Keys(ctx context.Context) ([]apitype.APIKey, map[string]config.Quotas, error) {
	keys, err := a.db.Keys(ctx)
	if err != nil {
		return nil, nil, err
	}
	tenants, err := a.db.Tenants(ctx)
	if keys == nil {
		keys = []apitype.APIKey{}
	}
	return keys, tenants, err
}

// RevokeKey revokes the key id.
func (a *Admin) RevokeKey(ctx context.Context, id string) error { return a.db.RevokeKey(ctx, id) }

// Audit calls each with the records q selects, oldest first, at most
// limit of them (0: all), a page at a time.
func (a *Admin) Audit(ctx context.Context, q apitype.AuditQuery, limit int, each func(apitype.AuditRecord)) error {
	n := 0
	for {
		q.Limit = apitype.MaxAuditPage
		recs, next, err := a.db.Audit(ctx, q)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if limit > 0 && n >= limit {
				return nil
			}
			n++
			each(r)
		}
		if next == "" || (limit > 0 && n >= limit) {
			return nil
		}
		if _, err := fmt.Sscan(next, &q.After); err != nil {
			return err
		}
	}
}

// Follow is Audit (every record of q), then, every interval until ctx
// ends, the records written since: what `airlock audit --follow` prints.
// It reads again a little below the newest record it printed (followLate)
// for records committed after a newer one, each printed once.
func (a *Admin) Follow(ctx context.Context, q apitype.AuditQuery, interval time.Duration, each func(apitype.AuditRecord), flush func()) error {
	read := func(after int64, f func(apitype.AuditRecord)) error {
		q.After = after
		return a.Audit(ctx, q, 0, f)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	next := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	err := follow(q.After, read, each, flush, next, time.Now, followLate)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// followLate is how long a gap below the newest record printed is looked
// at again. A record's sequence number is taken before its transaction
// commits, and several servers write to one PostgreSQL (each in batches):
// seq 7 may become visible after seq 8 was printed. A record that commits
// later than this after a newer one is missed; a hole that never fills
// (a rolled-back insert) costs this long of reading again.
const followLate = 5 * time.Second

// follow prints with each the records read returns after a cursor, once
// each, then reads again whenever next says so (until it returns false).
// The cursor stays at the newest seq printed as of late ago, so that what
// read returns anew below the newest is printed too; records older than
// late by their own time are settled from the first read on.
func follow(after int64, read func(after int64, each func(apitype.AuditRecord)) error, each func(apitype.AuditRecord), flush func(),
	next func() bool, now func() time.Time, late time.Duration) error {
	type mark struct {
		at  time.Time
		seq int64 // the newest seq printed by then
	}
	cursor, newest := after, after
	seen := map[int64]bool{} // printed, above cursor
	var marks []mark
	// settled: the first read's records so far are all older than late
	// (their writers committed them long ago): the cursor follows them.
	settled := true
	for {
		t := now()
		err := read(cursor, func(r apitype.AuditRecord) {
			if r.Seq <= cursor || seen[r.Seq] {
				return
			}
			newest = max(newest, r.Seq)
			each(r)
			if settled = settled && t.Sub(r.Time) >= late; settled {
				cursor = r.Seq
			} else {
				seen[r.Seq] = true
			}
		})
		if err != nil {
			return err
		}
		flush()
		settled = false
		marks = append(marks, mark{at: t, seq: newest})
		for len(marks) > 0 && t.Sub(marks[0].at) >= late {
			cursor = max(cursor, marks[0].seq)
			marks = marks[1:]
		}
		for s := range seen {
			if s <= cursor {
				delete(seen, s)
			}
		}
		if !next() {
			return nil
		}
	}
}

// PersistenceLeft says what persistence.dir holds that a server with
// persistence off leaves as it is ("" when nothing; see
// session.LeftWhileOff), for airlock doctor.
func PersistenceLeft(cfg config.Config) string { return session.LeftWhileOff(cfg) }
