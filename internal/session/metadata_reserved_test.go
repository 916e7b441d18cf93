package session

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// TestReservedMetadataRefused: Manager.Create, every API's way to make a
// session, refuses a request's metadata key under "airlock." (the
// server's own marks: its /mcp's airlock.mcp, which a restart adopts)
// with 400, whoever calls it: a server's own call's marks come beside
// the request (identity.WithOwnMetadata), never in it, and are set.
// checked against a mutant: Create without its check (the client's
// airlock.mcp was taken).
func TestReservedMetadataRefused(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	own := identity.WithOwnMetadata(tenantCtx("a"), map[string]string{"airlock.mcp": "connection"})
	for _, ctx := range []context.Context{tenantCtx("a"), own} {
		for _, k := range []string{"airlock.mcp", "airlock.x"} {
			_, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python", Metadata: map[string]string{k: "connection"}})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "reserved") {
				t.Errorf("a request's metadata %q: %v, want invalid argument", k, err)
			}
		}
	}
	s, err := m.Create(tenantCtx("a"), apitype.CreateSessionRequest{Language: "python", Metadata: map[string]string{"airlockx": "1", "my.airlock.key": "1"}})
	if err != nil {
		t.Fatalf("metadata outside the prefix: %v", err)
	}
	md := map[string]string{"team": "a"}
	s, err = m.Create(own, apitype.CreateSessionRequest{Language: "python", Metadata: md})
	if err != nil {
		t.Fatalf("the server's own airlock.mcp: %v", err)
	}
	if got, want := s.Info().Metadata, map[string]string{"team": "a", "airlock.mcp": "connection"}; !maps.Equal(got, want) {
		t.Errorf("metadata %v, want %v", got, want)
	}
	if len(md) != 1 {
		t.Errorf("the request's metadata was changed: %v", md)
	}
}

// TestForkDropsServerMarks: a fork keeps its source's client metadata
// but not the server's marks of it (airlock.mcp: the source is an MCP
// connection's, which a restart would adopt, and end if no connection
// names it; a fork made through the v1 API is its client's): a live
// source's fork and a paused one's. The server's own fork (MCP's
// fork_session) marks it with its own marks. checked against a mutant:
// the fork's metadata left as its source's (a client's fork kept
// airlock.mcp).
func TestForkDropsServerMarks(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	own := identity.WithOwnMetadata(tenantCtx("a"), map[string]string{"airlock.mcp": "connection"})
	src, err := m.Create(own, apitype.CreateSessionRequest{Language: "python", Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]string{"team": "a", "airlock.mcp": "connection"}
	fork := func(ctx context.Context, want map[string]string) {
		t.Helper()
		f, err := m.ForkFor(ctx, src.ID())
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Info().Metadata; !maps.Equal(got, want) {
			t.Errorf("the fork's metadata %v, want %v", got, want)
		}
		m.Delete(f.ID())
	}
	fork(tenantCtx("a"), map[string]string{"team": "a"})
	fork(own, marked)
	if _, err := src.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	fork(tenantCtx("a"), map[string]string{"team": "a"})
	if d, err := m.Describe(tenantCtx("a"), src.ID()); err != nil || !maps.Equal(d.Metadata, marked) {
		t.Errorf("the paused source: %+v %v, want its marks kept", d.Metadata, err)
	}
}
