package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"airlock/internal/apitype"
)

// The sessions directory: every server that uses the store has a row
// (its id is new at each start), refreshed by its heartbeat; each of its
// sessions has one, written when the session is created and when it
// ends or pauses. A server whose heartbeat is older than
// store.lease_timeout is dead: the first live server to notice marks its
// live sessions ended ("server_lost"), and listings show them so
// meanwhile. What the ledger's leases a dead server held stop counting
// at the same moment. Its paused sessions stay paused (their images are
// on its pod's volume, and the pod serves them again when it comes
// back) until they expire (persistence.keep, from their pause), or until
// a server of the same pod, started again, no longer holds them.

// Server is a server's row in the directory.
type Server struct {
	// ID is this run's: the pod name and 8 random bytes.
	ID string
	// Pod is the server's name (cluster.pod_name, or the host's name).
	Pod       string
	StartedAt time.Time
}

// EndServerLost is the end reason of a session whose server stopped
// sending heartbeats.
const EndServerLost = "server_lost"

// Serve registers this process as a server of the store, named pod,
// until Close: its sessions go in the directory under it and what it
// admits (see Ledger) is held in its name.
func (d *DB) Serve(ctx context.Context, pod string) (Server, error) {
	if err := d.drv.serve(); err != nil {
		return Server{}, err
	}
	var b [8]byte
	rand.Read(b[:])
	s := Server{ID: pod + "." + hex.EncodeToString(b[:]), Pod: pod, StartedAt: time.Now().UTC()}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	now := unixNano(s.StartedAt)
	if _, err := d.dir.ExecContext(ctx, d.q(`INSERT INTO servers (id, pod, started_at, heartbeat_at) VALUES (?, ?, ?, ?)`), s.ID, s.Pod, now, now); err != nil {
		return Server{}, d.unavailable("registering the server", err)
	}
	d.server = s
	return s, nil
}

// ServerID is this server's id in the directory ("" before Serve).
func (d *DB) ServerID() string { return d.server.ID }

// ServerPod is this server's name in the directory ("" before Serve).
func (d *DB) ServerPod() string { return d.server.Pod }

// Beat is what a heartbeat learnt.
type Beat struct {
	// Revived: this server had been taken for dead (its sessions marked
	// ended): it must register its live sessions again.
	Revived bool
	// Reaped: sessions of dead servers marked ended now.
	Reaped int64
}

