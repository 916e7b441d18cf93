package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/image"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
)

// Templates are the sources of sandboxes made from templates: for each
// template and isolation, one made from the template's current version
// (a Pool when templates.pool sizes it, with a Python template of its own
// when it has a Python pool; cold builds otherwise). When a newer version
// is imported, new sandboxes get it; those made from the old one hold it
// until they end, and its pool is retired.
type Templates struct {
	cfg     config.Config
	store   *image.Store
	host    *jail.Host
	kernels map[config.Isolation]instance.Kernel
	slots   *instance.Slots
	log     *slog.Logger
	retired sync.WaitGroup

	// mu guards live and closed.
	mu     sync.Mutex
	live   map[templateKey]*templateSource
	closed bool
}

type templateKey struct {
	name string
	iso  config.Isolation
}

type templateSource struct {
	tmpl  image.Template
	lease *image.Lease
	src   instance.Source
	pool  *Pool // nil without a pool
}

// NewTemplates returns the template sources of the server, building
// sandboxes with kernels (each made to use a template's root) on host's
// prepared roots.
func NewTemplates(cfg config.Config, store *image.Store, host *jail.Host, kernels map[config.Isolation]instance.Kernel, slots *instance.Slots, log *slog.Logger) *Templates {
	return &Templates{cfg: cfg, store: store, host: host, kernels: kernels, slots: slots, log: log, live: map[templateKey]*templateSource{}}
}

// Store is the template store.
func (t *Templates) Store() *image.Store { return t.store }

// Source returns the source of sandboxes of template name on isolation
// iso for a runtime of lang, and the template's version it builds.
func (t *Templates) Source(iso config.Isolation, name, lang string) (instance.Source, image.Template, error) {
	cur, err := t.store.Get(name)
	if err != nil {
		if errors.Is(err, image.ErrNoTemplate) {
			return nil, image.Template{}, fmt.Errorf("%w: template %q is not registered on this server; it has %s (GET /v1/templates describes them)", errdefs.ErrInvalidArgument, name, t.names())
		}
		return nil, image.Template{}, err
	}
	if lang != "" {
		if err := cur.Runs(lang); err != nil {
			return nil, cur, err
		}
	}
	k := templateKey{name, iso}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, cur, fmt.Errorf("%w: the server is shutting down", errdefs.ErrUnavailable)
	}
	if e := t.live[k]; e != nil && e.tmpl.Version == cur.Version {
		return e.src, e.tmpl, nil
	}
	e, err := t.open(k)
	if err != nil {
		return nil, cur, err
	}
	if old := t.live[k]; old != nil {
		t.log.Info("template: new version; its sandboxes are made from it from now on", "template", name, "version", e.tmpl.Version, "previous", old.tmpl.Version)
		t.retire(old)
	}
	t.live[k] = e
	return e.src, e.tmpl, nil
}

// names lists the registered templates for an error message.
func (t *Templates) names() string {
	list, err := t.store.List()
	if err != nil || len(list) == 0 {
		return "none"
	}
	names := make([]string, len(list))
	for i, tm := range list {
		names[i] = tm.Name
	}
	return strings.Join(names, ", ")
}

// open makes the source of the current version of k's template.
func (t *Templates) open(k templateKey) (*templateSource, error) {
	kernel, ok := t.kernels[k.iso]
	if !ok {
		return nil, fmt.Errorf("%w: isolation %q is not available on this server", errdefs.ErrUnavailable, k.iso)
	}
	lease, err := t.store.Acquire(k.name)
	if err != nil {
		return nil, err
	}
	root, err := instance.NewRoot(t.host, lease)
	if err != nil {
		lease.Release()
		return nil, errdefs.Private(errdefs.ErrUnavailable, fmt.Sprintf("template %q cannot be made a sandbox root", k.name), err)
	}
	kernel = kernel.WithRoot(root)
	e := &templateSource{tmpl: lease.Template, lease: lease}
	sizes := t.cfg.Templates.Pool[k.name]
	if k.iso == t.cfg.Isolation && anySize(sizes) {
		pc := t.cfg
		pc.Runtimes = lease.RuntimesConfig(pc.Runtimes)
		// A template's pools keep their sizes, whatever the memory
		// budget: they do not grow, and one-shots may take all of them.
		pc.Pool.Size, pc.Pool.NetworkSize, pc.Pool.MaxSize, pc.Pool.OneShotSize = map[string]int{}, nil, nil, nil
		pc.Pool.MemoryBudget = -1 // none: their sizes are what their owner asked for
		// Nor a lean template: one-shots on a template run on its own.
		pc.Pool.LeanSize = 0
		for lang, n := range sizes {
			if lease.Runtimes[lang] != "" {
				pc.Pool.Size[lang] = n
			}
		}
		// A Python template interpreter of its own where the root has
		// Python and a pool of it: its runtimes are forked warm from the
		// template's libraries. The interpreter runs as host root, outside
		// any sandbox: only for a root built from Debian's signed packages
		// (airlock template build), whose code is as trusted as the
		// host's. An imported one's code only ever runs in sandboxes: its
		// pooled runtimes import the preloads there, before they are
		// handed out.
		trusted := lease.Source == "debian"
		pc.Pool.Zygote = t.cfg.Pool.Zygote && pc.Pool.Size["python"] > 0 && trusted
		if !trusted {
			kernel = instance.WithPreload(kernel, t.cfg.Pool.Preload)
		}
		e.pool = New(pc, kernel, t.slots, t.log.With("template", k.name))
		e.src = e.pool
	} else {
		e.src = &instance.Cold{Kernel: kernel, Slots: t.slots}
	}
	return e, nil
}

