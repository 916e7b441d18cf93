// Package server owns airlock's composition root: it binds its TCP
// addresses (first: one in use stops it before anything starts), builds
// the jail host, takes the state directory's lock, sweeps what a killed predecessor left,
// starts the warm pools (and with them the template interpreter), the
// session manager and the API, listens on TCP and on the root-only unix
// socket, handles signals (SIGTERM and SIGINT shut down, SIGUSR1 dumps
// every goroutine, AIRLOCK_CPUPROFILE profiles the run), and shuts all of
// it down in order. New listeners, handlers (MCP, metrics) and session
// observers (audit, quotas) are wired here, one line each.
//
// It must never hold policy of its own: what a request may do is decided
// by api and session, how a sandbox is built by instance and jail. And it
// must never leave anything behind after Shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/audit"
	"airlock/internal/broker"
	"airlock/internal/cleanup"
	"airlock/internal/client"
	"airlock/internal/cluster"
	"airlock/internal/config"
	"airlock/internal/console"
	"airlock/internal/directory"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/gvisor"
	"airlock/internal/httpapi"
	"airlock/internal/httpapi/e2b"
	"airlock/internal/httpapi/v1"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/lockfile"
	"airlock/internal/mcp"
	"airlock/internal/metrics"
	"airlock/internal/pool"
	"airlock/internal/quota"
	"airlock/internal/runtimes"
	"airlock/internal/session"
	"airlock/internal/store"
)

// Options are what the command line adds to the configuration.
type Options struct {
	Version string
	Log     *slog.Logger
	// Stderr receives goroutine dumps (SIGUSR1).
	Stderr io.Writer
	// Observers hear what sessions do (metrics, audit, quotas).
	Observers []session.Observer
	// Handlers are served beside the API at their ServeMux patterns (MCP
	// at "/mcp", metrics), behind the API's request ids, authentication
	// and request log.
	Handlers map[string]http.Handler
	// Embedded serves no listener, TCP or unix: the server is used in
	// this process only, through Handler (`airlock mcp` without a server).
	Embedded bool
}

// Server is a running airlock server.
type Server struct {
	cfg  config.Config
	opts Options
	log  *slog.Logger

	host    *jail.Host
	lock    *os.File
	pool    *pool.Pool      // nil without warm pools
	tmpl    *pool.Templates // nil without a template store
	manager *session.Manager
	api     *v1.Server
	e2b     *e2b.Server          // nil: e2b.enabled is off
	mcp     *mcp.Server          // nil when mcp.enabled is off
	db      *store.DB            // nil when neither keys nor the audit log need it
	dir     *directory.Directory // nil without a store
	audit   *audit.Log           // nil when audit.enabled is off
	quotas  *quota.Tracker
	metrics *metrics.Metrics // nil when metrics.enabled is off
	// rootExtra are root files of the configuration's (the secrets' CA).
	rootExtra map[string]string
	// keeper: the digest of the gVisor keeper this server's sandboxes run
	// ("": none); gv, the gVisor host (nil: none), whose live sandboxes'
	// keepers a sweep keeps too.
	keeper string
	gv     *gvisor.Host
	ks     keeperSweeps

	listeners []listener
	tcp       net.Addr
	// metricsAddr: metrics.listen's listener, if any
	metricsAddr net.Addr
	socket      string // the unix socket's path, removed at shutdown
	errc        chan error
	closers     cleanup.Stack // run in reverse order by Shutdown
	once        sync.Once
}

// listener is one address the server serves, with its handler.
type listener struct {
	ln   net.Listener
	http *http.Server
}

// serve adds a listener that serves h from Start on: the one place a
// listener is added (a metrics port, say, is one more call).
func (s *Server) serve(ln net.Listener, h http.Handler) {
	s.listeners = append(s.listeners, listener{ln: ln, http: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}})
	s.closers.AddFunc(func() { ln.Close() })
}

