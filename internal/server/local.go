package server

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/fontcache"
	"airlock/internal/gvisor"
	"airlock/internal/image"
	"airlock/internal/instance"
	"airlock/internal/jail"
	"airlock/internal/lockfile"
	"airlock/internal/pool"
	"airlock/internal/runtimes"
	"airlock/internal/session"
)

// MainIfInit makes a sealed re-execution of this binary a sandbox's init
// (see jailinit.Main), or a gVisor sandbox's keeper (see
// gvisor.MainIfKeeper): the first thing main does.
func MainIfInit() {
	gvisor.MainIfKeeper()
	jail.MainIfInit()
}

// Trace notes a phase's time on stderr when AIRLOCK_TRACE is set (see
// jail.Trace).
func Trace(what string) { jail.Trace(what) }

// Local is the server's composition built in this process for one
// command on this host (`airlock run --cold`, `airlock doctor`): the jail
// host with the runtimes' files, the native kernel and session managers,
// the template store when a run names a template; no listener, pool,
// database or state lock. Its sandboxes are the
// command's own (jail.RunName, in the host's CLI slot, one at a time), so
// that it runs beside a server. A program takes the path POST /v1/run
// takes on a server: session.Manager.RunProgram.
type Local struct {
	cfg    config.Config
	host   *jail.Host
	src    instance.Source
	log    *slog.Logger
	kernel instance.Kernel
	slots  *instance.Slots
	// tmpl builds sandboxes made from templates, cold; the store is
	// opened when a run first names one (nil until then).
	mu   sync.Mutex
	tmpl *pool.Templates
}

// NewLocal builds the host, after the same checks a server makes, and
// removes what runs of processes that are gone left behind.
func NewLocal(cfg config.Config, log *slog.Logger) (*Local, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := session.CheckPolicy(cfg); err != nil {
		return nil, err
	}
	host, err := newHost(cfg, log, nil, false)
	if err != nil {
		return nil, err
	}
	jail.Trace("host ready")
	host.Cgroups().Sweep("r-", jail.StaleRun)
	// Root templates of other builds: a host that only ever runs cold
	// would keep one per build. Those a live process uses are leased,
	// and stay; while a server runs on the state directory (perhaps of a
	// version before leases, idle), its start swept already, and a run
	// leaves it be.
	if !lockfile.Held(stateLockPath(cfg.StateDir)) {
		if err := host.SweepTemplates(); err != nil {
			log.Warn("removing old root templates", "err", err)
		}
	}
	jail.Trace("swept")
	slot, err := host.CLISlot()
	if err != nil {
		host.Close()
		return nil, err
	}
	kernel := instance.Native{Host: host, Run: true}
	slots := instance.OneSlot(slot)
	return &Local{cfg: cfg, host: host, log: log, kernel: kernel, slots: slots, src: &instance.Cold{Kernel: kernel, Slots: slots}}, nil
}

// templates opens the template store, as a server has it but without
// pools, when a run names template name: a run on one builds its sandbox
// from the template's current version. A run on the host's root never
// opens it.
func (l *Local) templates(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name == "" || l.tmpl != nil {
		return nil
	}
	store, err := image.Open(l.cfg.TemplateDir())
	if err != nil {
		return err
	}
	cfg := l.cfg
	cfg.Templates.Pool = nil
	l.tmpl = pool.NewTemplates(cfg, store, l.host, map[config.Isolation]instance.Kernel{config.Native: l.kernel}, l.slots, l.log)
	return nil
}

// manager is a session manager of cfg over l's sandboxes and templates.
func (l *Local) manager(cfg config.Config, template string) (*session.Manager, error) {
	if err := l.templates(cmp.Or(template, cfg.Templates.Default)); err != nil {
		return nil, err
	}
	m := session.NewManager(cfg, l.src, l.log)
	l.mu.Lock()
	if l.tmpl != nil {
		m.SetTemplates(l.tmpl)
	}
	l.mu.Unlock()
	return m, nil
}

