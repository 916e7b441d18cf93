package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// KeyPrefix starts every API key, so that a leaked one is recognisable
// (secret scanners, logs).
const KeyPrefix = "alk_"

// Key is an API key as stored: never its secret (the wire's, apitype's).
type Key = apitype.APIKey

// Key states: why a known key does or does not authenticate.
const (
	KeyLive    = apitype.KeyLive
	KeyRevoked = apitype.KeyRevoked
	KeyExpired = apitype.KeyExpired
)

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
	ctx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.keys.ExecContext(ctx, d.q(`INSERT INTO keys (id, hash, tenant, admin, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		k.ID, HashKey(secret), k.Tenant, admin, name, k.CreatedAt.Unix(), exp)
	if err != nil {
		return "", Key{}, d.unavailable("storing the key", err)
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
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.keys.QueryContext(ctx, `SELECT `+keyColumns+` FROM keys ORDER BY created_at, id`)
	if err != nil {
		return nil, d.unavailable("listing keys", err)
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
	ctx, cancel := d.bound(ctx)
	defer cancel()
	res, err := d.keys.ExecContext(ctx, d.q(`UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`), time.Now().Unix(), id)
	if err != nil {
		return d.unavailable("revoking the key", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var one int
		err := d.keys.QueryRowContext(ctx, d.q(`SELECT 1 FROM keys WHERE id = ?`), id).Scan(&one)
		if isNoRows(err) {
			return fmt.Errorf("%w: no key %q", errdefs.ErrNotFound, id)
		}
		return d.unavailable("revoking the key", err)
	}
	return nil
}

// keyCache holds keys already looked up, as long as the driver says
// nothing changed (keysChanged) and, where the driver bounds it, for at
// most keyTTL: what bounds how long a revocation takes to hold.
type keyCache struct {
	mu   sync.Mutex
	keys map[string]cachedKey // by hash; known keys only (live or revoked)
}

type cachedKey struct {
	k  Key
	at time.Time
}

// maxCachedKeys bounds the cache (it is cleared when full).
const maxCachedKeys = 10000

func (c *keyCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = nil
}

// Authenticate returns the key whose secret this is (zero when none is)
// and whether it is live: neither revoked nor expired (Key.State says
// which).
func (d *DB) Authenticate(ctx context.Context, secret string) (Key, bool, error) {
	if !strings.HasPrefix(secret, KeyPrefix) || len(secret) > 200 {
		return Key{}, false, nil
	}
	hash := HashKey(secret)
	c := &d.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, err := d.drv.keysChanged()
	if err != nil {
		c.keys = nil
		return Key{}, false, d.unavailable("reading keys", err)
	}
	if changed || c.keys == nil || len(c.keys) >= maxCachedKeys {
		c.keys = map[string]cachedKey{}
	}
	now := d.clock()
	e, ok := c.keys[hash]
	if ttl := d.drv.keyTTL(); ok && ttl > 0 && now.Sub(e.at) >= ttl {
		ok = false
	}
	if !ok {
		qctx, cancel := d.bound(ctx)
		k, err := d.drv.lookupKey(qctx, hash)
		cancel()
		if isNoRows(err) {
			return Key{}, false, nil // not cached: guesses must not fill the cache
		}
		if err != nil {
			return Key{}, false, d.unavailable("reading keys", err)
		}
		e = cachedKey{k: k, at: now}
		c.keys[hash] = e
	}
	return e.k, e.k.State(now) == KeyLive, nil
}

// SetQuotas sets the tenant's quotas (replacing what it had).
func (d *DB) SetQuotas(ctx context.Context, tenant string, q config.Quotas) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	b, _ := json.Marshal(q)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.keys.ExecContext(ctx, d.q(`INSERT INTO tenants (name, quotas, updated_at) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET quotas = excluded.quotas, updated_at = excluded.updated_at`), tenant, string(b), time.Now().Unix())
	return d.unavailable("storing the tenant's quotas", err)
}

// Quotas returns the tenant's own quotas (zero when it has none).
func (d *DB) Quotas(ctx context.Context, tenant string) (config.Quotas, error) {
	var s string
	ctx, cancel := d.bound(ctx)
	defer cancel()
	err := d.keys.QueryRowContext(ctx, d.q(`SELECT quotas FROM tenants WHERE name = ?`), tenant).Scan(&s)
	if isNoRows(err) {
		return config.Quotas{}, nil
	}
	if err != nil {
		return config.Quotas{}, d.unavailable("reading the tenant's quotas", err)
	}
	var q config.Quotas
	if err := json.Unmarshal([]byte(s), &q); err != nil {
		return config.Quotas{}, fmt.Errorf("tenant %s: stored quotas: %v", tenant, err)
	}
	return q, nil
}

// Tenants lists every tenant with quotas of its own.
func (d *DB) Tenants(ctx context.Context) (map[string]config.Quotas, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.keys.QueryContext(ctx, `SELECT name, quotas FROM tenants ORDER BY name`)
	if err != nil {
		return nil, d.unavailable("listing tenants", err)
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