// New builds the server: host, lock, sweeps, pools, manager, API and the
// listeners (the unix socket first: the umask that keeps it private is
// process-wide). Nothing is served until Start.
func New(cfg config.Config, opts Options) (_ *Server, err error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	// The patterns of redaction and code rules, compiled by their users:
	// a bad one stops the server before anything starts.
	if err := session.CheckPolicy(cfg); err != nil {
		return nil, err
	}
	// Tools too, with their credentials read now: a bad schema or a
	// missing secret stops the server, never a call.
	var brk *broker.Broker
	if cfg.HasTools() {
		if brk, err = broker.New(cfg, broker.Options{Log: opts.Log}); err != nil {
			return nil, err
		}
	}
	// Secrets too, and their CA.
	sec, secretFiles, err := loadSecrets(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Log, rootExtra: secretFiles}
	// The template's runtimes are its children; should it die, they
	// become ours instead of the host init's, and are reaped here (see
	// zygote.Close and instance's pidfd watch): a host init slow to reap
	// would otherwise hold every such sandbox's teardown.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("%w: become a child subreaper: %v", errdefs.ErrUnavailable, err)
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// The addresses first: one in use is refused before anything starts
	// (the host, the state lock, the pools and their template).
	var tcpLn, metricsLn net.Listener
	if !opts.Embedded {
		if tcpLn, err = listenTCP("server.listen", cfg.Server.Listen); err != nil {
			return nil, err
		}
		s.closers.AddFunc(func() { tcpLn.Close() })
		if cfg.Metrics.Enabled && cfg.Metrics.Listen != "" {
			if metricsLn, err = listenTCP("metrics.listen", cfg.Metrics.Listen); err != nil {
				return nil, err
			}
			s.closers.AddFunc(func() { metricsLn.Close() })
		}
	}
	if s.host, err = newHost(cfg, s.log, s.rootExtra, true); err != nil {
		return nil, err
	}
	s.closers.AddFunc(func() { s.host.Close() })
	// One server per state directory and cgroup parent: everything named
	// s-* under them is ours, and whatever a killed predecessor left is
	// removed now.
	if s.lock, err = lockState(cfg.StateDir); err != nil {
		return nil, err
	}
	s.closers.AddFunc(func() { s.lock.Close() })
	// And one server per range of host ids and per cgroup parent,
	// whatever its state_dir.
	ids, err := s.host.LockServer()
	if err != nil {
		return nil, err
	}
	s.closers.AddFunc(func() { ids.Close() })
	s.sweep()
	var unixLn net.Listener
	if path := cfg.SocketPath(); path != "" && !opts.Embedded {
		if unixLn, err = listenUnix(path); err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		s.socket = path
		s.closers.AddFunc(func() { unixLn.Close(); os.Remove(path) })
	}

	slots := instance.NewSlots(s.host.Layout())
	// Before any pool fills: every sandbox gets a copy of the font list.
	native := &instance.Cold{Kernel: instance.Native{Host: s.host}, Slots: slots}
	if _, err := ensureFontCache(context.Background(), cfg, s.host, native, s.log); err != nil {
		s.log.Warn("no matplotlib font list: first plots of each session will be slow", "err", err)
	}
	kernels, err := s.kernels(cfg)
	if err != nil {
		return nil, err
	}
	// The server's own isolation gets the warm pools; one a request may
	// pick besides is built cold.
	own := kernels[cfg.Isolation]
	var source instance.Source = &instance.Cold{Kernel: own, Slots: slots}
	if cfg.Pool.Zygote || anyPool(cfg) {
		pc := cfg
		if pc.Pool.MemoryBudget == 0 {
			pc.Pool.MemoryBudget = config.Size(pool.AutoBudget(s.host.Cgroups().MemoryLimit()))
		}
		s.log.Info("warm pools", "memory_budget_mb", int64(pc.Pool.MemoryBudget)>>20, "automatic", cfg.Pool.MemoryBudget == 0)
		s.pool = pool.New(pc, own, slots, s.log)
		s.closers.AddFunc(s.pool.Close)
		source = s.pool
	}
	s.manager = session.NewManager(cfg, source, s.log)
	s.manager.SetBroker(brk)
	if err := s.manager.SetSecrets(sec); err != nil {
		return nil, fmt.Errorf("%w: secrets: %v", errdefs.ErrInvalidArgument, err)
	}
	// In a cluster, session ids carry this server's name and boot
	// epoch (after the state lock: the epoch is recorded there).
	ident, err := cluster.Load(cfg.Cluster, cfg.StateDir, os.Getenv, time.Now())
	if err != nil {
		return nil, err
	}
	s.manager.SetIdentity(ident)
	for iso, k := range kernels {
		if iso != cfg.Isolation {
			if g, ok := k.(instance.GVisor); ok {
				// Built on request: a runtime that imports the preload
				// first (about 2 s under gVisor) only pays off in a pool.
				g.Preload = nil
				k = g
			}
			s.manager.AddSource(iso, &instance.Cold{Kernel: k, Slots: slots})
		}
	}
	if err := s.openTemplates(cfg, kernels, slots); err != nil {
		return nil, err
	}
	eg, err := s.newEgress(cfg.Network)
	if err != nil {
		return nil, err
	}
	s.manager.SetEgress(eg)
	s.manager.Observe(opts.Observers...)
	s.api = v1.New(s.manager, cfg, s.log, opts.Version)
	if ident != nil {
		s.api.Pod = ident.Pod
		s.log.Info("serving as one server of a cluster", "pod", ident.Pod, "boot_epoch", ident.Epoch)
	}
	if err := s.tenancy(); err != nil {
		return nil, err
	}
	if s.pool != nil || s.tmpl != nil {
		s.api.Stats = s.poolStats
	}
	s.observe(metricsLn)
	s.api.Refused = s.refused
	if cfg.E2B.Enabled {
		if s.e2b, err = e2b.New(s.api.Edge, s.manager, cfg); err != nil {
			return nil, err
		}
		s.e2b.ServePort, s.e2b.Log = s.api.ServePort, s.log
		if s.db != nil {
			s.e2b.Records = e2bRecords{s.db}
			s.e2b.Register = s.dir.Register
			if s.db.Shared() {
				s.e2b.Cluster = s.dir.List
			}
		}
	}
	for pattern, h := range opts.Handlers {
		s.api.Handle(pattern, h)
	}
	if cfg.Console.Enabled {
		ui := console.Handler()
		s.api.Handle("GET "+console.Prefix, ui)
		s.api.Handle("GET "+strings.TrimSuffix(console.Prefix, "/"), ui)
		s.api.PublicTree(console.Prefix)
	}
	if cfg.MCP.Enabled {
		// What a closed MCP connection opened is ended by the server
		// itself: the caller's key may have been revoked meanwhile.
		mo := mcp.Options{Client: s.inProcessClient, Ender: client.InProcess(s.api.Local()), Version: opts.Version, Installs: cfg.Packages.Managers(), Languages: runtimes.Names(), Managers: runtimes.ManagerLanguages(), Content: cfg.MCP.Content, Log: s.log}
		// Its connections end with this process; the sessions they
		// made by name are paused with the others, for the next start.
		// (Marked by a metadata entry: not where none is allowed.)
		mo.Durable = cfg.Persistence.Enabled && cfg.Server.MaxMetadata > 0
		if ident != nil {
			// MCP sessions live in this server too: their ids carry
			// it, for the router (Mcp-Session-Id).
			mo.SessionID, mo.Pod = ident.NewID, ident.Pod
		}
		s.mcp = mcp.New(mo)
		s.api.Handle("/mcp", s.mcp.HTTPHandler(mcp.HTTPOptions{Idle: cfg.MCP.IdleTimeout.D(), MaxQuiet: cfg.MCP.SessionTimeout.D()}))
	}
	// Sessions an earlier run paused (at its shutdown, say) are listed
	// as paused from the first request on. Their keepers are swept now,
	// and again whenever images go (a resume, a delete, an expiry).
	s.manager.OnImagesRemoved(s.kickKeeperSweep)
	s.closers.AddFunc(s.stopKeeperSweeps)
	if err := s.manager.LoadPaused(); err != nil {
		return nil, err
	}
	s.sweepKeepers()
	if s.dir != nil {
		// The directory may now take what this pod no longer holds for
		// gone.
		s.dir.Loaded()
	}
	if s.e2b != nil {
		// Their E2B sandboxes too, with the same tokens.
		if err := s.e2b.Load(context.Background()); err != nil {
			return nil, err
		}
	}
	if s.mcp != nil && cfg.Persistence.Enabled {
		// And the sessions its MCP connections made, which no
		// connection holds any more: theirs are gone with that run.
		if err := s.mcp.Adopt(context.Background(), cfg.MCP.SessionTimeout.D()); err != nil {
			return nil, err
		}
	}
	if opts.Embedded {
		return s, nil
	}

	s.tcp = tcpLn.Addr()
	s.serve(tcpLn, s.Handler())
	if unixLn != nil {
		s.serve(unixLn, s.Handler())
	}
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metrics.Handler())
		s.serve(metricsLn, mux)
	}
	return s, nil
}

