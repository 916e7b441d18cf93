package main

import (
	"context"
	"io"
	"log/slog"

	"airlock/internal/server"
)

func mcpCmd(args []string, stderr io.Writer) int {
	c := newCommand("mcp", "Usage: airlock mcp [flags]\n\nServes the Model Context Protocol on stdin and stdout, for MCP clients that\nstart airlock themselves (Claude Desktop, Cursor, the OpenAI Agents SDK...).\nIt uses the local `airlock serve` through its unix socket when one runs,\nand otherwise runs a server of its own for as long as the client stays.\nLogs go to stderr.\n\nFlags:\n", stderr)
	c.configFlag()
	verbose := c.fs.Bool("v", false, "log more")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := server.RunMCPStdio(context.Background(), cfg, server.Options{Version: version, Log: log, Stderr: stderr}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}
