// Package session owns stateful sessions: one long-lived instance (a jail
// with a persistent interpreter) per session, executions in it one at a
// time with per-execution timeouts, CPU limits and output caps, interrupts
// that keep the session's state, the end of a session (deleted, idle, out
// of memory, process limit, interpreter gone) and the clear error every
// later call gets, one-shot executions and program runs in a fresh
// instance, which tenant owns each session (Find shows a caller only its
// tenant's, unless it is an admin), and the Observer that hears all of
// it, with who asked. Package installs are package packages'; a session
// gives them its sandbox and download sandboxes.
//
// It must never trust what a runtime says beyond the data it carries: an
// execution ends by the runtime's done, by the session's own limits (see
// package watch), or by the jail dying, never by waiting forever; and
// nothing a runtime sends can grow the server's memory past the configured
// caps. It reaches sandboxes only through package instance, behind its
// Instance interface (which tests fake).
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/broker"
	"airlock/internal/cluster"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/image"
	"airlock/internal/instance"
	"airlock/internal/packages"
	"airlock/internal/pauseimage"
	"airlock/internal/redact"
	"airlock/internal/runtimes"
	"airlock/internal/secrets"
	"airlock/internal/watch"
	"airlock/internal/workspace"
)

// EndedError is the error of every call to a session that ended: it
// matches errdefs.ErrGone and carries why; one that was paused is not
// gone: it matches errdefs.ErrPaused (a call that found its sandbox as
// the pause ended it).
type EndedError struct{ End apitype.End }

func (e *EndedError) Error() string {
	if e.End.Code == apitype.EndPaused {
		return "session paused as the call began: call again (a session created with auto_resume is resumed), or resume it with POST /v1/sessions/{id}/resume"
	}
	return "session ended: " + e.End.Reason
}

func (e *EndedError) Unwrap() error {
	if e.End.Code == apitype.EndPaused {
		return errdefs.ErrPaused
	}
	return errdefs.ErrGone
}

func gone(end apitype.End) error { return &EndedError{End: end} }

// Manager owns every session of a server.
type Manager struct {
	cfg config.Config
	// stopping ends with Close: what a restore reads (a paused
	// session's image, for a resume or fork) stops with it.
	stopping context.Context
	stop     context.CancelFunc
	// sources build the sandboxes of each isolation the server offers.
	sources map[config.Isolation]Source
	// templates build those made from templates (nil: none).
	templates TemplateSources
	log       *slog.Logger
	obs       Observer      // nil: nobody listens
	egress    *Egress       // nil: no client may ask for a network
	execs     chan struct{} // bounds concurrent executions, one-shot included
	// teardowns bounds the one-shot sandboxes alive, running or being
	// torn down (as many as executions): a burst of one-shots cannot
	// outrun their cleanup, and a teardown holds no execution slot.
	teardowns chan struct{}
	// ids makes session ids and judges unknown ones (nil: a server on
	// its own).
	ids *cluster.Identity
	// clock times executions, commands and yielding teardowns (nil:
	// the real one; tests replace it).
	clock watch.Clock

	// mu guards sessions, ended, endOrder, creating, closed, oneShots,
	// yielded and endedHist; no session's lock is ever taken under it.
	mu       sync.Mutex
	sessions map[string]*Session
	ended    map[string]endedSession // recently ended id -> why
	endOrder []string
	creating int
	creates  sync.WaitGroup // creations under way, waited for by Close
	closed   bool
	oneShots map[*Session]struct{} // running one-shot and program runs
	// yielded: one-shots whose teardown takes only spare CPU (see
	// yieldTeardown).
	yielded map[*Session]struct{}
	// teardownWaiters: one-shots waiting for a teardown slot; while
	// there are any, no teardown yields.
	teardownWaiters int
	// going: sessions ended and no longer listed whose teardown has not
	// finished (their sandbox closing, their recovery point removed):
	// Close waits for them too.
	going    map[*Session]struct{}
	bg       sync.WaitGroup // one-shot runs and their teardowns
	seals    sync.WaitGroup // sessions' seals of their recovery points
	lastFree atomic.Int64   // unix nanoseconds of the last returnMemory
	// policy: tenants' output redaction and code rules (nil: none).
	policy *policy
	// packages installs packages into sessions and runs.
	packages *packages.Installer
	// admit admits every request's work (see Admitter).
	admit Admitter
	// broker calls the operator's tools for sessions (nil: none).
	broker *broker.Broker
	// secrets are the operator's placeholder secrets (nil: none).
	secrets *secrets.Set
	// listing lists the sessions across a cluster (nil: none; see
	// SetListing).
	listing Listing

	// endedHist: the histories of the newest ended sessions
	// (history.ended), endedHistOrder their ids, oldest first; under mu.
	endedHist      map[string]endedHistory
	endedHistOrder []string

	// paused: the sessions paused (pause.go), under mu; sweeper deletes
	// those kept longer than persistence.keep.
	paused  map[string]*pausedSession
	sweeper *time.Timer
	// kept: the memory images resumes refused, kept for the operator
	// (pauseimage.Kept, by directory), under mu: counted in their
	// tenant's paused bytes until sweeper deletes them at their expiry.
	kept map[string]pauseimage.Kept
	// endLater: what ended but is still on persistence.dir (its
	// removal failed where nobody could be told: a pause that lost a
	// race with a delete, a fork's copy, an ended session's recovery
	// point), by name, with what removes it; sweeper tries again every
	// removeRetry. leftBehind: ends whose remains are left to delete
	// (pauseimage.ErrLeftBehind). Both under mu.
	endLater   map[string]func() error
	leftBehind bool
	// reserved: the bytes of persistence.dir the pauses and forks under
	// way may write, by tenant, under mu (see reserveImage).
	reserved map[string]int64
	// reservedDisk: what the writes under way may write on
	// persistence.dir beyond what reserved counts against the quotas
	// (a checkpoint is written whole before its size is checked), under mu.
	reservedDisk int64
	// sealing: the part of reserved that each session's seal under way
	// holds, by session id, under mu: a pause of that session does not
	// count it against the quota, since its image replaces the point.
	sealing map[string]int64
	// hook, if set (tests), is called at a point of a pause or fork
	// where another call may come in: "written" (a pause's image is
	// written, the session not yet listed as paused), "listed" (listed
	// as paused, its sandbox not yet ended), "paused" (its sandbox
	// ended, the pause not yet returned to its caller), "fork" (a paused
	// source found, its image not yet opened), "restoring" (a resumed
	// or forked session's sandbox made, its files not yet restored),
	// "kept-removed" (a sweep removed an expired kept memory image),
	// "deleting" (a delete found the session live, not yet ended it).
	hook func(point, id string)
	// queueTimer, if set (tests), makes the queue timeout's timers
	// (queueWait) in place of real ones.
	queueTimer func(d time.Duration) (<-chan time.Time, func())
	// imageFault, if set (tests), fails the write of an image (a pause's,
	// a fork's) before it begins with what it returns: a disk's failure,
	// transient or not, which the fake sandboxes cannot cause (a pause
	// reads only their workspace).
	imageFault func(id string) error
	// onPause hears of every pause, resume and fork (OnPause).
	onPause func(PauseEvent)
	// onSeal hears of every seal of a recovery point (OnSeal).
	onSeal func(SealEvent)
	// budget is what the tenants' seals may write (sealbudget.go).
	budget *sealBudget
	// imagesGone hears that paused sessions' images were removed
	// (OnImagesRemoved).
	imagesGone func()
}