// observe builds the metrics when they are on: a session observer, the
// API's request hook, collectors of the pools and quotas, and /metrics
// on the API (admins only, unless public) or on ln, metrics.listen's
// listener (nil without).
func (s *Server) observe(ln net.Listener) {
	cfg := s.cfg.Metrics
	if !cfg.Enabled {
		return
	}
	s.metrics = metrics.New()
	s.manager.Observe(s.metrics)
	s.api.Observe = s.metrics.HTTP
	if s.pool != nil || s.tmpl != nil {
		s.metrics.Pools(s.poolStats)
	}
	if s.quotas != nil {
		s.metrics.Quotas(s.quotas.Refused)
	}
	if eg := s.manager.Egress(); eg != nil {
		s.metrics.Egress(eg.Limits.Shared.Stats)
	}
	if s.audit != nil {
		s.metrics.Audit(s.audit.Health)
	}
	if s.cfg.Persistence.Enabled {
		s.manager.OnPause(s.metrics.Pause)
		s.manager.OnSeal(s.metrics.Seal)
		s.metrics.Paused(s.manager.PausedUsage)
	}
	if budget, per, err := s.cfg.Ptys(kernelPtys().ForSandboxes()); err == nil {
		s.metrics.Ptys(budget, per, func() (int, error) {
			k, err := jail.ReadKernelPtys()
			return k.Open, err
		})
	}
	s.metrics.AccessRefusals(httpapi.RefusalReasons())
	if ln == nil {
		s.api.HandleAdmin("GET /metrics", s.metrics.Handler())
		if cfg.Public {
			s.api.Public("/metrics")
		}
		return
	}
	s.metricsAddr = ln.Addr()
}

