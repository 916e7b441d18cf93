package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgLedger holds a row per holding (leases), in the name of the server
// that admitted it: a holding counts while its server's heartbeat is
// fresh, so a dead server's holdings stop counting within
// store.lease_timeout, and count again should it come back. Admissions of
// one tenant queue on that tenant's advisory lock (never one lock for
// all), for one round trip: the lock and the conditional insert go in
// one pipeline, one implicit transaction, the insert reading (READ
// COMMITTED) what committed before the lock was granted.
//
// CPU time is added to the day's row of the tenant by a flusher, every
// second; an admission adds what this server has not flushed yet.
type pgLedger struct {
	d *DB

	mu      sync.Mutex
	pending map[string]time.Duration // CPU not yet flushed, by tenant
	// failed are releases that could not be written (the database
	// gone): retried by the flusher; until then they hold their place,
	// which fails closed.
	failed []string
	// unsure are holds of admissions that failed once their batch was
	// sent (see Admit): deleted by the flusher until the server has
	// surely ended their transaction.
	unsure []unsureHold
	stop   chan struct{}
	done   chan struct{}
}

func (p *pgDriver) newLedger(d *DB) Ledger {
	l := &pgLedger{d: d, pending: map[string]time.Duration{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.flusher()
	return l
}

// admitSQL counts the tenant's live holdings of the kind, its
// executions of the last minute and its CPU today, and inserts the
// holding when no bound is reached (and it is to be held).
const admitSQL = `WITH live AS (
	SELECT count(*) AS n FROM leases l JOIN servers s ON s.id = l.server
	WHERE l.tenant = $1 AND l.kind = $2 AND l.ended_at IS NULL AND s.heartbeat_at >= $3 AND s.stopped_at IS NULL
), recent AS (
	SELECT count(*) AS n, COALESCE(min(started_at), 0) AS oldest FROM leases
	WHERE tenant = $1 AND kind = 'execution' AND started_at > $4
), cpu AS (
	SELECT COALESCE((SELECT cpu_ns FROM tenant_cpu WHERE tenant = $1 AND day = $5), 0) + $6::bigint AS ns
), ok AS (
	SELECT ($7::bigint = 0 OR cpu.ns < $7::bigint) AND ($8::bigint = 0 OR live.n < $8::bigint) AND ($9::bigint = 0 OR recent.n < $9::bigint) AS yes
	FROM live, recent, cpu
), ins AS (
	INSERT INTO leases (id, tenant, kind, server, started_at)
	SELECT $10, $1, $2, $11, $12 FROM ok WHERE ok.yes AND $13::boolean
	RETURNING 1
)
SELECT live.n, recent.n, recent.oldest, cpu.ns, ok.yes, EXISTS (SELECT 1 FROM ins) FROM live, recent, cpu, ok`

func (l *pgLedger) Admit(ctx context.Context, c Claim) (Admission, error) {
	d := l.d
	if c.Kind == HoldExecution && c.Max == 0 && c.PerMinute == 0 && c.CPUPerDay == 0 {
		// Nothing bounds it: not a round trip on the hot path.
		return Admission{release: func() {}}, nil
	}
	if d.server.ID == "" {
		return Admission{}, d.unavailable("admitting", errNotServed)
	}
	// Sessions are always held (a max_sessions set later counts them);
	// executions only when their count or rate is bounded.
	hold := c.Kind == HoldSession || c.Max > 0 || c.PerMinute > 0
	now := time.Now()
	l.mu.Lock()
	pending := l.pending[c.Tenant]
	l.mu.Unlock()
	id := randomID()
	var live, recent int
	var oldest, cpu int64
	var yes, held bool
	// Never cut short by the request: a client that leaves while the
	// batch is on the server (waiting for the tenant's lock, say) would
	// be told nothing was admitted while the server went on to insert
	// the hold, which nobody would release. Admitted, the caller gives
	// the place back when it finds its client gone.
	ctx, cancel := d.bound(context.WithoutCancel(ctx))
	defer cancel()
	conn, err := d.dir.Conn(ctx)
	if err != nil {
		return Admission{}, d.unavailable("admitting", err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		b := &pgx.Batch{}
		// The server gives up first: a client that times out only closes
		// its socket, and a batch already on the server would otherwise
		// take the lock later and insert a hold nobody releases.
		b.Queue(`SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $1, true)`, serverGiveUp(d.cfg.Timeout.D()))
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "airlock.quota:"+c.Tenant)
		b.Queue(admitSQL, c.Tenant, c.Kind, unixNano(now.Add(-d.cfg.LeaseTimeout.D())), unixNano(now.Add(-time.Minute)), day(now), int64(pending),
			int64(c.CPUPerDay), int64(c.Max), int64(c.PerMinute), id, d.server.ID, unixNano(now), hold).
			QueryRow(func(row pgx.Row) error { return row.Scan(&live, &recent, &oldest, &cpu, &yes, &held) })
		return pc.SendBatch(ctx, b).Close()
	})
	if err != nil {
		// The batch may commit all the same (its answer lost, or the
		// server still at it): the hold, if any, goes (see flush).
		l.mu.Lock()
		if len(l.unsure) < maxUnsure {
			l.unsure = append(l.unsure, unsureHold{id: id, until: time.Now().Add(2 * d.cfg.Timeout.D())})
		}
		l.mu.Unlock()
		return Admission{}, d.unavailable("admitting", err)
	}
	a := Admission{Usage: Usage{Live: live, Recent: recent, CPU: time.Duration(cpu)}}
	if oldest > 0 {
		a.Oldest = time.Unix(0, oldest)
	}
	if !yes {
		// The first bound reached, in the ledger's order.
		switch {
		case c.CPUPerDay > 0 && a.CPU >= c.CPUPerDay:
			a.Refused = QuotaCPU
		case c.Max > 0 && live >= c.Max:
			a.Refused = map[string]string{HoldSession: QuotaSessions, HoldExecution: QuotaConcurrent}[c.Kind]
		default:
			a.Refused = QuotaPerMinute
		}
		return a, nil
	}
	if !held {
		a.release = func() {}
		return a, nil
	}
	var once sync.Once
	a.release = func() { once.Do(func() { l.release(c.Kind, id) }) }
	return a, nil
}

// maxUnsure bounds the unsure holds kept (a database gone for long
// fails every admission, most before their batch reached it).
const maxUnsure = 4096

// unsureHold is a hold an admission may have inserted, though its caller
// was told it failed.
type unsureHold struct {
	id    string
	until time.Time // by then the server has ended the admission's transaction
}

// release ends a holding: a session's row goes, an execution's stays a
// minute for the rate. One that cannot be written is retried.
func (l *pgLedger) release(kind, id string) {
	ctx, cancel := l.d.bound(context.Background())
	defer cancel()
	if err := l.end(ctx, id, kind); err != nil {
		l.mu.Lock()
		l.failed = append(l.failed, kind+"\x00"+id)
		l.mu.Unlock()
	}
}

func (l *pgLedger) end(ctx context.Context, id, kind string) error {
	var err error
	if kind == HoldSession {
		_, err = l.d.dir.ExecContext(ctx, `DELETE FROM leases WHERE id = $1`, id)
	} else {
		_, err = l.d.dir.ExecContext(ctx, `UPDATE leases SET ended_at = $2 WHERE id = $1`, id, unixNano(time.Now()))
	}
	return err
}

func (l *pgLedger) AddCPU(tenant string, cpu time.Duration) {
	if cpu <= 0 {
		return
	}
	l.mu.Lock()
	l.pending[tenant] += cpu
	l.mu.Unlock()
}

func (l *pgLedger) flusher() {
	defer close(l.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush()
		case <-l.stop:
			l.flush()
			return
		}
	}
}

