package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/packages"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// Package installs are package packages'; what is the session's is here:
// one pip install at a time, the sandboxes an install runs code in (its
// steps audited as the session's executions), a cell's %pip install
// answered during its execution, and an install typed as a command.

// InstallPackages installs packages into the session (see package
// packages). It runs as executions of the session.
func (s *Session) InstallPackages(ctx context.Context, req apitype.PackagesRequest) (*apitype.PackagesResult, error) {
	release, err := s.m.admitExecution(ctx, &Ask{})
	if err != nil {
		return nil, err
	}
	defer release()
	return s.install(ctx, req, false)
}

var errInstalling = fmt.Errorf("%w: another package install is under way in this session", errdefs.ErrConflict)

// install is InstallPackages; slotHeld says the caller (a one-shot or
// program run) holds an execution slot that covers it.
func (s *Session) install(ctx context.Context, req apitype.PackagesRequest, slotHeld bool) (*apitype.PackagesResult, error) {
	start := time.Now()
	if err := packages.Manager(req.Manager); err != nil {
		return nil, err
	}
	if req.Manager == packages.Pip {
		// pip's share the session's wheels directory, and a cell's
		// %pip install holds it until its execution ends.
		if !s.pkgMu.TryLock() {
			return nil, errInstalling
		}
		defer s.pkgMu.Unlock()
	}
	c, err := s.installContext(ctx, req.Manager)
	if err != nil {
		return nil, err
	}
	installed, err := s.m.packages.Install(ctx, s.installTarget(ctx, c, req.Packages, slotHeld), req.Manager, req.Packages, s.id)
	if err != nil {
		return nil, err
	}
	if req.Manager == packages.Pip {
		// The interpreter put them on its own path; the context's
		// environment (the commands' too, for the default one) follows.
		s.mu.Lock()
		env := maps.Clone(c.env)
		packages.ProgramEnv(packages.Pip, env)
		c.env = env
		s.mu.Unlock()
	}
	s.Touch()
	return &apitype.PackagesResult{Installed: installed, DurationMs: ms(time.Since(start))}, nil
}

// installContext is the context an install with manager runs in: the
// default context of the manager's language (started now in a session
// of another language).
func (s *Session) installContext(ctx context.Context, manager string) (*codeContext, error) {
	return s.contextFor(ctx, "", runtimes.WithManager(manager))
}

// installTarget is what an install of pkgs into s's context c works with.
func (s *Session) installTarget(ctx context.Context, c *codeContext, pkgs []string, slotHeld bool) installTarget {
	return installTarget{s: s, c: c, pkgs: strings.Join(pkgs, " "), who: s.callerOf(ctx), slotHeld: slotHeld}
}

// installTarget is a session as package packages' Target: each step of
// an install is an execution the observers hear of, with the packages
// it is for.
type installTarget struct {
	s    *Session
	c    *codeContext
	pkgs string
	who  Caller
	// slotHeld: the caller's execution slot covers the install's.
	slotHeld bool
}

func (t installTarget) Workspace() *workspace.Dir { return t.s.workspace() }

func (t installTarget) Run(ctx context.Context, code string, timeout time.Duration) (*apitype.Result, error) {
	return t.s.execute(ctx, request{code: code, timeout: timeout, kind: ExecSession, pkg: t.pkgs, pkgSession: t.s.id, cc: t.c}, nil, t.slotHeld)
}

