package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
)

func TestKeys(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	secret, k, err := db.CreateKey(ctx, "team-a", false, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, KeyPrefix) || len(secret) != len(KeyPrefix)+64 || k.Tenant != "team-a" {
		t.Fatalf("key %q %+v", secret, k)
	}
	got, ok, err := db.Authenticate(ctx, secret)
	if err != nil || !ok || got.ID != k.ID || got.Tenant != "team-a" || got.Admin {
		t.Fatalf("authenticate: %+v %v %v", got, ok, err)
	}
	for _, bad := range []string{"", "alk_", secret + "0", secret[:len(secret)-1], strings.ToUpper(secret), "Bearer " + secret} {
		if _, ok, _ := db.Authenticate(ctx, bad); ok {
			t.Errorf("%q authenticates", bad)
		}
	}
	// Only the hash is stored.
	raw, _ := os.ReadFile(filepath.Join(dir, FileName))
	wal, _ := os.ReadFile(filepath.Join(dir, FileName+"-wal"))
	if strings.Contains(string(raw)+string(wal), secret[len(KeyPrefix):]) {
		t.Error("the secret is in the database file")
	}
	// A revocation, by another connection (another process: airlock keys
	// revoke), holds from the next lookup on.
	other, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if _, ok, _ := db.Authenticate(ctx, secret); ok {
		t.Error("a revoked key authenticates")
	}
	if err := db.RevokeKey(ctx, "key_nope"); err == nil {
		t.Error("revoking an unknown key succeeded")
	}
	if err := db.RevokeKey(ctx, k.ID); err != nil {
		t.Errorf("revoking twice: %v", err)
	}
	keys, _ := db.Keys(ctx)
	if len(keys) != 1 || keys[0].RevokedAt == nil {
		t.Errorf("keys %+v", keys)
	}
	for _, bad := range []string{"", "-x", "a b", strings.Repeat("a", 65), "a/b"} {
		if _, _, err := db.CreateKey(ctx, bad, false, ""); err == nil {
			t.Errorf("tenant %q accepted", bad)
		}
	}
	// Quotas round-trip.
	q := config.Quotas{MaxSessions: 3, MaxLimits: config.Limits{Memory: 1 << 30}, Egress: "deny"}
	if err := db.SetQuotas(ctx, "team-a", q); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Quotas(ctx, "team-a"); err != nil || got.MaxSessions != 3 || got.MaxLimits.Memory != 1<<30 || got.Egress != "deny" {
		t.Errorf("quotas %+v %v", got, err)
	}
	if got, _ := db.Quotas(ctx, "nobody"); got.MaxSessions != 0 {
		t.Errorf("a tenant without quotas: %+v", got)
	}
}

// Migrations run once; a database newer than the binary is refused.
func TestMigrations(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		db, err := OpenSQLite(dir)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := db.Version(); v != len(keyMigrations) {
			t.Errorf("version %d, want %d", v, len(keyMigrations))
		}
		db.Close()
	}
	raw, _ := sql.Open("sqlite", filepath.Join(dir, FileName))
	raw.Exec(`PRAGMA user_version = 99`)
	raw.Close()
	if _, err := OpenSQLite(dir); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a newer schema: %v", err)
	}
	if _, err := OpenSQLite("relative"); err == nil {
		t.Error("a relative data_dir was accepted")
	}
}

func TestCPUSince(t *testing.T) {
	db, err := OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	now := time.Now()
	db.AppendAudit(ctx, []apitype.AuditRecord{
		{Time: now.Add(-48 * time.Hour), Kind: "execution", Tenant: "a", CPUMs: 5000},
		{Time: now, Kind: "execution", Tenant: "a", CPUMs: 1500},
		{Time: now, Kind: "command", Tenant: "a", CPUMs: 500},
		{Time: now, Kind: "execution", Tenant: "b", CPUMs: 10},
		{Time: now, Kind: "execution", CPUMs: 99999},
	})
	got, err := db.drv.(*sqliteDriver).cpuSince(ctx, now.Add(-time.Hour))
	if err != nil || got["a"] != 2*time.Second || got["b"] != 10*time.Millisecond || len(got) != 2 {
		t.Errorf("%v %v", got, err)
	}
}