// listenTCP listens on addr, the value of key.
func listenTCP(key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", errdefs.ErrUnavailable, key, addr, err)
	}
	return ln, nil
}

// refused hears the API's refusals: counted by reason, recorded by the
// audit log in aggregate (both nil-safe).
func (s *Server) refused(r httpapi.Refusal) {
	s.metrics.AccessRefused(r.Reason)
	s.audit.Refused(r.Kind, r.Reason, r.Source, r.Tenant, r.KeyID, r.RequestID)
}

// Metrics is the server's metrics (nil when they are off): other packages
// report through it (egress decisions, say). Its methods are nil-safe.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// MetricsAddr is the address of the metrics' own listener (nil without).
func (s *Server) MetricsAddr() net.Addr { return s.metricsAddr }

// Handler is the API with everything served beside it.
func (s *Server) Handler() http.Handler {
	if s.e2b == nil {
		return s.api
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.e2b.Claims(r) {
			s.e2b.ServeHTTP(w, r)
			return
		}
		s.api.ServeHTTP(w, r)
	})
}

// inProcessClient is a client of this server's own API, in this process,
// carrying the credentials of header (an MCP request's): what MCP tools
// call, so that the API's authentication and limits apply to them.
func (s *Server) inProcessClient(header http.Header) *client.Client {
	var opts []client.Option
	if tok, ok := strings.CutPrefix(header.Get("Authorization"), "Bearer "); ok {
		opts = append(opts, client.WithToken(tok))
	}
	return client.InProcess(s.api, opts...)
}