// NewManager returns a manager that gets the sandboxes of the server's
// isolation from source (see AddSource for the others).
func NewManager(cfg config.Config, source instance.Source, log *slog.Logger) *Manager {
	return newManager(cfg, instances{source}, log)
}

// newManager is NewManager with any Source (tests give fakes).
func newManager(cfg config.Config, source Source, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	p, err := newPolicy(cfg)
	if err != nil {
		// The composition root ran CheckPolicy first: a programming
		// error, not a configuration's.
		panic("session: output policy: " + err.Error())
	}
	stopping, stop := context.WithCancel(context.Background())
	return &Manager{
		cfg: cfg, stopping: stopping, stop: stop,
		sources: map[config.Isolation]Source{cfg.Isolation: source}, log: log, policy: p,
		packages:  packages.New(cfg.Packages, log),
		admit:     NewTenants(cfg, nil),
		execs:     make(chan struct{}, cfg.Server.MaxConcurrentExecutions),
		teardowns: make(chan struct{}, cfg.Server.MaxConcurrentExecutions),
		sessions:  map[string]*Session{},
		ended:     map[string]endedSession{},
		oneShots:  map[*Session]struct{}{},
		yielded:   map[*Session]struct{}{},
		budget:    newSealBudget(int64(cfg.Persistence.SealBytesPerSecond), int64(cfg.Persistence.SealBurstBytes)),
	}
}

// SetIdentity makes the manager one server of a cluster: its session ids
// carry id's name and boot epoch, and an unknown id is judged by them
// (another server's, an earlier run's). Call it before the manager serves
// anything.
func (m *Manager) SetIdentity(id *cluster.Identity) { m.ids = id }

// Listing is where a cluster lists this server's sessions (package
// directory's).
type Listing interface {
	// Settle writes the session id as it is now (live, paused or gone)
	// and returns once every server lists it so.
	Settle(ctx context.Context, id string) error
}

// SetListing makes l the cluster's listing of the manager's sessions: a
// client's delete, pause or resume (through any API, an auto_resume
// too) is answered once l lists the session so, never while another
// server still lists it as it was. Call it before the manager serves
// anything.
func (m *Manager) SetListing(l Listing) { m.listing = l }

// settle waits for the listing to hold the session id as it is now. A
// store that cannot take it is logged and the change stands (it was
// made; the directory's health tells /readyz, and its next beat writes
// the session again).
func (m *Manager) settle(ctx context.Context, id string) {
	if m.listing == nil {
		return
	}
	if err := m.listing.Settle(ctx, id); err != nil {
		m.log.Warn("the cluster's directory does not list a session's change yet", "session", id, "err", err)
	}
}

// TemplateSources are the sources of sandboxes made from templates
// (pool.Templates).
type TemplateSources interface {
	// Source returns the source of template name's sandboxes on iso for
	// a runtime of lang, and the version it builds from.
	Source(iso config.Isolation, name, lang string) (instance.Source, image.Template, error)
	// Store is where the templates are registered.
	Store() *image.Store
}

// SetTemplates makes templates available to requests; call it before the
// manager serves anything.
func (m *Manager) SetTemplates(t TemplateSources) { m.templates = t }

// template resolves a request's template: empty is templates.default
// (itself empty: the host's root).
func (m *Manager) template(asked string) (string, error) {
	if asked == "" {
		return m.cfg.Templates.Default, nil
	}
	if err := config.CheckTemplateName(asked); err != nil {
		return "", err
	}
	if m.templates == nil {
		return "", fmt.Errorf("%w: template %q: this server has no templates", errdefs.ErrInvalidArgument, asked)
	}
	return asked, nil
}

// AddSource makes isolation iso available to requests, its sandboxes
// built by src; call it before the manager serves anything.
func (m *Manager) AddSource(iso config.Isolation, src instance.Source) {
	m.sources[iso] = instances{src}
}

// isolation resolves a request's isolation: empty is the server's own;
// another must be one the operator allows (allow_isolation).
func (m *Manager) isolation(asked config.Isolation) (config.Isolation, error) {
	if asked == "" {
		return m.cfg.Isolation, nil
	}
	if !asked.Valid() {
		return "", fmt.Errorf("%w: isolation %q must be \"native\" or \"gvisor\"", errdefs.ErrInvalidArgument, asked)
	}
	if !m.cfg.Allows(asked) {
		return "", fmt.Errorf("%w: isolation %q is not allowed by this server (its operator lists what requests may pick in allow_isolation)", errdefs.ErrPermission, asked)
	}
	return asked, nil
}

// Observe adds observers; call it before the manager serves anything.
func (m *Manager) Observe(obs ...Observer) {
	for _, o := range obs {
		if o != nil {
			m.obs = joinObservers(m.obs, o)
		}
	}
}

// endedSession is what is remembered of a session that ended.
type endedSession struct {
	end    apitype.End
	tenant string
}