func anySize(sizes map[string]int) bool {
	for _, n := range sizes {
		if n > 0 {
			return true
		}
	}
	return false
}

// retire closes e's pool in the background and lets its version go (the
// sandboxes it handed out hold their own).
func (t *Templates) retire(e *templateSource) {
	t.retired.Go(func() {
		if e.pool != nil {
			e.pool.Close()
		}
		e.lease.Release()
	})
}

// Start checks the templates the configuration names (templates.default,
// templates.pool): each must be registered, and each of the runtimes its
// root has must start in a sandbox made from it (a root whose Python
// cannot run airlock's runtime is refused here, with why). Their pools
// start filling.
func (t *Templates) Start(ctx context.Context) error {
	for _, name := range t.cfg.TemplatesNamed() {
		tm, err := t.store.Get(name)
		if err != nil {
			return fmt.Errorf("%w: the configuration names template %q (templates.default or templates.pool), which is not registered: %v (airlock template list shows what is)", errdefs.ErrUnavailable, name, err)
		}
		if len(tm.Runtimes) == 0 {
			return fmt.Errorf("%w: template %q has none of the interpreters airlock runs (%v) in its root", errdefs.ErrUnavailable, name, image.Interpreters)
		}
		if err := t.Check(ctx, t.cfg.Isolation, name); err != nil {
			return err
		}
	}
	return nil
}

// Check starts each runtime template name's root has in a sandbox made
// from it, once, cold: the runtime says hello only if the template's
// interpreter runs it.
func (t *Templates) Check(ctx context.Context, iso config.Isolation, name string) error {
	src, tm, err := t.Source(iso, name, "")
	if err != nil {
		return err
	}
	langs := make([]string, 0, len(tm.Runtimes))
	for lang := range tm.Runtimes {
		langs = append(langs, lang)
	}
	sort.Strings(langs)
	for _, lang := range langs {
		rt, err := runtimes.Lookup(t.cfg, lang)
		if err != nil {
			return err
		}
		rt.Binary = tm.Runtimes[lang]
		if cs, ok := src.(*Pool); ok {
			// Not from the pool: a check must not take a warm one.
			src = &instance.Cold{Kernel: cs.kernel, Slots: t.slots}
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		inst, err := src.Get(cctx, rt, t.cfg.Defaults, false)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: template %q cannot run airlock's %s runtime (%s): %v", errdefs.ErrUnavailable, name, lang, tm.Runtimes[lang], err)
		}
		inst.Close()
	}
	return nil
}

// Stats reports the pools of templates, keyed "<language>@<template>"
// (and apitype.TemplateKey+"@<template>" for its Python template).
func (t *Templates) Stats() map[string]any {
	t.mu.Lock()
	live := make(map[templateKey]*templateSource, len(t.live))
	for k, e := range t.live {
		live[k] = e
	}
	t.mu.Unlock()
	out := map[string]any{}
	for k, e := range live {
		if e.pool == nil {
			continue
		}
		for key, v := range e.pool.Stats() {
			out[key+"@"+k.name] = v
		}
	}
	return out
}

// Close retires every template's source and waits until their pools are
// gone.
func (t *Templates) Close() {
	t.mu.Lock()
	t.closed = true
	for k, e := range t.live {
		t.retire(e)
		delete(t.live, k)
	}
	t.mu.Unlock()
	t.retired.Wait()
}
