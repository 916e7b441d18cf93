package v1

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/session"
	"airlock/internal/workspace"
)

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req apitype.CreateSessionRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	sess, err := s.m.Create(r.Context(), req)
	if err != nil {
		fail(w, err)
		return
	}
	s.created(w, r, sess)
}

// created answers a session just made (created or forked): listed in the
// directory first, if there is one.
func (s *Server) created(w http.ResponseWriter, r *http.Request, sess *session.Session) {
	info := sess.Info()
	if s.Directory != nil {
		// Listed on every server before the client hears of it; a
		// session the directory cannot hold is ended (its end gives
		// the quota's place back), never left half-made.
		if err := s.Directory.Register(r.Context(), info); err != nil {
			s.m.Discard(context.WithoutCancel(r.Context()), info.ID)
			fail(w, err)
			return
		}
	}
	w.Header().Set("Location", "/v1/sessions/"+sess.ID())
	httpapi.WriteJSON(w, http.StatusCreated, info)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	who, _ := identity.From(r.Context())
	f, err := sessionFilter(r.URL.Query())
	if err != nil {
		fail(w, err)
		return
	}
	var all []apitype.Session
	if s.Directory != nil {
		// Every server's sessions that share the store.
		if all, err = s.Directory.List(r.Context(), who); err != nil {
			fail(w, err)
			return
		}
	} else {
		all = s.m.List()
	}
	mine := make([]apitype.Session, 0, len(all))
	for _, sess := range all {
		if who.Sees(sess.Tenant) && f.Match(sess) {
			mine = append(mine, sess)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.SessionList{Sessions: mine})
}

// listStates are the states a listing may be filtered on; "running"
// (E2B's word) is any live one.
var listStates = []string{apitype.StateIdle, apitype.StateBusy, apitype.StatePaused, apitype.StateEnded, "running"}

// sessionFilter reads a listing's filter: state (repeated, or
// comma-separated) and metadata.KEY=VALUE (each once).
func sessionFilter(q url.Values) (apitype.SessionFilter, error) {
	var f apitype.SessionFilter
	for k, vs := range q {
		switch key, isMeta := strings.CutPrefix(k, "metadata."); {
		case k == "state":
			for _, v := range vs {
				for _, st := range strings.Split(v, ",") {
					if !slices.Contains(listStates, st) {
						return f, fmt.Errorf("%w: state %q: one of %s", errdefs.ErrInvalidArgument, httpapi.Truncate(st), strings.Join(listStates, ", "))
					}
					if st == "running" {
						f.States = append(f.States, apitype.StateIdle, apitype.StateBusy)
					} else {
						f.States = append(f.States, st)
					}
				}
			}
		case isMeta && key != "":
			if len(vs) != 1 {
				return f, fmt.Errorf("%w: %s is given %d times; a session has one value per key", errdefs.ErrInvalidArgument, httpapi.Truncate(k), len(vs))
			}
			if f.Metadata == nil {
				f.Metadata = map[string]string{}
			}
			f.Metadata[key] = vs[0]
		default:
			return f, fmt.Errorf("%w: unknown query parameter %q (state, metadata.KEY)", errdefs.ErrInvalidArgument, httpapi.Truncate(k))
		}
	}
	return f, nil
}

// session is the request's session: one of another tenant is not found;
// a paused one is resumed if it was created with auto_resume (else 409).
func (s *Server) session(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	sess, err := s.m.Reach(r.Context(), r.PathValue("id"))
	if err != nil {
		s.denied(w, r, err)
		return nil, false
	}
	return sess, true
}

// getSession describes a live or paused session (never resuming it).
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	info, err := s.m.Describe(r.Context(), r.PathValue("id"))
	if err != nil {
		s.denied(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, info)
}

// pauseSession is POST /v1/sessions/{id}/pause: its files and settings
// (and its memory, where it says restores "memory" and the body does not
// ask for "files") are kept on the server's disk and its sandbox freed
// (409 while it executes code).
func (s *Server) pauseSession(w http.ResponseWriter, r *http.Request) {
	var req apitype.PauseRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	info, err := s.m.PauseFor(r.Context(), r.PathValue("id"), req.Restores)
	if err != nil {
		s.denied(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, info)
}

// resumeSession is POST /v1/sessions/{id}/resume: a paused session made
// live again in a fresh sandbox (a live one is described as it is).
func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request) {
	var req apitype.ResumeRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	sess, err := s.m.ResumeWith(r.Context(), r.PathValue("id"), req.Restores)
	if err != nil {
		s.denied(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, sess.Info())
}

// forkSession is POST /v1/sessions/{id}/fork: a new session from a live
// or paused one's files and settings.
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.m.ForkFor(r.Context(), r.PathValue("id"))
	if err != nil {
		s.denied(w, r, err)
		return
	}
	s.created(w, r, sess)
}

// setTimeout is PUT /v1/sessions/{id}/timeout: the session's lifetime,
// again from now.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req apitype.TimeoutRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	if err := sess.SetTimeout(req.Timeout.D()); err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, sess.Info())
}

