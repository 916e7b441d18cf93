// Package mcp owns airlock's Model Context Protocol server: the tools an
// agent calls (execute_code, run_command, write_file, read_file,
// list_files, create_session, close_session, pause_session,
// resume_session, fork_session, list_sessions), the resources it reads
// (a session's files, the list of sessions), a default session per MCP
// connection so that state persists with no id juggling, progress
// notifications while code runs, and the two transports: stdio (`airlock
// mcp`) and streamable HTTP (/mcp on `airlock serve`), both on the official
// Go SDK; and the stdio bridge to a remote server's /mcp (`airlock mcp
// --url`), which holds no state of its own.
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
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

// Options configure the MCP server.
type Options struct {
	// Client returns the API client for a call; header is the MCP
	// request's HTTP header (nil over stdio), whose Authorization the
	// client must carry.
	Client func(header http.Header) *client.Client
	// Ender, when set, ends the sessions of a connection that closed: a
	// client acting for the server itself, since the caller's key that
	// made them may have been revoked since, and a session must not live
	// on until its idle timeout for that. Nil: the connection's Client.
	Ender *client.Client
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
	// Languages are the languages sessions run, the default first, and
	// Managers the language each package manager installs into: the
	// language table's (package runtimes), given by the composition root.
	Languages []string
	Managers  map[string]string
	// Content lists the blocks tool results carry besides text
	// (mcp.content: config.MCPContent); an HTTP client's ?content=
	// overrides it.
	Content []string
	// Durable: the server's own /mcp, whose connections end with it
	// while the sessions create_session and fork_session made are paused
	// with the server's other sessions (persistence): they are marked
	// (DurableKey) for the next start to adopt (Shutdown, Adopt).
	Durable bool
	// Pod is the server's name in a cluster (empty: not one): Adopt
	// takes in its own paused sessions only.
	Pod string
	// MaxQueued bounds the execute_code calls of one connection that
	// wait for one session (0: DefaultMaxQueued).
	MaxQueued int
	Log       *slog.Logger
}

// DefaultMaxQueued is how many execute_code calls of a connection may
// wait for the same session (agents call tools in parallel).
const DefaultMaxQueued = 16

// Server is airlock's MCP server: one SDK server, and the sessions its
// connections opened.
type Server struct {
	o   Options
	srv *mcp.Server

	// mu guards conns, shut, orphans and swept; no connection's lock is
	// taken under it.
	mu      sync.Mutex
	conns   map[*mcp.ServerSession]*connection
	shut    bool           // CloseAll or Shutdown ran: no connection may open sessions
	closing sync.WaitGroup // connections whose sessions are being ended
	// orphans are the paused sessions of the last run's connections
	// (Adopt) that no connection has named yet; sweep ends them. A
	// call that names one takes it out before it works on it (take),
	// so that the sweep cannot end it, nor leave it to no connection,
	// meanwhile.
	orphans map[string]struct{}
	sweep   *time.Timer
	swept   bool // the sweep has run: an orphan given back ends now
}

// connection is one MCP connection's state: its default session per
// language (created on first use), the sessions create_session made, and
// the turns of the executions it sends to each session. All of its
// sessions end with it.
//
// Its two locks are never held together, nor with the server's: mu
// guards sessions, created, header and closed (and is held across the
// API calls that create a session, so that one being created is in the
// maps before the connection can close); qmu guards queues.
type connection struct {
	mu       sync.Mutex
	sessions map[string]string   // the default language -> the default airlock session id
	created  map[string]struct{} // create_session's, until close_session
	header   http.Header         // the credentials that made them
	closed   bool                // ended: nothing more may be created

	qmu    sync.Mutex
	queues map[string]*queue // airlock session id -> its executions' turns
}

// instructions tell the model what the server is.
const instructions = `airlock runs code in isolated, stateful sandboxes (Linux jails with no network, unless ` +
	`create_session asks for the hosts a session may reach, within the server's policy). ` +
	`Use execute_code to run Python (default), bash or JavaScript in one sandbox: variables, imports and files persist between calls, ` +
	`and every language sees the same files (Python writes a CSV, bash reads it); ` +
	`like a notebook; its result lists the files it wrote in /workspace (read_file reads them) and says what it displayed. ` +
	`Use run_command for shell commands in the same sandbox, and the file tools to move small files in and out ` +
	`(large files go through the HTTP files API). Without session_id every tool uses this connection's default session.`

// New returns the MCP server.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	s := &Server{o: o, conns: map[*mcp.ServerSession]*connection{}, orphans: map[string]struct{}{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock code sandbox", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Log,
		// No logging capability: the server sends no log messages.
		Capabilities: &mcp.ServerCapabilities{},
		GetSessionID: o.SessionID,
	})
	s.addTools()
	s.addDurableTools()
	s.addInstallTool()
	s.addResources()
	return s
}

// SDK is the underlying SDK server (for Go tests' in-memory transports).
func (s *Server) SDK() *mcp.Server { return s.srv }

// RunStdio serves one client on stdin and stdout until it leaves (end of
// input) or ctx ends (a signal: how clients stop a stdio server, so not a
// failure), and returns once every session the client opened has ended,
// since the process exits right after.
func (s *Server) RunStdio(ctx context.Context) error {
	// Not the SDK's Run, which logs an error when ctx ends.
	ss, err := s.srv.Connect(ctx, &mcp.StdioTransport{}, nil)
	if err != nil {
		return err
	}
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case err = <-closed:
	case <-ctx.Done():
		ss.Close()
		<-closed
		err = nil
	}
	s.CloseAll()
	return err
}

