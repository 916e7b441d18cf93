// Package mcp owns airlock's Model Context Protocol server: the tools an
// agent calls (execute_code, run_command, write_file, read_file,
// list_files, create_session, close_session), the resources it reads
// (a session's files, the list of sessions), a default session per MCP
// connection so that state persists with no id juggling, progress
// notifications while code runs, and the two transports: stdio (`airlock
// mcp`) and streamable HTTP (/mcp on `airlock serve`), both on the official
// Go SDK.
//
// It must never reach a sandbox any other way than through the HTTP API
// (package client), with the caller's own credentials: whatever the API
// enforces — authentication, tenants, limits, errors without host
// internals — holds for MCP too. Tool failures (an exception, a timeout, a
// bad argument) are results with isError, never protocol errors, so the
// model sees them.
package mcp

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// Options configure the MCP server.
type Options struct {
	// Client returns the API client for a call; header is the MCP
	// request's HTTP header (nil over stdio), whose Authorization the
	// client must carry.
	Client func(header http.Header) *client.Client
	// Version is airlock's, reported to clients.
	Version string
	// SessionID, when set, makes the MCP session ids of the HTTP
	// transport (Mcp-Session-Id): a server of a cluster gives ids that
	// carry its name, so that the router sends an MCP session's requests
	// back to it. Nil: the SDK's random ids.
	SessionID func() string
	// Installs are the package managers the server installs with
	// (packages.pip, packages.npm): install_packages is offered only
	// when there is one.
	Installs []string
	// Content lists the blocks tool results carry besides text
	// (mcp.content: config.MCPContent); an HTTP client's ?content=
	// overrides it.
	Content []string
	Log     *slog.Logger
}

// Server is airlock's MCP server: one SDK server, and the default
// sessions of its connections.
type Server struct {
	o   Options
	srv *mcp.Server

	mu       sync.Mutex
	defaults map[*mcp.ServerSession]*connection
}

// connection is one MCP connection's state: its default session per
// language, created on first use and ended with the connection.
type connection struct {
	mu       sync.Mutex
	sessions map[string]string // language -> airlock session id
	header   http.Header       // the credentials that made them
}

// instructions tell the model what the server is.
const instructions = `airlock runs code in isolated, stateful sandboxes (Linux jails with no network, unless ` +
	`create_session asks for the hosts a session may reach, within the server's policy). ` +
	`Use execute_code to run Python (default), bash or JavaScript: variables, imports and files persist between calls, ` +
	`like a notebook; its result lists the files it wrote in /workspace (read_file reads them) and says what it displayed. ` +
	`Use run_command for shell commands in the same sandbox, and the file tools to move small files in and out ` +
	`(large files go through the HTTP files API). Without session_id every tool uses this connection's default session.`

// New returns the MCP server.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Server{o: o, defaults: map[*mcp.ServerSession]*connection{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock code sandbox", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Log,
		// No logging capability: the server sends no log messages.
		Capabilities: &mcp.ServerCapabilities{},
		GetSessionID: o.SessionID,
	})
	s.addTools()
	s.addInstallTool()
	s.addResources()
	return s
}

// SDK is the underlying SDK server (for Go tests' in-memory transports).
func (s *Server) SDK() *mcp.Server { return s.srv }

// RunStdio serves one client on stdin and stdout until it leaves.
func (s *Server) RunStdio(ctx context.Context) error {
	return s.srv.Run(ctx, &mcp.StdioTransport{})
}

// HTTPHandler serves MCP's streamable HTTP transport (at /mcp, whose
// ?content= picks the blocks results carry besides text). Idle MCP
// sessions end after idle, with their default sessions. The SDK's DNS
// rebinding guard stays on: a request that reached a loopback address
// with another Host is refused.
func (s *Server) HTTPHandler(idle time.Duration) http.Handler {
	return withContent(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: idle,
		Logger:         s.o.Log,
	}))
}

// conn is the state of the connection a request came on.
func (s *Server) conn(ss *mcp.ServerSession) *connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.defaults[ss]
	if c == nil {
		c = &connection{sessions: map[string]string{}}
		s.defaults[ss] = c
		// Its default sessions end with the connection. (The SDK has no
		// close hook: Wait returns once the connection is closed.)
		go func() {
			ss.Wait()
			s.closeConnection(ss)
		}()
	}
	return c
}

// closeConnection ends the default sessions of a connection that closed.
func (s *Server) closeConnection(ss *mcp.ServerSession) {
	s.mu.Lock()
	c := s.defaults[ss]
	delete(s.defaults, ss)
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	ids, header := c.sessions, c.header
	c.sessions = map[string]string{}
	c.mu.Unlock()
	api := s.o.Client(header)
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := api.DeleteSession(ctx, id); err != nil && client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound {
			s.o.Log.Warn("mcp: ending a connection's default session", "session", id, "err", err)
		}
		cancel()
	}
}

// header is the HTTP header of a request (nil over stdio).
func header(extra *mcp.RequestExtra) http.Header {
	if extra == nil {
		return nil
	}
	return extra.Header
}

// session resolves the session a tool call works in: the one named, or
// the connection's default session of lang, created if it has none (or
// if it ended: said in note).
func (s *Server) session(ctx context.Context, req *mcp.CallToolRequest, api *client.Client, id, lang string) (sid, note string, err error) {
	if id != "" {
		return id, "", sessionArg(id)
	}
	if lang == "" {
		lang = "python"
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.sessions[lang]; old != "" {
		info, err := api.Session(ctx, old)
		if err == nil && info.State != apitype.StateEnded {
			return old, "", nil
		}
		if client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound && err != nil {
			return "", "", err
		}
		note = "the previous default " + lang + " session ended"
		if e := (*client.Error)(nil); err != nil && asClientError(err, &e) && e.Message != "" {
			note += " (" + strings.TrimPrefix(e.Message, "session ended: ") + ")"
		}
		note += "; a new one was started, and its state is empty"
	}
	info, err := api.CreateSession(ctx, apitype.CreateSessionRequest{Language: lang})
	if err != nil {
		return "", "", err
	}
	c.sessions[lang] = info.ID
	c.header = header(req.Extra)
	return info.ID, note, nil
}