// Download runs code in a fresh, short-lived sandbox of the server's own
// isolation (pip and npm run package code, an sdist's build, install
// scripts, as any tenant code would) whose only egress is policy.
func (t installTarget) Download(ctx context.Context, policy egress.Policy, code string, timeout time.Duration) (_ *workspace.Dir, _ *apitype.Result, done func(), err error) {
	s, m := t.s, t.s.m
	if m.egress == nil {
		return nil, nil, nil, fmt.Errorf("%w: the server has no egress layer", errdefs.ErrUnavailable)
	}
	if end := s.End(); !end.Zero() {
		return nil, nil, nil, gone(end)
	}
	rt, err := m.lookup(packages.ScriptLanguage)
	if err != nil {
		return nil, nil, nil, err
	}
	limits, err := config.Resolve(config.Limits{Timeout: config.Duration(timeout + 10*time.Second)}, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, nil, nil, err
	}
	release := func() {}
	if !t.slotHeld {
		if release, err = m.acquire(ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	dl, err := m.start(ctx, m.cfg.Isolation, "", rt, limits, sessionEnv(rt, limits, nil), time.Hour, policy, true, nil)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	var once sync.Once
	done = func() {
		once.Do(func() {
			dl.terminate(apitype.Ended(apitype.EndFinished))
			<-dl.gone
			release()
		})
	}
	res, err := dl.execute(ctx, request{code: code, timeout: limits.Timeout.D(), kind: ExecOneShot, pkg: t.pkgs, pkgSession: s.id, who: t.who}, nil, true)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return dl.workspace(), res, done, nil
}

// checkPackages validates a one-shot's or program run's packages before
// any sandbox is built, and names the manager for its language.
func (m *Manager) checkPackages(rt runtimes.Runtime, pkgs []string) (string, error) {
	if rt.PackageManager == "" {
		return "", fmt.Errorf("%w: packages: %s runs only", errdefs.ErrInvalidArgument, runtimes.Managed())
	}
	return rt.PackageManager, m.packages.Check(rt.PackageManager, pkgs)
}

// install answers a runtime's install request (%pip install, !pip
// install in a cell): the same checks and download as the API, then the
// wheels are left in the session's workspace and the runtime, which is
// waiting in the cell, installs them offline itself, its pip's output
// being the cell's stdout. The request comes from code the session runs:
// it is untrusted (the same parser and policy as the API; one at a time;
// bounded by the execution, whose timeout still applies).
func (r *running) install(m runtimes.Message) {
	reply := func(err error, log string) {
		r.instMu.Lock()
		defer r.instMu.Unlock()
		if r.instOver {
			return // the execution is over: nobody waits for this
		}
		msg := runtimes.Message{Type: "installed", ID: r.id, Wheels: packages.Wheels, Log: log}
		if err != nil {
			msg.Wheels, msg.Error = "", errdefs.Message(err)
		}
		if err := r.c.it.Reply(msg); err != nil {
			r.s.m.log.Warn("replying to the runtime failed", "session", r.s.id, "err", err)
		}
	}
	r.instMu.Lock()
	switch {
	case r.instOver:
		r.instMu.Unlock()
		return
	case r.instBusy:
		r.instMu.Unlock()
		reply(fmt.Errorf("%w: a package install is already under way in this execution", errdefs.ErrConflict), "")
		return
	}
	if !r.instLocked {
		if !r.s.pkgMu.TryLock() {
			r.instMu.Unlock()
			reply(errInstalling, "")
			return
		}
		r.instLocked = true
	}
	r.instBusy = true
	ctx, cancel := context.WithCancel(r.ctx)
	r.instStop = cancel
	r.instWG.Add(1)
	r.instMu.Unlock()
	var err error
	switch {
	case r.req.prog != nil || r.req.pkg != "":
		err = fmt.Errorf("%w: installing packages from here is not supported", errdefs.ErrUnsupported)
	case m.Manager != packages.Pip:
		err = fmt.Errorf("%w: manager %q: only pip installs can be asked for from a cell (JavaScript sessions: the API's packages)", errdefs.ErrInvalidArgument, m.Manager)
	case r.c.lang.PackageManager != packages.Pip:
		err = fmt.Errorf("%w: pip installs into python contexts only", errdefs.ErrInvalidArgument)
	}
	if err != nil {
		r.instWG.Done()
		reply(err, "")
		r.instMu.Lock()
		r.instBusy = false
		r.instMu.Unlock()
		return
	}
	pkgs := m.Packages
	go func() {
		defer r.instWG.Done()
		// The cell's execution slot covers the download sandbox, as a
		// one-shot's covers its packages.
		err := r.s.m.packages.FetchPip(ctx, r.s.installTarget(ctx, r.c, pkgs, true), pkgs)
		if err == nil {
			r.s.m.log.Info("packages fetched for a cell", "session", r.s.id, "manager", packages.Pip, "packages", pkgs)
		}
		reply(err, "")
		r.instMu.Lock()
		r.instBusy = false
		r.instMu.Unlock()
	}()
}

// stopInstall ends an install the execution left running and waits for
// it: no reply goes to the runtime after its execution.
func (r *running) stopInstall() {
	r.instMu.Lock()
	r.instOver = true
	if r.instStop != nil {
		r.instStop()
	}
	r.instMu.Unlock()
	r.instWG.Wait()
	if r.instLocked {
		r.s.pkgMu.Unlock()
	}
}

// runInstallCommand carries out an install typed as a foreground
// command (packages.ParseCommand): the installer's failure is the
// command's (exit 1, the reason on stderr), as a shell's npm or pip would
// report it.
func (s *Session) runInstallCommand(ctx context.Context, req apitype.CommandRequest, in packages.Command, emit func(apitype.Event)) (*apitype.CommandResult, error) {
	s.cmds.mu.Lock()
	s.cmds.next++
	id := "c" + strconv.Itoa(s.cmds.next)
	s.cmds.mu.Unlock()
	start := time.Now()
	res := apitype.CommandResult{ID: id, Command: req.Command, State: apitype.CommandExited, StartedAt: start, ExitCode: ptr(0)}
	out, err := s.install(ctx, apitype.PackagesRequest{Manager: in.Manager, Packages: in.Packages}, false)
	switch {
	case err == nil:
		var names []string
		for _, p := range out.Installed {
			names = append(names, p.Name+"-"+p.Version)
		}
		res.Stdout = "Successfully installed " + strings.Join(names, " ") + "\n"
	case errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrLimit) || errors.Is(err, errdefs.ErrQuota) || errors.Is(err, errdefs.ErrConflict) || ctx.Err() != nil:
		return nil, err // the session's state, not the install's outcome
	default:
		res.ExitCode = ptr(1)
		res.Stderr = fmt.Sprintf("airlock: %s install %s: %s\n", in.Manager, strings.Join(in.Packages, " "), errdefs.Message(err))
	}
	res.DurationMs = ms(time.Since(start))
	if emit != nil {
		if res.Stdout != "" {
			emit(apitype.Event{Type: apitype.EventStdout, Text: res.Stdout})
		}
		if res.Stderr != "" {
			emit(apitype.Event{Type: apitype.EventStderr, Text: res.Stderr})
		}
		emit(apitype.Event{Type: apitype.EventEnd, Command: &res})
	}
	return &res, nil
}
