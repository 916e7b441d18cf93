package store

import (
	"context"
	"time"
)

// Sandbox records: what the E2B API keeps of a sandbox beyond its
// session (its template, owner, metadata and lifecycle, as the API
// encodes them), so that a sandbox outlives its server's restart and is
// listed by every server of a cluster. Never its access tokens: the E2B
// API derives those from a key of its own server (see package e2b), so
// the store holds no secret of a sandbox.

// SandboxRecord is one sandbox's record.
type SandboxRecord struct {
	ID, Tenant string
	// Pod is the server that holds its session.
	Pod     string
	Created time.Time
	// Info is the E2B API's own encoding.
	Info []byte
}

// PutSandbox writes the record of a sandbox of this server (its pod:
// the one Serve named; "" before).
func (d *DB) PutSandbox(ctx context.Context, r SandboxRecord) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.boxes.ExecContext(ctx, d.q(`INSERT INTO sandboxes (id, tenant, pod, created_at, info) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, pod = excluded.pod, info = excluded.info`),
		r.ID, r.Tenant, d.server.Pod, unixNano(r.Created), string(r.Info))
	return d.unavailable("writing a sandbox's record", err)
}

// Sandbox reads the record of sandbox id (found false: none).
func (d *DB) Sandbox(ctx context.Context, id string) (r SandboxRecord, found bool, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	var created int64
	var info string
	err = d.boxes.QueryRowContext(ctx, d.q(`SELECT id, tenant, pod, created_at, info FROM sandboxes WHERE id = ?`), id).Scan(&r.ID, &r.Tenant, &r.Pod, &created, &info)
	if isNoRows(err) {
		return SandboxRecord{}, false, nil
	}
	if err != nil {
		return SandboxRecord{}, false, d.unavailable("reading a sandbox's record", err)
	}
	r.Created, r.Info = time.Unix(0, created).UTC(), []byte(info)
	return r, true, nil
}

// Sandboxes lists the records of the sandboxes held by pod ("": every
// pod's), oldest first.
func (d *DB) Sandboxes(ctx context.Context, pod string) ([]SandboxRecord, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	q, args := `SELECT id, tenant, pod, created_at, info FROM sandboxes`, []any{}
	if pod != "" {
		q += ` WHERE pod = ?`
		args = append(args, pod)
	}
	rows, err := d.boxes.QueryContext(ctx, d.q(q+` ORDER BY created_at, id LIMIT 100000`), args...)
	if err != nil {
		return nil, d.unavailable("reading the sandboxes' records", err)
	}
	defer rows.Close()
	var out []SandboxRecord
	for rows.Next() {
		var r SandboxRecord
		var created int64
		var info string
		if err := rows.Scan(&r.ID, &r.Tenant, &r.Pod, &created, &info); err != nil {
			return nil, d.unavailable("reading the sandboxes' records", err)
		}
		r.Created, r.Info = time.Unix(0, created).UTC(), []byte(info)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, d.unavailable("reading the sandboxes' records", err)
	}
	return out, nil
}

// DeleteSandbox removes the record of sandbox id (none is no error).
func (d *DB) DeleteSandbox(ctx context.Context, id string) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.boxes.ExecContext(ctx, d.q(`DELETE FROM sandboxes WHERE id = ?`), id)
	return d.unavailable("deleting a sandbox's record", err)
}
