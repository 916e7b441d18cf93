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

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// Files of the SQLite store in the data directory: keys and tenants in
// one, the audit log in another, the servers and sessions directory in a
// third, so that neither the audit's nor the directory's writes ever
// invalidate the key cache (see sqliteDriver.keysChanged) and the log's
// size never slows a key lookup.
const (
	FileName          = "airlock.db"
	AuditFileName     = "audit.db"
	DirectoryFileName = "directory.db"
)

// SQLite's migrations, per file, recorded in each file's PRAGMA
// user_version.
var (
	keyMigrations = []migration{
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
	auditMigrations = []migration{
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
	directoryMigrations = []migration{
		// 1: servers and their sessions
		`CREATE TABLE servers (
			id TEXT PRIMARY KEY,
			pod TEXT NOT NULL,
			started_at INTEGER NOT NULL,
			heartbeat_at INTEGER NOT NULL,
			stopped_at INTEGER
		);
		CREATE TABLE sessions (
			id TEXT PRIMARY KEY,
			tenant TEXT NOT NULL,
			server TEXT NOT NULL,
			pod TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			ended_at INTEGER,
			end_reason TEXT NOT NULL DEFAULT '',
			info TEXT NOT NULL
		);
		CREATE INDEX sessions_tenant ON sessions(tenant, created_at);
		CREATE INDEX sessions_server ON sessions(server, ended_at);`,
		// 2: paused sessions (kept when their server goes, until they
		// expire) and the E2B API's sandbox records.
		`ALTER TABLE sessions ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
		ALTER TABLE sessions ADD COLUMN expires_at INTEGER;
		CREATE TABLE sandboxes (
			id TEXT PRIMARY KEY,
			tenant TEXT NOT NULL,
			pod TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			info TEXT NOT NULL
		);
		CREATE INDEX sandboxes_tenant ON sandboxes(tenant, created_at);`,
	}
)

// sqliteDriver is the SQLite store: files in the data directory, one
// machine. Several processes may open them at once (the server and
// `airlock keys`): SQLite's locks and WAL keep them consistent.
type sqliteDriver struct {
	dir  string
	path string // the keys' file
	db   *sql.DB
	// served: the lock of a server that uses the database (see serve).
	served_ *os.File

	// The key cache's change detection (see keysChanged): a connection
	// of its own that never writes, the prepared data_version pragma,
	// and the WAL index's header.
	conn     *sql.Conn
	pragma   *sql.Stmt
	version_ int64
	shm      *os.File
	hdr      [48]byte
	hdrOK    bool
	checked  time.Time
	// auditDB is the audit log's file (retention measures its pages).
	auditDB *sql.DB
}

func openSQLite(cfg config.Store, dir string) (*DB, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: data_dir %q must be an absolute path", errdefs.ErrInvalidArgument, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: data_dir: %v", errdefs.ErrUnavailable, err)
	}
	drv := &sqliteDriver{dir: dir, path: filepath.Join(dir, FileName), version_: -1}
	d := &DB{drv: drv, cfg: cfg}
	var err error
	if d.keys, err = openFile(drv.path, keyMigrations); err != nil {
		return nil, err
	}
	drv.db = d.keys
	if d.audit, err = openFile(filepath.Join(dir, AuditFileName), auditMigrations); err != nil {
		d.keys.Close()
		return nil, err
	}
	drv.auditDB = d.audit
	if d.dir, err = openFile(filepath.Join(dir, DirectoryFileName), directoryMigrations); err != nil {
		d.keys.Close()
		d.audit.Close()
		return nil, err
	}
	d.boxes = d.dir
	d.ledger = drv.newLedger(d)
	return d, nil
}

func openFile(path string, migrations []migration) (*sql.DB, error) {
	// WAL: readers never wait for the writer; synchronous=NORMAL in WAL
	// mode loses nothing committed when the process is killed (the OS
	// has the pages), only the last commits on a power loss.
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %v", errdefs.ErrUnavailable, path, err)
	}
	db.SetMaxOpenConns(4)
	if err := migrateFile(db, path, migrations); err != nil {
		db.Close()
		return nil, err
	}
	os.Chmod(path, 0o600)
	return db, nil
}

func migrateFile(db *sql.DB, path string, migrations []migration) error {
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
	err = migrate(ctx, tx, path, v, migrations, func(v int) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v))
		return err
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

func (s *sqliteDriver) name() string           { return config.StoreSQLite }
func (s *sqliteDriver) where() string          { return s.dir }
func (s *sqliteDriver) rebind(q string) string { return q }

func (s *sqliteDriver) version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

// serverLock is a file of the data directory that every server using the
// database holds a shared lock on: `airlock keys` tells from it whether
// any running server reads what it writes.
const serverLock = "server.lock"

func (s *sqliteDriver) serve() error {
	f, err := os.OpenFile(filepath.Join(s.dir, serverLock), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return fmt.Errorf("%w: locking %s: %v", errdefs.ErrUnavailable, f.Name(), err)
	}
	s.served_ = f
	return nil
}

