package mcp

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/identity"
)

// DurableKey is the metadata key that marks a session an MCP connection
// of the server's own /mcp made (Options.Durable): after a restart, the
// server finds those its shutdown paused (Adopt).
const DurableKey = "airlock.mcp"

// durableValue is DurableKey's value.
const durableValue = "connection"

// metadata is the metadata of a session this server makes.
func (s *Server) metadata() map[string]string {
	if !s.o.Durable {
		return nil
	}
	return map[string]string{DurableKey: durableValue}
}

// Shutdown readies the connections for the end of the server they run
// in, which they do not outlive: an MCP session id is this process's
// alone (the SDK keeps its sessions in memory, and a restarted server
// answers an old Mcp-Session-Id 404, upon which the client initializes
// a new MCP session). It ends their default sessions, which no later
// connection could name (a new one gets a new default session), and
// leaves the sessions create_session and fork_session made, whose ids
// the model holds, to the server's own shutdown: with persistence it
// pauses them as every other session, and a tool call of a new
// connection that names one resumes it (Adopt). No connection opens a
// session after it.
func (s *Server) Shutdown() { s.closeAll(true) }

// end ends sessions of a connection (header: its credentials) that
// closed or whose server stops.
func (s *Server) end(header http.Header, ids []string) {
	api := s.o.Ender
	if api == nil {
		api = s.o.Client(header)
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := api.DeleteSession(ctx, id); err != nil && client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound {
			s.o.Log.Warn("mcp: ending a session of a closed connection", "session", id, "err", err)
		}
		cancel()
	}
}

// Adopt takes in, at a server's start, the sessions that connections of
// its earlier run made (DurableKey) and that its end paused: their
// connections are gone with it. A tool call of any connection that names
// one (with the caller's credentials: the API decides whether it may)
// resumes it (pause_session and fork_session leave it paused: claim) and
// makes it that connection's, ending with it as the sessions it made do. One that no connection has named within grace and
// is still paused then ends, so that no session is left paused, holding
// its tenant's quota, with no connection that would end it. Those of
// other servers of a cluster (Options.Pod) are theirs to adopt.
func (s *Server) Adopt(ctx context.Context, grace time.Duration) error {
	api := s.o.Ender
	if api == nil {
		return nil
	}
	list, err := api.SessionsWhere(ctx, apitype.SessionFilter{States: []string{apitype.StatePaused}, Metadata: map[string]string{DurableKey: durableValue}})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range list {
		if sess.Pod != "" && s.o.Pod != "" && sess.Pod != s.o.Pod {
			continue
		}
		if p := sess.Paused; p == nil || (!p.ByShutdown && p.Recovered == "") {
			// Paused on purpose (pause_session, a client, a
			// timeout): not its connection's end, left as any.
			continue
		}
		s.orphans[sess.ID] = struct{}{}
	}
	if len(s.orphans) > 0 && !s.shut {
		s.o.Log.Info("mcp: sessions of connections of the last run are paused; those not named again end", "sessions", len(s.orphans), "after", grace)
		s.sweep = time.AfterFunc(grace, s.endOrphans)
	}
	return nil
}

// endOrphans ends the sessions Adopt took in that no connection named
// and that are still paused.
func (s *Server) endOrphans() {
	s.mu.Lock()
	s.swept = true
	ids := make([]string, 0, len(s.orphans))
	for id := range s.orphans {
		ids = append(ids, id)
	}
	s.orphans = map[string]struct{}{}
	s.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		info, err := s.o.Ender.Session(ctx, id)
		if err == nil && info.State == apitype.StatePaused {
			s.o.Log.Info("mcp: a paused session of a connection of the last run was not named again: it ends", "session", id)
			// Only if it is paused still: a resume in between (a
			// REST client's) keeps it running (409).
			err = s.o.Ender.DeletePausedSession(ctx, id)
		}
		if client.StatusOf(err) == http.StatusConflict {
			s.o.Log.Info("mcp: a session of a connection of the last run was resumed meanwhile: it runs on", "session", id)
			err = nil
		}
		if err != nil && client.StatusOf(err) != http.StatusGone && client.StatusOf(err) != http.StatusNotFound {
			s.o.Log.Warn("mcp: ending a session of a connection of the last run", "session", id, "err", err)
		}
		cancel()
	}
}