// flush adds the pending CPU to the day's rows, retries failed releases
// and deletes unsure holds; what fails stays for the next tick.
func (l *pgLedger) flush() {
	l.mu.Lock()
	pending, failed, unsure := l.pending, l.failed, l.unsure
	l.pending, l.failed, l.unsure = map[string]time.Duration{}, nil, nil
	l.mu.Unlock()
	if len(pending) == 0 && len(failed) == 0 && len(unsure) == 0 {
		return
	}
	ctx, cancel := l.d.bound(context.Background())
	defer cancel()
	today := day(time.Now())
	var keep []string
	for _, f := range failed {
		kind, id, _ := strings.Cut(f, "\x00")
		if err := l.end(ctx, id, kind); err != nil {
			keep = append(keep, f)
		}
	}
	var still []unsureHold
	for _, u := range unsure {
		if err := l.end(ctx, u.id, HoldSession); err != nil || time.Now().Before(u.until) {
			still = append(still, u)
		}
	}
	left := map[string]time.Duration{}
	for tenant, cpu := range pending {
		_, err := l.d.dir.ExecContext(ctx, `INSERT INTO tenant_cpu (tenant, day, cpu_ns) VALUES ($1, $2, $3)
			ON CONFLICT (tenant, day) DO UPDATE SET cpu_ns = tenant_cpu.cpu_ns + excluded.cpu_ns`, tenant, today, int64(cpu))
		if err != nil {
			left[tenant] = cpu
		}
	}
	l.mu.Lock()
	l.failed = append(l.failed, keep...)
	l.unsure = append(l.unsure, still...)
	for tenant, cpu := range left {
		l.pending[tenant] += cpu
	}
	l.mu.Unlock()
}

// collect removes executions' rows past the rate's minute, holdings of
// servers dead for an hour, and CPU rows of days past.
func (l *pgLedger) collect(ctx context.Context, now time.Time) error {
	for _, q := range []struct {
		sql string
		arg int64
	}{
		{`DELETE FROM leases WHERE ended_at < $1`, unixNano(now.Add(-2 * time.Minute))},
		{`DELETE FROM leases WHERE server IN (SELECT id FROM servers WHERE heartbeat_at < $1)`, unixNano(now.Add(-time.Hour))},
		{`DELETE FROM tenant_cpu WHERE day < $1`, day(now) - 1},
	} {
		if _, err := l.d.dir.ExecContext(ctx, q.sql, q.arg); err != nil {
			return err
		}
	}
	return nil
}

func (l *pgLedger) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// errNotServed: a ledger of a store no server serves (Serve not called)
// has no name to hold places in.
var errNotServed = errors.New("the store is not served by this process")

// serverGiveUp is the transaction-local lock and statement timeout of an
// admission, in PostgreSQL's syntax: half the store's timeout, so the
// server has ended the transaction before the client stops waiting.
func serverGiveUp(timeout time.Duration) string {
	ms := timeout.Milliseconds() / 2
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
