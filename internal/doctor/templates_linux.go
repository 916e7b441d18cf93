package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/image"
	"airlock/internal/server"
)

// templateScript prints the interpreters' versions and, where Python is,
// the version of each module of its argument (or MISSING).
const templateScript = `
import importlib, sys
print("python", sys.version.split()[0])
for m in sys.argv[1].split(","):
    try:
        v = getattr(importlib.import_module(m), "__version__", "?")
        print(m, v)
    except Exception as e:
        print(m, "MISSING", type(e).__name__)
`

// templateChecks checks every registered template: its size, and in a
// jail made from it, each interpreter it has and the modules the pools
// preload. A template the configuration names (templates.default,
// templates.pool) that is missing or whose interpreter does not run is a
// failure: the server refuses to start on it.
func templateChecks(ctx context.Context, r *Report, l *server.Local, cfg config.Config) {
	named := cfg.TemplatesNamed()
	if _, err := os.Stat(cfg.TemplateDir()); errors.Is(err, fs.ErrNotExist) && len(named) == 0 {
		r.add("templates", OK, "none registered (%s does not exist): sessions run on the host's root", cfg.TemplateDir())
		return
	}
	store, err := image.Open(cfg.TemplateDir())
	if err != nil {
		st := Warn
		if len(named) > 0 {
			st = Fail
		}
		r.add("templates", st, "%v", err)
		return
	}
	list, err := store.List()
	if err != nil {
		r.add("templates", Fail, "%v", err)
		return
	}
	var have []string
	for _, t := range list {
		have = append(have, t.Name)
	}
	for _, n := range named {
		if !slices.Contains(have, n) {
			r.add("template "+n, Fail, "the configuration names it (templates.default or templates.pool) but it is not registered: airlock template build or import it")
		}
	}
	if len(list) == 0 {
		r.add("templates", OK, "none registered in %s: sessions run on the host's root", cfg.TemplateDir())
		return
	}
	for _, t := range list {
		st, detail := checkTemplate(ctx, l, cfg, t)
		if st == Fail && !slices.Contains(named, t.Name) {
			st = Warn // a session naming it is refused, the server runs
		}
		r.add("template "+t.Name, st, "%s", detail)
	}
}

func checkTemplate(ctx context.Context, l *server.Local, cfg config.Config, t image.Template) (Status, string) {
	head := fmt.Sprintf("version %s (%s %s), %.1f MiB in %d files", t.Version, t.Source, t.From, float64(t.Size)/(1<<20), t.Files)
	if len(t.Runtimes) == 0 {
		return Fail, head + "; no interpreter airlock runs (python3, bash or node under /usr/bin or /usr/local/bin) in its root"
	}
	lines := []string{head}
	status := OK
	if t.Runtimes["python"] != "" {
		out, _, err := runOn(ctx, l, t.Name, apitype.Python, templateScript, strings.Join(cfg.Pool.Preload, ","))
		if err != nil {
			return Fail, head + ": python3 does not run in a jail on it: " + err.Error()
		}
		line, mods, lack := moduleReport(out)
		if len(mods) > 0 {
			line += "; preloads: " + strings.Join(mods, ", ")
		}
		if len(lack) > 0 {
			line += "; missing preloads (its Python template imports the rest): " + strings.Join(lack, ", ")
			status = Warn
		}
		lines = append(lines, line)
	}
	for _, rt := range []struct{ lang, code string }{
		{apitype.JavaScript, "console.log(process.version)"},
		{apitype.Bash, "exec " + t.Runtimes[apitype.Bash] + " --version"},
	} {
		p := t.Runtimes[rt.lang]
		if p == "" {
			continue
		}
		out, _, err := runOn(ctx, l, t.Name, rt.lang, rt.code)
		if err != nil {
			return Fail, head + ": " + p + " does not run in a jail on it: " + err.Error()
		}
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		if rt.lang == apitype.JavaScript {
			first = "node " + first
		}
		lines = append(lines, first)
	}
	return status, strings.Join(lines, "\n")
}
