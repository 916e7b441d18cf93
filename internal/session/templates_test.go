package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/image"
	"airlock/internal/instance"
)

// storeOnly is a TemplateSources with a store and no sandboxes.
type storeOnly struct{ s *image.Store }

func (s storeOnly) Source(config.Isolation, string, string) (instance.Source, image.Template, error) {
	return nil, image.Template{}, errors.New("no sandboxes here")
}
func (s storeOnly) Store() *image.Store { return s.s }

// GET /v1/templates: what a caller may name, the default marked, the
// languages each root runs and its pool; a tenant limited to some sees
// only those and is refused the others by name.
func TestTemplatesListed(t *testing.T) {
	store, err := image.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shell", "tools"} {
		src := t.TempDir()
		os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
		os.WriteFile(filepath.Join(src, "usr/bin/bash"), []byte("x"), 0o755)
		if _, err := store.Import(context.Background(), name, src, image.ImportOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Templates.Default = "tools"
	cfg.Templates.Pool = map[string]map[string]int{"tools": {"bash": 2, "python": 3}}
	cfg.Tenants = map[string]config.Tenant{"acme": {Templates: []string{"shell"}}}
	m := NewManager(cfg, nil, slog.New(slog.DiscardHandler))
	if l, err := m.Templates(context.Background()); err != nil || len(l.Templates) != 0 {
		t.Fatalf("a server without templates: %+v %v", l, err)
	}
	m.SetTemplates(storeOnly{store})

	l, err := m.Templates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tm := range l.Templates {
		names = append(names, tm.Name)
	}
	if !slices.Equal(names, []string{"shell", "tools"}) || l.Default != "tools" {
		t.Fatalf("list: %+v", l)
	}
	tools := l.Templates[1]
	if !tools.Default || l.Templates[0].Default || !slices.Equal(tools.Languages, []string{"bash"}) ||
		len(tools.Pool) != 1 || tools.Pool["bash"] != 2 || tools.Version == "" || tools.Source != "dir" || tools.Files == 0 {
		t.Fatalf("tools: %+v", tools)
	}
	if got, err := m.Template(context.Background(), "tools"); err != nil || got.Version != tools.Version {
		t.Fatalf("get: %+v %v", got, err)
	}

	acme := tenantCtx("acme")
	if l, err := m.Templates(acme); err != nil || len(l.Templates) != 1 || l.Templates[0].Name != "shell" {
		t.Fatalf("acme's list: %+v %v", l, err)
	}
	for _, c := range []struct {
		ctx  context.Context
		name string
		want error
	}{
		{acme, "tools", errdefs.ErrPermission},
		{context.Background(), "nonexistent", errdefs.ErrNotFound},
		{context.Background(), "../etc", errdefs.ErrInvalidArgument},
		{context.Background(), "", errdefs.ErrInvalidArgument},
	} {
		if _, err := m.Template(c.ctx, c.name); !errors.Is(err, c.want) {
			t.Errorf("%q: %v, want %v", c.name, err, c.want)
		}
	}
}