// newHost builds the jail host of cfg, with the runtimes' files in every
// sandbox's root: a server's and a command's are the same. The root
// template, made once per host, gets the Python runtime's bytecode when
// it can be compiled (runtimes.Precompile); without it, a cold runtime
// compiles its source at each start, about 10 ms more. A server's host
// clones inits through a spawner (jail.Options.Spawner); a command's,
// which builds one jail, does it itself.
func newHost(cfg config.Config, log *slog.Logger, extra map[string]string, spawner bool) (*jail.Host, error) {
	if err := checkPtys(cfg); err != nil {
		return nil, err
	}
	opts := jail.OptionsFrom(cfg)
	opts.RootFiles, opts.EmbeddedFiles = rootFiles(cfg, extra), runtimes.RootFiles
	opts.Spawner = spawner
	key, prepare := runtimes.Precompile(cfg.Runtimes.Python)
	if prepare != nil {
		opts.PrepareKey = key
		opts.PrepareRoot = func(root string) error {
			if err := prepare(root); err != nil {
				log.Warn("the Python runtime is not precompiled: a cold runtime compiles it at each start", "err", err)
			}
			return nil
		}
	}
	return jail.NewHost(opts)
}

// checkPtys refuses a configuration whose sandboxes could together hold
// more ptys than the server's budget: once the kernel's pty.max is
// reached, no sandbox (of any tenant) could open a terminal.
func checkPtys(cfg config.Config) error {
	k, err := jail.ReadKernelPtys()
	if err != nil && cfg.Server.MaxPtys == 0 {
		return fmt.Errorf("%w: %v: set server.max_ptys", errdefs.ErrUnavailable, err)
	}
	if _, _, err := cfg.Ptys(k.ForSandboxes()); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

// kernelPtys are the kernel's pty figures (zero when unreadable).
func kernelPtys() jail.KernelPtys {
	k, _ := jail.ReadKernelPtys()
	return k
}

// FontCache builds the host's matplotlib font list if it has none, and
// has every later sandbox get a copy (see fontcache.Ensure); it reports
// whether it built one.
func (l *Local) FontCache(ctx context.Context) (bool, error) {
	return ensureFontCache(ctx, l.cfg, l.host, l.src, l.log)
}

// RunProgram runs a program once, as a server would (its limits, its
// redaction and code rules), natively: a request for another isolation or
// a network is refused (only a server has gVisor and the egress layer).
// The program's files go to sink (nil: in the result).
func (l *Local) RunProgram(ctx context.Context, req apitype.ProgramRequest, emit func(apitype.Event), sink session.FileSink) (*apitype.OneShotResult, error) {
	cfg := l.cfg
	cfg.Isolation, cfg.AllowIsolation = config.Native, nil
	m, err := l.manager(cfg, req.Template)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.RunProgramTo(ctx, req, emit, sink)
}

// RunOwn runs one of airlock's own programs (doctor's probes): as
// RunProgram, without the operator's redaction and code rules, with the
// limits it asks for up to fontcache.Limits.
func (l *Local) RunOwn(ctx context.Context, req apitype.ProgramRequest, sink session.FileSink) (*apitype.OneShotResult, error) {
	m, err := l.manager(ownConfig(l.cfg), req.Template)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.RunProgramTo(ctx, req, nil, sink)
}

// Close releases the templates' versions and the host; every run has
// ended by then.
func (l *Local) Close() error {
	if l.tmpl != nil {
		l.tmpl.Close()
	}
	return l.host.Close()
}

// ownConfig is cfg for airlock's own programs (the font cache, doctor's
// probes): native, on the host's root unless they name a template,
// without redaction and code rules (the operator's policy over clients'
// code), and with maximums that let them take the time they need.
func ownConfig(cfg config.Config) config.Config {
	cfg.Isolation, cfg.AllowIsolation = config.Native, nil
	cfg.Redaction, cfg.CodeRules, cfg.Tenants = config.Redaction{}, nil, nil
	cfg.Templates.Default = "" // the host's root unless a run names one
	cfg.Max.Timeout = max(cfg.Max.Timeout, fontcache.Limits.Timeout)
	cfg.Max.CPUTime = max(cfg.Max.CPUTime, fontcache.Limits.CPUTime)
	return cfg
}

// ensureFontCache builds the font list with a one-shot run of src's
// sandboxes when the host has none, and shares it with every sandbox host
// builds from then on.
func ensureFontCache(ctx context.Context, cfg config.Config, host *jail.Host, src instance.Source, log *slog.Logger) (bool, error) {
	m := session.NewManager(ownConfig(cfg), src, log)
	defer m.Close()
	t0 := time.Now()
	dir, built, err := fontcache.Ensure(ctx, cfg, func(ctx context.Context, req apitype.ProgramRequest, sink func(string, func() (io.ReadCloser, error))) (*apitype.OneShotResult, error) {
		return m.RunProgramTo(ctx, req, nil, sink)
	})
	if dir != "" {
		host.ShareTmp(fontcache.Name, dir)
	}
	if built {
		log.Info("built the matplotlib font list", "dir", dir, "ms", time.Since(t0).Milliseconds())
	}
	return built, err
}
