package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// KeyPrefix starts every API key, so that a leaked one is recognisable
// (secret scanners, logs).
const KeyPrefix = "alk_"

// Key is an API key as stored: never its secret.
type Key struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Admin     bool       `json:"admin"`
	Name      string     `json:"name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// ExpiresAt, when set, is when the key stops authenticating, as a
	// revoked one does.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Key states: why a known key does or does not authenticate.
const (
	KeyLive    = ""
	KeyRevoked = "revoked"
	KeyExpired = "expired"
)

// State is the key's state at now: KeyLive, KeyRevoked or KeyExpired.
func (k Key) State(now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return KeyRevoked
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return KeyExpired
	}
	return KeyLive
}

// Compiled on first use: this binary is also every sandbox's idle init,
// where a package-level regexp would be resident for nothing.
var tenantName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`) })

// ValidTenant checks a tenant's name: 1 to 64 letters, digits, '.', '_'
// and '-', starting with a letter or digit.
func ValidTenant(name string) error {
	if !tenantName().MatchString(name) {
		return fmt.Errorf("%w: tenant %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// HashKey is what is stored of a key: the SHA-256 of its secret (a
// 256-bit random secret needs no slow hash).
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// CreateKey makes a new key for tenant and returns its secret, which is
// never stored and cannot be shown again.
func (d *DB) CreateKey(ctx context.Context, tenant string, admin bool, name string) (string, Key, error) {
	return d.CreateKeyUntil(ctx, tenant, admin, name, time.Time{})
}

// CreateKeyUntil is CreateKey for a key that expires at expires (zero:
// never).
func (d *DB) CreateKeyUntil(ctx context.Context, tenant string, admin bool, name string, expires time.Time) (string, Key, error) {
	if err := ValidTenant(tenant); err != nil {
		return "", Key{}, err
	}
	if len(name) > 200 {
		return "", Key{}, fmt.Errorf("%w: a key's name is at most 200 bytes", errdefs.ErrInvalidArgument)
	}
	var sec [32]byte
	var id [6]byte
	rand.Read(sec[:])
	rand.Read(id[:])
	secret := KeyPrefix + hex.EncodeToString(sec[:])
	k := Key{ID: "key_" + hex.EncodeToString(id[:]), Tenant: tenant, Admin: admin, Name: name, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	var exp sql.NullInt64
	if !expires.IsZero() {
		if !expires.After(k.CreatedAt) {
			return "", Key{}, fmt.Errorf("%w: the key's expiry %s is not in the future", errdefs.ErrInvalidArgument, expires.UTC().Format(time.RFC3339))
		}
		t := expires.UTC().Truncate(time.Second)
		k.ExpiresAt = &t
		exp = sql.NullInt64{Int64: t.Unix(), Valid: true}
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO keys (id, hash, tenant, admin, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, HashKey(secret), k.Tenant, admin, name, k.CreatedAt.Unix(), exp)
	if err != nil {
		return "", Key{}, fmt.Errorf("%w: storing the key: %v", errdefs.ErrUnavailable, err)
	}
	return secret, k, nil
}

func scanKey(sc interface{ Scan(...any) error }) (Key, error) {
	var k Key
	var created int64
	var revoked, expires sql.NullInt64
	if err := sc.Scan(&k.ID, &k.Tenant, &k.Admin, &k.Name, &created, &revoked, &expires); err != nil {
		return Key{}, err
	}
	k.CreatedAt = time.Unix(created, 0).UTC()
	if revoked.Valid {
		t := time.Unix(revoked.Int64, 0).UTC()
		k.RevokedAt = &t
	}
	if expires.Valid {
		t := time.Unix(expires.Int64, 0).UTC()
		k.ExpiresAt = &t
	}
	return k, nil
}

// keyColumns are what scanKey reads.
const keyColumns = `id, tenant, admin, name, created_at, revoked_at, expires_at`

// Keys lists every key, oldest first.
func (d *DB) Keys(ctx context.Context) ([]Key, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM keys ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes the key id: every later request with it fails.
func (d *DB) RevokeKey(ctx context.Context, id string) error {
	res, err := d.db.ExecContext(ctx, `UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, time.Now().Unix(), id)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var one int
		if err := d.db.QueryRowContext(ctx, `SELECT 1 FROM keys WHERE id = ?`, id).Scan(&one); isNoRows(err) {
			return fmt.Errorf("%w: no key %q", errdefs.ErrNotFound, id)
		}
	}
	return nil
}

// keyCache holds keys already looked up, valid while the keys' database
// is unchanged: PRAGMA data_version, on a connection of its own that
// never writes, changes whenever any other connection or process (airlock
// keys revoke) commits. So a revocation holds from the next request on.
//
// The fast path skips even the pragma: in WAL mode every commit rewrites
// the header of the WAL index (the first 48 bytes of the -shm file: its
// change counter, last frame and checksums), which is how SQLite's own
// readers, and data_version, learn of it. A read of those bytes equal to
// what they were before the last pragma proves no commit since; any
// difference, a failed read, or a second since the last pragma runs it.
type keyCache struct {
	mu      sync.Mutex
	conn    *sql.Conn
	pragma  *sql.Stmt // PRAGMA data_version, prepared once
	version int64
	keys    map[string]Key // by hash; known keys only (live or revoked)
	shm     *os.File       // the WAL index, opened with conn
	hdr     [48]byte       // its header when the pragma last ran
	hdrOK   bool
	checked time.Time // when the pragma last ran
}

// walHeader reads the WAL index's header.
func (c *keyCache) walHeader() ([48]byte, bool) {
	var h [48]byte
	if c.shm == nil {
		return h, false
	}
	n, err := c.shm.ReadAt(h[:], 0)
	return h, err == nil && n == len(h)
}

// maxCachedKeys bounds the cache (it is cleared when full).
const maxCachedKeys = 10000

func (c *keyCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop()
}

func (c *keyCache) drop() {
	c.hdrOK = false
	if c.shm != nil {
		c.shm.Close()
		c.shm = nil
	}
	if c.pragma != nil {
		c.pragma.Close()
		c.pragma = nil
	}
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// Authenticate returns the key whose secret this is (zero when none is)
// and whether it is live: neither revoked nor expired (Key.State says
// which).
func (d *DB) Authenticate(ctx context.Context, secret string) (Key, bool, error) {
	if !strings.HasPrefix(secret, KeyPrefix) || len(secret) > 200 {
		return Key{}, false, nil
	}
	hash := HashKey(secret)
	c := &d.keys
	c.mu.Lock()
	defer c.mu.Unlock()
	// Not the request's context: a cancellable one costs the driver a
	// goroutine per query, and these take microseconds.
	bg := context.Background()
	if c.conn == nil {
		conn, err := d.db.Conn(bg)
		if err != nil {
			return Key{}, false, fmt.Errorf("%w: reading keys: %v", errdefs.ErrUnavailable, err)
		}
		st, err := conn.PrepareContext(bg, `PRAGMA data_version`)
		if err != nil {
			conn.Close()
			return Key{}, false, fmt.Errorf("%w: reading keys: %v", errdefs.ErrUnavailable, err)
		}
		c.conn, c.pragma, c.version = conn, st, -1
	}
	// The header first, then the pragma: a commit between the two makes
	// the next request run the pragma again, never miss it.
	h, hok := c.walHeader()
	if !hok || !c.hdrOK || h != c.hdr || time.Since(c.checked) > time.Second {
		var v int64
		if err := c.pragma.QueryRowContext(bg).Scan(&v); err != nil {
			c.drop()
			return Key{}, false, fmt.Errorf("%w: reading keys: %v", errdefs.ErrUnavailable, err)
		}
		if v != c.version {
			c.keys, c.version = map[string]Key{}, v
		}
		c.hdr, c.hdrOK, c.checked = h, hok, time.Now()
		if c.shm == nil {
			// The WAL index exists once the connection has read; its
			// header is trusted only once read before a pragma.
			c.shm, _ = os.Open(d.path + "-shm")
		}
	}
	if len(c.keys) >= maxCachedKeys {
		c.keys = map[string]Key{}
	}
	k, ok := c.keys[hash]
	if !ok {
		var err error
		k, err = scanKey(c.conn.QueryRowContext(bg, `SELECT `+keyColumns+` FROM keys WHERE hash = ?`, hash))
		if isNoRows(err) {
			return Key{}, false, nil // not cached: guesses must not fill the cache
		}
		if err != nil {
			return Key{}, false, fmt.Errorf("%w: reading keys: %v", errdefs.ErrUnavailable, err)
		}
		c.keys[hash] = k
	}
	return k, k.State(time.Now()) == KeyLive, nil
}

// SetQuotas sets the tenant's quotas (replacing what it had).
func (d *DB) SetQuotas(ctx context.Context, tenant string, q config.Quotas) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	b, _ := json.Marshal(q)
	_, err := d.db.ExecContext(ctx, `INSERT INTO tenants (name, quotas, updated_at) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET quotas = excluded.quotas, updated_at = excluded.updated_at`, tenant, string(b), time.Now().Unix())
	return err
}

// Quotas returns the tenant's own quotas (zero when it has none).
func (d *DB) Quotas(ctx context.Context, tenant string) (config.Quotas, error) {
	var s string
	err := d.db.QueryRowContext(ctx, `SELECT quotas FROM tenants WHERE name = ?`, tenant).Scan(&s)
	if isNoRows(err) {
		return config.Quotas{}, nil
	}
	if err != nil {
		return config.Quotas{}, err
	}
	var q config.Quotas
	if err := json.Unmarshal([]byte(s), &q); err != nil {
		return config.Quotas{}, fmt.Errorf("tenant %s: stored quotas: %v", tenant, err)
	}
	return q, nil
}

// Tenants lists every tenant with quotas of its own.
func (d *DB) Tenants(ctx context.Context) (map[string]config.Quotas, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT name, quotas FROM tenants ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]config.Quotas{}
	for rows.Next() {
		var name, s string
		if err := rows.Scan(&name, &s); err != nil {
			return nil, err
		}
		var q config.Quotas
		json.Unmarshal([]byte(s), &q)
		out[name] = q
	}
	return out, rows.Err()
}
