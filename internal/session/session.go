// Package session owns stateful sessions: one long-lived jail per session
// with a persistent interpreter, executions in it one at a time with
// per-execution timeouts, CPU limits and output caps, interrupts that keep
// the session's state, the end of a session (deleted, idle, out of memory,
// process limit, interpreter gone) and the clear error every later call
// gets, and one-shot executions in a fresh jail.
//
// It must never trust what a runtime says beyond the data it carries: an
// execution ends by the runtime's done, by the session's own timers, or by
// the jail dying, never by waiting forever; and nothing a runtime sends can
// grow the server's memory past the configured caps.
package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// Why sessions end.
const (
	EndDeleted      = "deleted"
	EndIdle         = "idle timeout"
	EndOOM          = "out of memory"
	EndPids         = "process limit reached"
	EndUnresponsive = "the interpreter did not stop after an interrupt"
	EndShutdown     = "server shut down"
	EndProtocol     = "the interpreter broke the protocol"
	EndNotReading   = "the interpreter stopped reading its requests"
	EndKilled       = "killed" // a program run airlock stopped at a limit
)

// CreateRequest asks for a new session.
type CreateRequest struct {
	Language    string            `json:"language"`
	Limits      config.Limits     `json:"limits"`
	Env         map[string]string `json:"env"`
	IdleTimeout config.Duration   `json:"timeout_idle"`
}

