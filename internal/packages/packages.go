// Package packages owns package installs into sessions: which
// requirements a client may ask for (the operator's sources and allow
// and deny lists, one parser for every way of asking: the API's and a
// one-shot's packages, a cell's %pip install, an install typed as a
// shell command), the download in a sandbox of its own whose only egress
// is the operator's index, and the install into the session from what was
// downloaded: offline, in the session's own sandbox for pip (into a
// session-private site directory first on sys.path), copied into its
// /workspace/node_modules for npm. A session without a network policy
// keeps no route out.
//
// It must never run anything of a package on the host or fetch anything
// from there: downloads run in sandboxes (wheels only for pip, no install
// scripts for npm), and what comes out of one is copied by descriptor,
// never following a link. It reaches sandboxes only through a Target,
// which package session provides.
package packages

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// The managers.
const (
	Pip = "pip"
	Npm = "npm"
)

// ScriptLanguage is the language downloads and pip's install run in:
// their scripts are Python.
const ScriptLanguage = apitype.Python

// Where pip's installs live in a session's /workspace.
const (
	pkgDir   = ".packages"
	wheelDir = pkgDir + "/wheels"
	siteDir  = pkgDir + "/site"
	marker   = "@@airlock-packages@@ "
)

// Target is what an install works with: the session it installs into,
// and fresh sandboxes for its downloads. Package session provides it; its
// executions are audited as steps of the install.
type Target interface {
	// Workspace is the session's /workspace.
	Workspace() *workspace.Dir
	// Run runs Python code in the session's own sandbox (offline: the
	// session keeps its own egress).
	Run(ctx context.Context, code string, timeout time.Duration) (*apitype.Result, error)
	// Download runs Python code in a fresh, short-lived sandbox whose
	// only egress is policy, and returns that sandbox's workspace and the
	// code's result; done ends the sandbox (it may be called twice).
	Download(ctx context.Context, policy egress.Policy, code string, timeout time.Duration) (ws *workspace.Dir, res *apitype.Result, done func(), err error)
}

// Installer installs packages from the operator's sources.
type Installer struct {
	cfg config.Packages
	log *slog.Logger
}

// New returns an installer from the configuration's packages section.
func New(cfg config.Packages, log *slog.Logger) *Installer {
	if log == nil {
		log = slog.Default()
	}
	return &Installer{cfg: cfg, log: log}
}

// Manager checks a request's manager is one there is.
func Manager(manager string) error {
	if manager != Pip && manager != Npm {
		return fmt.Errorf("%w: manager %q: %q or %q", errdefs.ErrInvalidArgument, manager, Pip, Npm)
	}
	return nil
}

// Check validates a request's packages for manager against the
// operator's policy, before any sandbox is built.
func (i *Installer) Check(manager string, pkgs []string) error {
	switch manager {
	case Pip:
		return checkPip(i.cfg.Pip, pkgs)
	case Npm:
		return checkNpm(i.cfg.Npm, pkgs)
	}
	return Manager(manager)
}

// Install installs pkgs with manager into t's session and says what was
// installed. who is for the log (the session's id).
func (i *Installer) Install(ctx context.Context, t Target, manager string, pkgs []string, who string) ([]apitype.Package, error) {
	var installed []apitype.Package
	var err error
	switch manager {
	case Pip:
		installed, err = i.installPip(ctx, t, pkgs)
	case Npm:
		installed, err = i.installNpm(ctx, t, pkgs)
	default:
		err = i.Check(manager, pkgs)
	}
	if err != nil {
		return nil, err
	}
	i.log.Info("packages installed", "session", who, "manager", manager, "packages", pkgs, "installed", installed)
	if installed == nil {
		installed = []apitype.Package{}
	}
	return installed, nil
}

// ProgramEnv adds to a program's environment what it needs to find the
// packages manager installed, and reports whether that needs a new
// interpreter (one the runtime has started reads none of it).
func ProgramEnv(manager string, env map[string]string) (fresh bool) {
	if manager != Pip {
		return false // require() from /workspace finds node_modules
	}
	pp := "/workspace/" + siteDir
	if old := env["PYTHONPATH"]; old != "" {
		if slices.Contains(strings.Split(old, ":"), pp) {
			return true
		}
		pp += ":" + old
	}
	env["PYTHONPATH"] = pp
	return true
}

