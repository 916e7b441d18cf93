package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/image/imagetest"
)

// GET /v1/templates over real HTTP, by API keys of two tenants: one
// limited to the python template sees only it, is refused another by
// name (listing and session alike) and runs on its own; the other sees
// every template, code-interpreter with its languages and pool.
func TestTemplatesByTenant(t *testing.T) {
	store := imagetest.Store(t, "code-interpreter", "python")
	s := keysServer(t, map[string]any{
		"pool": map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}},
		"templates": map[string]any{
			"dir": store.Dir(), "pool": map[string]any{"python": map[string]int{"python": 1}},
		},
		"tenants": map[string]any{"limited": map[string]any{"templates": []string{"python"}}},
	})
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	limited, open := s.as(s.newKey("limited")), s.as(s.newKey("open"))

	l, err := limited.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Templates) != 1 || l.Templates[0].Name != "python" || l.Templates[0].Pool["python"] != 1 || l.Default != "" {
		t.Fatalf("limited tenant's templates: %+v", l)
	}
	if _, err := limited.Template(ctx, "code-interpreter"); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("limited tenant GETs code-interpreter: %v", err)
	}
	if _, err := limited.CreateSession(ctx, apitype.CreateSessionRequest{Template: "code-interpreter"}); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("limited tenant's session on code-interpreter: %v", err)
	}
	sess, err := limited.CreateSession(ctx, apitype.CreateSessionRequest{Template: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.TemplateVersion != l.Templates[0].Version {
		t.Errorf("session on version %q, listed %q", sess.TemplateVersion, l.Templates[0].Version)
	}
	limited.DeleteSession(ctx, sess.ID)

	all, err := open.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tm := range all.Templates {
		if tm.Name == "code-interpreter" {
			found = true
			if len(tm.Languages) != 3 || tm.Source != "debian" || tm.Size < 100<<20 || tm.Packages != nil {
				t.Errorf("code-interpreter listed as %+v", tm)
			}
		}
	}
	if !found || len(all.Templates) < 2 {
		t.Fatalf("open tenant's templates: %+v", all)
	}
	if _, err := open.Template(ctx, "no-such-template"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown template: %v", err)
	}
}