// take takes session id out of the orphans, if Adopt took it in and no
// other call has taken it since, for a call that names it: from then on
// the sweep leaves it, while the call works on it (a resume, a pause, a
// fork: seconds). The call then keeps it (keep) or gives it back
// (release). Taken only once the call is done, a sweep in between
// found it gone or running and left it, and the claim found it no
// longer an orphan: nobody's, it outlived the connection that named it.
func (s *Server) take(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, orphan := s.orphans[id]
	delete(s.orphans, id)
	return orphan
}

// keep makes session id, taken (take), the connection c's (its mu
// held): it ends with c from then on.
func keep(c *connection, id string, h http.Header) {
	c.created[id] = struct{}{}
	if c.header == nil {
		c.header = h
	}
}

// release gives session id, taken (take) by a call that failed on it
// or whose connection closed meanwhile, back to the sweep; if the sweep
// has run already, it ends now (if it is paused still).
func (s *Server) release(id string) {
	s.mu.Lock()
	s.orphans[id] = struct{}{}
	now := s.swept && !s.shut
	s.mu.Unlock()
	if now {
		s.endOrphans()
	}
}

// adopt makes session id, if Adopt took it in, the connection c's (its
// mu held): it resumes it now, so that the result can say what came
// back (note), and returns what the resume answered (nil: id was not
// one Adopt took in, and is left as it is).
func (s *Server) adopt(ctx context.Context, api *client.Client, c *connection, id string, h http.Header) (info *apitype.Session, note string, err error) {
	if !s.take(id) {
		return nil, "", nil
	}
	info, err = api.ResumeSession(ctx, id)
	if err != nil {
		// The caller's: not adopted (another tenant's gets the API's
		// 404; a broken image is kept for inspection).
		s.release(id)
		return nil, "", err
	}
	keep(c, id, h)
	return info, "session " + id + " was paused when the server restarted and is resumed: " + restoredNote(info), nil
}

// claim takes session id (take) for a call that names it and works on
// it as it is, paused, with the caller's credentials (pause_session,
// fork_session): named, it is that connection's, not resumed for it.
// done, once the call's work is over, keeps it if the work did (ok) and
// the connection is open still, else gives it back to the sweep.
func (s *Server) claim(req *mcp.CallToolRequest, id string) (done func(ok bool)) {
	if !s.take(id) {
		return func(bool) {}
	}
	return func(ok bool) {
		c := s.conn(req.Session)
		c.mu.Lock()
		ok = ok && !c.closed
		if ok {
			keep(c, id, header(req.Extra))
		}
		c.mu.Unlock()
		if !ok {
			s.release(id)
		}
	}
}

// restoredNote says what a resume brought back, for the model.
func restoredNote(info *apitype.Session) string {
	var b strings.Builder
	switch info.Restored {
	case "memory":
		b.WriteString("its files and memory (variables, imports) are as they were")
	default:
		b.WriteString("its files are as they were, but its interpreter started afresh: variables and imports are gone, run the setup code again")
	}
	if info.RestoredReason != "" {
		b.WriteString(" (" + info.RestoredReason + ")")
	}
	return b.String()
}

// PauseIn is pause_session's input.
type PauseIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"the session to pause; without it, this connection's default session"`
	Restores  string `json:"restores,omitempty" jsonschema:"files: keep the files only, even where memory could be kept; memory: keep the memory too, or fail saying why; default: what the session keeps"`
}

// ResumeIn is resume_session's input.
type ResumeIn struct {
	SessionID string `json:"session_id" jsonschema:"the paused session to resume"`
}

// ForkIn is fork_session's input.
type ForkIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"the session (live or paused) to copy; without it, this connection's default session"`
}