// Info describes a session.
type Info struct {
	ID          string          `json:"id"`
	Language    string          `json:"language"`
	State       string          `json:"state"` // idle, busy or ended
	EndReason   string          `json:"end_reason,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	LastUsedAt  time.Time       `json:"last_used_at"`
	IdleTimeout config.Duration `json:"timeout_idle"`
	Limits      config.Limits   `json:"limits"`
	Executions  int             `json:"executions"`
	// Sandbox names the session's cgroup under the server's cgroup parent,
	// for operators (and the benchmark's memory figures).
	Sandbox string `json:"sandbox"`
}

// Manager owns every session of a server.
type Manager struct {
	cfg    config.Config
	source Source
	log    *slog.Logger
	execs  chan struct{} // bounds concurrent executions, one-shot included

	mu       sync.Mutex
	sessions map[string]*Session
	ended    map[string]string // recently ended id -> reason
	endOrder []string
	creating int
	closed   bool
	oneShots map[*Session]struct{} // running one-shot and program runs
	bg       sync.WaitGroup        // one-shot runs and their teardowns
}

// NewManager returns a manager that gets its sandboxes from source.
func NewManager(cfg config.Config, source Source, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{
		cfg: cfg, source: source, log: log,
		execs:    make(chan struct{}, cfg.Server.MaxConcurrentExecutions),
		sessions: map[string]*Session{},
		ended:    map[string]string{},
		oneShots: map[*Session]struct{}{},
	}
}

// Session is one live session.
type Session struct {
	m      *Manager
	id     string
	lang   string
	limits config.Limits
	idle   time.Duration
	inst   *Instance
	ws     *workspace.Dir
	out    *pipeReader
	errp   *pipeReader
	create time.Time

	execMu sync.Mutex // one execution at a time

	mu        sync.Mutex
	lastUsed  time.Time
	busy      bool
	endReason string
	execCount int
	cur       *execution
	idleTimer *time.Timer
	ended     chan struct{}
	endOnce   sync.Once
	interrupt chan struct{} // a client asked to interrupt

	teardownOnce sync.Once
	gone         chan struct{} // closed when everything is freed
}

// ValidateEnv checks client environment variables against the caps.
func ValidateEnv(env map[string]string, maxN int) error {
	if len(env) > maxN {
		return fmt.Errorf("%w: env has %d variables, at most %d are allowed", errdefs.ErrInvalidArgument, len(env), maxN)
	}
	total := 0
	for k, v := range env {
		if err := runtimes.ValidEnvName(k, k+"="+v); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > 256<<10 {
		return fmt.Errorf("%w: env is larger than 256 KiB", errdefs.ErrInvalidArgument)
	}
	return nil
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Create starts a session.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (*Session, error) {
	lang := req.Language
	if lang == "" {
		lang = "python"
	}
	rt, err := runtimes.Lookup(m.cfg, lang)
	if err != nil {
		return nil, err
	}
	limits, err := config.Resolve(req.Limits, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, err
	}
	if err := ValidateEnv(req.Env, m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	idle := req.IdleTimeout.D()
	if idle == 0 {
		idle = m.cfg.Server.IdleTimeout.D()
	}
	if idle < time.Second || idle > m.cfg.Server.MaxIdleTimeout.D() {
		return nil, fmt.Errorf("%w: timeout_idle %s must be between 1s and the server maximum %s", errdefs.ErrInvalidArgument, idle, m.cfg.Server.MaxIdleTimeout)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the server is shutting down", errdefs.ErrUnavailable)
	}
	if len(m.sessions)+m.creating >= m.cfg.Server.MaxSessions {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions are open, the server maximum", errdefs.ErrLimit, m.cfg.Server.MaxSessions)
	}
	m.creating++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.creating--
		m.mu.Unlock()
	}()

	s, err := m.start(ctx, rt, limits, sessionEnv(rt, limits, req.Env), idle)
	if err != nil {
		return nil, err
	}
	// The timer exists before the session is visible: end and Touch, from
	// other requests, use it.
	s.idleTimer = time.AfterFunc(idle, s.checkIdle)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.idleTimer.Stop()
		s.teardownOnce.Do(s.teardown)
		return nil, fmt.Errorf("%w: the server is shutting down", errdefs.ErrUnavailable)
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	go s.monitor()
	m.log.Info("session created", "session", s.id, "language", s.lang, "sandbox", s.inst.Sandbox.Name(), "ms", time.Since(s.inst.Started).Milliseconds())
	return s, nil
}

// EnvMap turns K=V pairs into a map; a later pair wins.
func EnvMap(kvs []string) map[string]string {
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// sessionEnv is the environment of a session's runtime: the jail's base,
// the language's, then the client's.
func sessionEnv(rt runtimes.Runtime, limits config.Limits, userEnv map[string]string) map[string]string {
	env := EnvMap(append(jail.BaseEnv(), rt.SessionEnv(limits)...))
	for k, v := range userEnv {
		env[k] = v
	}
	return env
}

// start gets an instance and turns it into an unregistered session whose
// runtime has env. The configuration round trip also shows the runtime
// alive: one that died just before it was handed out (it passed the
// health check a moment earlier) is replaced.
func (m *Manager) start(ctx context.Context, rt runtimes.Runtime, limits config.Limits, env map[string]string, idle time.Duration) (*Session, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var s *Session
		s, err = m.startOnce(ctx, rt, limits, env, idle)
		if err == nil || ctx.Err() != nil || !errors.Is(err, errRuntimeGone) {
			return s, err
		}
		m.log.Warn("a sandbox's runtime died before its session started; trying another", "err", err)
	}
	return nil, err
}

var errRuntimeGone = errors.New("runtime gone")

func (m *Manager) startOnce(ctx context.Context, rt runtimes.Runtime, limits config.Limits, env map[string]string, idle time.Duration) (*Session, error) {
	inst, err := m.source.Get(ctx, rt.Lang, limits)
	if err != nil {
		return nil, err
	}
	s := &Session{
		m: m, id: newID(), lang: rt.Lang, limits: limits, idle: idle, inst: inst,
		ws: inst.Sandbox.Workspace(), create: time.Now(), lastUsed: time.Now(),
		ended: make(chan struct{}), interrupt: make(chan struct{}, 1), gone: make(chan struct{}),
	}
	if s.out, err = newPipeReader(inst.stdout, func(p []byte) { s.output(p, false) }); err != nil {
		inst.Close()
		return nil, err
	}
	if s.errp, err = newPipeReader(inst.stderr, func(p []byte) { s.output(p, true) }); err != nil {
		inst.Sandbox.Kill()
		s.out.close()
		inst.Close()
		return nil, err
	}
	inst.stdout, inst.stderr = nil, nil // owned by the readers now
	cfgDone := make(chan error, 1)
	go func() { cfgDone <- inst.conn.configure(env) }()
	select {
	case err = <-cfgDone:
	case <-time.After(30 * time.Second):
		err = errors.New("no answer")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		s.teardownOnce.Do(s.teardown)
		if ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", errRuntimeGone, err)
		}
		return nil, fmt.Errorf("%w: configuring the %s runtime: %w", errdefs.ErrUnavailable, rt.Lang, err)
	}
	return s, nil
}

// Get returns a live session, or an error saying why there is none.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s, nil
	}
	if reason, ok := m.ended[id]; ok {
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, reason)
	}
	return nil, fmt.Errorf("%w: no session %q", errdefs.ErrNotFound, truncateID(id))
}

func truncateID(id string) string {
	if len(id) > 64 {
		return id[:64] + "..."
	}
	return id
}

// List describes every live session, oldest first.
func (m *Manager) List() []Info {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	out := make([]Info, 0, len(all))
	for _, s := range all {
		out = append(out, s.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Count is the number of live sessions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Delete ends a session.
func (m *Manager) Delete(id string) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	s.end(EndDeleted)
	return nil
}

// Close ends every session and refuses new ones. It returns when every
// sandbox is gone.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	all := make([]*Session, 0, len(m.sessions)+len(m.oneShots))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	for s := range m.oneShots {
		all = append(all, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); s.end(EndShutdown); <-s.gone }()
	}
	wg.Wait()
	m.bg.Wait()
}

// acquire takes an execution slot, waiting up to the queue timeout.
func (m *Manager) acquire(ctx context.Context) (func(), error) {
	select {
	case m.execs <- struct{}{}:
		return func() { <-m.execs }, nil
	default:
	}
	t := time.NewTimer(m.cfg.Server.QueueTimeout.D())
	defer t.Stop()
	select {
	case m.execs <- struct{}{}:
		return func() { <-m.execs }, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %d executions are running, the server maximum", errdefs.ErrLimit, cap(m.execs))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Workspace is the host's handle on the session's /workspace.
func (s *Session) Workspace() *workspace.Dir { return s.ws }

// Limits are the session's limits.
func (s *Session) Limits() config.Limits { return s.limits }

// Info describes the session.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := "idle"
	if s.busy {
		state = "busy"
	}
	if s.endReason != "" {
		state = "ended"
	}
	return Info{
		ID: s.id, Language: s.lang, State: state, EndReason: s.endReason,
		CreatedAt: s.create.UTC(), LastUsedAt: s.lastUsed.UTC(),
		IdleTimeout: config.Duration(s.idle), Limits: s.limits, Executions: s.execCount,
		Sandbox: s.inst.Sandbox.Name(),
	}
}

// Touch marks the session used (file transfers count as use).
func (s *Session) Touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	if s.idleTimer != nil && s.endReason == "" {
		s.idleTimer.Reset(s.idle)
	}
	s.mu.Unlock()
}

func (s *Session) checkIdle() {
	s.mu.Lock()
	idleFor := time.Since(s.lastUsed)
	busy := s.busy
	s.mu.Unlock()
	if busy || idleFor < s.idle {
		s.mu.Lock()
		if s.idleTimer != nil && s.endReason == "" {
			s.idleTimer.Reset(max(s.idle-idleFor, time.Second))
		}
		s.mu.Unlock()
		return
	}
	s.end(EndIdle)
}

// EndReason says why the session ended ("" while it lives).
func (s *Session) EndReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endReason
}

// monitor ends the session when its jail reports trouble while no
// execution is watching: an OOM kill, the process limit, the runtime
// exiting, the jail dying.
func (s *Session) monitor() {
	sb := s.inst.Sandbox
	for {
		select {
		case ev := <-sb.Events():
			switch ev {
			case cgroup.EventOOM:
				s.end(EndOOM)
			case cgroup.EventPidsMax:
				s.end(EndPids)
			}
		case e := <-sb.Exits():
			if e.Pid == s.inst.RuntimePid {
				s.end(s.deathReason(e))
			}
		case <-s.inst.gone:
			e, _ := s.inst.runtimeExit()
			s.end(s.deathReason(e))
		case <-sb.Dead():
			s.end(s.deathReason(jail.Exit{}))
		case <-s.ended:
			return
		}
	}
}

// deathReason explains why the runtime or the jail went away.
func (s *Session) deathReason(e jail.Exit) string {
	if s.oomKilled() {
		return EndOOM
	}
	switch {
	case e.Pid == 0:
		return "the interpreter ended"
	case e.Status.Signaled():
		return fmt.Sprintf("the interpreter was killed by signal %d (%s)", e.Status.Signal(), e.Status.Signal())
	case e.Status.Exited():
		return fmt.Sprintf("the interpreter exited with status %d", e.Status.ExitStatus())
	}
	return "the interpreter ended"
}

// end ends the session once, for reason, and frees everything.
func (s *Session) end(reason string) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.endReason = reason
		if s.idleTimer != nil {
			s.idleTimer.Stop()
		}
		s.mu.Unlock()
		close(s.ended)
		m := s.m
		m.mu.Lock()
		// A one-shot's id was never a client's to ask about again: only
		// sessions are remembered (for a 410 rather than a 404).
		if _, ok := m.sessions[s.id]; ok {
			delete(m.sessions, s.id)
			m.ended[s.id] = reason
			m.endOrder = append(m.endOrder, s.id)
			if len(m.endOrder) > 10000 {
				delete(m.ended, m.endOrder[0])
				m.endOrder = m.endOrder[1:]
			}
		}
		m.mu.Unlock()
		s.inst.Sandbox.Kill()
		// A running execution notices the jail dying and frees it all
		// when it returns; otherwise free it now.
		s.mu.Lock()
		busy := s.busy
		s.mu.Unlock()
		if !busy {
			s.teardownOnce.Do(s.teardown)
		}
		m.log.Info("session ended", "session", s.id, "reason", reason)
	})
}

func (s *Session) teardown() {
	defer close(s.gone)
	s.inst.Sandbox.Kill()
	<-s.inst.Sandbox.Dead()
	if s.out != nil {
		s.out.close()
	}
	if s.errp != nil {
		s.errp.close()
	}
	if err := s.inst.Close(); err != nil {
		s.m.log.Error("session teardown", "session", s.id, "err", err)
	}
}

// output routes a chunk of the runtime's stdout or stderr to the running
// execution; output while none runs (a background thread) is dropped.
func (s *Session) output(p []byte, isErr bool) {
	s.mu.Lock()
	ex := s.cur
	s.mu.Unlock()
	if ex != nil {
		ex.output(p, isErr)
	}
}

// Interrupt interrupts the running execution, if any, and reports
// whether there was one.
func (s *Session) Interrupt() (bool, error) {
	s.mu.Lock()
	busy, reason := s.busy, s.endReason
	s.mu.Unlock()
	if reason != "" {
		return false, fmt.Errorf("%w: %s", errdefs.ErrGone, reason)
	}
	if !busy {
		return false, nil
	}
	select {
	case s.interrupt <- struct{}{}:
	default:
	}
	return true, nil
}

func (s *Session) signalRuntime(sig syscall.Signal) {
	s.inst.Sandbox.Signal(s.inst.RuntimePid, sig, true)
}