// kernels builds the kernels of the isolations the configuration uses.
// A configured gVisor that cannot boot a sandbox now is an error: the
// server refuses to start rather than run code with less isolation.
func (s *Server) kernels(cfg config.Config) (map[config.Isolation]instance.Kernel, error) {
	out := map[config.Isolation]instance.Kernel{}
	for _, iso := range cfg.Isolations() {
		switch iso {
		case config.Native:
			out[iso] = instance.Native{Host: s.host}
		case config.GVisor:
			runsc, err := gvisor.Find(cfg.GVisor.Runsc)
			if err != nil {
				return nil, err
			}
			opts := gvisor.OptionsFrom(cfg, runsc)
			opts.RootFiles = runtimes.RootFiles()
			maps.Copy(opts.RootFiles, rootFiles(cfg, s.rootExtra))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h, err := gvisor.NewHost(ctx, opts, s.host.Cgroups())
			if err != nil {
				return nil, err
			}
			s.closers.AddFunc(func() { h.Close() })
			s.keeper, s.gv = h.KeeperDigest(), h
			probe, err := h.Probe(ctx, gvisor.Spec{Name: instance.GVisorPrefix + "probe", Limits: cfg.Defaults})
			if err != nil {
				return nil, fmt.Errorf("%w: gVisor is configured but cannot boot a sandbox here (run `airlock doctor`): %v", errdefs.ErrUnavailable, err)
			}
			s.log.Info("gvisor ready", "runsc", h.Describe(), "boot_ms", probe.Boot.Milliseconds(), "kernel", probe.Kernel)
			if on, why := cfg.GVisorCheckpoint(); on {
				// Pauses are to keep memory: that must work here, or the
				// server says so now rather than at the first pause.
				ck, err := h.ProbeCheckpoint(ctx, gvisor.Spec{Name: instance.GVisorPrefix + "probe-ck", Limits: cfg.Defaults})
				if err != nil {
					return nil, fmt.Errorf("%w: %s, but runsc cannot checkpoint and restore a sandbox here (run `airlock doctor`; set gvisor.checkpoint to false to pause gVisor sessions with their files only): %v", errdefs.ErrUnavailable, why, err)
				}
				s.log.Info("gvisor checkpoints ready: pauses keep memory", "why", why, "checkpoint_ms", ck.Checkpoint.Milliseconds(), "restore_ms", ck.Restore.Milliseconds())
			} else {
				s.log.Info("gvisor pauses keep files only", "why", why)
			}
			if cfg.Network.Enabled {
				// Sessions with egress boot in a namespace of airlock's.
				ns, err := egress.NewNamespace()
				if err == nil {
					_, err = h.Probe(ctx, gvisor.Spec{Name: instance.GVisorPrefix + "probe-net", Limits: cfg.Defaults, NetNS: ns})
				}
				if err != nil {
					return nil, fmt.Errorf("%w: gVisor is configured with network egress but cannot boot a sandbox in a network namespace here (run `airlock doctor`): %v", errdefs.ErrUnavailable, err)
				}
			}
			out[iso] = instance.GVisor{Host: h, Preload: cfg.Pool.Preload}
		}
	}
	return out, nil
}