func (s *sqliteDriver) served(context.Context, *DB) bool {
	f, err := os.OpenFile(filepath.Join(s.dir, serverLock), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
}

func (s *sqliteDriver) close() error {
	if s.served_ != nil {
		s.served_.Close()
	}
	s.dropConn()
	return nil
}

// The key cache holds keys while the keys' file is unchanged: PRAGMA
// data_version, on a connection of its own that never writes, changes
// whenever any other connection or process (airlock keys revoke)
// commits. So a revocation holds from the next request on.
//
// The fast path skips even the pragma: in WAL mode every commit rewrites
// the header of the WAL index (the first 48 bytes of the -shm file: its
// change counter, last frame and checksums), which is how SQLite's own
// readers, and data_version, learn of it. A read of those bytes equal to
// what they were before the last pragma proves no commit since; any
// difference, a failed read, or a second since the last pragma runs it.
func (s *sqliteDriver) keysChanged() (bool, error) {
	bg := context.Background()
	if s.conn == nil {
		conn, err := s.db.Conn(bg)
		if err != nil {
			return true, err
		}
		st, err := conn.PrepareContext(bg, `PRAGMA data_version`)
		if err != nil {
			conn.Close()
			return true, err
		}
		s.conn, s.pragma, s.version_ = conn, st, -1
	}
	// The header first, then the pragma: a commit between the two makes
	// the next request run the pragma again, never miss it.
	h, hok := s.walHeader()
	if hok && s.hdrOK && h == s.hdr && time.Since(s.checked) <= time.Second {
		return false, nil
	}
	var v int64
	if err := s.pragma.QueryRowContext(bg).Scan(&v); err != nil {
		s.dropConn()
		return true, err
	}
	changed := v != s.version_
	s.version_ = v
	s.hdr, s.hdrOK, s.checked = h, hok, time.Now()
	if s.shm == nil {
		// The WAL index exists once the connection has read; its header
		// is trusted only once read before a pragma.
		s.shm, _ = os.Open(s.path + "-shm")
	}
	return changed, nil
}

func (s *sqliteDriver) keyTTL() time.Duration { return 0 }

// walHeader reads the WAL index's header.
func (s *sqliteDriver) walHeader() ([48]byte, bool) {
	var h [48]byte
	if s.shm == nil {
		return h, false
	}
	n, err := s.shm.ReadAt(h[:], 0)
	return h, err == nil && n == len(h)
}

func (s *sqliteDriver) dropConn() {
	s.hdrOK = false
	if s.shm != nil {
		s.shm.Close()
		s.shm = nil
	}
	if s.pragma != nil {
		s.pragma.Close()
		s.pragma = nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// lookupKey reads on the cache's own connection (which keysChanged has
// just opened), not the request's context: a cancellable one costs the
// driver a goroutine per query, and these take microseconds.
func (s *sqliteDriver) lookupKey(_ context.Context, hash string) (Key, error) {
	if s.conn == nil {
		return Key{}, errors.New("no connection")
	}
	return scanKey(s.conn.QueryRowContext(context.Background(), `SELECT `+keyColumns+` FROM keys WHERE hash = ?`, hash))
}

// auditUse reads the tenant index alone.
func (s *sqliteDriver) auditUse() string {
	return `SELECT tenant, SUM(size), COUNT(*) FROM audit INDEXED BY audit_tenant GROUP BY tenant`
}

// auditBytes is the pages in use (the file's size never goes down:
// freed pages are reused), read in constant time.
func (s *sqliteDriver) auditBytes(ctx context.Context) (int64, error) {
	var pages, free, size int64
	for _, q := range []struct {
		sql string
		v   *int64
	}{{`PRAGMA page_count`, &pages}, {`PRAGMA freelist_count`, &free}, {`PRAGMA page_size`, &size}} {
		if err := s.auditDB.QueryRowContext(ctx, q.sql).Scan(q.v); err != nil {
			return 0, err
		}
	}
	return (pages - free) * size, nil
}

func (s *sqliteDriver) exclusive(ctx context.Context, _ string, f func(context.Context) error) (bool, error) {
	return true, f(ctx)
}

// newLedger counts in memory, the day's CPU read back from the audit log
// (a restart keeps the day's quota).
func (s *sqliteDriver) newLedger(d *DB) Ledger {
	l := newMemLedger(time.Now)
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	if used, err := s.cpuSince(context.Background(), midnight); err == nil {
		l.seed(used)
	}
	return l
}

// cpuSince sums the CPU time of each tenant's recorded operations since
// t.
func (s *sqliteDriver) cpuSince(ctx context.Context, t time.Time) (map[string]time.Duration, error) {
	rows, err := s.auditDB.QueryContext(ctx, `SELECT tenant, COALESCE(SUM(json_extract(record, '$.cpu_ms')), 0) FROM audit
		WHERE time >= ? AND tenant != '' GROUP BY tenant`, unixNano(t))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var tenant string
		var ms float64
		if err := rows.Scan(&tenant, &ms); err != nil {
			return nil, err
		}
		out[tenant] = time.Duration(ms * float64(time.Millisecond))
	}
	return out, rows.Err()
}
