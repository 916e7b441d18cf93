// Package store owns airlock's persistent data: the API keys (stored
// hashed), the tenants' quotas, the audit log with its retention, the
// quotas' counts (the ledger) and the sessions directory (which server
// holds which session, with the servers' heartbeats), each with its
// schema and versioned migrations.
//
// Two drivers sit below it, behind the driver interface (driver.go):
// SQLite files in the data directory (sqlite.go: modernc.org/sqlite, no
// cgo), the single-machine default, and PostgreSQL (postgres.go: pgx, no
// cgo), one database the servers of a cluster share. Everything above
// uses DB and never knows which driver it has.
//
// It must never hold a key's secret (only its SHA-256), never be on a
// sandbox's path, never let a slow or lost database hold a request past
// store.timeout, and never import a package above it: api, session, the
// server and the command line use it, not the other way round.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// DB is the open store.
type DB struct {
	drv driver
	cfg config.Store
	// keys holds keys and tenants, audit the log, dir the servers, the
	// sessions directory and the ledger's rows: three SQLite files, or
	// one PostgreSQL database.
	keys, audit, dir *sql.DB
	// boxes holds the E2B API's sandbox records: the directory's file
	// (SQLite), or PostgreSQL's durable commits (a record lost would
	// cost its sandbox's tokens).
	boxes  *sql.DB
	cache  keyCache
	ledger Ledger
	// server is this server's row in the directory (see Serve).
	server Server
	// now is the clock keys' expiry is judged by; nil: time.Now. Tests
	// move it past an expiry instead of waiting for one.
	now func() time.Time
}

// clock is the time keys' expiry is judged at.
func (d *DB) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// Open opens the store the configuration names (cfg.Driver; data_dir
// for SQLite) and brings its schema up to this binary's version. A
// database that cannot be reached within store.timeout, or whose schema
// is newer than this binary's, is an error that says so.
func Open(ctx context.Context, cfg config.Store, dataDir string) (*DB, error) {
	switch cfg.Driver {
	case config.StorePostgres:
		return openPostgres(ctx, cfg)
	case config.StoreSQLite, "":
		return openSQLite(cfg, dataDir)
	}
	return nil, fmt.Errorf("%w: store.driver %q", errdefs.ErrInvalidArgument, cfg.Driver)
}

// Exists reports whether the store the configuration names may hold
// data: SQLite's file in dataDir exists (a shared store always may).
func Exists(cfg config.Store, dataDir string) bool {
	if cfg.Shared() {
		return true
	}
	_, err := os.Stat(filepath.Join(dataDir, FileName))
	return err == nil
}

// OpenSQLite opens the SQLite store in dir with the default settings.
func OpenSQLite(dir string) (*DB, error) {
	return openSQLite(config.DefaultStore(), dir)
}

// Close closes the store: it marks this server stopped (its directory
// entries ended) when it served.
func (d *DB) Close() error {
	if d.server.ID != "" {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout.D())
		d.stopServer(ctx)
		cancel()
	}
	if d.ledger != nil {
		d.ledger.close()
	}
	d.cache.close()
	return d.drv.close()
}

// Driver names the driver: "sqlite" or "postgres" (for doctor and logs,
// never for decisions).
func (d *DB) Driver() string { return d.drv.name() }

// Shared reports whether other machines may use the same store.
func (d *DB) Shared() bool { return d.cfg.Shared() }

// Where says where the store is, for messages: the data directory, or
// PostgreSQL's host and database (never its password).
func (d *DB) Where() string { return d.drv.where() }

// Version is the schema version of the keys' part of the store.
func (d *DB) Version() (int, error) { return d.drv.version(context.Background()) }

// Ping checks that the store answers within store.timeout.
func (d *DB) Ping(ctx context.Context) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if err := d.keys.PingContext(ctx); err != nil {
		return d.unavailable("reaching the store", err)
	}
	return nil
}

// Served reports whether a running server uses this store (`airlock
// keys` warns when none does).
func (d *DB) Served(ctx context.Context) bool {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.drv.served(ctx, d)
}

// bound gives a store call its deadline, store.timeout.
func (d *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.cfg.Timeout.D())
}

// q is a query in the driver's placeholders.
func (d *DB) q(query string) string { return d.drv.rebind(query) }

// unavailable is what a failed statement is to callers: 503, the
// client told only that the store is unavailable, the log the detail.
func (d *DB) unavailable(doing string, err error) error {
	if err == nil {
		return nil
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	return errdefs.Private(errdefs.ErrUnavailable, "the server's store is unavailable now; try again later",
		fmt.Errorf("%s (%s): %w", doing, d.drv.where(), err))
}

// migration is one step of a schema: statements applied in one
// transaction. Never edit a step that shipped in a release: add one.
type migration = string

// migrate applies the steps of a schema past version have, in one
// transaction with the recording of the version (set): a step
// interrupted mid-way leaves nothing of itself. A database whose version
// is newer than the steps is refused.
func migrate(ctx context.Context, tx *sql.Tx, where string, have int, steps []migration, set func(v int) error) error {
	if have > len(steps) {
		return fmt.Errorf("%w: the store %s has schema version %d, newer than this airlock's %d: run the newer airlock, or restore a backup", errdefs.ErrUnavailable, where, have, len(steps))
	}
	for i := have; i < len(steps); i++ {
		if _, err := tx.ExecContext(ctx, steps[i]); err != nil {
			return fmt.Errorf("%w: the store %s: migration %d: %v", errdefs.ErrUnavailable, where, i+1, err)
		}
		if err := set(i + 1); err != nil {
			return fmt.Errorf("%w: the store %s: recording migration %d: %v", errdefs.ErrUnavailable, where, i+1, err)
		}
	}
	return nil
}

// rebindDollar turns ? placeholders into PostgreSQL's $1, $2... (no
// query of this package has a ? in a literal).
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func unixNano(t time.Time) int64 { return t.UTC().UnixNano() }

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
