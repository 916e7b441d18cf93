package server

import (
	"context"

	"airlock/internal/httpapi/e2b"
	"airlock/internal/store"
)

// e2bRecords keeps the E2B API's sandbox records in the store, converting
// between the two packages' record types (the front never imports the
// store; both types have the same fields).
type e2bRecords struct{ *store.DB }

func (r e2bRecords) PutSandbox(ctx context.Context, rec e2b.Record) error {
	return r.DB.PutSandbox(ctx, store.SandboxRecord(rec))
}

func (r e2bRecords) Sandbox(ctx context.Context, id string) (e2b.Record, bool, error) {
	rec, found, err := r.DB.Sandbox(ctx, id)
	return e2b.Record(rec), found, err
}

func (r e2bRecords) Sandboxes(ctx context.Context, pod string) ([]e2b.Record, error) {
	recs, err := r.DB.Sandboxes(ctx, pod)
	out := make([]e2b.Record, len(recs))
	for i, rec := range recs {
		out[i] = e2b.Record(rec)
	}
	return out, err
}
