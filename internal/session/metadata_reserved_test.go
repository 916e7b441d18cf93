package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// TestReservedMetadataRefused: a client's metadata key under "airlock."
// (the server's own marks: its /mcp's airlock.mcp, which a restart
// adopts) is refused with 400; the server's own call
// (identity.WithOwnMetadata) sets it. checked against a mutant: without
// the check, a client's airlock.mcp was taken.
func TestReservedMetadataRefused(t *testing.T) {
	ctx := tenantCtx("a")
	for _, k := range []string{"airlock.mcp", "airlock.x"} {
		err := ClientMetadata(ctx, map[string]string{k: "connection"})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("a client's metadata %q: %v, want invalid argument", k, err)
		}
	}
	if err := ClientMetadata(ctx, map[string]string{"airlockx": "1", "my.airlock.key": "1"}); err != nil {
		t.Errorf("metadata outside the prefix: %v", err)
	}
	if err := ClientMetadata(identity.WithOwnMetadata(context.Background()), map[string]string{"airlock.mcp": "connection"}); err != nil {
		t.Errorf("the server's own airlock.mcp: %v", err)
	}
}
