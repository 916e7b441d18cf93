package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"airlock/internal/doctor"
)

func doctorCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default $AIRLOCK_CONFIG)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: airlock doctor [flags]\n\nShows each protection this host supports and whether it will be applied,\nbuilds a jail to prove it, checks the language runtimes, and prepares the\nshared font cache. Exits %d when code cannot run as configured.\n\nFlags:\n", exitUnavailable)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "airlock doctor: %v\n", err)
		return exitConfig
	}
	r := doctor.Run(context.Background(), cfg)
	if *asJSON {
		json.NewEncoder(stdout).Encode(struct {
			OK     bool           `json:"ok"`
			Checks []doctor.Check `json:"checks"`
		}{r.OK(), r.Checks})
	} else {
		r.Print(stdout)
	}
	if !r.OK() {
		return exitUnavailable
	}
	return 0
}
