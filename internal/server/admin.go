package server

import (
	"context"
	"fmt"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
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
// Records are followed by their sequence number, so one committed late
// (the log writes in batches, off the request path) is not missed.
func (a *Admin) Follow(ctx context.Context, q apitype.AuditQuery, interval time.Duration, each func(apitype.AuditRecord), flush func()) error {
	last := q.After
	seen := func(r apitype.AuditRecord) {
		last = max(last, r.Seq)
		each(r)
	}
	if err := a.Audit(ctx, q, 0, seen); err != nil {
		return err
	}
	flush()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		q.After = last
		if err := a.Audit(ctx, q, 0, seen); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		flush()
	}
}
