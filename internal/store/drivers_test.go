package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// opener opens another handle on the same store: another server (or
// `airlock keys`) using it.
type opener func(t *testing.T) *DB

// twoPods opens two stores of one database, serving as pods pod-a and
// pod-b.
func twoPods(t *testing.T, open opener) (a, b *DB) {
	t.Helper()
	a, b = open(t), open(t)
	for i, db := range []*DB{a, b} {
		if _, err := db.Serve(context.Background(), []string{"pod-a", "pod-b"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// drivers runs f once per driver, on a store of its own.
func drivers(t *testing.T, f func(t *testing.T, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		f(t, func(t *testing.T) *DB {
			t.Helper()
			db, err := OpenSQLite(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Shared(t).NewDatabase(t)
		f(t, func(t *testing.T) *DB {
			t.Helper()
			return openPG(t, dsn, nil)
		})
	})
}

func openPG(t *testing.T, dsn string, tweak func(*config.Store)) *DB {
	t.Helper()
	cfg := config.DefaultStore()
	cfg.Driver, cfg.DSN = config.StorePostgres, dsn
	if tweak != nil {
		tweak(&cfg)
	}
	db, err := Open(context.Background(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitFor waits until ok, at most within; it returns how long it took.
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// A key made through one handle authenticates through another at once;
// its revocation holds there within the bound (SQLite: the next lookup;
// PostgreSQL: KeyTTL, milliseconds when notified), waited for as an
// event; so does a change of quotas.
func TestKeysAcrossServers(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		a, b := open(t), open(t)
		ctx := context.Background()
		for round := 0; round < 5; round++ {
			secret, k, err := a.CreateKey(ctx, "team-a", round == 0, "ci")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				got, ok, err := b.Authenticate(ctx, secret)
				if err != nil || !ok || got.ID != k.ID || got.Admin != (round == 0) {
					t.Fatalf("round %d: the new key on the other server: %+v %v %v", round, got, ok, err)
				}
			}
			if err := a.RevokeKey(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			// What b cached it read before the revocation: a lookup that
			// begins KeyTTL after it must see it, however slow the host
			// (a fixed deadline for the whole wait would race its load).
			revoked := time.Now()
			for {
				late := time.Since(revoked) >= KeyTTL
				got, ok, err := b.Authenticate(ctx, secret)
				if err == nil && !ok && got.State(time.Now()) == KeyRevoked {
					t.Logf("round %d: revoked on the other server after %s", round, time.Since(revoked))
					break
				}
				if late {
					t.Fatalf("round %d: the key on the other server, looked up %s after its revocation: %+v %v %v", round, KeyTTL, got, ok, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if err := a.SetQuotas(ctx, "team-a", config.Quotas{MaxSessions: 7}); err != nil {
			t.Fatal(err)
		}
		if q, err := b.Quotas(ctx, "team-a"); err != nil || q.MaxSessions != 7 {
			t.Errorf("quotas on the other server: %+v %v", q, err)
		}
		if err := b.RevokeKey(ctx, "key_nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("revoking an unknown key: %v", err)
		}
	})
}

// Migrations run once per store; a store newer than the binary is
// refused with a clear error.
func TestSchemaVersions(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		db := open(t)
		v, err := db.Version()
		if err != nil || v < 1 {
			t.Fatalf("version %d %v", v, err)
		}
		db2 := open(t) // again: nothing to do
		if v2, _ := db2.Version(); v2 != v {
			t.Errorf("version %d then %d", v, v2)
		}
		var bump string
		if db.Driver() == config.StorePostgres {
			bump = `INSERT INTO airlock_migrations (version) VALUES (99)`
		} else {
			bump = `PRAGMA user_version = 99`
		}
		if _, err := db.keys.Exec(bump); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db2.Close()
		var newer *DB
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatal(r)
				}
			}()
			newer, err = tryOpen(db)
		}()
		if err == nil {
			newer.Close()
			t.Fatal("a store newer than the binary was opened")
		}
		if !strings.Contains(err.Error(), "newer than this airlock's") || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("a newer store: %v", err)
		}
	})
}

// tryOpen opens the store db was opened on.
func tryOpen(db *DB) (*DB, error) {
	switch d := db.drv.(type) {
	case *pgDriver:
		return Open(context.Background(), db.cfg, "")
	case *sqliteDriver:
		return OpenSQLite(d.dir)
	}
	return nil, fmt.Errorf("no driver")
}

// A migration interrupted mid-way leaves nothing of itself: on
// PostgreSQL its connection is terminated while the step runs (DDL is
// transactional); on SQLite a step fails half-way. The next start
// applies it whole.
func TestInterruptedMigration(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		dsn := srv.NewDatabase(t)
		db := openPG(t, dsn, nil)
		p := db.drv.(*pgDriver)
		base := len(pgMigrations)
		slow := append(append([]migration{}, pgMigrations...), `CREATE TABLE half (x int); INSERT INTO half VALUES (1); SELECT pg_sleep(60); CREATE TABLE other (y int);`)
		errc := make(chan error, 1)
		go func() { errc <- p.migrate(context.Background(), slow) }()
		// Wait for the step to be in its sleep, then cut its connection.
		waitFor(t, 30*time.Second, "the migration's sleep", func() bool {
			var n int
			db.keys.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()`).Scan(&n)
			return n > 0
		})
		if _, err := db.keys.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err == nil {
			t.Fatal("the interrupted migration reported success")
		}
		var n int
		db.keys.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name IN ('half', 'other')`).Scan(&n)
		if v, _ := db.Version(); v != base || n != 0 {
			t.Fatalf("after the interruption: version %d (want %d), %d of its tables", v, base, n)
		}
		fixed := append(append([]migration{}, pgMigrations...), `CREATE TABLE half (x int); INSERT INTO half VALUES (1); CREATE TABLE other (y int);`)
		if err := p.migrate(context.Background(), fixed); err != nil {
			t.Fatal(err)
		}
		db.keys.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name IN ('half', 'other')`).Scan(&n)
		if v, _ := db.Version(); v != base+1 || n != 2 {
			t.Errorf("after the next start: version %d, %d tables", v, n)
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		path := dir + "/" + FileName
		broken := append(append([]migration{}, keyMigrations...), `CREATE TABLE half (x int); INSERT INTO half VALUES (1); SELECT nonsense FROM nowhere;`)
		db, err := openFile(path, keyMigrations)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if db, err := openFile(path, broken); err == nil {
			db.Close()
			t.Fatal("a failing step was applied")
		}
		ok, err := OpenSQLite(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ok.Close()
		var n int
		ok.keys.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'half'`).Scan(&n)
		if v, _ := ok.Version(); v != len(keyMigrations) || n != 0 {
			t.Errorf("after the failed step: version %d, half exists: %d", v, n)
		}
	})
}

// Audit records written by several servers are one log: each sees all,
// in order, paged.
func TestAuditAcrossServers(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		servers := []*DB{open(t), open(t), open(t)}
		ctx := context.Background()
		var wg sync.WaitGroup
		for i, db := range servers {
			wg.Go(func() {
				for j := 0; j < 10; j++ {
					recs := []apitype.AuditRecord{
						{Time: time.Now(), Kind: apitype.AuditExecution, Tenant: fmt.Sprint("t", i), Session: fmt.Sprint("s", i), CPUMs: 1},
						{Time: time.Now(), Kind: apitype.AuditFileUpload, Tenant: fmt.Sprint("t", i), Session: fmt.Sprint("s", i)},
					}
					if err := db.AppendAudit(ctx, recs); err != nil {
						t.Error(err)
						return
					}
					if recs[0].Seq == 0 || recs[1].Seq <= recs[0].Seq {
						t.Errorf("seqs %d %d", recs[0].Seq, recs[1].Seq)
					}
				}
			})
		}
		wg.Wait()
		var all []apitype.AuditRecord
		q := AuditQuery{Limit: 7}
		for {
			recs, next, err := servers[1].Audit(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, recs...)
			if next == "" {
				break
			}
			fmt.Sscan(next, &q.After)
		}
		if len(all) != 60 {
			t.Fatalf("%d records, want 60", len(all))
		}
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq {
				t.Fatalf("records out of order at %d", i)
			}
		}
		recs, _, err := servers[2].Audit(ctx, AuditQuery{Tenant: "t0", Kind: "file"})
		if err != nil || len(recs) != 10 || recs[0].Kind != apitype.AuditFileUpload {
			t.Errorf("t0's file records: %d %v", len(recs), err)
		}
	})
}

