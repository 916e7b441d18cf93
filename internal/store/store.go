// Package store owns airlock's persistent data: one embedded SQLite
// database (modernc.org/sqlite, no cgo) in the data directory, its schema
// migrations, the API keys (stored hashed), the tenants' quotas, and the
// audit records with their retention.
//
// It must never hold a key's secret (only its SHA-256), never be on a
// sandbox's path, and never import a package above it: api, session and
// the command line use it, not the other way round.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"

	"airlock/internal/errdefs"
)

// Files of the database in the data directory: keys and tenants in one,
// the audit log in another, so that the audit's writes never invalidate
// the key cache (see Authenticate) and its size never slows a key lookup.
const (
	FileName      = "airlock.db"
	AuditFileName = "audit.db"
)

// DB is the open database.
type DB struct {
	db    *sql.DB // keys and tenants
	audit *sql.DB
	path  string
	keys  keyCache
	// served: the lock of a server that uses the database (see Serve).
	served *os.File
}

// serverLock is a file of the data directory that every server using the
// database holds a shared lock on: `airlock keys` tells from it whether
// any running server reads what it writes.
const serverLock = "server.lock"

// Serve marks the database as used by a running server, until Close.
func (d *DB) Serve() error {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(d.path), serverLock), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return fmt.Errorf("%w: locking %s: %v", errdefs.ErrUnavailable, f.Name(), err)
	}
	d.served = f
	return nil
}

// Served reports whether a running server uses the database in dir (one
// holds its lock; see Serve).
func Served(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, serverLock), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// migrations are the schema of each file, one step per entry, applied in
// order and recorded in the file's PRAGMA user_version. Never edit a step
// that shipped in a release: add one.
var (
	keyMigrations = []string{
		// 1: keys and tenants
		`CREATE TABLE keys (
			id TEXT PRIMARY KEY,
			hash TEXT NOT NULL UNIQUE,
			tenant TEXT NOT NULL,
			admin INTEGER NOT NULL DEFAULT 0,
			name TEXT NOT NULL DEFAULT '',
			created_at INTEGER NOT NULL,
			revoked_at INTEGER
		);
		CREATE TABLE tenants (
			name TEXT PRIMARY KEY,
			quotas TEXT NOT NULL DEFAULT '{}',
			updated_at INTEGER NOT NULL
		);`,
		// 2: a key's optional expiry (unix seconds); existing keys keep
		// none.
		`ALTER TABLE keys ADD COLUMN expires_at INTEGER;`,
	}
	auditMigrations = []string{
		// 1: the audit log
		`CREATE TABLE audit (
			seq INTEGER PRIMARY KEY AUTOINCREMENT,
			time INTEGER NOT NULL,
			kind TEXT NOT NULL,
			tenant TEXT NOT NULL DEFAULT '',
			key_id TEXT NOT NULL DEFAULT '',
			session TEXT NOT NULL DEFAULT '',
			request_id TEXT NOT NULL DEFAULT '',
			record TEXT NOT NULL
		);
		CREATE INDEX audit_time ON audit(time);
		CREATE INDEX audit_session ON audit(session, seq);
		CREATE INDEX audit_tenant ON audit(tenant, seq);`,
		// 2: each record's size, in the tenant's index: retention weighs
		// tenants by the space they use with an index-only scan.
		`ALTER TABLE audit ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
		UPDATE audit SET size = length(CAST(record AS BLOB));
		DROP INDEX audit_tenant;
		CREATE INDEX audit_tenant ON audit(tenant, seq, size);`,
	}
)

// Open opens (creating them, 0700 and 0600) the database files in dir and
// migrates them. Several processes may open them at once (the server and
// `airlock keys`): SQLite's locks and WAL keep them consistent.
func Open(dir string) (*DB, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: data_dir %q must be an absolute path", errdefs.ErrInvalidArgument, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: data_dir: %v", errdefs.ErrUnavailable, err)
	}
	d := &DB{path: filepath.Join(dir, FileName)}
	var err error
	if d.db, err = openFile(d.path, keyMigrations); err != nil {
		return nil, err
	}
	if d.audit, err = openFile(filepath.Join(dir, AuditFileName), auditMigrations); err != nil {
		d.db.Close()
		return nil, err
	}
	return d, nil
}

func openFile(path string, migrations []string) (*sql.DB, error) {
	// WAL: readers never wait for the writer; synchronous=NORMAL in WAL
	// mode loses nothing committed when the process is killed (the OS
	// has the pages), only the last commits on a power loss.
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %v", errdefs.ErrUnavailable, path, err)
	}
	db.SetMaxOpenConns(4)
	if err := migrate(db, path, migrations); err != nil {
		db.Close()
		return nil, err
	}
	os.Chmod(path, 0o600)
	return db, nil
}

// Close closes the database.
func (d *DB) Close() error {
	if d.served != nil {
		d.served.Close()
	}
	d.keys.close()
	d.audit.Close()
	return d.db.Close()
}

// Path is the keys' database file.
func (d *DB) Path() string { return d.path }

func migrate(db *sql.DB, path string, migrations []string) error {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: database %s: %v", errdefs.ErrUnavailable, path, err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("%w: database %s: %v", errdefs.ErrUnavailable, path, err)
	}
	if v > len(migrations) {
		return fmt.Errorf("%w: database %s has schema version %d, newer than this airlock's %d", errdefs.ErrUnavailable, path, v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.Exec(migrations[i]); err != nil {
			return fmt.Errorf("%w: database %s: migration %d: %v", errdefs.ErrUnavailable, path, i+1, err)
		}
	}
	if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return err
	}
	return tx.Commit()
}

// Version is the schema version of the keys' database.
func (d *DB) Version() (int, error) {
	var v int
	err := d.db.QueryRow(`PRAGMA user_version`).Scan(&v)
	return v, err
}

func unixNano(t time.Time) int64 { return t.UTC().UnixNano() }

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
