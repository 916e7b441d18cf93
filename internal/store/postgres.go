package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// PostgreSQL's migrations, one schema for the whole store, recorded in
// the table airlock_migrations (one row per step applied). Every step
// runs in one transaction with its row, under an advisory lock that
// servers starting together queue on: DDL is transactional in
// PostgreSQL, so a step interrupted mid-way leaves nothing of itself.
var pgMigrations = []migration{
	// 1: keys and tenants (a change notifies the servers' key caches),
	// the audit log, the servers and their sessions, the ledger.
	`CREATE TABLE keys (
		id TEXT PRIMARY KEY,
		hash TEXT NOT NULL UNIQUE,
		tenant TEXT NOT NULL,
		admin BOOLEAN NOT NULL DEFAULT false,
		name TEXT NOT NULL DEFAULT '',
		created_at BIGINT NOT NULL,
		revoked_at BIGINT,
		expires_at BIGINT
	);
	CREATE TABLE tenants (
		name TEXT PRIMARY KEY,
		quotas TEXT NOT NULL DEFAULT '{}',
		updated_at BIGINT NOT NULL
	);
	CREATE FUNCTION airlock_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_notify('airlock_keys', TG_TABLE_NAME);
		RETURN NULL;
	END $$;
	CREATE TRIGGER keys_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON keys
		FOR EACH STATEMENT EXECUTE FUNCTION airlock_keys_changed();
	CREATE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenants
		FOR EACH STATEMENT EXECUTE FUNCTION airlock_keys_changed();
	CREATE TABLE audit (
		seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		time BIGINT NOT NULL,
		kind TEXT NOT NULL,
		tenant TEXT NOT NULL DEFAULT '',
		key_id TEXT NOT NULL DEFAULT '',
		session TEXT NOT NULL DEFAULT '',
		request_id TEXT NOT NULL DEFAULT '',
		record TEXT NOT NULL,
		size BIGINT NOT NULL DEFAULT 0
	);
	CREATE INDEX audit_time ON audit(time);
	CREATE INDEX audit_session ON audit(session, seq);
	CREATE INDEX audit_tenant ON audit(tenant, seq) INCLUDE (size);
	CREATE TABLE servers (
		id TEXT PRIMARY KEY,
		pod TEXT NOT NULL,
		started_at BIGINT NOT NULL,
		heartbeat_at BIGINT NOT NULL,
		stopped_at BIGINT
	);
	CREATE TABLE sessions (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		server TEXT NOT NULL,
		pod TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		ended_at BIGINT,
		end_reason TEXT NOT NULL DEFAULT '',
		info TEXT NOT NULL
	);
	CREATE INDEX sessions_tenant ON sessions(tenant, created_at);
	CREATE INDEX sessions_server ON sessions(server, ended_at);
	CREATE TABLE leases (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		kind TEXT NOT NULL,
		server TEXT NOT NULL,
		started_at BIGINT NOT NULL,
		ended_at BIGINT
	);
	CREATE INDEX leases_tenant ON leases(tenant, kind, started_at);
	CREATE INDEX leases_server ON leases(server);
	CREATE TABLE tenant_cpu (
		tenant TEXT NOT NULL,
		day BIGINT NOT NULL,
		cpu_ns BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, day)
	);`,
	// 2: paused sessions (kept when their server goes, until they
	// expire) and the E2B API's sandbox records.
	`ALTER TABLE sessions ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false;
	ALTER TABLE sessions ADD COLUMN expires_at BIGINT;
	CREATE TABLE sandboxes (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		pod TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		info TEXT NOT NULL
	);
	CREATE INDEX sandboxes_tenant ON sandboxes(tenant, created_at);`,
}

// migrationLock is the advisory lock migrations hold (any constant that
// no other lock of airlock's uses).
const migrationLock = 0x6169726c6f636b // "airlock"

// pgDriver is the PostgreSQL store.
type pgDriver struct {
	cfg    config.Store
	conn   *pgx.ConnConfig
	db     *sql.DB
	fast   *sql.DB // the same database, commits not waiting for the disk
	target string  // host:port/database, for messages

	// The key cache's change detection: a connection that LISTENs on
	// airlock_keys (notified by a trigger on every change of keys and
	// tenants); while it is not listening the cache holds nothing.
	listening atomic.Bool
	notified  atomic.Bool
	stop      context.CancelFunc
	done      chan struct{}
}