// sweep removes the cgroups and root templates a previous server left.
func (s *Server) sweep() {
	for _, prefix := range []string{"s-", "zygote-", instance.GVisorPrefix} {
		if err := s.host.Cgroups().Sweep(prefix, func(string) bool { return true }); err != nil {
			s.log.Warn("removing cgroups left by a previous server", "err", err)
		}
	}
	// gVisor sandboxes: their state directories and mounts, and the
	// cgroups runsc made beside airlock's (the Sentry and gofer died
	// with airlock's cgroups above).
	if err := gvisor.Sweep(s.cfg.StateDir, s.cfg.CgroupParent, instance.GVisorPrefix); err != nil {
		s.log.Warn("removing gVisor sandboxes left by a previous server", "err", err)
	}
	s.host.Cgroups().Sweep("r-", jail.StaleRun)
	if err := s.host.SweepTemplates(); err != nil {
		s.log.Warn("removing old root templates", "err", err)
	}
}

// keeperSweeps runs the sweeps of gVisor keeper copies while the server
// runs: one at a time (run), at most one more waiting (pending), none
// once stopped; timer sweeps again when a copy's grace ends. lk guards
// timer and stopped, and is never held across a sweep.
type keeperSweeps struct {
	run     sync.Mutex
	pending atomic.Bool
	lk      sync.Mutex
	timer   *time.Timer
	stopped bool
	wg      sync.WaitGroup
}

// kickKeeperSweep sweeps keeper copies in the background (paused
// sessions' images went: their keepers may be needed no more).
func (s *Server) kickKeeperSweep() {
	if !s.ks.pending.CompareAndSwap(false, true) {
		return // one is waiting, and will see this
	}
	s.ks.lk.Lock()
	defer s.ks.lk.Unlock()
	if s.ks.stopped {
		return
	}
	s.ks.wg.Add(1)
	go func() {
		defer s.ks.wg.Done()
		s.sweepKeepers()
	}()
}

// stopKeeperSweeps stops the sweeps and waits for the one running.
func (s *Server) stopKeeperSweeps() {
	s.ks.lk.Lock()
	s.ks.stopped = true
	if s.ks.timer != nil {
		s.ks.timer.Stop()
	}
	s.ks.lk.Unlock()
	s.ks.wg.Wait()
}

// sweepKeepers removes the copies of gVisor keepers nothing needs: not
// this server's, nor one a live sandbox is bound to (a restored one's
// pause names its copy again), nor one a paused session's memory image
// (or a fork's copy of a live one, or an image a resume set aside until
// its session's first recovery point) was taken with: its resume binds
// it again. Nothing goes while any memory.json cannot be read, nor a copy
// used within the grace (gvisor.SweepKeepers), swept again once that
// ends. The live sandboxes' are read before the images: a sandbox is
// closed only once its checkpoint's memory.json is written, so a copy
// is always seen by one or the other.
func (s *Server) sweepKeepers() {
	s.ks.run.Lock()
	defer s.ks.run.Unlock()
	s.ks.pending.Store(false)
	keep := map[string]bool{s.keeper: true}
	if s.gv != nil {
		maps.Copy(keep, s.gv.KeepersInUse())
	}
	dirs := []string{gvisor.KeeperDir(config.Config{StateDir: s.cfg.StateDir})}
	if s.cfg.Persistence.Enabled {
		refs, err := s.manager.PausedKeepers()
		if err != nil {
			s.log.Warn("old gVisor keepers are kept: a paused session's memory image cannot be read", "err", err)
			return
		}
		maps.Copy(keep, refs)
		dirs = append(dirs, gvisor.KeeperDir(s.cfg))
	}
	var next time.Time
	defer func() { s.log.Debug("gVisor keepers swept", "kept", slices.Sorted(maps.Keys(keep))) }()
	for _, dir := range dirs {
		gone, later, err := gvisor.SweepKeepers(dir, keep)
		if err != nil {
			s.log.Warn("removing old gVisor keepers", "dir", dir, "err", err)
		}
		if len(gone) > 0 {
			s.log.Info("removed gVisor keepers no paused session needs", "dir", dir, "digests", gone)
		}
		if !later.IsZero() && (next.IsZero() || later.Before(next)) {
			next = later
		}
	}
	if next.IsZero() {
		return
	}
	s.ks.lk.Lock()
	defer s.ks.lk.Unlock()
	if s.ks.stopped {
		return
	}
	d := time.Until(next) + time.Second
	if s.ks.timer == nil {
		s.ks.timer = time.AfterFunc(d, s.kickKeeperSweep)
	} else {
		s.ks.timer.Reset(d)
	}
}

