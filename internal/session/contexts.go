package session

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/broker"
	"airlock/internal/errdefs"
	"airlock/internal/packages"
	"airlock/internal/runtimes"
)

// A session is one sandbox holding one or more code contexts: each an
// interpreter with its own state and working directory, all sharing the
// sandbox's files, limits, network, commands and quotas (E2B's contexts,
// Jupyter's kernels on one machine). The default context is the
// sandbox's first runtime, the one its pool kept warm; another language's
// starts inside the same sandbox the first time it is asked for, as do
// the contexts clients create. Executions in different contexts may run
// at once; one context runs one at a time.

// codeContext is one of a session's interpreters.
type codeContext struct {
	id      string
	lang    runtimes.Runtime
	cwd     string
	created time.Time
	// it is its runtime; beside is the same runtime when it was started
	// beside the sandbox's first (nil: the session's default context,
	// whose end is the session's).
	it     Interp
	beside Beside
	// userEnv is the client's environment for this context, on top of
	// the session's.
	userEnv map[string]string
	// execMu: one execution at a time in this context (TryLock).
	execMu sync.Mutex

	// Under the session's mu: the running execution, the runtime's
	// environment (replaced, never changed in place) and the variables
	// it has yet to take (a network given later), why it ended, how many
	// executions it ran, and whether its runtime was freed.
	cur             *execution
	env, envPending map[string]string
	end             apitype.End
	execs           int
	closed          bool
}

// contextPrefix starts the ids of the contexts clients create; a
// language's default context is named after the language.
const contextPrefix = "ctx"

// contextOutput routes a context's runtime's stdout and stderr to the
// execution running in it. Output while none runs (a background
// thread's), and output past the execution's max_output, is dropped
// unread.
type contextOutput struct {
	s *Session
	c *codeContext
}

func (o contextOutput) current() *execution {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	return o.c.cur
}

func (o contextOutput) Write(p []byte, isErr bool) {
	if ex := o.current(); ex != nil {
		ex.output(p, isErr)
	}
}

func (o contextOutput) Keeps(isErr bool) bool {
	ex := o.current()
	return ex != nil && ex.keeps(isErr)
}

func (o contextOutput) Dropped(n int, isErr bool) {
	if ex := o.current(); ex != nil {
		ex.dropped(n, isErr)
	}
}

// CreateContext starts a new code context in the session's sandbox.
func (s *Session) CreateContext(ctx context.Context, req apitype.CreateContextRequest) (*apitype.CodeContext, error) {
	rt := s.lang
	if req.Language != "" {
		var err error
		if rt, err = s.m.lookup(req.Language); err != nil {
			return nil, err
		}
	}
	cwd, err := s.contextDir(req.Cwd)
	if err != nil {
		return nil, err
	}
	if err := ValidateEnv(req.Env, s.m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	// A pause holds ctxStart: the context would be lost on resume.
	if err := s.notPausing(); err != nil {
		return nil, err
	}
	s.ctxStart.Lock()
	defer s.ctxStart.Unlock()
	s.mu.Lock()
	s.ctxNext++
	id := contextPrefix + strconv.Itoa(s.ctxNext)
	s.mu.Unlock()
	c, err := s.startContext(ctx, id, rt, cwd, req.Env)
	if err != nil {
		return nil, err
	}
	info := s.contextInfo(c)
	return &info, nil
}

// contextDir is the directory a context's code runs in: cwd named as a
// command's (commandDir); one beneath /workspace must exist, so that the
// client learns a mistyped name at once.
func (s *Session) contextDir(cwd string) (string, error) {
	dir, err := commandDir(cwd)
	if err != nil {
		return "", err
	}
	if rel, ok := strings.CutPrefix(dir, "/workspace"); ok {
		rel = strings.TrimPrefix(rel, "/")
		if rel == "" {
			return dir, nil
		}
		e, err := s.workspace().Stat(rel)
		if err != nil || e.Type != "dir" {
			return "", fmt.Errorf("%w: cwd %q is not a directory in /workspace; create it first", errdefs.ErrInvalidArgument, truncateID(cwd))
		}
	}
	return path.Clean(dir), nil
}

// defContext is the session's default context (a restart replaces it).
func (s *Session) defContext() *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.def
}

