// Package identity owns who a request acts for: the tenant and the API key
// resolved once at the API's edge, carried in the request's context to
// every layer below (sessions, quotas, audit, metrics, redaction), with
// the request's id.
//
// It owns only the values and their context plumbing. It must never
// authenticate anything itself, touch storage, or import another airlock
// package: everything may import it.
package identity

import "context"

// Identity is the caller of a request.
type Identity struct {
	// Tenant owns what the request creates; sessions of other tenants do
	// not exist for it. Empty for the unauthenticated local default.
	Tenant string
	// KeyID names the API key used (never the secret); empty when the
	// caller is the server's own unix socket or the legacy token.
	KeyID string
	// Admin callers see and act on every tenant's resources.
	Admin bool
}

// Sees reports whether the caller may see a resource owned by tenant.
func (id Identity) Sees(tenant string) bool { return id.Admin || id.Tenant == tenant }

type key struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// From returns the identity ctx carries, if any.
func From(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(key{}).(Identity)
	return id, ok
}

type requestKey struct{}

// WithRequest returns ctx carrying the request's id (X-Request-Id), which
// audit records and logs below the API name.
func WithRequest(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestKey{}, id)
}

// Request returns the request id ctx carries ("" if none).
func Request(ctx context.Context) string {
	id, _ := ctx.Value(requestKey{}).(string)
	return id
}

// ReservedMetadataPrefix starts the session metadata keys the server
// sets itself (its /mcp's "airlock.mcp"): a client's are refused.
const ReservedMetadataPrefix = "airlock."

type ownMetadataKey struct{}

// WithOwnMetadata is ctx carrying the server's own marks md (keys under
// ReservedMetadataPrefix: its /mcp's, in process) for the session a
// create or fork in ctx makes. No HTTP request carries them: a client's
// metadata is its request's, where such keys are refused.
func WithOwnMetadata(ctx context.Context, md map[string]string) context.Context {
	return context.WithValue(ctx, ownMetadataKey{}, md)
}

// OwnMetadata is the server's own marks ctx carries (WithOwnMetadata;
// nil: none).
func OwnMetadata(ctx context.Context) map[string]string {
	md, _ := ctx.Value(ownMetadataKey{}).(map[string]string)
	return md
}