// A revocation by another process holds from the very next lookup, even
// right after cached ones and among unrelated commits.
func TestRevocationIsImmediate(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		secret, k, err := other.CreateKey(ctx, "t", false, "")
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			if _, ok, err := db.Authenticate(ctx, secret); !ok || err != nil {
				t.Fatalf("round %d: a new key does not authenticate: %v", i, err)
			}
		}
		other.SetQuotas(ctx, "t", config.Quotas{MaxSessions: i + 1}) // an unrelated commit
		if _, ok, _ := db.Authenticate(ctx, secret); !ok {
			t.Fatalf("round %d: an unrelated commit broke the key", i)
		}
		if err := other.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := db.Authenticate(ctx, secret); ok {
			t.Fatalf("round %d: a revoked key still authenticates", i)
		}
	}
}

// A key may expire: refused from its expiry on like a revoked one (the
// cache holds no stale answer: the time is checked on every lookup),
// listed with it; an expiry in the past is refused at creation.
func TestKeyExpiry(t *testing.T) {
	db, err := OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	soon := time.Now().Add(time.Hour)
	secret, k, err := db.CreateKeyUntil(ctx, "team-a", false, "", soon)
	if err != nil || k.ExpiresAt == nil || !k.ExpiresAt.Equal(soon.UTC().Truncate(time.Second)) {
		t.Fatalf("create: %+v %v", k, err)
	}
	// The store's clock is moved, not waited for: a loaded host cannot
	// make the key expire before the test looks.
	at := func(tm time.Time) (Key, bool) {
		t.Helper()
		db.now = func() time.Time { return tm }
		got, ok, err := db.Authenticate(ctx, secret)
		if err != nil || got.ID != k.ID {
			t.Fatalf("at %v: %+v %v", tm, got, err)
		}
		return got, ok
	}
	if got, ok := at(k.ExpiresAt.Add(-time.Nanosecond)); !ok || got.State(time.Now()) != KeyLive {
		t.Fatalf("before its expiry: %+v %v", got, ok)
	}
	// From its expiry on, the cached key included.
	for _, after := range []time.Duration{0, time.Second} {
		if got, ok := at(k.ExpiresAt.Add(after)); ok || got.State(k.ExpiresAt.Add(after)) != KeyExpired {
			t.Errorf("%v after its expiry: %+v %v, want the key, expired", after, got, ok)
		}
	}
	db.now = nil
	keys, _ := db.Keys(ctx)
	if len(keys) != 1 || keys[0].ExpiresAt == nil {
		t.Errorf("keys %+v: want the expiry listed", keys)
	}
	if _, _, err := db.CreateKeyUntil(ctx, "team-a", false, "", time.Now().Add(-time.Hour)); err == nil {
		t.Error("a key expiring in the past was created")
	}
	// Revoked wins over expired: it was a decision.
	if err := db.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	past := k.ExpiresAt.Add(time.Second)
	if got, _ := at(past); got.State(past) != KeyRevoked {
		t.Errorf("revoked and expired: %q", got.State(past))
	}
}

// A keys database of the first schema (keys without an expiry) is
// migrated when opened: its keys keep authenticating, with no expiry.
func TestKeysMigration(t *testing.T) {
	dir := t.TempDir()
	old, err := openFile(filepath.Join(dir, FileName), keyMigrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	secret := KeyPrefix + strings.Repeat("ab", 32)
	if _, err := old.Exec(`INSERT INTO keys (id, hash, tenant, admin, name, created_at) VALUES ('key_old', ?, 'team-a', 0, '', ?)`,
		HashKey(secret), time.Now().Unix()); err != nil {
		t.Fatal(err)
	}
	old.Close()
	db, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Version(); err != nil || v != len(keyMigrations) || v < 2 {
		t.Errorf("schema version %d %v, want %d", v, err, len(keyMigrations))
	}
	k, ok, err := db.Authenticate(context.Background(), secret)
	if !ok || err != nil || k.ID != "key_old" || k.ExpiresAt != nil {
		t.Errorf("the old key after the migration: %+v %v %v", k, ok, err)
	}
}
