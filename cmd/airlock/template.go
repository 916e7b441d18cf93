package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/image"
	"airlock/internal/termtext"
)

const templateUsage = `Usage:
  airlock template list [--json]
  airlock template import [--ref REF] [--json] NAME SOURCE
  airlock template build [--json] NAME --recipe code-interpreter|python
  airlock template build [--json] NAME --packages "python3 python3-numpy ..."
  airlock template rm [--json] NAME

Manages templates: named root filesystems sessions and runs may be made
from (the "template" of a request, airlock run --template), kept in the
store at templates.dir (on this host, as root). A running server sees a
change at its next session: sessions already running keep the version
they were made from until they end, and an old version is removed when
none does.

import takes SOURCE as a directory holding a root filesystem, an OCI
layout directory, or a tar written by docker save, podman save (either
format) or any tool that writes an OCI archive; REF picks one image of
an archive or layout holding several. build runs debootstrap (Debian 12)
and apt-get for the package list, cached under templates.build_cache.
Nothing of the source is trusted: see the README's "Templates".

Long operations show their progress on a terminal, and with --json print
one JSON event per line, the template last. Ctrl-C stops them and leaves
nothing behind.

Flags:
`

func templateCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("template", templateUsage, stderr)
	if len(args) == 0 {
		c.fs.Usage()
		return exitUsage
	}
	sub, args := args[0], args[1:]
	asJSON := c.fs.Bool("json", false, "print JSON (events, one per line, for import and build)")
	ref := c.fs.String("ref", "", "import: the image to take from an archive or layout holding several (name:tag)")
	recipe := c.fs.String("recipe", "", "build: a named package list (code-interpreter, python)")
	pkgs := c.fs.String("packages", "", "build: Debian packages to install, separated by spaces or commas")
	c.configFlag()
	// Flags may come after the arguments too (template build NAME
	// --recipe R): parse again after each argument.
	var pos []string
	for {
		if status, ok := c.parse(args); !ok {
			return status
		}
		if c.fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, c.fs.Arg(0)), c.fs.Args()[1:]
	}
	cfg, status, ok := c.loadConfig()
	if !ok {
		return status
	}
	want := map[string]int{"list": 0, "import": 2, "build": 1, "rm": 1}
	n, known := want[sub]
	if !known {
		fmt.Fprintf(stderr, "airlock template: unknown subcommand %q\n\n", sub)
		c.fs.Usage()
		return exitUsage
	}
	if len(pos) != n {
		fmt.Fprintf(stderr, "airlock template %s: want %d argument(s), got %d\n\n", sub, n, len(pos))
		c.fs.Usage()
		return exitUsage
	}
	store, err := image.Open(cfg.TemplateDir())
	if err != nil {
		return exitFor(stderr, err)
	}
	switch sub {
	case "list":
		return templateList(store, *asJSON, stdout, stderr)
	case "rm":
		kept, err := store.Remove(pos[0])
		if err != nil {
			return exitFor(stderr, err)
		}
		if *asJSON {
			writeJSON(stdout, map[string]any{"removed": pos[0], "versions_in_use": kept})
		} else if len(kept) > 0 {
			fmt.Fprintf(stdout, "removed %s; version(s) %s still used by running sessions stay until those end\n", pos[0], strings.Join(kept, ", "))
		} else {
			fmt.Fprintf(stdout, "removed %s\n", pos[0])
		}
		return 0
	}
	name := pos[0]
	if err := image.CheckName(name); err != nil {
		fmt.Fprintf(stderr, "airlock template %s: %v\n", sub, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newProgress(stdout, stderr, *asJSON)
	o := image.ImportOptions{Ref: *ref, Progress: p.event, Limits: image.Limits{
		Bytes: int64(cfg.Templates.MaxBytes), Files: cfg.Templates.MaxFiles, Layer: int64(cfg.Templates.MaxLayer), Layers: image.DefaultLimits().Layers,
	}}
	var t image.Template
	if sub == "import" {
		t, err = store.Import(ctx, name, pos[1], o)
	} else {
		list, lerr := buildPackages(*recipe, *pkgs)
		if lerr != nil {
			p.done()
			fmt.Fprintf(stderr, "airlock template build: %v\n", lerr)
			return exitUsage
		}
		t, err = store.Build(ctx, name, cfg.TemplateBuildCache(), list, o)
	}
	p.done()
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "airlock template %s: interrupted; nothing was kept\n", sub)
		return 130
	}
	if err != nil {
		return exitFor(stderr, err)
	}
	if *asJSON {
		writeJSON(stdout, map[string]any{"stage": "template", "template": t})
		return 0
	}
	fmt.Fprintf(stdout, "%s version %s: %s, %d files, runtimes %s\n", t.Name, t.Version, humanBytes(t.Size), t.Files, runtimeList(t))
	if s := t.Stripped; s != (image.Stripped{}) {
		fmt.Fprintf(stdout, "left out: %d device files, %d fifos, %d setuid/setgid bits, %d other entries\n", s.Devices, s.Fifos, s.SetID, s.Unknown)
	}
	return 0
}