// startContext starts a context's runtime beside the sandbox's first and
// registers it; the caller holds ctxStart.
func (s *Session) startContext(ctx context.Context, id string, rt runtimes.Runtime, cwd string, userEnv map[string]string) (_ *codeContext, err error) {
	if end := s.End(); !end.Zero() {
		return nil, gone(end)
	}
	// Every context runs on the session's root: a template's must have
	// the language's interpreter (the host's root has every one).
	if s.template != "" {
		if err := s.tmplMeta.Runs(rt.Lang); err != nil {
			return nil, err
		}
		rt.Binary = s.tmplMeta.Runtimes[rt.Lang]
	}
	s.mu.Lock()
	n := len(s.ctxs)
	if old := s.ctxs[id]; old != nil {
		n-- // replaced (an ended language default)
	}
	s.mu.Unlock()
	if n >= s.m.cfg.Server.MaxSessionContexts {
		return nil, fmt.Errorf("%w: the session has %d code contexts, the maximum (server.max_session_contexts); delete one first", errdefs.ErrLimit, n)
	}
	begun := time.Now()
	it, err := s.inst.StartInterp(ctx, rt)
	if err != nil {
		if end := s.End(); !end.Zero() {
			return nil, gone(end)
		}
		return nil, err
	}
	c := &codeContext{id: id, lang: rt, cwd: cwd, created: time.Now(), it: it, beside: it, userEnv: userEnv}
	defer func() {
		if err != nil {
			it.Kill()
			it.Close()
		}
	}()
	if err := it.Attach(contextOutput{s, c}); err != nil {
		return nil, err
	}
	if c.env, err = s.contextEnv(rt, id, userEnv); err != nil {
		return nil, err
	}
	if err := it.Configure(ctx, c.env, cwd); err != nil {
		if end := s.End(); !end.Zero() {
			return nil, gone(end)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.m.log.Warn("a context's runtime did not take its configuration", "session", s.id, "language", rt.Lang, "err", err)
		return nil, fmt.Errorf("%w: the %s interpreter could not start in %s (it must be a directory the sandbox user can enter)", errdefs.ErrInvalidArgument, rt.Lang, cwd)
	}
	s.mu.Lock()
	if !s.end.Zero() {
		end := s.end
		s.mu.Unlock()
		return nil, gone(end)
	}
	old := s.ctxs[id]
	s.ctxs[id] = c
	if old == nil {
		s.ctxOrder = append(s.ctxOrder, id)
	}
	if old != nil && old == s.def {
		s.def = c
	}
	s.mu.Unlock()
	switch {
	case old != nil && old.beside == nil:
		// The sandbox's first runtime (a restarted default context): the
		// sandbox lives on without it.
		s.inst.RetireFirst()
		s.mu.Lock()
		old.closed = true
		old.end = apitype.End{Code: apitype.EndDeleted, Reason: "the context was restarted"}
		s.mu.Unlock()
	case old != nil:
		s.freeContext(old)
	}
	s.m.log.Info("context started", "session", s.id, "context", id, "language", rt.Lang, "ms", time.Since(begun).Milliseconds())
	go s.watchContext(c)
	return c, nil
}

// contextEnv is the environment of a new context's runtime: the
// language's in the sandbox, the session's client environment, the
// context's own, and the proxy settings of the session's network.
func (s *Session) contextEnv(rt runtimes.Runtime, id string, userEnv map[string]string) (map[string]string, error) {
	env := sessionEnv(rt, s.limits, s.userEnv)
	maps.Copy(env, userEnv)
	if g := s.egressGate(); g != nil {
		env = s.m.proxyEnv(env, g.Policy())
	}
	s.packagesEnv(rt, env)
	// What the session's first context got for its tools and secrets,
	// every context gets (a second context once had neither).
	if s.toolSession() != nil {
		env = toolsEnv(env)
		env[broker.ContextEnv] = id
	}
	user := maps.Clone(s.userEnv)
	if user == nil {
		user = map[string]string{}
	}
	maps.Copy(user, userEnv)
	return secretsEnv(env, user, s.secrets)
}

// packagesEnv puts the pip packages installed in the session on the path
// of a new interpreter of rt's (a context started, restarted or restored
// after an install), as the install did for the interpreter it ran in.
func (s *Session) packagesEnv(rt runtimes.Runtime, env map[string]string) bool {
	if rt.PackageManager != packages.Pip || !packages.Installed(s.workspace()) {
		return false
	}
	packages.ProgramEnv(packages.Pip, env)
	return true
}

// watchContext marks a context ended when its runtime goes away between
// executions (an execution running in it sees that itself).
func (s *Session) watchContext(c *codeContext) {
	select {
	case <-c.beside.Done():
	case <-s.ended:
		return
	}
	end := c.beside.Ended()
	s.mu.Lock()
	if c.end.Zero() {
		c.end = end
	}
	s.mu.Unlock()
}

// endContext marks c ended for end, unless it ended before, and says
// why it ended.
func (s *Session) endContext(c *codeContext, end apitype.End) apitype.End {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.end.Zero() {
		c.end = end
	}
	return c.end
}

// contextLive is the error of an execution in c if c or its session
// ended.
func (s *Session) contextLive(c *codeContext) error {
	s.mu.Lock()
	end, cend := s.end, c.end
	s.mu.Unlock()
	switch {
	case !end.Zero():
		return gone(end)
	case !cend.Zero():
		return &ContextEndedError{ID: c.id, End: cend}
	}
	return nil
}

// tagEgressLocked tells the session's gate which execution its
// decisions are for: the one running, if exactly one is; while several
// contexts run at once, none (the decisions go to the session's end
// record). mu is held.
func (s *Session) tagEgressLocked() {
	if s.gate == nil {
		return
	}
	id, n := "", 0
	for _, c := range s.ctxs {
		if c.cur != nil {
			id, n = c.cur.id, n+1
		}
	}
	if n != 1 {
		id = ""
	}
	s.gate.SetExecution(id)
}

// freeContext kills a context's runtime and frees it once no execution
// runs in it.
func (s *Session) freeContext(c *codeContext) {
	c.beside.Kill()
	c.execMu.Lock()
	defer c.execMu.Unlock()
	s.mu.Lock()
	closed := c.closed
	c.closed = true
	s.mu.Unlock()
	if !closed {
		c.beside.Close()
	}
}

// contextFor resolves an execution's context: the one named id, the
// default context of lang (started now if it has not been, or anew if it
// ended), or the session's default.
func (s *Session) contextFor(ctx context.Context, id, lang string) (*codeContext, error) {
	var rt runtimes.Runtime
	if lang != "" {
		var err error
		if rt, err = s.m.lookup(lang); err != nil {
			return nil, err
		}
	}
	if id != "" {
		s.mu.Lock()
		c := s.ctxs[id]
		var end apitype.End
		if c != nil {
			end = c.end
		}
		s.mu.Unlock()
		switch {
		case c == nil:
			if end := s.End(); !end.Zero() {
				return nil, gone(end)
			}
			return nil, fmt.Errorf("%w: no context %q in this session", errdefs.ErrNotFound, truncateID(id))
		case lang != "" && rt.Lang != c.lang.Lang:
			return nil, fmt.Errorf("%w: context %q runs %s, not %s; name one or the other", errdefs.ErrInvalidArgument, truncateID(id), c.lang.Lang, rt.Lang)
		case !end.Zero() && c.beside != nil:
			return nil, &ContextEndedError{ID: c.id, End: end}
		}
		return c, nil
	}
	if lang == "" || rt.Lang == s.lang.Lang {
		return s.defContext(), nil
	}
	s.mu.Lock()
	c := s.ctxs[rt.Lang]
	live := c != nil && c.end.Zero()
	s.mu.Unlock()
	if live {
		return c, nil
	}
	s.ctxStart.Lock()
	defer s.ctxStart.Unlock()
	s.mu.Lock()
	c = s.ctxs[rt.Lang]
	live = c != nil && c.end.Zero()
	s.mu.Unlock()
	if live { // another request started it meanwhile
		return c, nil
	}
	return s.startContext(ctx, rt.Lang, rt, "/workspace", nil)
}

// ContextEndedError is the error of an execution in a context that
// ended (its interpreter exited or was killed) while its session lives.
type ContextEndedError struct {
	ID  string
	End apitype.End
}

func (e *ContextEndedError) Error() string {
	return fmt.Sprintf("context %s ended: %s; delete it and create another (or name its language for a new default context)", truncateID(e.ID), e.End.Reason)
}
func (e *ContextEndedError) Unwrap() error { return errdefs.ErrConflict }

// Contexts describes the session's code contexts, oldest first.
func (s *Session) Contexts() ([]apitype.CodeContext, error) {
	if end := s.End(); !end.Zero() {
		return nil, gone(end)
	}
	s.mu.Lock()
	all := make([]*codeContext, 0, len(s.ctxOrder))
	for _, id := range s.ctxOrder {
		all = append(all, s.ctxs[id])
	}
	s.mu.Unlock()
	out := make([]apitype.CodeContext, 0, len(all))
	for _, c := range all {
		out = append(out, s.contextInfo(c))
	}
	return out, nil
}

// contextInfo describes c.
func (s *Session) contextInfo(c *codeContext) apitype.CodeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := apitype.CodeContext{ID: c.id, Language: c.lang.Lang, Cwd: c.cwd, Default: c == s.def,
		State: apitype.ContextIdle, CreatedAt: c.created.UTC(), Executions: c.execs}
	if ex := c.cur; ex != nil {
		info.State = apitype.ContextBusy
		head, _ := ex.codeHead()
		info.Current = &apitype.CurrentExecution{ID: ex.id, StartedAt: ex.started.UTC(), CodeHead: head, CodeBytes: len(ex.code)}
	}
	end := c.end
	if !s.end.Zero() && end.Zero() {
		end = s.end
	}
	if !end.Zero() {
		info.State, info.EndReason, info.EndCode = apitype.ContextEnded, end.Reason, end.Code
	}
	return info
}