// The ledger is exact under concurrency: 20 admissions at once against a
// limit of 3, spread over three servers, admit exactly 3; releases give
// places back; executions' rate and CPU bounds hold; on PostgreSQL a dead
// server's holdings stop counting.
func TestLedger(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		n := 3
		if open(t).Driver() == config.StoreSQLite {
			n = 1 // memory: one server's
		}
		var servers []*DB
		for i := 0; i < n; i++ {
			db := open(t)
			if _, err := db.Serve(ctx, fmt.Sprint("pod-", i)); err != nil {
				t.Fatal(err)
			}
			servers = append(servers, db)
		}
		// Rounds of 20 at once (released together by a barrier), each
		// round a tenant of its own.
		var held []Admission
		for round := 0; round < 10; round++ {
			claim := Claim{Tenant: fmt.Sprint("r", round), Kind: HoldSession, Max: 3}
			var admitted atomic.Int32
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < 20; i++ {
				wg.Go(func() {
					<-start
					a, err := servers[i%n].Ledger().Admit(ctx, claim)
					if err != nil {
						t.Error(err)
						return
					}
					if a.Refused == "" {
						admitted.Add(1)
						mu.Lock()
						if round == 0 {
							held = append(held, a)
						}
						mu.Unlock()
					} else if a.Refused != QuotaSessions || a.Live != 3 {
						t.Errorf("refused %+v", a)
					}
				})
			}
			close(start)
			wg.Wait()
			if admitted.Load() != 3 {
				t.Fatalf("round %d: %d of 20 admitted against a limit of 3", round, admitted.Load())
			}
		}
		claim := Claim{Tenant: "r0", Kind: HoldSession, Max: 3}
		// Another tenant is not held back.
		if a, err := servers[0].Ledger().Admit(ctx, Claim{Tenant: "b", Kind: HoldSession, Max: 1}); err != nil || a.Refused != "" {
			t.Errorf("tenant b: %+v %v", a, err)
		}
		held[0].Release()
		held[0].Release() // once
		if a, err := servers[n-1].Ledger().Admit(ctx, claim); err != nil || a.Refused != "" {
			t.Fatalf("after a release: %+v %v", a, err)
		}
		if a, _ := servers[0].Ledger().Admit(ctx, claim); a.Refused != QuotaSessions {
			t.Errorf("a 4th: %+v", a)
		}

		// Executions: in flight, then the rate.
		ex := Claim{Tenant: "a", Kind: HoldExecution, Max: 2, PerMinute: 4}
		e1, _ := servers[0].Ledger().Admit(ctx, ex)
		e2, _ := servers[n-1].Ledger().Admit(ctx, ex)
		if e1.Refused != "" || e2.Refused != "" {
			t.Fatalf("executions: %+v %+v", e1, e2)
		}
		if a, _ := servers[0].Ledger().Admit(ctx, ex); a.Refused != QuotaConcurrent {
			t.Errorf("a 3rd execution: %+v", a)
		}
		e1.Release()
		e2.Release()
		for i := 0; i < 2; i++ {
			a, _ := servers[0].Ledger().Admit(ctx, ex)
			if a.Refused != "" {
				t.Fatalf("execution %d: %+v", i+3, a)
			}
			a.Release()
		}
		if a, _ := servers[0].Ledger().Admit(ctx, ex); a.Refused != QuotaPerMinute || a.Recent != 4 || a.Oldest.IsZero() {
			t.Errorf("a 5th in a minute: %+v", a)
		}
		// CPU counts across servers (flushed by the next tick on
		// PostgreSQL: waited for).
		servers[0].Ledger().AddCPU("c", 3*time.Second)
		cpu := Claim{Tenant: "c", Kind: HoldExecution, CPUPerDay: 2 * time.Second}
		waitFor(t, 30*time.Second, "the CPU on another server", func() bool {
			a, err := servers[n-1].Ledger().Admit(ctx, cpu)
			return err == nil && a.Refused == QuotaCPU && a.CPU >= 3*time.Second
		})

		if n == 1 {
			return
		}
		// A dead server's holdings stop counting: tenant d fills its
		// quota on server 0, which then stops beating.
		d := Claim{Tenant: "d", Kind: HoldSession, Max: 2}
		for i := 0; i < 2; i++ {
			if a, _ := servers[0].Ledger().Admit(ctx, d); a.Refused != "" {
				t.Fatal(a)
			}
		}
		if a, _ := servers[1].Ledger().Admit(ctx, d); a.Refused != QuotaSessions {
			t.Fatalf("d's 3rd: %+v", a)
		}
		servers[1].dir.Exec(`UPDATE servers SET heartbeat_at = 0 WHERE id = $1`, servers[0].ServerID())
		if a, _ := servers[1].Ledger().Admit(ctx, d); a.Refused != "" {
			t.Errorf("with the holder dead: %+v", a)
		}
	})
}