// buildPackages is the package list of build's flags: a recipe or a
// list, not both.
func buildPackages(recipe, pkgs string) ([]string, error) {
	switch {
	case recipe != "" && pkgs != "":
		return nil, errors.New("give --recipe or --packages, not both")
	case recipe != "":
		list, ok := image.Recipes[recipe]
		if !ok {
			names := make([]string, 0, len(image.Recipes))
			for n := range image.Recipes {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("--recipe %q: the recipes are %s", recipe, strings.Join(names, ", "))
		}
		return list, nil
	case pkgs != "":
		list := strings.FieldsFunc(pkgs, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
		return list, image.CheckPackages(list)
	}
	return nil, errors.New("give --recipe NAME or --packages LIST")
}

func templateList(store *image.Store, asJSON bool, stdout, stderr io.Writer) int {
	list, err := store.List()
	if err != nil {
		return exitFor(stderr, err)
	}
	// Older versions on disk are held by running sessions (each is
	// removed when its last one ends): an upgrade in progress.
	older := map[string][]string{}
	for _, t := range list {
		vs, _ := store.Versions(t.Name)
		for _, v := range vs {
			if v != t.Version {
				older[t.Name] = append(older[t.Name], v)
			}
		}
	}
	if asJSON {
		if list == nil {
			list = []image.Template{}
		}
		writeJSON(stdout, map[string]any{"templates": list, "versions_in_use": older})
		return 0
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no templates (airlock template import or build adds one)")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tSOURCE\tSIZE\tRUNTIMES\tCREATED\tOLDER IN USE")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", t.Name, t.Version, termtext.Field(t.Source+" "+t.From), humanBytes(t.Size), runtimeList(t), t.Created.Format(time.DateTime), len(older[t.Name]))
	}
	tw.Flush()
	return 0
}

func runtimeList(t image.Template) string {
	var out []string
	for lang := range t.Runtimes {
		out = append(out, lang)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// progress shows a long operation's events: one JSON line each with
// --json; on a terminal, one line redrawn in place (time, a bar of the
// image read when its size is known, stage, layer, bytes written);
// otherwise a line per stage.
type progress struct {
	out, err io.Writer
	json     bool
	tty      bool
	start    time.Time
	last     string
	drawn    bool
}

func newProgress(stdout, stderr io.Writer, asJSON bool) *progress {
	p := &progress{out: stdout, err: stderr, json: asJSON, start: time.Now()}
	if f, ok := stderr.(*os.File); ok && !asJSON {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.tty = err == nil
	}
	return p
}

func (p *progress) event(e image.Event) {
	if p.json {
		writeJSON(p.out, e)
		return
	}
	line := e.Stage
	if e.Layers > 0 {
		line += fmt.Sprintf(" %d/%d", e.Layer, e.Layers)
	}
	if e.Message != "" {
		line += " " + termtext.Field(e.Message)
	}
	if e.Bytes > 0 {
		line += "  " + humanBytes(e.Bytes)
	}
	if p.tty {
		if e.Total > 0 {
			line = progressBar(e.Read, e.Total) + " " + line
		}
		line = fmt.Sprintf("[%5.1fs] %s", time.Since(p.start).Seconds(), line)
		if len(line) > 120 {
			line = line[:120]
		}
		fmt.Fprintf(p.err, "\r\x1b[K%s", line)
		p.drawn = true
		return
	}
	if e.Stage != p.last {
		fmt.Fprintln(p.err, line)
		p.last = e.Stage
	}
}

// progressBar draws read of total as a bar with a percentage.
func progressBar(read, total int64) string {
	const width = 24
	read = min(max(read, 0), total)
	n := int(read * width / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + fmt.Sprintf("] %3d%% of %s", read*100/total, humanBytes(total))
}

// done ends the line a terminal's progress drew.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.err)
		p.drawn = false
	}
}
