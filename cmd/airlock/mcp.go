package main

import (
	"context"
	"io"
	"log/slog"

	"airlock/internal/server"
)

// runMCP serves MCP on stdio (tests replace it to see the configuration
// it would run with).
var runMCP = server.RunMCPStdio

func mcpCmd(args []string, stderr io.Writer) int {
	c := newCommand("mcp", "Usage: airlock mcp [flags]\n\nServes the Model Context Protocol on stdin and stdout, for MCP clients that\nstart airlock themselves (Claude Desktop, Cursor, the OpenAI Agents SDK...).\nIt uses the local `airlock serve` through its unix socket when one runs,\nand otherwise runs a server of its own for as long as the client stays.\nLogs go to stderr.\n\nFlags:\n", stderr)
	c.configFlag()
	c.keyFlag("content", "mcp.content", "blocks tool results carry besides text, comma-separated: image, resource_link, resource (default none: text only; mcp.content)")
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
	if err := runMCP(context.Background(), cfg, server.Options{Version: version, Log: log, Stderr: stderr}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}
