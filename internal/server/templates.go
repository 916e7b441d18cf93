package server

import (
	"context"
	"errors"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/image"
	"airlock/internal/instance"
	"airlock/internal/pool"
)

// openTemplates opens the template store and the sources of templates'
// sandboxes, and checks the templates the configuration names (a
// template whose root cannot run airlock's runtimes refuses the start,
// with why). Without a store (a read-only data_dir, say) and without a
// named template, the server runs on the host's root alone.
func (s *Server) openTemplates(cfg config.Config, kernels map[config.Isolation]instance.Kernel, slots *instance.Slots) error {
	store, err := image.Open(cfg.TemplateDir())
	if err != nil {
		if len(cfg.TemplatesNamed()) > 0 {
			return err
		}
		s.log.Warn("no template store: sessions run on the host's root only", "dir", cfg.TemplateDir(), "err", err)
		return nil
	}
	s.tmpl = pool.NewTemplates(cfg, store, s.host, kernels, slots, s.log)
	s.closers.AddFunc(s.tmpl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := s.tmpl.Start(ctx); err != nil {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			err = errors.Join(errdefs.ErrUnavailable, err)
		}
		return err
	}
	list, err := store.List()
	if err != nil {
		return err
	}
	for _, t := range list {
		s.log.Info("template", "name", t.Name, "version", t.Version, "source", t.Source, "size", t.Size, "runtimes", t.Runtimes)
	}
	s.manager.SetTemplates(s.tmpl)
	return nil
}

// poolStats reports the warm pools of the host's root and of templates.
func (s *Server) poolStats() map[string]any {
	out := map[string]any{}
	if s.pool != nil {
		out = s.pool.Stats()
	}
	if s.tmpl != nil {
		for k, v := range s.tmpl.Stats() {
			out[k] = v
		}
	}
	return out
}
