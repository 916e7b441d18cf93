package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"airlock/internal/doctor"
)

func doctorCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("doctor", fmt.Sprintf("Usage: airlock doctor [flags]\n\nShows each protection this host supports and whether it will be applied,\nbuilds a jail to prove it, checks the language runtimes, and prepares the\nshared font cache. Exits %d when code cannot run as configured.\n\nFlags:\n", exitUnavailable), stderr)
	c.configFlag()
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
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
