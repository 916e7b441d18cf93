package store

import (
	"context"
	"time"
)

// driver is what differs between the backends; the SQL the two share
// (keys, tenants, the audit log's queries, the directory) is DB's, in ?
// placeholders that rebind turns into the driver's.
type driver interface {
	name() string
	// where names the store for messages (no secret).
	where() string
	rebind(q string) string
	version(ctx context.Context) (int, error)

	// keysChanged reports whether keys or tenants may have changed since
	// it last ran (cached keys are then dropped); keyTTL is how long a
	// cached key is believed without it (0: until it says so). Both are
	// called under the key cache's lock.
	keysChanged() (bool, error)
	keyTTL() time.Duration
	// lookupKey reads the key whose hash this is (sql.ErrNoRows: none).
	lookupKey(ctx context.Context, hash string) (Key, error)

	// auditUse is the query of every tenant's audit use (tenant,
	// bytes, records); auditBytes the size retention bounds.
	auditUse() string
	auditBytes(ctx context.Context) (int64, error)
	// exclusive runs f unless another server runs it (retention: one at
	// a time across a cluster); ran says whether it did.
	exclusive(ctx context.Context, what string, f func(context.Context) error) (ran bool, err error)

	// served reports whether a running server uses the store; serve
	// marks this process as one (until close).
	served(ctx context.Context, d *DB) bool
	serve() error
	// newLedger is the driver's ledger of quota holdings.
	newLedger(d *DB) Ledger
	close() error
}
