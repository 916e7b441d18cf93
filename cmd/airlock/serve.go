package main

import (
	"context"
	"io"

	"airlock/internal/server"
)

// runServer runs the server (tests replace it to see the configuration
// serve would start with).
var runServer = server.Run

func serveCmd(args []string, stderr io.Writer) int {
	c := newCommand("serve", "Usage: airlock serve [flags]\n\nServes the HTTP API (see /v1/openapi.json). SIGTERM pauses every live\nsession when persistence.enabled (persistence.on_shutdown \"pause\", the\ndefault; one that cannot be paused ends, its recovery point kept), else ends\nevery session; either way it leaves no process, mount or cgroup behind.\n\nFlags:\n", stderr)
	c.configFlag()
	c.keyFlag("listen", "server.listen", "address to listen on: server.listen (default 127.0.0.1:8080)")
	c.keySwitch("v", "log.level", "debug", "log every request: log.level debug")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	log := server.NewLogger(cfg.Log, stderr)
	if err := runServer(context.Background(), cfg, server.Options{Version: version, Log: log, Stderr: stderr}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}