// CloseAll ends the sessions of every connection, returns once they have
// ended (or failed to), and lets no connection open more.
func (s *Server) CloseAll() { s.closeAll(false) }

// closeAll ends every connection (CloseAll, Shutdown: keep leaves the
// sessions they made to the server's shutdown) and those that closed
// just before, and lets no connection open more.
func (s *Server) closeAll(keep bool) {
	s.mu.Lock()
	s.shut = true
	if s.sweep != nil {
		s.sweep.Stop()
	}
	// Taken out at once: their close ends nothing more.
	conns := make([]*connection, 0, len(s.conns))
	for ss, c := range s.conns {
		conns = append(conns, c)
		delete(s.conns, ss)
	}
	s.closing.Add(len(conns))
	s.mu.Unlock()
	for _, c := range conns {
		s.endConnection(c, keep)
	}
	s.closing.Wait()
}

// conn is the state of the connection a request came on.
func (s *Server) conn(ss *mcp.ServerSession) *connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[ss]
	if c == nil {
		c = &connection{sessions: map[string]string{}, created: map[string]struct{}{}, queues: map[string]*queue{}, closed: s.shut}
		if c.closed {
			return c
		}
		s.conns[ss] = c
		// Its sessions end with the connection. (The SDK has no close
		// hook: Wait returns once the connection is closed.)
		go func() {
			ss.Wait()
			s.closeConnection(ss)
		}()
	}
	return c
}

// closeConnection ends the sessions of a connection that closed.
func (s *Server) closeConnection(ss *mcp.ServerSession) {
	s.mu.Lock()
	c := s.conns[ss]
	delete(s.conns, ss)
	if c != nil {
		s.closing.Add(1)
	}
	s.mu.Unlock()
	if c != nil {
		s.endConnection(c, false)
	}
}

// endConnection ends the connection c, taken out of s.conns (and counted
// in s.closing, which it marks done): nothing more may be created on it,
// and its sessions end, its default ones and, unless keep, those it
// made.
func (s *Server) endConnection(c *connection, keep bool) {
	defer s.closing.Done()
	// A session being created holds c.mu until it is in the maps.
	c.mu.Lock()
	c.closed = true
	ids := make([]string, 0, len(c.sessions)+len(c.created))
	for _, id := range c.sessions {
		ids = append(ids, id)
	}
	if !keep {
		for id := range c.created {
			ids = append(ids, id)
		}
	}
	header := c.header
	c.sessions, c.created = map[string]string{}, map[string]struct{}{}
	c.mu.Unlock()
	s.end(header, ids)
}

// named readies the session id a tool call names: one the last run's
// connections made is adopted (Adopt), which resumes it, and info is
// what that resume answered; nil for any other (left as it is: a
// paused one resumes itself, auto_resume).
func (s *Server) named(ctx context.Context, req *mcp.CallToolRequest, api *client.Client, id string) (info *apitype.Session, note string, err error) {
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, "", nil
	}
	return s.adopt(ctx, api, c, id, header(req.Extra))
}

// errClosing refuses work on a connection that is ending.
var errClosing = fmt.Errorf("%w: the MCP connection is closing; open a new one", errdefs.ErrUnavailable)

// header is the HTTP header of a request (nil over stdio).
func header(extra *mcp.RequestExtra) http.Header {
	if extra == nil {
		return nil
	}
	return extra.Header
}

// session resolves the session a tool call works in: the one named, or
// the connection's default session, created if it has none (or if it
// ended: said in note). The default session is one sandbox for every
// language: code in another language runs in a context of it, beside
// the same files. A paused session is resumed (the sessions MCP makes
// resume themselves, auto_resume; here, so that note says what came
// back); one the last run's connections made is adopted (Adopt).
func (s *Server) session(ctx context.Context, req *mcp.CallToolRequest, api *client.Client, id string) (sid, note string, err error) {
	if id != "" {
		if err := sessionArg(id); err != nil {
			return id, "", err
		}
		_, note, err := s.named(ctx, req, api, id)
		return id, note, err
	}
	var lang string
	if len(s.o.Languages) > 0 {
		lang = s.o.Languages[0]
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", "", errClosing
	}
	if old := c.sessions[lang]; old != "" {
		info, err := api.Session(ctx, old)
		if err == nil && info.State == apitype.StatePaused {
			// Paused by pause_session, or by a restart of the server
			// this connection reaches through its API (airlock mcp).
			if info, err = api.ResumeSession(ctx, old); err != nil {
				return "", "", err
			}
			return old, "this connection's default session was paused and is resumed: " + restoredNote(info), nil
		}
		if err == nil && info.State != apitype.StateEnded {
			return old, "", nil
		}
		if client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound && err != nil {
			return "", "", err
		}
		note = "the previous default session ended"
		if e := (*client.Error)(nil); err != nil && asClientError(err, &e) && e.Message != "" {
			note += " (" + strings.TrimPrefix(e.Message, "session ended: ") + ")"
		}
		note += "; a new one was started, and its state is empty"
	}
	info, err := api.CreateSession(identity.WithOwnMetadata(ctx, s.metadata()), apitype.CreateSessionRequest{Language: lang, AutoResume: true})
	if err != nil {
		return "", "", err
	}
	c.sessions[lang] = info.ID
	c.header = header(req.Extra)
	return info.ID, note, nil
}