func openPostgres(ctx context.Context, cfg config.Store) (*DB, error) {
	cc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		// pgx's message leaves the password out.
		return nil, fmt.Errorf("%w: store.dsn: %v", errdefs.ErrInvalidArgument, err)
	}
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > cfg.Timeout.D() {
		cc.ConnectTimeout = cfg.Timeout.D()
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "airlock"
	}
	p := &pgDriver{cfg: cfg, conn: cc, target: fmt.Sprintf("PostgreSQL %s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database), done: make(chan struct{})}
	p.db = stdlib.OpenDB(*cc)
	// The directory's and the ledger's rows coordinate live servers:
	// their commits do not wait for the WAL's flush to disk (a crash of
	// the database, not of a server, may lose the last few hundred
	// milliseconds of them, which the next heartbeats write again). Keys
	// and the audit log commit durably.
	fast := cc.Copy()
	fast.RuntimeParams["synchronous_commit"] = "off"
	p.fast = stdlib.OpenDB(*fast)
	for _, db := range []*sql.DB{p.db, p.fast} {
		db.SetMaxOpenConns(max(cfg.MaxConns/2, 1))
		db.SetMaxIdleConns(max(cfg.MaxConns/2, 1))
		db.SetConnMaxIdleTime(5 * time.Minute)
	}
	d := &DB{drv: p, cfg: cfg, keys: p.db, audit: p.db, dir: p.fast, boxes: p.db}
	fail := func(err error) (*DB, error) {
		p.db.Close()
		p.fast.Close()
		close(p.done)
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, 4*cfg.Timeout.D())
	defer cancel()
	if err := p.db.PingContext(mctx); err != nil {
		return fail(fmt.Errorf("%w: cannot reach the store, %s (store.dsn): %v", errdefs.ErrUnavailable, p.target, err))
	}
	if err := p.migrate(mctx, pgMigrations); err != nil {
		return fail(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.listen(lctx)
	d.ledger = p.newLedger(d)
	return d, nil
}

// migrate brings the schema to len(steps), each step in a transaction
// of its own with its row in airlock_migrations.
func (p *pgDriver) migrate(ctx context.Context, steps []migration) error {
	for {
		done, err := p.migrateOne(ctx, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next step, if any (done when none is left).
func (p *pgDriver) migrateOne(ctx context.Context, steps []migration) (done bool, err error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("%w: the store %s: %v", errdefs.ErrUnavailable, p.target, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return false, fmt.Errorf("%w: the store %s: %v", errdefs.ErrUnavailable, p.target, err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_migrations (
		version INTEGER PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return false, fmt.Errorf("%w: the store %s: %v", errdefs.ErrUnavailable, p.target, err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_migrations`).Scan(&have); err != nil {
		return false, fmt.Errorf("%w: the store %s: %v", errdefs.ErrUnavailable, p.target, err)
	}
	if have == len(steps) {
		return true, tx.Commit()
	}
	one := steps[:min(have+1, len(steps))]
	err = migrate(ctx, tx, p.target, have, one, func(v int) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO airlock_migrations (version) VALUES ($1)`, v)
		return err
	})
	if err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("%w: the store %s: migration %d: %v", errdefs.ErrUnavailable, p.target, have+1, err)
	}
	return false, nil
}

func (p *pgDriver) name() string           { return config.StorePostgres }
func (p *pgDriver) where() string          { return p.target }
func (p *pgDriver) rebind(q string) string { return rebindDollar(q) }

func (p *pgDriver) version(ctx context.Context) (int, error) {
	var v int
	err := p.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_migrations`).Scan(&v)
	return v, err
}

// listen keeps a connection LISTENing on airlock_keys until ctx ends,
// reconnecting after a failure; each notification, and each (re)start,
// drops the cached keys.
func (p *pgDriver) listen(ctx context.Context) {
	defer close(p.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := p.listenOnce(ctx)
		p.listening.Store(false)
		p.notified.Store(true)
		if ctx.Err() != nil {
			return
		}
		slog.Debug("store: key notifications lost; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (p *pgDriver) listenOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.D())
	conn, err := pgx.ConnectConfig(cctx, p.conn.Copy())
	if err == nil {
		_, err = conn.Exec(cctx, `LISTEN airlock_keys`)
	}
	cancel()
	if err != nil {
		if conn != nil {
			conn.Close(context.Background())
		}
		return err
	}
	defer conn.Close(context.Background())
	// Listening from here: whatever changed before is dropped once.
	p.notified.Store(true)
	p.listening.Store(true)
	for {
		// A bounded wait, so that a connection silently gone is noticed
		// (a ping) within the key TTL's order.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			p.notified.Store(true)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.D())
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// keysChanged: a notification came, or nothing listens (every lookup
// then reads the database). Cached keys are also bounded by keyTTL.
func (p *pgDriver) keysChanged() (bool, error) {
	return p.notified.Swap(false) || !p.listening.Load(), nil
}

// KeyTTL bounds how long a server believes a key it read from
// PostgreSQL: a revocation holds on every server within it, notified or
// not (notifications make it milliseconds).
const KeyTTL = time.Second

func (p *pgDriver) keyTTL() time.Duration { return KeyTTL }

func (p *pgDriver) lookupKey(ctx context.Context, hash string) (Key, error) {
	return scanKey(p.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE hash = $1`, hash))
}

func (p *pgDriver) auditUse() string {
	return `SELECT tenant, SUM(size), COUNT(*) FROM audit GROUP BY tenant`
}

// auditBytes is the records' bytes: a table's size on disk does not
// shrink as rows are deleted (their space is reused).
func (p *pgDriver) auditBytes(ctx context.Context) (int64, error) {
	var n int64
	err := p.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM audit`).Scan(&n)
	return n, err
}

// exclusive holds a transaction-scoped advisory lock named after what
// while f runs; a server that finds it taken skips f.
func (p *pgDriver) exclusive(ctx context.Context, what string, f func(context.Context) error) (bool, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var got bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, "airlock:"+what).Scan(&got); err != nil || !got {
		return false, err
	}
	return true, f(ctx)
}

func (p *pgDriver) served(ctx context.Context, d *DB) bool {
	var n int
	dead := unixNano(time.Now().Add(-d.cfg.LeaseTimeout.D()))
	err := p.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM servers WHERE heartbeat_at >= $1 AND stopped_at IS NULL`, dead).Scan(&n)
	return err == nil && n > 0
}

func (p *pgDriver) serve() error { return nil }

func (p *pgDriver) close() error {
	if p.stop != nil {
		p.stop()
	}
	<-p.done
	p.fast.Close()
	return p.db.Close()
}

// Probe is what `airlock doctor` learns of a store without changing it.
type Probe struct {
	Where string
	// Have is the schema version of the database (0: none yet, made at
	// the first start), Want this binary's.
	Have, Want int
	// Servers is how many servers send heartbeats now.
	Servers int
}

// ProbePostgres connects to the configured PostgreSQL within
// store.timeout and reads its schema version, migrating nothing.
func ProbePostgres(ctx context.Context, cfg config.Store) (Probe, error) {
	cc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return Probe{}, fmt.Errorf("store.dsn: %v", err)
	}
	pr := Probe{Where: fmt.Sprintf("PostgreSQL %s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database), Want: len(pgMigrations)}
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > cfg.Timeout.D() {
		cc.ConnectTimeout = cfg.Timeout.D()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Timeout.D())
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return pr, fmt.Errorf("cannot reach %s: %v", pr.Where, err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('airlock_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return pr, fmt.Errorf("%s: %v", pr.Where, err)
	}
	if !exists {
		return pr, nil
	}
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_migrations`).Scan(&pr.Have); err != nil {
		return pr, fmt.Errorf("%s: %v", pr.Where, err)
	}
	if pr.Have >= 1 {
		dead := unixNano(time.Now().Add(-cfg.LeaseTimeout.D()))
		conn.QueryRow(ctx, `SELECT COUNT(*) FROM servers WHERE heartbeat_at >= $1 AND stopped_at IS NULL`, dead).Scan(&pr.Servers)
	}
	if pr.Have > pr.Want {
		return pr, fmt.Errorf("%s has schema version %d, newer than this airlock's %d", pr.Where, pr.Have, pr.Want)
	}
	return pr, nil
}