// The directory lists other servers' sessions; a server that stops
// beating has its sessions marked ended (server_lost) by the next live
// server's heartbeat, and learns it was taken for dead when it beats
// again.
func TestDirectory(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		a, b := twoPods(t, open)
		now := time.Now().UTC()
		if err := a.PutSessions(ctx, []apitype.Session{
			{ID: "s1", Tenant: "t1", State: apitype.StateIdle, Language: "python", CreatedAt: now},
			{ID: "s2", Tenant: "t2", State: apitype.StateIdle, Language: "bash", CreatedAt: now.Add(time.Millisecond)},
			{ID: "s3", Tenant: "t1", State: apitype.StateIdle, Language: "bash", CreatedAt: now.Add(2 * time.Millisecond)},
		}); err != nil {
			t.Fatal(err)
		}
		a.PutSessions(ctx, []apitype.Session{{ID: "s3", Tenant: "t1", State: apitype.StateEnded, EndReason: "deleted", CreatedAt: now}})
		got, err := b.ListSessions(ctx, "t1", false)
		if err != nil || len(got) != 1 || got[0].ID != "s1" || got[0].Pod != "pod-a" || got[0].State != apitype.StateIdle {
			t.Fatalf("t1's sessions from b: %+v %v", got, err)
		}
		if all, _ := b.ListSessions(ctx, "", true); len(all) != 2 {
			t.Errorf("every tenant's: %+v", all)
		}
		if mine, _ := a.ListSessions(ctx, "t1", false); len(mine) != 0 {
			t.Errorf("a lists its own from the directory: %+v", mine)
		}
		// a stops beating.
		b.dir.Exec(b.q(`UPDATE servers SET heartbeat_at = 0 WHERE id = ?`), a.ServerID())
		got, _ = b.ListSessions(ctx, "t1", false)
		if len(got) != 1 || got[0].State != apitype.StateEnded || got[0].EndReason != EndServerLost {
			t.Errorf("a's session with a dead: %+v", got)
		}
		beat, err := b.Heartbeat(ctx)
		if err != nil || beat.Reaped != 2 || beat.Revived {
			t.Errorf("b's heartbeat: %+v %v", beat, err)
		}
		beat, err = a.Heartbeat(ctx)
		if err != nil || !beat.Revived {
			t.Errorf("a's heartbeat after it was taken for dead: %+v %v", beat, err)
		}
		if servers, err := b.Servers(ctx); err != nil || len(servers) != 2 || !servers[0].Alive || !servers[1].Alive {
			t.Errorf("servers %+v %v", servers, err)
		}
		if !b.Served(ctx) {
			t.Error("no server is said to use the store")
		}
	})
}

