package config

import (
	"fmt"
	"path/filepath"
	"slices"

	"airlock/internal/errdefs"
)

// Templates configures the templates sandboxes may be made from: named
// root filesystems registered with `airlock template import|build`, kept
// in a store on the host.
type Templates struct {
	// Dir is the template store; <data_dir>/templates when empty. It is
	// persistent, like data_dir.
	Dir string `json:"dir"`
	// BuildCache caches the Debian roots `airlock template build` makes
	// (by package list); <cache_dir>/templates when empty.
	BuildCache string `json:"build_cache"`
	// Default is the template of a request that names none; empty is the
	// host's own root (its /usr and /etc).
	Default string `json:"default"`
	// Pool sizes the warm pools of templates, per language, as pool.size
	// does the host root's: {"code-interpreter": {"python": 4}}. A
	// template with a Python pool also gets a Python template interpreter
	// of its own (pool.zygote). A template not listed has no pool: its
	// sandboxes are built when asked for.
	Pool map[string]map[string]int `json:"pool,omitempty"`
	// MaxBytes and MaxFiles cap what one import may write (uncompressed
	// bytes, entries); MaxLayer caps the size an image may declare for a
	// layer.
	MaxBytes Size  `json:"max_bytes"`
	MaxFiles int64 `json:"max_files"`
	MaxLayer Size  `json:"max_layer"`
}

// DefaultTemplates are the templates' defaults.
func DefaultTemplates() Templates {
	return Templates{MaxBytes: 8 << 30, MaxFiles: 1_000_000, MaxLayer: 4 << 30}
}

// TemplateDir is the template store's directory.
func (c Config) TemplateDir() string {
	if c.Templates.Dir != "" {
		return c.Templates.Dir
	}
	return filepath.Join(c.DataDir, "templates")
}

// TemplateBuildCache is where built Debian roots are cached.
func (c Config) TemplateBuildCache() string {
	if c.Templates.BuildCache != "" {
		return c.Templates.BuildCache
	}
	return filepath.Join(c.CacheDir, "templates")
}

// TemplatesNamed lists the templates the configuration names (the
// default, those with pools, those tenants may use), sorted: each must
// exist and run when the server starts.
func (c Config) TemplatesNamed() []string {
	var out []string
	if c.Templates.Default != "" {
		out = append(out, c.Templates.Default)
	}
	for name := range c.Templates.Pool {
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckTemplateName checks a template's name: a lower-case letter or
// digit, then up to 62 of those, '.', '_' and '-'.
func CheckTemplateName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("%w: template name %q must be 1 to 63 characters", errdefs.ErrInvalidArgument, clip(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%w: template name %q: lower-case letters, digits, '.', '_' and '-', starting with a letter or digit", errdefs.ErrInvalidArgument, clip(name))
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func (c Config) validateTemplates() []error {
	var errs []error
	t := c.Templates
	for key, p := range map[string]string{"templates.dir": t.Dir, "templates.build_cache": t.BuildCache} {
		if p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/") {
			errs = append(errs, fmt.Errorf("%s %q must be a clean absolute path other than /", key, p))
		}
	}
	if t.Default != "" {
		if err := CheckTemplateName(t.Default); err != nil {
			errs = append(errs, fmt.Errorf("templates.default: %v", err))
		}
	}
	for name, sizes := range t.Pool {
		if err := CheckTemplateName(name); err != nil {
			errs = append(errs, fmt.Errorf("templates.pool: %v", err))
		}
		for lang, n := range sizes {
			if !KnownLanguage(lang) {
				errs = append(errs, fmt.Errorf("templates.pool.%s: unknown language %q", name, lang))
			}
			if n < 0 || n > 4096 {
				errs = append(errs, fmt.Errorf("templates.pool.%s.%s %d must be between 0 and 4096", name, lang, n))
			}
		}
	}
	if t.MaxBytes < 1<<20 || t.MaxFiles < 100 || t.MaxLayer < 1<<20 || t.MaxLayer > t.MaxBytes {
		errs = append(errs, fmt.Errorf("templates.max_bytes and templates.max_layer must be at least 1M (the layer cap at most the total), templates.max_files at least 100"))
	}
	for name, tn := range c.Tenants {
		for _, tmpl := range tn.Templates {
			if err := CheckTemplateName(tmpl); err != nil {
				errs = append(errs, fmt.Errorf("tenants.%s.templates: %v", name, err))
			}
		}
	}
	return errs
}