// Addr is the TCP address the server listens on.
func (s *Server) Addr() net.Addr { return s.tcp }

// Manager is the server's session manager.
func (s *Server) Manager() *session.Manager { return s.manager }

// Start serves on every listener.
func (s *Server) Start() {
	s.errc = make(chan error, len(s.listeners)) // every Serve returns once
	for _, l := range s.listeners {
		go func() { s.errc <- l.http.Serve(l.ln) }()
	}
	attrs := []any{"listen", s.Addr().String(), "socket", s.socket, "version", s.opts.Version, "protections", s.host.Protections()}
	if s.metricsAddr != nil {
		attrs = append(attrs, "metrics", s.metricsAddr.String())
	}
	s.log.Info("airlock serving", attrs...)
}

// Done delivers the error of a listener that failed (after Start).
func (s *Server) Done() <-chan error { return s.errc }

// Shutdown stops listening and ends every session (with persistence,
// pausing each first: Manager.Close); it returns when every
// sandbox is gone, or ctx ends the HTTP drain early.
func (s *Server) Shutdown(ctx context.Context) {
	s.once.Do(func() {
		// Listeners close at once; sessions end alongside, so that
		// executions in flight answer "server shut down" instead of
		// holding the shutdown until their own timeouts.
		var drained sync.WaitGroup
		for _, l := range s.listeners {
			drained.Go(func() { l.http.Shutdown(ctx) })
		}
		if s.mcp != nil {
			// MCP connections do not outlive this process: their
			// default sessions end, before the others pause.
			s.mcp.Shutdown()
		}
		s.manager.Close()
		drained.Wait()
		s.close()
		s.log.Info("all sessions ended")
	})
}

// close releases what New acquired, in reverse order.
func (s *Server) close() {
	if err := s.closers.Run(); err != nil {
		s.log.Warn("shutting down", "err", err)
	}
}

// Run runs a server until SIGTERM or SIGINT (or ctx ends), then shuts it
// down.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	defer floorHeap(heapFloor)()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s, err := New(cfg, opts)
	if err != nil {
		return err
	}
	// SIGUSR1 writes every goroutine's stack to the log, for diagnosing a
	// stuck server without stopping it.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	go func() {
		for range usr1 {
			pprof.Lookup("goroutine").WriteTo(s.opts.Stderr, 1)
		}
	}()
	if p := os.Getenv("AIRLOCK_CPUPROFILE"); p != "" {
		// A CPU profile of the whole run, written at shutdown (for
		// performance work).
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	s.Start()
	var failed error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
	case failed = <-s.Done():
		s.log.Error("server failed", "err", failed)
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.Shutdown(shutdown)
	if errors.Is(failed, http.ErrServerClosed) {
		failed = nil
	}
	return failed
}

// heapFloor is the heap a serving server's garbage collector is paced
// as if it held on top of its own (floorHeap). A warm execution allocates
// about 12 KiB; on the 2 MiB a server holds, the collector's default
// pacing started a cycle every 150-200 executions, and the executions
// that met one (1-3 ms of marking beside them on a small host) were half
// of those over 1.5 ms (docs/explanation/performance.md). 16 MiB did
// no better.
const heapFloor = 8 << 20

