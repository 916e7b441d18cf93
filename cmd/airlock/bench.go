package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"airlock/internal/bench"
	"airlock/internal/image"
	"airlock/internal/termtext"
)

func benchCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("bench", "Usage: airlock bench [flags]\n\nStarts an airlock server of its own (as root) and measures the speed and\ndensity scenarios against baselines run in the same invocation.\n\nFlags:\n", stderr)
	fs := c.fs
	o := bench.Options{Version: version}
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.BoolVar(&o.Smoke, "smoke", false, "tiny counts: check that every scenario runs (numbers mean nothing)")
	fs.StringVar(&o.Only, "only", "", "comma-separated scenarios: exec, create_pandas, concurrent_create, drained_burst, contexts, e2b, oneshot, density, airlock_run, audit, observe, history, egress, store, persist, ports, template, tools, secrets, gvisor; gvisor_persist (only the gVisor pause and resume with memory); capacity holds -sessions idle sessions (alone, it starts no other server)")
	fs.IntVar(&o.Sessions, "sessions", 1000, "the capacity scenario's number of idle Python sessions with pandas")
	fs.StringVar(&o.Template, "template", "code-interpreter", "the template of the template scenario (skipped when the store has none of that name)")
	fs.StringVar(&o.Python, "python", "/usr/bin/python3", "python for the baselines")
	fs.StringVar(&o.Isolation, "isolation", "native", "native, or gvisor: also run the session scenarios on gVisor, beside the native ones")
	fs.StringVar(&o.Runsc, "runsc", "", "the runsc binary for --isolation gvisor (default: runsc on PATH)")
	fs.StringVar(&o.StoreDSNFile, "store-dsn-file", "", "a file holding a PostgreSQL connection string: the store scenario compares servers on it with one on SQLite")
	c.configFlag()
	verbose := fs.Bool("v", false, "say what runs")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *verbose {
		o.Verbose = stderr
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "airlock bench: must run as root (it starts an airlock server)")
		return exitUnavailable
	}
	// The template scenario runs on the configuration's store, when it
	// holds the template.
	if cfg, code, ok := c.loadConfig(); !ok {
		return code
	} else if st, err := image.Open(cfg.TemplateDir()); err == nil {
		if _, err := st.Get(o.Template); err == nil {
			o.TemplateDir = cfg.TemplateDir()
		} else if o.Only == "template" {
			fmt.Fprintf(stderr, "airlock bench: %s\n", termtext.Field(err.Error()))
			return exitUnavailable
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := bench.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "airlock bench: %s\n", termtext.Field(err.Error()))
		return exitSoftware
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
	} else {
		r.Print(stdout)
	}
	if len(r.Errors) > 0 {
		return exitSoftware
	}
	return 0
}
