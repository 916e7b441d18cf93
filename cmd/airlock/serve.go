package main

import (
	"context"
	"io"

	"airlock/internal/server"
)

func serveCmd(args []string, stderr io.Writer) int {
	c := newCommand("serve", "Usage: airlock serve [flags]\n\nServes the HTTP API (see /v1/openapi.json). SIGTERM ends every session and\nleaves nothing behind.\n\nFlags:\n", stderr)
	cfgPath := c.configFlag()
	listen := c.fs.String("listen", "", "address to listen on (default 127.0.0.1:8080)")
	verbose := c.fs.Bool("v", false, "log every request (log.level debug)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig(*cfgPath)
	if !ok {
		return code
	}
	if *listen != "" {
		cfg.Server.Listen = *listen
	}
	log := server.NewLogger(cfg.Log, stderr, *verbose)
	if err := server.Run(context.Background(), cfg, server.Options{Version: version, Log: log, Stderr: stderr}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}
