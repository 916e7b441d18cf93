package server

import (
	"context"
	"time"

	"airlock/internal/api"
	"airlock/internal/audit"
	"airlock/internal/config"
	"airlock/internal/identity"
	"airlock/internal/quota"
	"airlock/internal/store"
)

// tenancy wires what needs the data directory's database: API keys,
// tenants' quotas and the audit log. With auth "none" and the audit log
// off nothing is opened.
func (s *Server) tenancy() error {
	cfg := s.cfg
	keys := cfg.Server.Auth == config.AuthKeys
	if !keys && !cfg.Audit.Enabled {
		return nil
	}
	db, err := store.Open(cfg.DataDir)
	if err != nil {
		return err
	}
	s.db = db
	s.closers.Add(db.Close)
	// `airlock keys` tells whether a server reads the keys it writes.
	if err := db.Serve(); err != nil {
		return err
	}
	if keys {
		s.api.Keys = keyAuth{db}
	} else {
		s.log.Warn("authentication is OFF (server.auth \"none\"): every caller of " + cfg.Server.Listen + " acts as an admin")
	}
	s.quotas = quota.New(cfg.Quotas, db.Quotas)
	s.api.Quotas = s.quotas
	s.manager.Observe(s.quotas)
	if cfg.Audit.Enabled {
		s.audit = audit.New(db, cfg.Audit, s.log)
		// Closed after the manager (closers run in reverse): the records
		// of the sessions Shutdown ends are written first.
		s.closers.AddFunc(s.audit.Close)
		s.manager.Observe(s.audit)
		s.api.Audit = s.audit
		// The day's CPU quota survives a restart: what the audit log
		// recorded since midnight (UTC) counts.
		midnight := time.Now().UTC().Truncate(24 * time.Hour)
		if used, err := db.CPUSince(context.Background(), midnight); err == nil {
			s.quotas.SeedCPU(used)
		} else {
			s.log.Warn("reading today's CPU use from the audit log", "err", err)
		}
	}
	return nil
}

// Audit is the server's audit log (nil when it is off).
func (s *Server) Audit() *audit.Log { return s.audit }

// keyAuth authenticates API keys against the database, on every request.
type keyAuth struct{ db *store.DB }

func (k keyAuth) Authenticate(ctx context.Context, secret string) (identity.Identity, string, error) {
	key, _, err := k.db.Authenticate(ctx, secret)
	if err != nil {
		return identity.Identity{}, "", err
	}
	if key.ID == "" {
		return identity.Identity{}, api.RefusedUnknownKey, nil
	}
	who := identity.Identity{Tenant: key.Tenant, KeyID: key.ID, Admin: key.Admin}
	switch key.State(time.Now()) {
	case store.KeyRevoked:
		return who, api.RefusedRevokedKey, nil
	case store.KeyExpired:
		return who, api.RefusedExpiredKey, nil
	}
	return who, "", nil
}