// Installed reports whether pip packages were installed into ws (its
// site directory exists): a new interpreter of the session (a resumed or
// forked session's, a context started or restarted later) needs them on
// its path (ProgramEnv). A symlink there is not followed: nothing is.
func Installed(ws *workspace.Dir) bool {
	e, err := ws.Stat(siteDir)
	return err == nil && e.Type == "dir"
}

// checkCount checks a request names some packages, at most max (the
// configuration's key).
func checkCount(pkgs []string, max int, key string) error {
	if len(pkgs) == 0 {
		return fmt.Errorf("%w: packages is empty", errdefs.ErrInvalidArgument)
	}
	if len(pkgs) > max {
		return fmt.Errorf("%w: more than %d packages (%s)", errdefs.ErrInvalidArgument, max, key)
	}
	return nil
}

// lazyRegexp compiles on first use. This binary is also every sandbox's
// init, which runs all package initialisers and then idles for the
// sandbox's life: a bounded repetition compiles to hundreds of kilobytes,
// which would be resident in every sandbox.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// indexPolicy is the download sandbox's allowlist: the index's host and
// port (the configuration's key), and the operator's file hosts.
func indexPolicy(key, index string, hosts []string) (egress.Policy, *url.URL, error) {
	u, err := url.Parse(index)
	if err != nil || u.Hostname() == "" {
		return egress.Policy{}, nil, fmt.Errorf("%w: %s is not a URL", errdefs.ErrUnavailable, key)
	}
	entry := u.Hostname()
	if u.Port() != "" {
		entry += ":" + u.Port()
	}
	p, err := egress.ParsePolicy(append([]string{entry}, hosts...))
	if err != nil {
		return egress.Policy{}, nil, errdefs.Private(errdefs.ErrUnavailable, "the server's package index is misconfigured", err)
	}
	return p, u, nil
}

// report is what the Python snippets print after the marker.
type report struct {
	Code      int               `json:"code"`
	Log       string            `json:"log"`
	Timeout   bool              `json:"timeout"`
	Installed []apitype.Package `json:"installed"`
}

func parseReport(res *apitype.Result) (report, error) {
	var r report
	i := strings.LastIndex(res.Stdout, marker)
	if i < 0 {
		detail := res.Stderr
		if res.Error != nil {
			detail = res.Error.Name + ": " + res.Error.Value
		}
		return r, errdefs.Private(errdefs.ErrUnavailable, "the package installer did not report", fmt.Errorf("%s %s", res.KillReason, detail))
	}
	line, _, _ := strings.Cut(res.Stdout[i+len(marker):], "\n")
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, errdefs.Private(errdefs.ErrUnavailable, "the package installer's report is unreadable", err)
	}
	return r, nil
}

// tail is the end of a failed run's log, for its error.
func (r report) tail() string {
	tail := strings.TrimSpace(r.Log)
	if len(tail) > 1500 {
		tail = "..." + tail[len(tail)-1500:]
	}
	return tail
}

// download runs code (which prints a report after the marker) in a fresh
// sandbox whose only egress is policy. done ends the sandbox.
func download(ctx context.Context, t Target, policy egress.Policy, code string, timeout time.Duration) (*workspace.Dir, report, func(), error) {
	ws, res, done, err := t.Download(ctx, policy, code, timeout)
	if err != nil {
		return nil, report{}, nil, err
	}
	rep, err := parseReport(res)
	if err != nil {
		done()
		return nil, report{}, nil, err
	}
	return ws, rep, done, nil
}

// copyFile copies one file from a sandbox's workspace to another's.
func copyFile(from, to *workspace.Dir, src, dst string) error {
	f, e, err := from.Open(src)
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "a downloaded package is unreadable", err)
	}
	defer f.Close()
	if _, err := to.Write(dst, io.LimitReader(f, e.Size), e.Size, 0o644); err != nil {
		return err
	}
	return nil
}