// Heartbeat says this server is alive, marks the sessions of servers
// that stopped saying so ended, and removes what is long over: ended
// sessions after an hour, servers gone for a day, the ledger's spent
// rows.
func (d *DB) Heartbeat(ctx context.Context) (Beat, error) {
	var b Beat
	if d.server.ID == "" {
		return b, nil
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	now := time.Now()
	dead := unixNano(now.Add(-d.cfg.LeaseTimeout.D()))
	var last int64
	err := d.dir.QueryRowContext(ctx, d.q(`SELECT heartbeat_at FROM servers WHERE id = ?`), d.server.ID).Scan(&last)
	switch {
	case isNoRows(err):
		b.Revived = true
		_, err = d.dir.ExecContext(ctx, d.q(`INSERT INTO servers (id, pod, started_at, heartbeat_at) VALUES (?, ?, ?, ?)`), d.server.ID, d.server.Pod, unixNano(d.server.StartedAt), unixNano(now))
	case err == nil:
		b.Revived = last < dead
		_, err = d.dir.ExecContext(ctx, d.q(`UPDATE servers SET heartbeat_at = ? WHERE id = ?`), unixNano(now), d.server.ID)
	}
	if err != nil {
		return b, d.unavailable("sending the heartbeat", err)
	}
	res, err := d.dir.ExecContext(ctx, d.q(`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE ended_at IS NULL AND NOT paused
		AND server IN (SELECT id FROM servers WHERE heartbeat_at < ? OR stopped_at IS NOT NULL)`), unixNano(now), EndServerLost, dead)
	if err != nil {
		return b, d.unavailable("marking lost sessions", err)
	}
	b.Reaped, _ = res.RowsAffected()
	if _, err := d.dir.ExecContext(ctx, d.q(`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE ended_at IS NULL AND paused AND expires_at < ?`),
		unixNano(now), EndPausedExpired, unixNano(now)); err != nil {
		return b, d.unavailable("marking expired paused sessions", err)
	}
	for _, q := range []struct {
		sql string
		arg int64
	}{
		{`DELETE FROM sessions WHERE ended_at < ?`, unixNano(now.Add(-time.Hour))},
		{`DELETE FROM servers WHERE heartbeat_at < ? AND id NOT IN (SELECT server FROM sessions)`, unixNano(now.Add(-24 * time.Hour))},
	} {
		if _, err := d.dir.ExecContext(ctx, d.q(q.sql), q.arg); err != nil {
			return b, d.unavailable("removing old directory entries", err)
		}
	}
	if err := d.ledger.collect(ctx, now); err != nil {
		return b, d.unavailable("removing spent quota holdings", err)
	}
	return b, nil
}

// EndPausedExpired is the end reason of a paused session whose server
// was gone when it expired.
const EndPausedExpired = "lifetime"

// EndPausedGone is the end reason of a paused session its pod's server
// no longer holds (deleted, expired, or its image lost with the pod's
// volume).
const EndPausedGone = "paused_gone"

// endServerStopped is the end reason of a live session still listed
// when its server stopped.
const endServerStopped = "server_stopped"

// stopServer marks this server stopped: its live sessions that are still
// listed end now (a clean shutdown has ended or paused them already);
// paused ones stay listed, on its pod.
func (d *DB) stopServer(ctx context.Context) {
	now := unixNano(time.Now())
	d.dir.ExecContext(ctx, d.q(`UPDATE servers SET stopped_at = ? WHERE id = ?`), now, d.server.ID)
	d.dir.ExecContext(ctx, d.q(`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE server = ? AND ended_at IS NULL AND NOT paused`), now, endServerStopped, d.server.ID)
}

// SyncPaused ends the directory's paused sessions of this server's pod
// (under this server or an earlier one of the same pod) that are not in
// held: the paused sessions this server has. Call it only once the
// server has loaded what it paused before (an earlier run's are
// otherwise taken for gone).
func (d *DB) SyncPaused(ctx context.Context, held map[string]bool) (int, error) {
	if d.server.ID == "" {
		return 0, nil
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.dir.QueryContext(ctx, d.q(`SELECT id FROM sessions WHERE pod = ? AND paused AND ended_at IS NULL`), d.server.Pod)
	if err != nil {
		return 0, d.unavailable("reading the paused sessions", err)
	}
	var gone []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, d.unavailable("reading the paused sessions", err)
		}
		if !held[id] {
			gone = append(gone, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, d.unavailable("reading the paused sessions", err)
	}
	now := unixNano(time.Now())
	for _, id := range gone {
		if _, err := d.dir.ExecContext(ctx, d.q(`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND pod = ? AND paused AND ended_at IS NULL`),
			now, EndPausedGone, id, d.server.Pod); err != nil {
			return 0, d.unavailable("ending paused sessions", err)
		}
	}
	return len(gone), nil
}

// PutSessions writes sessions of this server to the directory, live or
// ended (an ended one with its EndReason), in one statement: one round
// trip. A session ended otherwise than with its server is never made
// live again by a later write of it; one ended with its server (lost,
// stopped, or ended by its shutdown, which kept its recovery point) is
// listed again when its pod, started again, holds it paused.
func (d *DB) PutSessions(ctx context.Context, sessions []apitype.Session) error {
	if d.server.ID == "" || len(sessions) == 0 {
		return nil
	}
	// The last word on each session, in order of first appearance: a
	// statement may not touch a row twice.
	last := map[string]int{}
	var order []string
	for i, s := range sessions {
		if _, ok := last[s.ID]; !ok {
			order = append(order, s.ID)
		}
		last[s.ID] = i
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	now := unixNano(time.Now())
	const rows = 500
	for len(order) > 0 {
		n := min(len(order), rows)
		var q strings.Builder
		q.WriteString(`INSERT INTO sessions (id, tenant, server, pod, created_at, ended_at, end_reason, info, paused, expires_at) VALUES `)
		args := make([]any, 0, 10*n+1)
		for i, id := range order[:n] {
			s := sessions[last[id]]
			s.Pod = d.server.Pod
			b, _ := json.Marshal(s)
			var ended, expires sql.NullInt64
			if s.State == apitype.StateEnded {
				ended = sql.NullInt64{Int64: now, Valid: true}
			}
			paused := s.State == apitype.StatePaused
			if paused && s.Paused != nil {
				expires = sql.NullInt64{Int64: unixNano(s.Paused.ExpiresAt), Valid: true}
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, s.ID, s.Tenant, d.server.ID, d.server.Pod, unixNano(s.CreatedAt), ended, s.EndReason, string(b), paused, expires)
		}
		q.WriteString(` ON CONFLICT (id) DO UPDATE SET ended_at = excluded.ended_at, end_reason = excluded.end_reason, info = excluded.info, server = excluded.server,
			paused = excluded.paused, expires_at = excluded.expires_at
			WHERE sessions.ended_at IS NULL OR sessions.end_reason IN (?, ?, ?, ?) OR excluded.ended_at IS NOT NULL`)
		args = append(args, EndServerLost, EndPausedGone, endServerStopped, apitype.Ended(apitype.EndShutdown).Reason)
		if _, err := d.dir.ExecContext(ctx, d.q(q.String()), args...); err != nil {
			return d.unavailable("writing the sessions directory", err)
		}
		order = order[n:]
	}
	return nil
}

// EndSessions marks ended, for reason, the sessions ids of this server's
// pod that the directory still lists live or paused (a paused session
// deleted: no end event is written for it). Those ended already keep
// their end.
func (d *DB) EndSessions(ctx context.Context, ids []string, reason string) error {
	if d.server.ID == "" || len(ids) == 0 {
		return nil
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	args := []any{unixNano(time.Now()), reason, d.server.Pod}
	for _, id := range ids {
		args = append(args, id)
	}
	q := `UPDATE sessions SET ended_at = ?, end_reason = ? WHERE pod = ? AND ended_at IS NULL AND id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	if _, err := d.dir.ExecContext(ctx, d.q(q), args...); err != nil {
		return d.unavailable("ending sessions in the directory", err)
	}
	return nil
}

// ListSessions lists the directory's sessions of other servers than this
// one: those live, those paused (whether their server is up or not: the
// pod that holds them says where), and those lost with their server
// (state "ended", end reason "server_lost", for an hour), oldest first. tenant "" with all
// lists every tenant's (an admin); else only that tenant's.
func (d *DB) ListSessions(ctx context.Context, tenant string, all bool) ([]apitype.Session, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	dead := unixNano(time.Now().Add(-d.cfg.LeaseTimeout.D()))
	q := `SELECT s.info, s.ended_at, s.end_reason, v.heartbeat_at, v.stopped_at, s.paused FROM sessions s JOIN servers v ON v.id = s.server
		WHERE s.server <> ? AND (s.ended_at IS NULL OR s.end_reason = ?)`
	args := []any{d.server.ID, EndServerLost}
	if !all {
		q += ` AND s.tenant = ?`
		args = append(args, tenant)
	}
	rows, err := d.dir.QueryContext(ctx, d.q(q+` ORDER BY s.created_at, s.id LIMIT 10000`), args...)
	if err != nil {
		return nil, d.unavailable("reading the sessions directory", err)
	}
	defer rows.Close()
	out := []apitype.Session{}
	for rows.Next() {
		var info, reason string
		var ended, stopped sql.NullInt64
		var beat int64
		var paused bool
		if err := rows.Scan(&info, &ended, &reason, &beat, &stopped, &paused); err != nil {
			return nil, d.unavailable("reading the sessions directory", err)
		}
		var s apitype.Session
		if json.Unmarshal([]byte(info), &s) != nil {
			continue
		}
		if paused && !ended.Valid {
			// Kept on its pod's volume, whether its server is up or not.
			s.State = apitype.StatePaused
		} else if ended.Valid || beat < dead || stopped.Valid {
			// Ended, or its server is gone: a live session's row is what
			// it was at its creation.
			s.State, s.EndReason = apitype.StateEnded, EndServerLost
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, d.unavailable("reading the sessions directory", err)
	}
	return out, nil
}

// ServerStatus is a server in the directory (doctor, tests).
type ServerStatus struct {
	ID, Pod string
	Alive   bool
}

// Servers lists the servers the directory knows, alive or not.
func (d *DB) Servers(ctx context.Context) ([]ServerStatus, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	dead := unixNano(time.Now().Add(-d.cfg.LeaseTimeout.D()))
	rows, err := d.dir.QueryContext(ctx, `SELECT id, pod, heartbeat_at, stopped_at FROM servers ORDER BY started_at`)
	if err != nil {
		return nil, d.unavailable("reading the servers", err)
	}
	defer rows.Close()
	var out []ServerStatus
	for rows.Next() {
		var s ServerStatus
		var beat int64
		var stopped sql.NullInt64
		if err := rows.Scan(&s.ID, &s.Pod, &beat, &stopped); err != nil {
			return nil, err
		}
		s.Alive = beat >= dead && !stopped.Valid
		out = append(out, s)
	}
	return out, rows.Err()
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