// DeleteContext ends a code context: its interpreter and every process it
// started are killed, and an execution running in it ends. The session's
// default context ends only with the session.
func (s *Session) DeleteContext(id string) error {
	if end := s.End(); !end.Zero() {
		return gone(end)
	}
	s.mu.Lock()
	c := s.ctxs[id]
	switch {
	case c == nil:
		s.mu.Unlock()
		return fmt.Errorf("%w: no context %q in this session", errdefs.ErrNotFound, truncateID(id))
	case c == s.def:
		s.mu.Unlock()
		return fmt.Errorf("%w: context %q is the session's default: it ends with the session (DELETE the session)", errdefs.ErrConflict, truncateID(id))
	}
	delete(s.ctxs, id)
	for i, o := range s.ctxOrder {
		if o == id {
			s.ctxOrder = append(s.ctxOrder[:i:i], s.ctxOrder[i+1:]...)
			break
		}
	}
	if c.end.Zero() {
		c.end = apitype.End{Code: apitype.EndDeleted, Reason: "the context was deleted"}
	}
	s.mu.Unlock()
	s.freeContext(c)
	return nil
}

// InterruptContext interrupts the execution running in context id, if
// any, and reports whether there was one.
func (s *Session) InterruptContext(id string) (bool, error) {
	if end := s.End(); !end.Zero() {
		return false, gone(end)
	}
	s.mu.Lock()
	c := s.ctxs[id]
	var ex *execution
	if c != nil {
		ex = c.cur
	}
	s.mu.Unlock()
	if c == nil {
		return false, fmt.Errorf("%w: no context %q in this session", errdefs.ErrNotFound, truncateID(id))
	}
	return ex != nil && ex.interruptNow(""), nil
}

