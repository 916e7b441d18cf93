package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"airlock/internal/config"
)

const configUsage = `Usage:
  airlock config print [--config FILE]   the effective configuration, secrets masked
  airlock config env                     the AIRLOCK_* variables that override keys

The effective configuration is the defaults, then the file ($AIRLOCK_CONFIG
or --config), then AIRLOCK_* environment variables, then the secrets'
*_file variants.

Flags:
`

func configCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "print" && args[0] != "env") {
		fmt.Fprint(stderr, configUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return exitUsage
	}
	c := newCommand("config "+args[0], configUsage, stderr)
	cfgPath := c.configFlag()
	if code, ok := c.parse(args[1:]); !ok {
		return code
	}
	if args[0] == "env" {
		fmt.Fprintln(stdout, strings.Join(config.EnvNames(), "\n"))
		return 0
	}
	cfg, code, ok := c.loadConfig(*cfgPath)
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