// StateOut is the state of a session pause_session, resume_session,
// fork_session or list_sessions describes.
type StateOut struct {
	SessionID      string `json:"session_id"`
	Language       string `json:"language"`
	State          string `json:"state" jsonschema:"idle, busy or paused"`
	Restores       string `json:"restores,omitempty" jsonschema:"what a pause keeps (files, or memory too), or for a paused session what a resume brings back"`
	Restored       string `json:"restored,omitempty" jsonschema:"what the last resume or the fork brought back: files (the interpreter started afresh) or memory"`
	RestoredReason string `json:"restored_reason,omitempty" jsonschema:"why less came back than the pause kept"`
	MemoryError    string `json:"memory_error,omitempty" jsonschema:"why a pause kept the files only"`
	Recovered      string `json:"recovered,omitempty" jsonschema:"for a session the server's end left paused: what it recovered"`
	PausedAt       string `json:"paused_at,omitempty"`
	ExpiresAt      string `json:"expires_at,omitempty" jsonschema:"a paused session is deleted at this time unless resumed"`
	Default        bool   `json:"default,omitempty" jsonschema:"this connection's default session"`
}

// SessionsOut is list_sessions' result.
type SessionsOut struct {
	Sessions []StateOut `json:"sessions"`
}

func stateOut(info *apitype.Session) StateOut {
	out := StateOut{SessionID: info.ID, Language: info.Language, State: info.State, Restores: info.Restores, Restored: info.Restored, RestoredReason: info.RestoredReason}
	if p := info.Paused; p != nil {
		out.MemoryError, out.Recovered = p.MemoryError, p.Recovered
		out.PausedAt, out.ExpiresAt = p.PausedAt.UTC().Format(time.RFC3339), p.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return out
}

func (s *Server) addDurableTools() {
	no := false
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "pause_session",
		Title: "Pause a session",
		Description: "Pauses a session between tasks: its files (and, where the server keeps it, its memory: variables, imports) are " +
			"stored on the server and its sandbox is freed. Any tool call that names the session afterwards resumes it first " +
			"(or resume_session); a paused session is deleted after a time (expires_at) unless resumed. The result says what a " +
			"resume will bring back (restores: files, or memory). Sessions also pause by themselves when the server restarts.",
		InputSchema: withEnum[PauseIn]("restores", []any{"files", "memory"}),
		Annotations: &mcp.ToolAnnotations{Title: "Pause a session", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, s.pauseSession)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "resume_session",
		Title: "Resume a paused session",
		Description: "Resumes a paused session into a new sandbox and says what came back: its files always; its memory " +
			"(variables, imports) when restored is memory, else its interpreter starts afresh and setup code must run again. " +
			"Other tools resume a paused session they name by themselves; this one says what was restored before any code runs.",
		Annotations: &mcp.ToolAnnotations{Title: "Resume a session", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, s.resumeSession)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "fork_session",
		Title: "Fork a session",
		Description: "Creates a new session that is a copy of a live or paused one (its files, settings and, where its pauses keep " +
			"memory, its variables), to try several approaches from one state; the original goes on as it was. Returns the new " +
			"session_id; the copy ends with this connection, like create_session's.",
		Annotations: &mcp.ToolAnnotations{Title: "Fork a session", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.forkSession)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "list_sessions",
		Title: "List sessions",
		Description: "Lists the sessions you may use, live and paused (state), with what a paused one will bring back on resume. " +
			"Naming a paused session in any tool resumes it.",
		Annotations: &mcp.ToolAnnotations{Title: "List sessions", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listSessions)
}

// target is the session pause_session or fork_session acts on: the one
// named, or the connection's default session as it is (neither created
// nor resumed for it).
func (s *Server) target(req *mcp.CallToolRequest, id string) (string, error) {
	if id != "" {
		return id, sessionArg(id)
	}
	var lang string
	if len(s.o.Languages) > 0 {
		lang = s.o.Languages[0]
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if id = c.sessions[lang]; id == "" {
		return "", argError("this connection has no default session yet (it starts with the first execute_code); name a session_id")
	}
	return id, nil
}

func (s *Server) pauseSession(ctx context.Context, req *mcp.CallToolRequest, in PauseIn) (*mcp.CallToolResult, StateOut, error) {
	var out StateOut
	if in.Restores != "" && in.Restores != "files" && in.Restores != "memory" {
		return failed(argError("restores must be files or memory, not %q", in.Restores)), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, err := s.target(req, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	// Named (a session of the last run's connections): this
	// connection's now, kept paused as asked, not swept.
	done := s.claim(req, id)
	info, err := api.PauseSessionWith(ctx, id, apitype.PauseRequest{Restores: in.Restores})
	done(err == nil)
	if err != nil {
		return failed(err), out, nil
	}
	out = stateOut(info)
	msg := fmt.Sprintf("paused session %s: a resume brings back its files", id)
	if info.Restores == "memory" && (info.Paused == nil || info.Paused.MemoryError == "") {
		msg += " and its memory (variables, imports)"
	} else {
		msg += "; its interpreter will start afresh (variables and imports are not kept)"
		if out.MemoryError != "" {
			msg += ": " + out.MemoryError
		}
	}
	if out.ExpiresAt != "" {
		msg += "; kept until " + out.ExpiresAt
	}
	msg += ". Any tool naming it resumes it."
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, out, nil
}

func (s *Server) resumeSession(ctx context.Context, req *mcp.CallToolRequest, in ResumeIn) (*mcp.CallToolResult, StateOut, error) {
	var out StateOut
	if in.SessionID == "" {
		return failed(argError("session_id is required: the session to resume (list_sessions lists them)")), out, nil
	}
	if err := sessionArg(in.SessionID); err != nil {
		return failed(err), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id := in.SessionID
	// A session of the last run's connections is adopted, which resumes
	// it: resumed once, not again.
	info, note, err := s.named(ctx, req, api, id)
	if err == nil && info == nil {
		info, err = api.ResumeSession(ctx, id)
	}
	if err != nil {
		return failed(err), out, nil
	}
	out = stateOut(info)
	msg := "session " + id + " is live: " + restoredNote(info)
	if note != "" {
		msg = note
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, out, nil
}

func (s *Server) forkSession(ctx context.Context, req *mcp.CallToolRequest, in ForkIn) (*mcp.CallToolResult, StateOut, error) {
	var out StateOut
	api := s.o.Client(header(req.Extra))
	id, err := s.target(req, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return failed(errClosing), out, nil
	}
	// The original, if it was a session of the last run's connections,
	// is this connection's (named: claimed, left paused), taken before
	// the fork so that the sweep leaves it meanwhile.
	orphan := s.take(id)
	// Marked as create_session's are (a fork does not inherit its
	// source's marks).
	info, err := api.ForkSession(identity.WithOwnMetadata(ctx, s.metadata()), id)
	if err != nil {
		if orphan {
			s.release(id)
		}
		return failed(err), out, nil
	}
	// It ends with the connection, like create_session's; so does the
	// original if it was an orphan.
	keep(c, info.ID, header(req.Extra))
	if orphan {
		keep(c, id, header(req.Extra))
	}
	out = stateOut(info)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("forked session %s into %s (pass it as session_id): %s", id, info.ID, restoredNote(info))}}}, out, nil
}

func (s *Server) listSessions(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SessionsOut, error) {
	out := SessionsOut{Sessions: []StateOut{}}
	list, err := s.o.Client(header(req.Extra)).Sessions(ctx)
	if err != nil {
		return failed(err), out, nil
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	defaults := map[string]bool{}
	for _, id := range c.sessions {
		defaults[id] = true
	}
	c.mu.Unlock()
	var b strings.Builder
	for i := range list {
		if list[i].State == apitype.StateEnded {
			continue
		}
		o := stateOut(&list[i])
		o.Default = defaults[o.SessionID]
		out.Sessions = append(out.Sessions, o)
		fmt.Fprintf(&b, "%s %s %s", o.SessionID, o.Language, o.State)
		if o.Default {
			b.WriteString(" (this connection's default)")
		}
		if o.State == apitype.StatePaused {
			fmt.Fprintf(&b, ", resumes with %s, kept until %s", map[bool]string{true: "its memory", false: "its files only"}[o.Restores == "memory" && o.MemoryError == ""], o.ExpiresAt)
		}
		b.WriteString("\n")
	}
	if len(out.Sessions) == 0 {
		b.WriteString("no sessions\n")
	}
	text, _ := clip(b.String(), fieldCap)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}
