package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"airlock/internal/config"
)

const configUsage = `Usage:
  airlock config print [--config FILE]   the effective configuration, secrets masked
  airlock config env                     the AIRLOCK_* variables that override keys

The effective configuration is the defaults, then the file ($AIRLOCK_CONFIG
or --config), then AIRLOCK_* environment variables, then the flags of the
command that set keys (serve --listen, serve -v), then the secrets' *_file
variants, validated as a whole. An AIRLOCK_* variable that names no key
is an error, except AIRLOCK_TEST_* and:
`

// otherEnv lists the AIRLOCK_ variables that are no key.
func otherEnv() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(config.OtherEnv)) {
		fmt.Fprintf(&b, "  %-20s %s\n", name, config.OtherEnv[name])
	}
	return b.String()
}

func configCmd(args []string, stdout, stderr io.Writer) int {
	usage := configUsage + otherEnv() + "\nFlags:\n"
	if len(args) == 0 || (args[0] != "print" && args[0] != "env") {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return exitUsage
	}
	c := newCommand("config "+args[0], usage, stderr)
	c.configFlag()
	if code, ok := c.parse(args[1:]); !ok {
		return code
	}
	if args[0] == "env" {
		fmt.Fprintln(stdout, strings.Join(config.EnvNames(), "\n"))
		return 0
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	if cfg.Version == 0 {
		cfg.Version = 1
	}
	b, _ := json.MarshalIndent(cfg.Masked(), "", "  ")
	fmt.Fprintln(stdout, string(b))
	return 0
}