// Session is one live session.
//
// Locks, in the order they may be taken: ctxStart (held while a context
// starts), pkgMu and a context's execMu (each held for a whole install or
// execution; the other is then only ever TryLocked, which cannot wait: an
// install's execution, a cell's %pip install), attachMu (an execution's
// end may tear the session down), mu, then the gate's own and an
// execution's. The manager's mu is never held with any of them; cmds.mu
// and the history's are taken alone.
type Session struct {
	m  *Manager
	id string
	// owner created the session: its tenant owns it (see Find); client
	// says it is a client's session (not a one-shot's sandbox).
	owner  Caller
	client bool
	// deletedBy: the caller that deleted it (under mu), if one did.
	deletedBy *Caller
	lang      runtimes.Runtime
	limits    config.Limits
	idle      time.Duration
	inst      Instance
	// template and templateVersion: what the root was made from (empty:
	// the host's root); tmplMeta, that version's description.
	template, templateVersion string
	tmplMeta                  image.Template
	// userEnv is the client's environment at creation, which every
	// context's starts from.
	userEnv map[string]string
	create  time.Time
	// made is the request that created the session (a pause keeps it).
	made apitype.CreateSessionRequest

	// def is the default context (the sandbox's first runtime), set
	// before the session is visible; ctxs are every context by id,
	// ctxOrder their ids oldest first, ctxNext numbers those clients
	// create (under mu). The default context's environment is the one
	// commands start from.
	def      *codeContext
	ctxs     map[string]*codeContext
	ctxOrder []string
	ctxNext  int
	// ctxStart: one context starts at a time (outside mu: it takes a
	// while), so that two executions asking for a new language start it
	// once.
	ctxStart sync.Mutex

	cmds  commands // shell commands (commands.go)
	ports ports    // ports opened to the outside (ports.go)
	// hist is what the session remembers of its executions and commands
	// (nil: nothing; history.go), set before the session is visible.
	hist *history
	// gate is the session's network egress (nil: loopback only); set
	// under mu, once, by Create or SetNetwork.
	gate *egress.Gate
	// tools serves the session's tool calls (nil: it has none); set
	// under mu, once, before the session is visible.
	tools *broker.Session
	// secrets are the session's placeholder secrets (nil: none); set
	// when it is made, never changed.
	secrets *secrets.Session
	// reds: with secrets, the output policy of the tenants whose code it
	// ran, the secrets' values added (see redactor); under redMu.
	redMu sync.Mutex
	reds  map[string]*redact.Redactor
	// attachMu keeps the sandbox open while a gate is put into it: the
	// gate enters its namespace through a descriptor number, which, closed
	// by a teardown in between and reused, could name another sandbox's
	// namespace or the server's own. Teardown takes it before it closes
	// the sandbox; attaching checks the session has not ended under it.
	attachMu sync.Mutex

	// pkgMu: one pip install at a time (they share .packages/wheels); a
	// cell's %pip install holds it until its execution ends, since the
	// interpreter installs from the wheels after the server's reply.
	pkgMu sync.Mutex

	// mu guards the fields below, and deletedBy, the contexts' and gate
	// above; idleTimer is set before the session is visible.
	mu       sync.Mutex
	lastUsed time.Time
	// busy: executions are running (running counts them, in every
	// context).
	busy      bool
	running   int
	inUse     int // file transfers in progress: they keep the session alive
	end       apitype.End
	execCount int
	// cpuAt, cpuThen and cpuPct: the last reading of the sandbox's CPU
	// time and the share of a CPU it gave (Info).
	cpuAt     time.Time
	cpuThen   time.Duration
	cpuPct    float64
	idleTimer *time.Timer
	// pausing: a pause is under way (nothing new may begin); lifetime,
	// expires and lifeTimer: the session's lifetime (0: none), when it
	// runs out, and its timer; restored: what its last resume restored,
	// restoredWhy: why that is less than its pause kept.
	pausing     bool
	lifetime    time.Duration
	expires     time.Time
	lifeTimer   *time.Timer
	restored    string
	restoredWhy string
	// reseeded: for a fork restored with its memory, whether every
	// interpreter confirmed it reseeded its generators; notReseeded: the
	// code contexts whose runtime did not.
	reseeded    *bool
	notReseeded []string
	// checkpointing: a pause is checkpointing the sandbox, which ends
	// with it (the pause's end, not a death: see monitor).
	checkpointing atomic.Bool
	ended         chan struct{}
	endOnce       sync.Once

	teardownOnce sync.Once
	gone         chan struct{} // closed when everything is freed

	// live is its recovery point (live.go; nil: persistence off, or not
	// a client's session), set before the session is visible.
	live *livePoint
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

// Bounds of a session's metadata besides server.max_metadata.
const (
	maxMetadataKey   = 256
	maxMetadataValue = 2 << 10
	maxMetadataTotal = 32 << 10
)

// ValidateMetadata checks a client's session metadata against the caps:
// its labels are echoed in descriptions and listings, and kept on disk
// with a paused session.
func ValidateMetadata(md map[string]string, maxN int) error {
	if len(md) > maxN {
		return fmt.Errorf("%w: metadata has %d entries, at most %d are allowed (server.max_metadata)", errdefs.ErrInvalidArgument, len(md), maxN)
	}
	total := 0
	for k, v := range md {
		switch {
		case k == "" || len(k) > maxMetadataKey:
			return fmt.Errorf("%w: metadata key %q must be 1 to %d bytes", errdefs.ErrInvalidArgument, truncateID(k), maxMetadataKey)
		case len(v) > maxMetadataValue:
			return fmt.Errorf("%w: metadata %q: the value is longer than %d bytes", errdefs.ErrInvalidArgument, truncateID(k), maxMetadataValue)
		case !printable(k) || !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			return fmt.Errorf("%w: metadata %q: keys must be printable UTF-8, values UTF-8 without NUL", errdefs.ErrInvalidArgument, truncateID(k))
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataTotal {
		return fmt.Errorf("%w: metadata is larger than %d KiB", errdefs.ErrInvalidArgument, maxMetadataTotal>>10)
	}
	return nil
}

// clientMetadata refuses, in a request to create a session, metadata
// keys under identity.ReservedMetadataPrefix: the server's own marks
// (its /mcp's, which a restart adopts), which come only from its own
// calls, beside the request (identity.WithOwnMetadata: see
// withOwnMetadata), never in it.
func clientMetadata(md map[string]string) error {
	for k := range md {
		if reservedKey(k) {
			return fmt.Errorf("%w: metadata key %q: keys starting with %q are reserved for the server's own", errdefs.ErrInvalidArgument, truncateID(k), identity.ReservedMetadataPrefix)
		}
	}
	return nil
}

func reservedKey(k string) bool { return strings.HasPrefix(k, identity.ReservedMetadataPrefix) }

// withOwnMetadata is md, a new session's metadata, with the server's own
// marks that ctx carries (identity.WithOwnMetadata) in place of md's
// (a fork's source's): a session made by a client has none, whoever's
// session it was made from. md is not changed.
func withOwnMetadata(ctx context.Context, md map[string]string) map[string]string {
	own := identity.OwnMetadata(ctx)
	if len(own) == 0 && clientMetadata(md) == nil {
		return md
	}
	out := make(map[string]string, len(md)+len(own))
	for k, v := range md {
		if !reservedKey(k) {
			out[k] = v
		}
	}
	for k, v := range own {
		if reservedKey(k) {
			out[k] = v
		}
	}
	return out
}

// printable: valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// lookup resolves a request's language; the first of the table when
// empty.
func (m *Manager) lookup(lang string) (runtimes.Runtime, error) {
	if lang == "" {
		lang = runtimes.Names()[0]
	}
	return runtimes.Lookup(m.cfg, lang)
}

// Create starts a session, once the caller is admitted to: every API's
// way to create one (a resume or fork makes it otherwise). Its metadata
// is the client's (refused under identity.ReservedMetadataPrefix), with
// the server's own marks when ctx carries some.
func (m *Manager) Create(ctx context.Context, req apitype.CreateSessionRequest) (*Session, error) {
	if err := clientMetadata(req.Metadata); err != nil {
		return nil, err
	}
	req.Metadata = withOwnMetadata(ctx, req.Metadata)
	release, err := m.admit.AdmitSession(ctx, &Ask{Limits: &req.Limits, Isolation: &req.Isolation, Network: req.Network, Template: req.Template})
	if err != nil {
		return nil, err
	}
	s, err := m.create(ctx, req, nil)
	if err != nil {
		release()
		return nil, err
	}
	return s, nil
}

// create creates a session for req; r, when set, makes a paused session
// live again (its id, owner and files).
func (m *Manager) create(ctx context.Context, req apitype.CreateSessionRequest, r *restoring) (*Session, error) {
	begun := time.Now()
	rt, err := m.lookup(req.Language)
	if err != nil {
		return nil, err
	}
	limits, err := config.Resolve(req.Limits, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, err
	}
	iso, err := m.isolation(req.Isolation)
	if err != nil {
		return nil, err
	}
	tmpl, err := m.template(req.Template)
	if err != nil {
		return nil, err
	}
	if err := ValidateEnv(req.Env, m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	if err := ValidateMetadata(req.Metadata, m.cfg.Server.MaxMetadata); err != nil {
		return nil, err
	}
	policy, err := m.NetworkPolicy(req.Network)
	if err != nil {
		return nil, err
	}
	histLimits, err := m.historyLimits(req.History)
	if err != nil {
		return nil, err
	}
	// Tools and secrets are the owner's tenant's: a session resumed or
	// forked by an admin gets its own tenant's, never the admin's.
	tenant := callerOf(ctx).Tenant
	if r != nil {
		tenant = r.meta.Tenant
	}
	tools, err := m.resolveTools(tenant, req.Tools)
	if err != nil {
		return nil, err
	}
	ss, err := m.resolveSecrets(tenant, req.Secrets)
	if err != nil {
		return nil, err
	}
	idle := req.IdleTimeout.D()
	if idle == 0 {
		idle = m.cfg.Server.IdleTimeout.D()
	}
	if idle < time.Second || idle > m.cfg.Server.MaxIdleTimeout.D() {
		return nil, fmt.Errorf("%w: timeout_idle %s must be between 1s and the server maximum %s", errdefs.ErrInvalidArgument, idle, m.cfg.Server.MaxIdleTimeout)
	}
	if err := m.checkLifetime(req.Timeout.D()); err != nil {
		return nil, err
	}
	if err := m.checkOnTimeout(req.OnTimeout); err != nil {
		return nil, err
	}
	if err := checkRestores("on_timeout_restores", req.OnTimeoutRestores); err != nil {
		return nil, err
	}
	if req.OnTimeoutRestores != "" && req.OnTimeout != apitype.OnTimeoutPause {
		return nil, fmt.Errorf("%w: on_timeout_restores says what a pause on the timeout keeps: it needs on_timeout \"pause\"", errdefs.ErrInvalidArgument)
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
	m.creates.Add(1)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.creating--
		m.mu.Unlock()
		m.creates.Done()
	}()

	// A session that named a network (even an empty allowlist) can be
	// given a policy later: on a kernel whose network is fixed at boot
	// (gVisor), its sandbox is started with one.
	// Tools answer inside the sandbox's network namespace: a gVisor
	// sandbox needs one from its start too.
	net := !policy.Empty() || (req.Network != nil && m.egress != nil && m.egress.Enabled) || len(tools) > 0 || ss != nil
	if r != nil {
		// The resumed session's sandbox is built under its own id (its
		// gate's records name it).
		ctx = context.WithValue(ctx, resumeID{}, r.meta.ID)
	}
	env := m.proxyEnv(sessionEnv(rt, limits, req.Env), policy)
	if len(tools) > 0 {
		env = toolsEnv(env)
		env[broker.ContextEnv] = rt.Lang // the default context's id
	}
	if env, err = secretsEnv(env, req.Env, ss); err != nil {
		return nil, err
	}
	s, err := m.start(ctx, iso, tmpl, rt, limits, env, idle, policy, net, ss)
	if err != nil {
		return nil, err
	}
	s.made = req
	s.live = m.newLive(s)
	if r == nil && req.OnTimeoutRestores == apitype.RestoreMemory {
		// Known once its sandbox is made: a session that cannot keep
		// what its timeout is to keep is not handed over.
		if err := s.MemoryRefusal(); err != nil {
			s.teardownOnce.Do(s.teardown)
			return nil, fmt.Errorf("on_timeout_restores %q: %w; ask for \"files\", or leave on_timeout_restores unset", req.OnTimeoutRestores, err)
		}
	}
	if r != nil {
		// Before the session is visible, and before any code of the
		// client's runs in it.
		s.create, s.execCount, s.restored = r.meta.Created, r.meta.Executions, apitype.RestoreFiles
		var err error
		if r.memory != nil && r.memory.restored {
			// Its files were put back before its memory ran again.
			s.restored = apitype.RestoreMemory
			err = s.attachContexts(r.meta, r.memory)
			if err == nil && r.fork {
				err = s.reseed(ctx)
			}
		} else {
			switch {
			case r.memory != nil:
				s.restoredWhy = "the memory image was not restored (" + errdefs.Message(r.memory.why) + "); the files were"
			case r.lost != nil:
				s.restoredWhy = "the memory was not restored (" + errdefs.Message(r.lost) + "); the files were, as of " + r.meta.PausedAt.UTC().Format(time.RFC3339)
			}
			if r.meta.Recovered != "" {
				s.restoredWhy = r.meta.Recovered
			}
			if m.hook != nil {
				m.hook("restoring", r.meta.ID)
			}
			err = r.image.Restore(ctx, s.workspace(), int64(m.cfg.Persistence.MaxImageBytes))
			if err == nil {
				err = s.restorePackages(ctx)
			}
			if err == nil {
				err = s.restoreContexts(ctx, r.meta)
			}
		}
		if err != nil {
			s.teardownOnce.Do(s.teardown)
			return nil, err
		}
		if !r.fork {
			// Its first recovery point is made of the image it came from.
			s.live.fromImage(s.workspace(), r.image)
		}
	}
	if len(tools) > 0 {
		if err := s.attachTools(tenant, tools); err != nil {
			s.teardownOnce.Do(s.teardown)
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		// The client left while its sandbox was being built: nobody
		// would ever learn this session's id.
		s.teardownOnce.Do(s.teardown)
		return nil, err
	}
	committed := false
	if r != nil && r.commit != nil {
		// The last step before the session is visible (a resume's
		// image ends here, or the resume fails and it stays paused).
		if err := r.commit(s); err != nil {
			s.teardownOnce.Do(s.teardown)
			return nil, err
		}
		committed = true
	}
	s.userEnv = req.Env
	// The timers exist before the session is visible: end and Touch,
	// from other requests, use them.
	s.idleTimer = time.AfterFunc(idle, s.checkIdle)
	if d := req.Timeout.D(); d > 0 {
		s.lifetime, s.expires = d, time.Now().Add(d)
		s.lifeTimer = time.AfterFunc(d, s.expire)
	}
	s.hist = newHistory(histLimits)
	m.mu.Lock()
	// A resume whose image has ended is the only copy of its session:
	// it is listed even when a shutdown began meanwhile, and the
	// shutdown (which waits for creations under way before it lists
	// what to pause) treats it as any other live session.
	if m.closed && !committed {
		m.mu.Unlock()
		s.idleTimer.Stop()
		if s.lifeTimer != nil {
			s.lifeTimer.Stop()
		}
		s.teardownOnce.Do(s.teardown)
		return nil, fmt.Errorf("%w: the server is shutting down", errdefs.ErrUnavailable)
	}
	s.owner, s.client = callerOf(ctx), true
	if r != nil {
		s.owner = Caller{Tenant: r.meta.Tenant, KeyID: r.meta.KeyID}
		delete(m.paused, s.id)
		delete(m.ended, s.id)
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	// Its first point: the workspace as it was made (or restored).
	s.live.first(time.Now())
	go s.monitor()
	m.log.Info("session created", "session", s.id, "language", s.lang.Lang, "sandbox", s.inst.Name(), "ms", time.Since(s.inst.Started()).Milliseconds())
	if m.obs != nil {
		var nw *apitype.AuditNetwork
		if net {
			nw = &apitype.AuditNetwork{Allow: policy.Entries()}
		}
		m.obs.SessionCreated(SessionEvent{Caller: s.owner, Session: s.id, Language: s.lang.Lang, Sandbox: s.inst.Name(), Limits: limits,
			Duration: time.Since(begun), Network: nw})
	}
	return s, nil
}

// sessionEnv is the environment of a session's runtime: the jail's base,
// the language's, then the client's.
func sessionEnv(rt runtimes.Runtime, limits config.Limits, userEnv map[string]string) map[string]string {
	env := runtimes.EnvMap(instance.RuntimeEnv(rt, limits))
	for k, v := range userEnv {
		env[k] = v
	}
	return env
}

// start gets an instance and turns it into an unregistered session whose
// runtime has env. The configuration round trip also shows the runtime
// alive: one that died before it was handed out is replaced, once from
// the source's ready ones, then by one built for this request
// (instance.ForFresh). A pool's check when it hands one out sees a death
// only a moment after it happens, and ready sandboxes often die together
// (the host's OOM killer, a kill of the server's processes): however many
// it holds dead, a creation never fails for them. net asks for a sandbox
// that can be given a network (always so when policy is not empty).
func (m *Manager) start(ctx context.Context, iso config.Isolation, tmpl string, rt runtimes.Runtime, limits config.Limits, env map[string]string, idle time.Duration, policy egress.Policy, net bool, ss *secrets.Session) (*Session, error) {
	for attempt := 1; ; attempt++ {
		actx := ctx
		last := attempt > readyAttempts
		if last {
			actx = instance.ForFresh(ctx)
		}
		s, err := m.startOnce(actx, iso, tmpl, rt, limits, env, idle, policy, net, ss)
		if err == nil || last || ctx.Err() != nil || !errors.Is(err, errRuntimeGone) {
			return s, err
		}
		m.log.Warn("a sandbox's runtime died before its session started; trying another", "err", err, "attempt", attempt)
	}
}

// readyAttempts is how many sandboxes start takes from its source's ready
// ones before it asks for one built for it.
const readyAttempts = 2

var errRuntimeGone = errors.New("runtime gone")

func (m *Manager) startOnce(ctx context.Context, iso config.Isolation, tmpl string, rt runtimes.Runtime, limits config.Limits, env map[string]string, idle time.Duration, policy egress.Policy, net bool, ss *secrets.Session) (*Session, error) {
	src, ok := m.sources[iso]
	if !ok {
		return nil, fmt.Errorf("%w: isolation %q is not available on this server", errdefs.ErrUnavailable, iso)
	}
	var version string
	var meta image.Template
	if tmpl != "" {
		ts, tm, err := m.templates.Source(iso, tmpl, rt.Lang)
		if err != nil {
			return nil, err
		}
		src, version, meta = instances{ts}, tm.Version, tm
		rt.Binary = tm.Runtimes[rt.Lang] // the template's interpreter
	}
	// A resume's memory image: the sandbox restored from it, with its
	// runtime running on, or (mr.why) a fresh one.
	var inst Instance
	mr, _ := ctx.Value(resumeMemory{}).(*memoryRestore)
	if mr != nil && mr.why == nil {
		if tmpl != "" || net {
			mr.why = fmt.Errorf("%w: only a session without a template or network keeps its memory", errdefs.ErrUnsupported)
		} else {
			inst = restoreInstance(ctx, src, rt, limits, mr)
		}
	}
	if inst == nil {
		var err error
		if inst, err = src.Get(ctx, rt, limits, net); err != nil {
			return nil, err
		}
	}
	restored := mr != nil && mr.restored
	s := &Session{
		m: m, id: m.newID(ctx), lang: rt, limits: limits, idle: idle, inst: inst,
		template: tmpl, templateVersion: version, tmplMeta: meta, secrets: ss,
		create: time.Now(), lastUsed: time.Now(),
		ended: make(chan struct{}), gone: make(chan struct{}),
	}
	s.def = &codeContext{id: rt.Lang, lang: rt, cwd: "/workspace", created: s.create, it: inst, env: env}
	s.ctxs, s.ctxOrder = map[string]*codeContext{rt.Lang: s.def}, []string{rt.Lang}
	if err := inst.Attach(contextOutput{s, s.def}); err != nil {
		inst.Close()
		return nil, err
	}
	if restored {
		// It kept its environment (what its code changed in it too).
	} else if err := inst.Configure(ctx, env, s.def.cwd); err != nil {
		s.teardownOnce.Do(s.teardown)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: configuring the %s runtime: %w", errdefs.ErrUnavailable, rt.Lang, err)
		}
		// Retried by start: the detail is for the log only.
		return nil, fmt.Errorf("%w: %w", errRuntimeGone,
			errdefs.Private(errdefs.ErrUnavailable, fmt.Sprintf("the %s runtime did not answer its configuration", rt.Lang), err))
	}
	// The policy is attached when the session takes its sandbox (a
	// pooled one was built before any session existed), as limits are.
	if _, err := s.attachEgress(policy); err != nil {
		s.teardownOnce.Do(s.teardown)
		return nil, err
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
	if p, ok := m.paused[id]; ok {
		return nil, &PausedError{ID: id, Explicit: p.meta.ExplicitResume}
	}
	if e, ok := m.ended[id]; ok {
		return nil, gone(e.end)
	}
	return nil, m.ids.Unknown(id)
}

// Find is Get for the caller ctx carries: a session of another tenant
// (live or ended) does not exist for it, unless it is an admin. Without
// an identity in ctx (the server's own callers) every session is found.
func (m *Manager) Find(ctx context.Context, id string) (*Session, error) {
	who, ok := identity.From(ctx)
	if !ok {
		return m.Get(id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		if who.Sees(s.owner.Tenant) {
			return s, nil
		}
		return nil, &OtherTenantError{m.ids.Unknown(id)}
	}
	if p, err := m.pausedLocked(id, &who); p != nil || err != nil {
		if err == nil {
			err = &PausedError{ID: id, Explicit: p.meta.ExplicitResume}
		}
		return nil, err
	}
	if e, ok := m.ended[id]; ok {
		if who.Sees(e.tenant) {
			return nil, gone(e.end)
		}
		return nil, &OtherTenantError{m.ids.Unknown(id)}
	}
	// Another tenant's session of this run is not found (above); ids of
	// other servers and earlier runs say so to anyone: the id alone
	// tells, and nothing of a session is learnt.
	return nil, m.ids.Unknown(id)
}

// OtherTenantError is the error of a request for another tenant's
// session: exactly the error of an unknown id (Err), for the client; the
// API tells it apart only to count and record the probe.
type OtherTenantError struct{ Err error }

func (e *OtherTenantError) Error() string { return e.Err.Error() }
func (e *OtherTenantError) Unwrap() error { return e.Err }

// Tenant is the tenant that owns the session.
func (s *Session) Tenant() string { return s.owner.Tenant }

func truncateID(id string) string {
	if len(id) > 64 {
		return id[:64] + "..."
	}
	return id
}

// listBatch is the number of sessions per extra worker of List.
const listBatch = 128

// List describes every live session and every paused one, oldest first.
func (m *Manager) List() []apitype.Session {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	out := make([]apitype.Session, len(all))
	// What counts against the tenants' paused quotas (for each
	// session's restores) is read once, when the first needs it.
	usage := sync.OnceValue(func() *pausedUsage {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.pausedUsageLocked()
	})
	// Each description reads its sandbox's cgroup (two files): with a
	// thousand sessions that is most of a listing's time, so a large one
	// is read by a few workers at once.
	var next atomic.Int64
	describe := func() {
		for i := int(next.Add(1)) - 1; i < len(all); i = int(next.Add(1)) - 1 {
			out[i] = all[i].info(usage)
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(all)/listBatch) {
		wg.Go(describe)
	}
	describe()
	wg.Wait()
	// One being paused is listed paused from the moment it is (see
	// pause), not twice.
	paused := m.pausedList()
	if len(paused) > 0 {
		ids := make(map[string]bool, len(paused))
		for _, p := range paused {
			ids[p.ID] = true
		}
		out = slices.DeleteFunc(out, func(live apitype.Session) bool { return ids[live.ID] })
	}
	out = append(out, paused...)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Capacity is what readiness needs: the sessions open or being created,
// the server's maximum, and whether the manager still takes new ones.
func (m *Manager) Capacity() (open, maxSessions int, accepting bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions) + m.creating, m.cfg.Server.MaxSessions, !m.closed
}

// Count is the number of live sessions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Delete ends the session id for the server itself (Discard): as
// DeleteFor, but a session a shutdown ended with its recovery point kept
// (listed paused at the next start) has its point ended here rather than
// refused: its creator was told it failed, so it never comes back.
// A session ended otherwise is an error, as for Get; one done is settled
// (see DeleteFor).
func (m *Manager) Delete(id string) error { return m.deleteKept(context.Background(), id) }

func (m *Manager) deleteKept(ctx context.Context, id string) error {
	_, err := m.Get(id)
	if m.KeptAtShutdown(err) {
		m.endResumed(id)
		if err := m.leftOK(pauseimage.RemoveLive(m.persistDir(), id)); err != nil {
			return errdefs.Private(errdefs.ErrUnavailable, "the session's recovery point cannot be removed", err)
		}
		m.unkeep(id)
		return nil
	}
	if pe := (*PausedError)(nil); err != nil && !errors.As(err, &pe) {
		return err
	}
	return m.DeleteFor(ctx, id)
}

// KeptAtShutdown says whether err, of a call naming a session (Get,
// Find), is the end of one this server's shutdown ended with its
// recovery point kept: gone for now, but listed paused at the next
// start, so that nothing that belongs to it (an E2B sandbox's record)
// may be dropped as for a session gone for good.
func (m *Manager) KeptAtShutdown(err error) bool {
	ee := (*EndedError)(nil)
	return errors.As(err, &ee) && m.keptAtShutdown(ee.End)
}

// unkeep records that the session id, if this shutdown ended it
// keeping its recovery point, had that point ended since (a delete): it
// is deleted, no longer kept for the next start (KeptAtShutdown).
func (m *Manager) unkeep(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.ended[id]; ok && m.keptAtShutdown(e.end) {
		e.end = apitype.Ended(apitype.EndDeleted)
		m.ended[id] = e
	}
}

// keptAtShutdown says whether a session that ended for end had its
// recovery point kept, to be listed paused at the next start.
func (m *Manager) keptAtShutdown(end apitype.End) bool {
	return m.cfg.Persistence.Enabled && end.Code == apitype.EndShutdown && m.cfg.Persistence.OnShutdown == "pause"
}

// EndUnlessPaused ends the session for end, as Delete does, unless a
// pause claimed its end first (it stays paused) or this server's
// shutdown ended it first keeping its recovery point (listed paused at
// the next start, see KeptAtShutdown); it reports whether the session
// has ended for good (neither). For a lifetime its caller keeps itself
// (E2B's sandbox timeout), which a pause stops: its caller drops what
// belongs to the session only on true.
func (s *Session) EndUnlessPaused(end apitype.End) bool {
	s.terminate(end)
	if s.End().Code == apitype.EndPaused {
		return false
	}
	// The manager's word, not s.End(): a delete since may have ended
	// the point a shutdown kept (unkeep).
	_, err := s.m.Get(s.id)
	return !s.m.KeptAtShutdown(err)
}

// Discard ends the session id just made (created or forked) that its
// creator will never hear of (the cluster's directory could not list it,
// its E2B record could not be kept), and returns once the cluster's
// listing has it gone, as a client's delete does: a server that listed
// it meanwhile (a partial write, a beat) never lists it live after the
// creator's error.
func (m *Manager) Discard(ctx context.Context, id string) {
	m.deleteKept(ctx, id)
}

// DeleteFor ends the session id for the caller ctx carries (who must see
// it, see Find); observers hear who ended it. Deleting a session that has
// ended already is done, not an error: a client's retry, or its cleanup
// after the session ran out of memory, must not fail.
func (m *Manager) DeleteFor(ctx context.Context, id string) error {
	s, err := m.Find(ctx, id)
	if pe := (*PausedError)(nil); errors.As(err, &pe) {
		_, err := m.deletePausedAs(ctx, id)
		return err
	}
	if m.KeptAtShutdown(err) {
		// Ended by this shutdown, its recovery point kept: the next
		// start lists it paused. Never told deleted, then back.
		return fmt.Errorf("%w: the server is shutting down; the session is kept and listed paused at its next start: delete it then", errdefs.ErrUnavailable)
	}
	if errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrSessionLost) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.hook != nil {
		m.hook("deleting", id)
	}
	s.mu.Lock()
	if s.deletedBy == nil {
		by := s.callerOf(ctx)
		s.deletedBy = &by
	}
	s.mu.Unlock()
	s.terminate(apitype.Ended(apitype.EndDeleted))
	// Its recovery point (and the image it was resumed from, if set
	// aside still) ended before the delete is reported, also when a
	// shutdown ended it first and kept them: then it is deleted, not
	// kept, for every later call too (a client's retry).
	s.live.end()
	m.unkeep(id)
	if s.End().Code == apitype.EndPaused {
		// A pause completed first (its end and its listing are one
		// step): the client asked for the session gone, so it goes.
		if _, err := m.deletePaused(id, nil); err != nil {
			return err
		}
	}
	m.settle(ctx, id)
	return nil
}

// DeletePausedFor deletes the session id for the caller ctx carries only
// if it is paused: a live one (resumed meanwhile), or one being resumed,
// is ErrConflict and runs on; one ended already is done, as DeleteFor's.
func (m *Manager) DeletePausedFor(ctx context.Context, id string) error {
	_, err := m.Find(ctx, id)
	if pe := (*PausedError)(nil); errors.As(err, &pe) {
		found, err := m.deletePausedAs(ctx, id)
		if !found && err == nil {
			return fmt.Errorf("%w: the session is not paused (resumed meanwhile); it runs on", errdefs.ErrConflict)
		}
		return err
	}
	if errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrSessionLost) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: the session is not paused; it runs on", errdefs.ErrConflict)
}

// deletePausedAs deletes the paused session id for the caller ctx
// carries, who the deletion names, and settles it if it was there.
func (m *Manager) deletePausedAs(ctx context.Context, id string) (found bool, err error) {
	var who *identity.Identity
	if w, ok := identity.From(ctx); ok {
		who = &w
	}
	found, err = m.deletePaused(id, who)
	if found && err == nil {
		m.settle(ctx, id)
	}
	return found, err
}

// Close ends every session (with persistence and on_shutdown "pause",
// pausing each first) and refuses new ones. It returns when every
// sandbox is gone.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	// The shutdown waits for every teardown: none takes spare CPU alone.
	m.hurryTeardowns()
	// A creation under way sees closed when it is done and tears its
	// sandbox down itself; none may outlive Close. A restore under way
	// stops reading its image (its session stays paused) rather than
	// hold the shutdown for it.
	m.stop()
	m.creates.Wait()
	m.mu.Lock()
	if m.sweeper != nil {
		m.sweeper.Stop()
	}
	live := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		live = append(live, s)
	}
	m.mu.Unlock()
	if m.cfg.Persistence.Enabled && m.cfg.Persistence.OnShutdown == "pause" {
		m.pauseAll(live)
	}
	m.mu.Lock()
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
		go func() { defer wg.Done(); s.terminate(apitype.Ended(apitype.EndShutdown)); <-s.gone }()
	}
	wg.Wait()
	m.mu.Lock()
	going := make([]*Session, 0, len(m.going))
	for s := range m.going {
		going = append(going, s)
	}
	m.mu.Unlock()
	for _, s := range going {
		<-s.gone
	}
	m.bg.Wait()
	m.seals.Wait()
}

// acquire takes an execution slot, waiting up to the queue timeout.
func (m *Manager) acquire(ctx context.Context) (func(), error) {
	wait, stop := m.queueWait()
	defer stop()
	return m.acquireBy(ctx, wait)
}

// acquireBy takes an execution slot, waiting until wait fires (a queue
// timeout its caller shares with another slot it took: a one-shot's).
func (m *Manager) acquireBy(ctx context.Context, wait <-chan time.Time) (func(), error) {
	return m.take(ctx, m.execs, nil, "executions are running", wait)
}

// acquireTeardownBy takes a one-shot's place among the sandboxes
// one-shots may have alive, waiting until wait fires (the one-shot's
// queue timeout, which its execution slot's wait shares); the teardowns
// it waits for take all the CPU they need meanwhile.
func (m *Manager) acquireTeardownBy(ctx context.Context, wait <-chan time.Time) (func(), error) {
	waiting := false
	full := func() {
		// Counted before the hurry: a teardown that starts yielding
		// after it sees the waiter (yieldTeardown), one before it is
		// hurried here.
		m.mu.Lock()
		m.teardownWaiters++
		m.mu.Unlock()
		waiting = true
		m.hurryTeardowns()
	}
	release, err := m.take(ctx, m.teardowns, full, "one-shot sandboxes are running or being torn down", wait)
	if waiting {
		m.mu.Lock()
		m.teardownWaiters--
		m.mu.Unlock()
	}
	return release, err
}

// queueWait fires once the queue timeout (server.queue_timeout) has
// passed from now; stop releases it.
func (m *Manager) queueWait() (<-chan time.Time, func()) {
	if m.queueTimer != nil {
		return m.queueTimer(m.cfg.Server.QueueTimeout.D())
	}
	t := time.NewTimer(m.cfg.Server.QueueTimeout.D())
	return t.C, func() { t.Stop() }
}

// take takes a slot of sem, waiting until wait fires (full says so
// first, unless nil); what is said of its capacity when that runs out.
func (m *Manager) take(ctx context.Context, sem chan struct{}, full func(), what string, wait <-chan time.Time) (func(), error) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	default:
	}
	if full != nil {
		full()
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-wait:
		return nil, fmt.Errorf("%w: %d %s, the server maximum", errdefs.ErrLimit, cap(sem), what)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// oneShotYield is how long at most a one-shot's teardown takes only spare
// CPU (see yieldTeardown): long enough to stay out of the way of a burst
// of requests right after the one-shots', short enough that a busy
// server never holds dead sandboxes' memory for long.
const oneShotYield = 2 * time.Second

// yieldTeardown gives the one-shot s's sandbox the lowest CPU weight
// before its teardown: nobody waits for it (its answer has gone), so the
// runtime's and the init's exits, which unmap their memory, take only
// the CPU that requests leave, rather than compete with those that
// follow a burst of one-shots (the creations right after one, above
// all). For at most oneShotYield, and never while a request waits for a
// teardown slot (acquireTeardownBy) or the server shuts down. Its caller
// holds m.bg (the one-shot's teardown).
func (m *Manager) yieldTeardown(s *Session) {
	m.mu.Lock()
	if m.closed || m.teardownWaiters > 0 {
		m.mu.Unlock()
		return
	}
	m.yielded[s] = struct{}{}
	m.mu.Unlock()
	if s.inst.Yield() != nil {
		// Its weight cannot be set: torn down as it is.
		m.mu.Lock()
		delete(m.yielded, s)
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	_, still := m.yielded[s]
	m.mu.Unlock()
	if !still {
		// Hurried before it yielded.
		s.inst.Foreground()
		return
	}
	fire, stop := m.timer(oneShotYield)
	// Its caller, the one-shot's teardown, holds m.bg: Close waits for
	// this one too.
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		defer stop()
		select {
		case <-fire:
			select {
			case <-s.gone:
				// Gone as the timer fired: its cgroup with it, nothing
				// to give the weight back to.
			default:
				m.hurryTeardown(s)
			}
		case <-s.gone:
		}
	}()
}

// hurryTeardown gives the one-shot s's sandbox, if it yields, the normal
// CPU weight back.
func (m *Manager) hurryTeardown(s *Session) {
	m.mu.Lock()
	_, ok := m.yielded[s]
	delete(m.yielded, s)
	m.mu.Unlock()
	if ok {
		s.inst.Foreground()
	}
}

// hurryTeardowns gives every yielding one-shot's sandbox the normal CPU
// weight back.
func (m *Manager) hurryTeardowns() {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.yielded))
	for s := range m.yielded {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		m.hurryTeardown(s)
	}
}

// tornDown forgets the one-shot s, its sandbox gone.
func (m *Manager) tornDown(s *Session) {
	m.mu.Lock()
	delete(m.yielded, s)
	delete(m.oneShots, s)
	m.mu.Unlock()
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Limits are the session's limits.
func (s *Session) Limits() config.Limits { return s.limits }

// Info describes the session: what it is, and what it does and uses now
// (the sandbox's cgroup read, outside any lock).
func (s *Session) Info() apitype.Session { return s.info(nil) }

// info is Info; usage, if set, is the paused quotas' use read once for
// a listing (see restores).
func (s *Session) info(usage func() *pausedUsage) (info apitype.Session) {
	defer func() {
		if s.egressGate() != nil {
			info.Network = s.Network()
		}
		s.cmds.mu.Lock()
		info.CommandsRunning = s.cmds.running
		s.cmds.mu.Unlock()
	}()
	cpu, cerr := s.inst.CPU()
	mem, merr := s.inst.Memory()
	pointAt := s.live.pointAt()
	restores := ""
	if s.client {
		restores = s.restores(usage, mem, merr)
	}
	rp := s.live.info()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	state := apitype.StateIdle
	if s.busy {
		state = apitype.StateBusy
	}
	if !s.end.Zero() {
		state = apitype.StateEnded
	}
	info = apitype.Session{
		ID: s.id, Language: s.lang.Lang, State: state, EndReason: s.end.Reason, EndCode: s.end.Code,
		CreatedAt: s.create.UTC(), LastUsedAt: s.lastUsed.UTC(),
		IdleTimeout: config.Duration(s.idle), Limits: s.limits, Executions: s.execCount,
		Sandbox: s.inst.Name(), Isolation: s.inst.Isolation(), Tenant: s.owner.Tenant,
		Template: s.template, TemplateVersion: s.templateVersion,
		History:   s.hist.info(),
		OnTimeout: s.made.OnTimeout, OnTimeoutRestores: s.made.OnTimeoutRestores, AutoResume: s.made.AutoResume,
		Restored: s.restored, RestoredReason: s.restoredWhy,
		Metadata: s.made.Metadata, Reseeded: s.reseeded, NotReseeded: s.notReseeded,
	}
	if s.client && state != apitype.StateEnded {
		info.Restores = restores
		if !pointAt.IsZero() {
			at := pointAt.UTC()
			info.RecoveryPointAt = &at
		}
		info.RecoveryPoint = rp
	}
	if s.lifetime > 0 {
		exp := s.expires.UTC()
		info.ExpiresAt = &exp
	}
	if s.tools != nil {
		info.Tools = s.tools.Names()
	}
	if s.secrets != nil {
		info.Secrets = s.Secrets()
	}
	if state != apitype.StateEnded && cerr == nil && merr == nil {
		info.Usage = &apitype.Usage{MemoryBytes: mem, CPUMs: ms(cpu), CPUPercent: s.cpuShareLocked(cpu, now)}
	}
	if ex := s.currentLocked(); ex != nil {
		head, _ := ex.codeHead()
		info.Current = &apitype.CurrentExecution{ID: ex.id, StartedAt: ex.started.UTC(), CodeHead: head, CodeBytes: len(ex.code)}
	}
	return info
}

// cpuShareLocked is the share of one CPU (in percent) the sandbox used
// since the previous reading at least a second before (the first, the
// description of the new session, reads 0); s.mu is held.
func (s *Session) cpuShareLocked(cpu time.Duration, now time.Time) float64 {
	if s.cpuAt.IsZero() {
		s.cpuAt, s.cpuThen = now, cpu
	}
	if el := now.Sub(s.cpuAt); el >= time.Second {
		s.cpuPct = max(0, float64(cpu-s.cpuThen)/float64(el)*100)
		s.cpuAt, s.cpuThen = now, cpu
	}
	return s.cpuPct
}

// Touch marks the session used (file transfers count as use).
func (s *Session) Touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	if s.idleTimer != nil && s.end.Zero() {
		s.idleTimer.Reset(s.idle)
	}
	s.mu.Unlock()
}

// Use marks the session in use until done is called: a file transfer in
// progress keeps it from idling out however long it takes.
func (s *Session) Use() (done func()) {
	s.mu.Lock()
	s.inUse++
	s.lastUsed = time.Now()
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.inUse--
			s.mu.Unlock()
			s.Touch()
		})
	}
}