// getNetwork is GET /v1/sessions/{id}/network: the session's egress policy
// and counters ({"allow": []} for a session without network).
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	st := sess.Network()
	if st == nil {
		st = &apitype.NetworkState{Allow: []string{}}
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// putNetwork is PUT /v1/sessions/{id}/network: replace the session's
// egress policy; new lookups and connections follow it.
func (s *Server) putNetwork(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.NetworkPolicy
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	st, err := sess.SetNetwork(r.Context(), &req)
	if err != nil {
		fail(w, err)
		return
	}
	if st == nil {
		st = &apitype.NetworkState{Allow: []string{}}
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// installPackages is POST /v1/sessions/{id}/packages.
func (s *Server) installPackages(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.PackagesRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	res, err := sess.InstallPackages(r.Context(), req)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	del := s.m.DeleteFor
	switch st := r.URL.Query().Get("state"); st {
	case "":
	case apitype.StatePaused:
		// Only if it is paused still (the MCP sweep of sessions no
		// connection named): one resumed meanwhile runs on.
		del = s.m.DeletePausedFor
	default:
		fail(w, fmt.Errorf("%w: state %q: only \"paused\" (delete it only if it is paused)", errdefs.ErrInvalidArgument, httpapi.Truncate(st)))
		return
	}
	if err := del(r.Context(), r.PathValue("id")); err != nil {
		s.denied(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	// ?context= interrupts that context's execution; without it, every
	// one running.
	var running bool
	var err error
	if id := r.URL.Query().Get("context"); id != "" {
		running, err = sess.InterruptContext(id)
	} else {
		running, err = sess.Interrupt()
	}
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.InterruptResult{Interrupted: running})
}

// wantsStream reports whether the client asked for NDJSON events.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		if mt == "application/x-ndjson" || mt == "application/jsonl" {
			return true
		}
	}
	return false
}

// eventWriter streams events as NDJSON.
type eventWriter struct {
	*httpapi.Stream
	w http.ResponseWriter
}

func newEventWriter(w http.ResponseWriter) eventWriter {
	return eventWriter{httpapi.NewStream(w, "application/x-ndjson"), w}
}

func (ew eventWriter) emit(ev apitype.Event) {
	ew.Send(eventLine(ev))
}

// end finishes the stream: an error after events went out becomes a last
// "failed" event, an error before any a plain error response.
func (ew eventWriter) end(err error) {
	if err != nil && ew.Started() {
		ew.emit(failedEvent(err))
	}
	if !ew.Finish() && err != nil {
		fail(ew.w, err)
	}
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.ExecuteRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	respond(w, r, func(emit func(apitype.Event)) (any, error) { return sess.Execute(r.Context(), req, emit) })
}

func (s *Server) executeOnce(w http.ResponseWriter, r *http.Request) {
	var req apitype.OneShotRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	respond(w, r, func(emit func(apitype.Event)) (any, error) { return s.m.RunOnce(r.Context(), req, emit) })
}

func (s *Server) runProgram(w http.ResponseWriter, r *http.Request) {
	var req apitype.ProgramRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	respond(w, r, func(emit func(apitype.Event)) (any, error) { return s.m.RunProgram(r.Context(), req, emit) })
}

// respond runs an execution and answers with its result as one JSON body,
// or, when the client accepts NDJSON, streams its events as they happen.
// (The session layer gives the execution's admission back before either
// can reach the client.)
func respond(w http.ResponseWriter, r *http.Request, run func(emit func(apitype.Event)) (any, error)) {
	if !wantsStream(r) {
		res, err := run(nil)
		if err != nil {
			fail(w, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, res)
		return
	}
	ew := newEventWriter(w)
	defer func() {
		if p := recover(); p != nil {
			ew.Finish() // its writer must not outlive the handler
			panic(p)
		}
	}()
	_, err := run(ew.emit)
	ew.end(err)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	dir, err := workspace.Clean(r.URL.Query().Get("path"))
	if err != nil {
		fail(w, err)
		return
	}
	recursive, ok := boolQuery(w, r, "recursive")
	if !ok {
		return
	}
	sess.Touch()
	entries, truncated, err := sess.Files(r.Context()).List(dir, recursive)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.FileList{Path: dir, Entries: wireEntries(entries), Truncated: truncated})
}

func (s *Server) filePath(w http.ResponseWriter, r *http.Request) (*session.Session, string, bool) {
	sess, ok := s.session(w, r)
	if !ok {
		return nil, "", false
	}
	p, err := workspace.Clean(r.PathValue("path"))
	if err != nil {
		fail(w, err)
		return nil, "", false
	}
	if p == "" {
		fail(w, fmt.Errorf("%w: name a file under /workspace", errdefs.ErrInvalidArgument))
		return nil, "", false
	}
	sess.Touch()
	return sess, p, true
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sess, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	t, err := s.Transfers.Begin(w, sess, false, s.cfg.Server)
	if err != nil {
		fail(w, err)
		return
	}
	defer t.Done()
	w = t.Writer(w)
	f, e, err := sess.Files(r.Context()).Open(p)
	if err != nil {
		fail(w, err)
		return
	}
	defer f.Close()
	if err := httpapi.ServeFile(w, r, p, f, e, int64(sess.Limits().Disk)); err != nil {
		fail(w, err)
	}
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	sess, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	max := int64(s.cfg.Server.MaxFileBytes)
	if lim := int64(sess.Limits().Disk); lim < max {
		max = lim
	}
	if r.ContentLength > max {
		fail(w, fmt.Errorf("%w: the file is %d bytes, more than the limit of %d", errdefs.ErrTooLarge, r.ContentLength, max))
		return
	}
	t, err := s.Transfers.Begin(w, sess, true, s.cfg.Server)
	if err != nil {
		fail(w, err)
		return
	}
	defer t.Done()
	n, err := sess.Files(r.Context()).Write(p, t.Body(r.Body), max, 0o644)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusCreated, apitype.UploadResult{Path: p, Size: n})
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	sess, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	recursive, ok := boolQuery(w, r, "recursive")
	if !ok {
		return
	}
	if err := sess.Files(r.Context()).Remove(p, recursive); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// boolQuery reads an optional boolean query parameter; a value that is not
// one is the client's mistake, answered here.
func boolQuery(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fail(w, fmt.Errorf("%w: query parameter %s=%q: want true or false", errdefs.ErrInvalidArgument, name, v))
		return false, false
	}
	return b, true
}

// wireEntries are workspace entries as the API sends them.
func wireEntries(entries []workspace.Entry) []apitype.Entry {
	out := make([]apitype.Entry, len(entries))
	for i, e := range entries {
		out[i] = apitype.Entry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, ModTime: e.ModTime}
	}
	return out
}

// listTools is GET /v1/tools: the tools the caller's sessions may opt in
// to (the server's and its tenant's), with their argument schemas; never
// their endpoints or credentials.
func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	who, _ := identity.From(r.Context())
	httpapi.WriteJSON(w, http.StatusOK, apitype.ToolList{Tools: s.m.Broker().Describe(who.Tenant, nil)})
}

// listSecrets is GET /v1/secrets: the secrets the caller's sessions may
// opt in to (names, variables, bound hosts; never a value).
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	who, _ := identity.From(r.Context())
	httpapi.WriteJSON(w, http.StatusOK, apitype.SecretList{Secrets: s.m.SecretsFor(who.Tenant)})
}

// sessionTools is GET /v1/sessions/{id}/tools: the tools the session's
// code may call.
func (s *Server) sessionTools(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.ToolList{Tools: sess.Tools()})
}
