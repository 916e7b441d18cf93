package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/mcp"
	"airlock/internal/server"
)

// runMCP serves MCP on stdio, and runBridge relays it to a remote server
// (tests replace them to see what they would run with).
var (
	runMCP    = server.RunMCPStdio
	runBridge = mcp.Bridge
)

const mcpUsage = `Usage: airlock mcp [flags]

Serves the Model Context Protocol on stdin and stdout, for MCP clients that
start airlock themselves (Claude Desktop, Cursor, the OpenAI Agents SDK...).
It uses the local ` + "`airlock serve`" + ` through its unix socket when one runs,
and otherwise runs a server of its own for as long as the client stays
(both as root).

With --url it is a bridge to a remote server's /mcp instead, as any user:
the API key comes from $AIRLOCK_API_KEY or --key-file.

When the client closes its input or sends SIGTERM, every session it opened
ends before airlock exits (status 0). Logs go to stderr.

Flags:
`

func mcpCmd(args []string, stderr io.Writer) int {
	c := newCommand("mcp", mcpUsage, stderr)
	c.configFlag()
	c.keyFlag("content", "mcp.content", "blocks tool results carry besides text, comma-separated: image, resource_link, resource (default none: text only; mcp.content)")
	remote := c.fs.String("url", "", "relay to the MCP endpoint of a remote server (https://HOST:8080/mcp)")
	keyFile := c.fs.String("key-file", "", "with --url: a file holding the API key (default $AIRLOCK_API_KEY)")
	verbose := c.fs.Bool("v", false, "log more")
	if code, ok := c.parse(args); !ok {
		return code
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *remote != "" {
		// --content is the server's to apply (as ?content=), checked here
		// as it would be in the configuration.
		var content []string
		for _, f := range c.overrides {
			if f.Key == "mcp.content" {
				content = strings.Split(f.Value, ",")
			}
		}
		if err := config.CheckMCPContent(content); err != nil {
			fmt.Fprintf(stderr, "airlock mcp: --content (mcp.content): %v\n", errdefs.Message(err))
			return exitConfig
		}
		return mcpBridge(*remote, *keyFile, strings.Join(content, ","), log, stderr)
	}
	if *keyFile != "" {
		fmt.Fprintln(stderr, "airlock mcp: --key-file goes with --url")
		return exitUsage
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	if err := runMCP(context.Background(), cfg, server.Options{Version: version, Log: log, Stderr: stderr}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}

// mcpBridge relays stdio to a remote server's /mcp (asking for content
// blocks, when given, with ?content=) until the client leaves or a
// signal comes.
func mcpBridge(endpoint, keyFile, content string, log *slog.Logger, stderr io.Writer) int {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "airlock mcp: --url %q is not an http(s) URL (https://HOST:8080/mcp)\n", endpoint)
		return exitUsage
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/mcp"
	}
	if content != "" {
		q := u.Query()
		q.Set("content", content)
		u.RawQuery = q.Encode()
	}
	key, err := apiKey(keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "airlock mcp: %v\n", err)
		return exitNoInput
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runBridge(ctx, mcp.BridgeOptions{URL: u.String(), Key: key, In: os.Stdin, Out: os.Stdout, Log: log}); err != nil {
		return exitFor(stderr, err)
	}
	return 0
}

// apiKey is the API key a client command sends to a remote server: the
// content of keyFile when given, else $AIRLOCK_API_KEY.
func apiKey(keyFile string) (string, error) {
	key := os.Getenv("AIRLOCK_API_KEY")
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", fmt.Errorf("the key file: %w", err)
		}
		key = string(b)
	}
	return strings.TrimSpace(key), nil
}
