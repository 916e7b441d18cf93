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
	"airlock/internal/termtext"
)

func benchCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("bench", "Usage: airlock bench [flags]\n\nStarts an airlock server of its own (as root) and measures the speed and\ndensity scenarios against baselines run in the same invocation.\n\nFlags:\n", stderr)
	fs := c.fs
	var o bench.Options
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.BoolVar(&o.Smoke, "smoke", false, "tiny counts: check that every scenario runs (numbers mean nothing)")
	fs.StringVar(&o.Only, "only", "", "comma-separated scenarios: exec, create_pandas, concurrent_create, contexts, oneshot, density, airlock_run, audit, observe, egress, store, gvisor")
	fs.StringVar(&o.Python, "python", "/usr/bin/python3", "python for the baselines")
	fs.StringVar(&o.Isolation, "isolation", "native", "native, or gvisor: also run the session scenarios on gVisor, beside the native ones")
	fs.StringVar(&o.Runsc, "runsc", "", "the runsc binary for --isolation gvisor (default: runsc on PATH)")
	fs.StringVar(&o.StoreDSNFile, "store-dsn-file", "", "a file holding a PostgreSQL connection string: the store scenario compares servers on it with one on SQLite")
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
