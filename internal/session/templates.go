package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/image"
)

// Templates lists the templates the caller may name (its tenant's
// tenants.T.templates, or every one registered), each as new sessions
// get it.
func (m *Manager) Templates(ctx context.Context) (apitype.TemplateList, error) {
	out := apitype.TemplateList{Templates: []apitype.Template{}, Default: m.cfg.Templates.Default}
	if m.templates == nil {
		return out, nil
	}
	list, err := m.templates.Store().List()
	if err != nil {
		return out, errdefs.Private(errdefs.ErrUnavailable, "the template store cannot be read", err)
	}
	for _, t := range list {
		if mayName(ctx, m.cfg, t.Name) == nil {
			info := m.templateInfo(t)
			info.Packages = nil // long: only the template's own answer has them
			out.Templates = append(out.Templates, info)
		}
	}
	return out, nil
}

// Template describes the template name as new sessions get it.
func (m *Manager) Template(ctx context.Context, name string) (apitype.Template, error) {
	if err := image.CheckName(name); err != nil {
		return apitype.Template{}, err
	}
	if err := mayName(ctx, m.cfg, name); err != nil {
		return apitype.Template{}, err
	}
	if m.templates == nil {
		return apitype.Template{}, fmt.Errorf("%w: template %q: this server has no templates", errdefs.ErrNotFound, name)
	}
	t, err := m.templates.Store().Get(name)
	if errors.Is(err, image.ErrNoTemplate) {
		return apitype.Template{}, fmt.Errorf("%w: template %q is not registered on this server (GET /v1/templates lists them)", errdefs.ErrNotFound, name)
	}
	if err != nil {
		return apitype.Template{}, errdefs.Private(errdefs.ErrUnavailable, "the template store cannot be read", err)
	}
	return m.templateInfo(t), nil
}

func (m *Manager) templateInfo(t image.Template) apitype.Template {
	info := apitype.Template{
		Name: t.Name, Version: t.Version, Created: t.Created, Source: t.Source, From: t.From, Digest: t.Digest,
		Languages: slices.Sorted(maps.Keys(t.Runtimes)), Size: t.Size, Files: t.Files,
		Default: t.Name == m.cfg.Templates.Default, Packages: t.Packages,
	}
	if info.Languages == nil {
		info.Languages = []string{}
	}
	for lang, n := range m.cfg.Templates.Pool[t.Name] {
		if n > 0 && t.Runtimes[lang] != "" {
			if info.Pool == nil {
				info.Pool = map[string]int{}
			}
			info.Pool[lang] = n
		}
	}
	return info
}