// A database that cannot be reached at start is refused, saying where,
// never the password; one lost mid-run fails calls with 503 within
// store.timeout, and they work again once it is back.
func TestPostgresFaults(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDatabase(t)
	cfg := config.DefaultStore()
	cfg.Driver, cfg.Timeout = config.StorePostgres, config.Duration(time.Second)

	cfg.DSN = strings.Replace(dsn, fmt.Sprint(srv.Port()), "1", 1) // nothing listens on port 1
	_, err := Open(context.Background(), cfg, "")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), srv.Password()) {
		t.Errorf("unreachable: %v", err)
	}
	cfg.DSN = strings.Replace(dsn, srv.Password(), "wrong-password", 1)
	if _, err = Open(context.Background(), cfg, ""); err == nil || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("a wrong password: %v", err)
	}

	cfg.DSN = dsn
	db, err := Open(context.Background(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Serve(ctx, "pod-0"); err != nil {
		t.Fatal(err)
	}
	secret, _, err := db.CreateKey(ctx, "t", false, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := db.Authenticate(ctx, secret); !ok || err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	waitFor(t, 10*time.Second, "the lost database to fail authentication", func() bool {
		_, _, err := db.Authenticate(ctx, secret)
		return errors.Is(err, errdefs.ErrUnavailable) && errdefs.HTTPStatus(err) == 503 && !strings.Contains(errdefs.Message(err), "127.0.0.1")
	})
	for name, call := range map[string]func() error{
		"admit":  func() error { _, err := db.Ledger().Admit(ctx, Claim{Tenant: "t", Kind: HoldSession}); return err },
		"audit":  func() error { return db.AppendAudit(ctx, []apitype.AuditRecord{{Time: time.Now(), Kind: "execution"}}) },
		"list":   func() error { _, err := db.ListSessions(ctx, "t", false); return err },
		"beat":   func() error { _, err := db.Heartbeat(ctx); return err },
		"create": func() error { _, _, err := db.CreateKey(ctx, "t", false, ""); return err },
	} {
		start := time.Now()
		err := call()
		if !errors.Is(err, errdefs.ErrUnavailable) || strings.Contains(err.Error(), srv.Password()) {
			t.Errorf("%s with the database gone: %v", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s with store.timeout 1s", name, d)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the store back", func() bool {
		_, ok, err := db.Authenticate(ctx, secret)
		return ok && err == nil
	})
	if a, err := db.Ledger().Admit(ctx, Claim{Tenant: "t", Kind: HoldSession, Max: 1}); err != nil || a.Refused != "" {
		t.Errorf("admission after the restart: %+v %v", a, err)
	}
}

// A slow database (a statement that waits on a lock someone holds) fails
// calls with 503 once store.timeout passes, never holds them: a key's
// lookup behind a locked keys table, an admission behind the tenant's
// lock held elsewhere. Released, both work again.
func TestPostgresSlow(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	db := openPG(t, dsn, func(c *config.Store) { c.Timeout = config.Duration(300 * time.Millisecond) })
	ctx := context.Background()
	if _, err := db.Serve(ctx, "pod-0"); err != nil {
		t.Fatal(err)
	}
	secret, _, err := db.CreateKey(ctx, "t", false, "")
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := db.keys.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	tx, err := blocker.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE keys IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT pg_advisory_xact_lock(hashtextextended('airlock.quota:t', 0))`); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"authenticate": func() error { _, _, err := db.Authenticate(ctx, secret); return err },
		"admit": func() error {
			_, err := db.Ledger().Admit(ctx, Claim{Tenant: "t", Kind: HoldSession, Max: 1})
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if !errors.Is(err, errdefs.ErrUnavailable) || errdefs.HTTPStatus(err) != 503 {
				t.Errorf("%s behind a lock: %v, want 503 unavailable", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s is held by a slow database past store.timeout (300ms)", name)
		}
	}
	tx.Rollback()
	if _, ok, err := db.Authenticate(ctx, secret); !ok || err != nil {
		t.Errorf("after the lock: %v %v", ok, err)
	}
	if a, err := db.Ledger().Admit(ctx, Claim{Tenant: "t", Kind: HoldSession, Max: 1}); err != nil || a.Refused != "" {
		t.Errorf("admission after the lock: %+v %v", a, err)
	}
}

// E2B sandbox records: written by one server, read by another (with the
// pod that holds them), listed by pod, rewritten in place, deleted.
func TestSandboxRecords(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		a, b := twoPods(t, open)
		now := time.Now().UTC()
		for i, db := range []*DB{a, b, a} {
			r := SandboxRecord{ID: fmt.Sprint("sb", i), Tenant: "t1", Created: now.Add(time.Duration(i) * time.Millisecond), Info: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			if err := db.PutSandbox(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		r, ok, err := b.Sandbox(ctx, "sb0")
		if err != nil || !ok || r.Pod != "pod-a" || r.Tenant != "t1" || string(r.Info) != `{"n":0}` || !r.Created.Equal(now) {
			t.Fatalf("sb0 from b: %+v %v %v", r, ok, err)
		}
		if _, ok, err := b.Sandbox(ctx, "nope"); ok || err != nil {
			t.Errorf("an unknown record: %v %v", ok, err)
		}
		mine, err := a.Sandboxes(ctx, "pod-a")
		if err != nil || len(mine) != 2 || mine[0].ID != "sb0" || mine[1].ID != "sb2" {
			t.Errorf("pod-a's records: %+v %v", mine, err)
		}
		if all, _ := a.Sandboxes(ctx, ""); len(all) != 3 {
			t.Errorf("every record: %+v", all)
		}
		if err := a.PutSandbox(ctx, SandboxRecord{ID: "sb0", Tenant: "t1", Created: now, Info: []byte(`{"n":9}`)}); err != nil {
			t.Fatal(err)
		}
		if r, _, _ := b.Sandbox(ctx, "sb0"); string(r.Info) != `{"n":9}` {
			t.Errorf("rewritten: %s", r.Info)
		}
		if err := b.DeleteSandbox(ctx, "sb0"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := a.Sandbox(ctx, "sb0"); ok {
			t.Error("a deleted record is still read")
		}
		if err := b.DeleteSandbox(ctx, "sb0"); err != nil {
			t.Errorf("deleting it again: %v", err)
		}
	})
}

// Paused sessions outlive their server in the directory: a dead
// server's live sessions end (server_lost), its paused ones stay listed
// paused on its pod until they expire; a clean stop keeps them too; a
// server of the same pod started again takes them over, and those it no
// longer holds end.
func TestDirectoryPaused(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		a, b := twoPods(t, open)
		now := time.Now().UTC()
		paused := func(id string, expires time.Time) apitype.Session {
			return apitype.Session{ID: id, Tenant: "t1", State: apitype.StatePaused, CreatedAt: now, Paused: &apitype.PausedInfo{PausedAt: now, ExpiresAt: expires}}
		}
		if err := a.PutSessions(ctx, []apitype.Session{
			paused("kept", now.Add(time.Hour)), paused("expired", now.Add(-time.Second)),
			{ID: "live", Tenant: "t1", State: apitype.StateIdle, CreatedAt: now},
		}); err != nil {
			t.Fatal(err)
		}
		list := func(who *DB) map[string]apitype.Session {
			t.Helper()
			got, err := who.ListSessions(ctx, "t1", false)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]apitype.Session{}
			for _, s := range got {
				if _, dup := out[s.ID]; dup {
					t.Errorf("%s listed twice", s.ID)
				}
				out[s.ID] = s
			}
			return out
		}
		// a dies.
		b.dir.Exec(b.q(`UPDATE servers SET heartbeat_at = 0 WHERE id = ?`), a.ServerID())
		if beat, err := b.Heartbeat(ctx); err != nil || beat.Reaped != 1 {
			t.Errorf("b's heartbeat: %+v %v (want the live session alone reaped)", beat, err)
		}
		got := list(b)
		if s := got["kept"]; s.State != apitype.StatePaused || s.Pod != "pod-a" {
			t.Errorf("a dead server's paused session: %+v", s)
		}
		if s := got["live"]; s.State != apitype.StateEnded || s.EndReason != EndServerLost {
			t.Errorf("a dead server's live session: %+v", s)
		}
		if s, ok := got["expired"]; ok {
			t.Errorf("an expired paused session is listed: %+v", s)
		}
		// A clean stop keeps it paused too.
		a.Close()
		b.Heartbeat(ctx)
		if s := list(b)["kept"]; s.State != apitype.StatePaused {
			t.Errorf("after its server stopped: %+v", s)
		}

		// pod-a again, holding it: taken over, listed once.
		a2 := open(t)
		if _, err := a2.Serve(ctx, "pod-a"); err != nil {
			t.Fatal(err)
		}
		if n, err := a2.SyncPaused(ctx, map[string]bool{"kept": true}); err != nil || n != 0 {
			t.Errorf("SyncPaused holding it: %d %v", n, err)
		}
		if err := a2.PutSessions(ctx, []apitype.Session{paused("kept", now.Add(time.Hour))}); err != nil {
			t.Fatal(err)
		}
		if s := list(b)["kept"]; s.State != apitype.StatePaused || s.Pod != "pod-a" {
			t.Errorf("taken over by pod-a's new server: %+v", s)
		}
		// Resumed there: live again.
		a2.PutSessions(ctx, []apitype.Session{{ID: "kept", Tenant: "t1", State: apitype.StateIdle, CreatedAt: now}})
		if s := list(b)["kept"]; s.State != apitype.StateIdle {
			t.Errorf("resumed: %+v", s)
		}
		a2.PutSessions(ctx, []apitype.Session{paused("kept", now.Add(time.Hour))})
		// pod-a no longer holds it (its image lost with the volume, say).
		if n, err := a2.SyncPaused(ctx, map[string]bool{}); err != nil || n != 1 {
			t.Errorf("SyncPaused without it: %d %v", n, err)
		}
		if s, ok := list(b)["kept"]; ok {
			t.Errorf("a paused session its pod no longer holds is listed: %+v", s)
		}
	})
}

// A live session its server ended at shutdown while keeping its
// recovery point (the shutdown could not pause it), or that was still
// listed when its server stopped, is listed paused on its pod again once
// the pod's next server holds it (issue #21: recovered at the start);
// one ended otherwise (deleted) is never listed again, and the other
// pod never takes any of them over. Checked against a mutant: the
// directory's rewrite refused for the shutdown's end (the recovered
// session was never listed elsewhere).
func TestDirectoryRecoveredAfterShutdown(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		a, b := twoPods(t, open)
		now := time.Now().UTC()
		shutdown := apitype.Ended(apitype.EndShutdown).Reason
		if err := a.PutSessions(ctx, []apitype.Session{
			{ID: "kept", Tenant: "t1", State: apitype.StateEnded, EndReason: shutdown, CreatedAt: now},
			{ID: "stopped", Tenant: "t1", State: apitype.StateIdle, CreatedAt: now},
			{ID: "deleted", Tenant: "t1", State: apitype.StateEnded, EndReason: apitype.Ended(apitype.EndDeleted).Reason, CreatedAt: now},
		}); err != nil {
			t.Fatal(err)
		}
		a.Close()
		listed := func() map[string]string {
			t.Helper()
			got, err := b.ListSessions(ctx, "t1", false)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, s := range got {
				out[s.ID] = s.State + "@" + s.Pod
			}
			return out
		}
		if got := listed(); len(got) != 0 {
			t.Errorf("while pod-a is away: %v", got)
		}
		// b's own beat and sync touch none of them.
		b.Heartbeat(ctx)
		if n, err := b.SyncPaused(ctx, map[string]bool{}); err != nil || n != 0 {
			t.Errorf("pod-b's SyncPaused: %d %v", n, err)
		}
		a2 := open(t)
		if _, err := a2.Serve(ctx, "pod-a"); err != nil {
			t.Fatal(err)
		}
		paused := func(id string) apitype.Session {
			return apitype.Session{ID: id, Tenant: "t1", State: apitype.StatePaused, CreatedAt: now, Paused: &apitype.PausedInfo{PausedAt: now, ExpiresAt: now.Add(time.Hour)}}
		}
		if err := a2.PutSessions(ctx, []apitype.Session{paused("kept"), paused("stopped"), paused("deleted")}); err != nil {
			t.Fatal(err)
		}
		if n, err := a2.SyncPaused(ctx, map[string]bool{"kept": true, "stopped": true, "deleted": true}); err != nil || n != 0 {
			t.Errorf("pod-a's SyncPaused: %d %v", n, err)
		}
		want := map[string]string{"kept": "paused@pod-a", "stopped": "paused@pod-a"}
		if got := listed(); !maps.Equal(got, want) {
			t.Errorf("pod-a back: pod-b lists %v, want %v", got, want)
		}
	})
}

// EndSessions ends the sessions named of this server's pod, live or
// paused, and only those: an end already written keeps its reason, and
// another pod's session is not touched.
func TestEndSessions(t *testing.T) {
	drivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		a, b := twoPods(t, open)
		now := time.Now().UTC()
		if err := a.PutSessions(ctx, []apitype.Session{
			{ID: "live", Tenant: "t1", State: apitype.StateIdle, CreatedAt: now},
			{ID: "paused", Tenant: "t1", State: apitype.StatePaused, CreatedAt: now, Paused: &apitype.PausedInfo{PausedAt: now, ExpiresAt: now.Add(time.Hour)}},
			{ID: "ended", Tenant: "t1", State: apitype.StateEnded, EndReason: "idle", CreatedAt: now},
		}); err != nil {
			t.Fatal(err)
		}
		if err := b.PutSessions(ctx, []apitype.Session{{ID: "b's", Tenant: "t1", State: apitype.StateIdle, CreatedAt: now}}); err != nil {
			t.Fatal(err)
		}
		if err := a.EndSessions(ctx, []string{"live", "paused", "ended", "b's", "unknown"}, "deleted"); err != nil {
			t.Fatal(err)
		}
		if got, err := b.ListSessions(ctx, "t1", false); err != nil || len(got) != 0 {
			t.Errorf("b lists %+v %v, want none of a's", got, err)
		}
		if got, err := a.ListSessions(ctx, "t1", false); err != nil || len(got) != 1 || got[0].ID != "b's" {
			t.Errorf("a lists %+v %v, want b's session", got, err)
		}
		reasons := map[string]string{}
		rows, err := a.dir.Query(`SELECT id, end_reason FROM sessions`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, reason string
			rows.Scan(&id, &reason)
			reasons[id] = reason
		}
		if want := map[string]string{"live": "deleted", "paused": "deleted", "ended": "idle", "b's": ""}; !maps.Equal(reasons, want) {
			t.Errorf("end reasons %v, want %v", reasons, want)
		}
	})
}

// A client that leaves while its admission waits for its tenant's lock
// (another admission holds it) leaves no hold behind: it was told
// nothing was admitted, so nobody would release one. (The server went
// on to insert the hold once it had the lock, after the client's
// context was cancelled: a place of max_sessions lost for as long as the
// server ran.)
func TestAdmissionOfAClientGone(t *testing.T) {
	ctx := context.Background()
	db := openPG(t, pgtest.Shared(t).NewDatabase(t), nil)
	if _, err := db.Serve(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	// Another admission of the tenant, as it holds the lock.
	other, err := db.dir.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const lock = `SELECT pg_advisory_lock(hashtextextended('airlock.quota:t', 0))`
	const unlock = `SELECT pg_advisory_unlock(hashtextextended('airlock.quota:t', 0))`
	if _, err := other.ExecContext(ctx, lock); err != nil {
		t.Fatal(err)
	}
	reqCtx, leave := context.WithCancel(ctx)
	type result struct {
		a   Admission
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := db.Ledger().Admit(reqCtx, Claim{Tenant: "t", Kind: HoldSession, Max: 5})
		done <- result{a, err}
	}()
	waitFor(t, 10*time.Second, "the admission waiting for the tenant's lock", func() bool {
		var n int
		db.dir.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
		return n == 1
	})
	leave()
	if _, err := other.ExecContext(ctx, unlock); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil && r.a.Refused == "" {
		r.a.Release() // admitted: the caller gives the place back
	}
	// Once the admission's transaction is over (the lock is granted in
	// order), what it left is what counts.
	if _, err := other.ExecContext(ctx, lock); err != nil {
		t.Fatal(err)
	}
	other.ExecContext(ctx, unlock)
	held := func() int {
		var n int
		if err := db.dir.QueryRow(`SELECT count(*) FROM leases WHERE tenant = 't'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if r.err != nil {
		// Told nothing was admitted: a hold it may have left goes with
		// a flush (each second).
		waitFor(t, 10*time.Second, "the hold of an admission that failed gone", func() bool { return held() == 0 })
	}
	if n := held(); n != 0 {
		t.Errorf("admission %+v (%v) of a client gone left %d holds", r.a, r.err, n)
	}
	// Decided whatever the client did: admitted (and given back by the
	// caller, which finds its client gone).
	if r.err != nil || r.a.Refused != "" {
		t.Errorf("the admission of a client gone: %+v %v, want admitted", r.a, r.err)
	}
}