// checkIdle ends the session if it has been idle for its idle timeout.
// The decision and the claim of the session's end are one step under
// its lock, so that an execution or transfer cannot begin in between.
func (s *Session) checkIdle() {
	s.mu.Lock()
	idleFor := time.Since(s.lastUsed)
	if s.busy || s.inUse > 0 || s.pausing || idleFor < s.idle || !s.end.Zero() {
		if s.idleTimer != nil && s.end.Zero() {
			s.idleTimer.Reset(max(s.idle-idleFor, time.Second))
		}
		s.mu.Unlock()
		return
	}
	if s.made.OnTimeout == apitype.OnTimeoutPause {
		s.mu.Unlock()
		s.timedOut(apitype.Ended(apitype.EndIdle))
		return
	}
	s.end = apitype.Ended(apitype.EndIdle)
	s.mu.Unlock()
	s.terminate(s.end)
}

// End says why the session ended (zero while it lives).
func (s *Session) End() apitype.End {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// monitor ends the session when its sandbox reports trouble while no
// execution is watching.
func (s *Session) monitor() {
	if end := s.inst.Monitor(s.ended); !end.Zero() && !s.checkpointing.Load() {
		s.terminate(end)
	}
}

// terminate ends the session once, for end, and frees everything.
func (s *Session) terminate(end apitype.End) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		if s.end.Zero() {
			s.end = end
		}
		end = s.end // claimed already (checkIdle)
		if s.idleTimer != nil {
			s.idleTimer.Stop()
		}
		if s.lifeTimer != nil {
			s.lifeTimer.Stop()
		}
		s.mu.Unlock()
		// The recovery point before anything the end lets go (an
		// execution returning, its seal) can seal it again: ended
		// durably, or kept by a shutdown that could not pause the
		// session (the next start recovers it, as after a crash).
		if s.keepsPoint(end) {
			s.live.stop()
		} else {
			s.live.end()
		}
		close(s.ended)
		m := s.m
		m.mu.Lock()
		// A one-shot's id was never a client's to ask about again: only
		// sessions are remembered (for a 410 rather than a 404).
		_, registered := m.sessions[s.id]
		if registered {
			delete(m.sessions, s.id)
			select {
			case <-s.gone:
			default:
				if m.going == nil {
					m.going = map[*Session]struct{}{}
				}
				m.going[s] = struct{}{}
			}
			m.keepHistoryLocked(s, end)
			// A paused session's record is its listing (m.paused, made
			// with its end's claim): whoever takes it from there, a
			// delete or persistence.keep, remembers its end.
			if end.Code != apitype.EndPaused {
				m.rememberEndLocked(s.id, end, s.owner.Tenant)
			}
		}
		m.mu.Unlock()
		s.hist.ended()
		s.inst.Kill()
		s.closeEgress()
		s.closePorts(Caller{Tenant: s.owner.Tenant})
		s.closeTools()
		// A running execution notices the jail dying and frees it all
		// when it returns; otherwise free it now.
		s.mu.Lock()
		busy, execs := s.busy, s.execCount
		s.mu.Unlock()
		if !busy {
			s.teardownOnce.Do(s.teardown)
		}
		m.log.Info("session ended", "session", s.id, "reason", end.Reason)
		if registered && m.obs != nil {
			// The owner's tenant; the key and request of the deletion,
			// or none when the session ended by itself.
			who := Caller{Tenant: s.owner.Tenant}
			s.mu.Lock()
			if s.deletedBy != nil && end.Code == apitype.EndDeleted {
				who = *s.deletedBy
			}
			s.mu.Unlock()
			var eg []apitype.EgressDecision
			var summarized int64
			if g := s.egressGate(); g != nil {
				// What sandbox code did on the network outside any
				// execution reaches the audit log too (red team: a
				// background thread's connections were in no record).
				eg, summarized = egressOf(g.TakeAll())
			}
			m.obs.SessionEnded(SessionEvent{Caller: who, Session: s.id, Language: s.lang.Lang, Sandbox: s.inst.Name(), Limits: s.limits,
				Duration: time.Since(s.create), Executions: execs, End: end, Egress: eg, EgressSummarized: summarized})
		}
	})
}

