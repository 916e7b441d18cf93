package server

import (
	"context"
	"os"
	"time"

	"airlock/internal/audit"
	"airlock/internal/config"
	"airlock/internal/directory"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/quota"
	"airlock/internal/session"
	"airlock/internal/store"
)

// tenancy wires what needs the store: API keys, tenants' quotas and
// their counts, the audit log, the sessions directory. With SQLite, auth
// "none" and the audit log off nothing is opened; a shared store
// (PostgreSQL) is always used: the operator named it for the cluster;
// so is one for E2B's sandboxes that may outlive the server (their
// records).
func (s *Server) tenancy() error {
	cfg := s.cfg
	keys := cfg.Server.Auth == config.AuthKeys
	sandboxes := cfg.E2B.Enabled && cfg.Persistence.Enabled
	if !keys && !cfg.Audit.Enabled && !cfg.Store.Shared() && !sandboxes {
		return nil
	}
	ctx := context.Background()
	db, err := store.Open(ctx, cfg.Store, cfg.DataDir)
	if err != nil {
		return err
	}
	s.db = db
	s.closers.Add(db.Close)
	// This server in the store's directory: `airlock keys` tells whether
	// a server reads the keys it writes, other servers list its
	// sessions, and what it admits of tenants' quotas is held in its
	// name.
	pod := s.api.Pod
	if pod == "" {
		pod, _ = os.Hostname()
	}
	if _, err := db.Serve(ctx, pod); err != nil {
		return err
	}
	s.log.Info("store", "driver", db.Driver(), "where", db.Where())
	if keys {
		s.api.Keys = keyAuth{db}
	} else {
		s.log.Warn("authentication is OFF (server.auth \"none\"): every caller of " + cfg.Server.Listen + " acts as an admin")
	}
	s.quotas = quota.New(cfg.Quotas, db.Quotas, db.Ledger())
	s.manager.SetAdmitter(session.NewTenants(cfg, s.quotas))
	s.manager.Observe(s.quotas)
	if cfg.Audit.Enabled {
		s.audit = audit.New(db, cfg.Audit, s.log)
		// Closed after the manager (closers run in reverse): the records
		// of the sessions Shutdown ends are written first.
		s.closers.AddFunc(s.audit.Close)
		s.manager.Observe(s.audit)
		s.api.Audit = s.audit
	}
	dir := directory.New(db, s.manager, cfg.Store.LeaseTimeout.D()/3, s.log)
	s.closers.AddFunc(dir.Close)
	s.manager.Observe(dir)
	s.manager.SetListing(dir)
	s.api.Directory = dir
	s.dir = dir
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
		return identity.Identity{}, httpapi.RefusedUnknownKey, nil
	}
	who := identity.Identity{Tenant: key.Tenant, KeyID: key.ID, Admin: key.Admin}
	switch key.State(time.Now()) {
	case store.KeyRevoked:
		return who, httpapi.RefusedRevokedKey, nil
	case store.KeyExpired:
		return who, httpapi.RefusedExpiredKey, nil
	}
	return who, "", nil
}