// floorHeap paces the garbage collector as if the heap held n bytes more
// than it does, until the returned function is called: a cycle starts
// once about twice (the live heap + n) is allocated, instead of twice the
// live heap (4 MiB at least), so a small heap is collected far less often
// and a large one as before. The n bytes are one allocation never
// written, which the kernel backs with no memory; what it costs is the
// garbage the wider room holds between cycles, about n. Call it first:
// memory freed before would be reused, and zeroed, for it.
func floorHeap(n int) (release func()) {
	b := make([]byte, n)
	return func() { runtime.KeepAlive(b) }
}

func anyPool(cfg config.Config) bool {
	for _, sizes := range []map[string]int{cfg.Pool.Size, cfg.Pool.NetworkSize} {
		for _, n := range sizes {
			if n > 0 {
				return true
			}
		}
	}
	return false
}

// listenUnix listens on a unix socket at path that only this user can
// reach. A socket left by a killed server is replaced (the caller holds
// the state lock); any other file there is an error.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // removed at shutdown
	return ln, nil
}

// stateLockPath is the lock file of the server on the state directory
// dir.
func stateLockPath(dir string) string { return filepath.Join(dir, "server.lock") }

// lockState takes an exclusive lock on the state directory (see
// lockfile: a server killed with SIGKILL does not keep it).
func lockState(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	f, held, err := lockfile.TryLock(stateLockPath(dir))
	switch {
	case held && err != nil:
		return nil, fmt.Errorf("%w: another airlock server uses %s: %v", errdefs.ErrUnavailable, dir, err)
	case held:
		return nil, fmt.Errorf("%w: another airlock server uses %s", errdefs.ErrUnavailable, dir)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return f, nil
}

// RunMCPStdio serves one MCP client on stdin and stdout (`airlock mcp`)
// until it leaves or ctx ends: through the local server's unix socket when
// one runs (its sessions, its pools), else through a server embedded in
// this process that listens nowhere and is shut down at the end. Nothing
// but the protocol may be written to stdout.
func RunMCPStdio(ctx context.Context, cfg config.Config, opts Options) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if path := cfg.SocketPath(); path != "" {
		local := client.Unix(path)
		probe, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := local.Health(probe)
		cancel()
		if err == nil {
			opts.Log.Info("mcp: using the local server", "socket", path)
			// The local server's configuration is this one's (the same
			// file), so is what it installs with.
			srv := mcp.New(mcp.Options{Client: func(http.Header) *client.Client { return local }, Version: opts.Version, Installs: cfg.Packages.Managers(), Languages: runtimes.Names(), Managers: runtimes.ManagerLanguages(), Content: cfg.MCP.Content, Log: opts.Log})
			return srv.RunStdio(ctx)
		}
		if !errors.Is(err, client.ErrUnreachable) {
			return err
		}
	}
	opts.Log.Info("mcp: no local server; running one in this process")
	opts.Embedded = true
	cfg.MCP.Enabled = false // the stdio server below is this one's MCP
	s, err := New(cfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		s.Shutdown(shutdown)
	}()
	api := client.InProcess(s.api.Local()) // the stdio client is the operator
	srv := mcp.New(mcp.Options{Client: func(http.Header) *client.Client { return api }, Version: opts.Version, Installs: cfg.Packages.Managers(), Languages: runtimes.Names(), Managers: runtimes.ManagerLanguages(), Content: cfg.MCP.Content, Log: opts.Log})
	err = srv.RunStdio(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// rootFiles are the files airlock places in every sandbox's root besides
// the session runtimes (runtimes.RootFiles, which a host reads only when
// it makes its root template: jail.Options.EmbeddedFiles): the tools'
// clients when the server declares tools, and extra (the secrets' CA
// files); without, the roots are as they were.
func rootFiles(cfg config.Config, extra map[string]string) map[string]string {
	files := map[string]string{}
	for p, c := range extra {
		files[p] = c
	}
	if cfg.HasTools() {
		for p, c := range broker.ClientFiles() {
			files[p] = c
		}
	}
	return files
}