// keepsPoint says whether the session's end keeps its recovery point: a
// shutdown's (with persistence.on_shutdown "pause") that could not
// pause it (refused, failed, out of time), so that a clean shutdown
// never loses what a kill -9 would have kept.
func (s *Session) keepsPoint(end apitype.End) bool {
	return s.m.keptAtShutdown(end)
}

func (s *Session) teardown() {
	defer func() {
		m := s.m
		m.mu.Lock()
		close(s.gone)
		delete(m.going, s)
		m.mu.Unlock()
	}()
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.closeEgress()
	s.closeTools()
	if err := s.inst.Close(); err != nil {
		s.m.log.Error("session teardown", "session", s.id, "err", err)
	}
	// Its end (terminate) ended or kept its recovery point: its files
	// go, or its descriptors.
	s.live.close()
	// Their processes went with the sandbox.
	for _, c := range s.besides() {
		c.beside.Close()
	}
}

// currentLocked is the execution that has run longest of those running
// now, in any context (nil: none); mu is held.
func (s *Session) currentLocked() *execution {
	var cur *execution
	for _, c := range s.ctxs {
		if ex := c.cur; ex != nil && ex.id != "" && (cur == nil || ex.started.Before(cur.started)) {
			cur = ex
		}
	}
	return cur
}

// Interrupt interrupts every execution running in the session (one per
// context at most), and reports whether there was one.
func (s *Session) Interrupt() (bool, error) { return s.interruptFor("") }

// interruptFor is Interrupt for reason ("": a client's; a pause's kill
// reason, which its result reports).
func (s *Session) interruptFor(reason apitype.KillReason) (bool, error) {
	s.mu.Lock()
	end := s.end
	var running []*execution
	for _, c := range s.ctxs {
		if c.cur != nil {
			running = append(running, c.cur)
		}
	}
	s.mu.Unlock()
	if !end.Zero() {
		return false, gone(end)
	}
	any := false
	for _, ex := range running {
		any = ex.interruptNow(reason) || any
	}
	return any, nil
}

// interruptNow asks the execution to stop (its watch interrupts the
// code) for reason ("": a client's). Each execution has its own channel:
// a request for one can never land on the next.
func (ex *execution) interruptNow(reason apitype.KillReason) bool {
	select {
	case ex.interrupt <- reason:
	default:
	}
	return true
}

// Workspace is the host's handle on the session's /workspace, for the
// session's own use; clients go through Files.
func (s *Session) workspace() *workspace.Dir { return s.inst.Workspace() }