// besides are the contexts started beside the sandbox's first, for the
// session's teardown.
func (s *Session) besides() []*codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*codeContext
	for _, c := range s.ctxs {
		if c.beside != nil && !c.closed {
			c.closed = true
			out = append(out, c)
		}
	}
	return out
}

// Context describes one of the session's code contexts.
func (s *Session) Context(id string) (*apitype.CodeContext, error) {
	c, err := s.namedContext(id)
	if err != nil {
		return nil, err
	}
	info := s.contextInfo(c)
	return &info, nil
}

// namedContext finds the context id of a live session.
func (s *Session) namedContext(id string) (*codeContext, error) {
	if end := s.End(); !end.Zero() {
		return nil, gone(end)
	}
	s.mu.Lock()
	c := s.ctxs[id]
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w: no context %q in this session", errdefs.ErrNotFound, truncateID(id))
	}
	return c, nil
}

// RestartContext starts context id's interpreter anew, with the same id,
// language, directory and environment, and empty state (E2B's restart):
// the old interpreter, an execution running in it, and every process it
// started are killed once the new one runs. The session's default
// context too (E2B's SDKs restart it): its new interpreter runs beside
// the sandbox's first, which is ended for good; it must be idle (an
// execution in the first interpreter ends with it, and with the session).
func (s *Session) RestartContext(ctx context.Context, id string) (*apitype.CodeContext, error) {
	c, err := s.namedContext(id)
	if err != nil {
		return nil, err
	}
	if err := s.notPausing(); err != nil {
		return nil, err
	}
	s.ctxStart.Lock()
	defer s.ctxStart.Unlock()
	s.mu.Lock()
	still := s.ctxs[id] == c
	s.mu.Unlock()
	if !still {
		return nil, fmt.Errorf("%w: context %q was deleted or restarted meanwhile", errdefs.ErrConflict, truncateID(id))
	}
	if c.beside == nil {
		// No execution may start in the first interpreter from now on.
		if !c.execMu.TryLock() {
			return nil, fmt.Errorf("%w: context %q is executing code; interrupt it, then restart it", errdefs.ErrConflict, truncateID(id))
		}
		defer c.execMu.Unlock()
	}
	n, err := s.startContext(ctx, id, c.lang, c.cwd, c.userEnv)
	if err != nil {
		return nil, err
	}
	info := s.contextInfo(n)
	return &info, nil
}
