package session

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/runtimes"
)

// Package installation: the download runs in a separate, short-lived
// sandbox whose only egress is the operator's index (wheels only: nothing
// from a package runs there, and nothing is fetched or run on the host);
// the session's own sandbox then installs offline from what was fetched,
// into a session-private site directory first on sys.path. A session
// without a network policy keeps no route out.

const (
	pkgDir   = ".packages"
	wheelDir = pkgDir + "/wheels"
	siteDir  = pkgDir + "/site"
	marker   = "@@airlock-packages@@ "
)

// lazyRegexp compiles on first use. This binary is also every sandbox's
// init, which runs all package initialisers and then idles for the
// sandbox's life: a bounded repetition compiles to hundreds of kilobytes,
// which would be resident in every sandbox.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// pipSpec is a requirement a client may ask for: a name, optional extras
// and at most one version clause. No URLs, paths or options.
var pipSpec = lazyRegexp(`^([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)(\[[A-Za-z0-9._,-]{1,100}\])?((?:==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]{1,64})?$`)

var nameSep = lazyRegexp(`[-_.]+`)

// pipName is the PEP 503 normalised form of a project name.
func pipName(s string) string { return strings.ToLower(nameSep().ReplaceAllString(s, "-")) }

// checkPip validates a request's packages against the operator's lists.
func checkPip(cfg config.Pip, pkgs []string) error {
	if cfg.IndexURL == "" {
		return fmt.Errorf("%w: package installation is not configured on this server (packages.pip.index_url)", errdefs.ErrUnsupported)
	}
	if len(pkgs) == 0 {
		return fmt.Errorf("%w: packages is empty", errdefs.ErrInvalidArgument)
	}
	if len(pkgs) > cfg.MaxPackages {
		return fmt.Errorf("%w: more than %d packages (packages.pip.max_packages)", errdefs.ErrInvalidArgument, cfg.MaxPackages)
	}
	allow := make([]string, len(cfg.Allow))
	for i, a := range cfg.Allow {
		allow[i] = pipName(a)
	}
	for _, p := range pkgs {
		m := pipSpec().FindStringSubmatch(p)
		if m == nil {
			return fmt.Errorf("%w: %q is not a package requirement (NAME, NAME[extra], NAME==VERSION ...)", errdefs.ErrInvalidArgument, p)
		}
		n := pipName(m[1])
		for _, d := range cfg.Deny {
			if pipName(d) == n {
				return fmt.Errorf("%w: package %s is not allowed by the server's policy (packages.pip.deny)", errdefs.ErrPermission, n)
			}
		}
		if len(allow) > 0 && !slices.Contains(allow, n) {
			return fmt.Errorf("%w: package %s is not allowed by the server's policy (packages.pip.allow)", errdefs.ErrPermission, n)
		}
	}
	return nil
}

// indexPolicy is the download sandbox's allowlist: the index's host and
// port, and the operator's file hosts.
func indexPolicy(cfg config.Pip) (egress.Policy, *url.URL, error) {
	u, err := url.Parse(cfg.IndexURL)
	if err != nil || u.Hostname() == "" {
		return egress.Policy{}, nil, fmt.Errorf("%w: packages.pip.index_url is not a URL", errdefs.ErrUnavailable)
	}
	entry := u.Hostname()
	if u.Port() != "" {
		entry += ":" + u.Port()
	}
	p, err := egress.ParsePolicy(append([]string{entry}, cfg.Hosts...))
	if err != nil {
		return egress.Policy{}, nil, errdefs.Private(errdefs.ErrUnavailable, "the server's package index is misconfigured", err)
	}
	return p, u, nil
}

// pipReport is what the Python snippets print after the marker.
type pipReport struct {
	Code      int               `json:"code"`
	Log       string            `json:"log"`
	Timeout   bool              `json:"timeout"`
	Installed []apitype.Package `json:"installed"`
}

func parseReport(res *apitype.Result) (pipReport, error) {
	var r pipReport
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

// pipFailure turns a failed pip run into a clear error with the tail of
// its log.
func pipFailure(what string, r pipReport) error {
	tail := strings.TrimSpace(r.Log)
	if len(tail) > 1500 {
		tail = "..." + tail[len(tail)-1500:]
	}
	switch {
	case r.Timeout:
		return fmt.Errorf("%w: %s timed out (packages.pip.timeout): %s", errdefs.ErrTimeout, what, tail)
	case strings.Contains(r.Log, "Failed to establish a new connection"), strings.Contains(r.Log, "Max retries exceeded"),
		strings.Contains(r.Log, "Could not fetch URL"), strings.Contains(r.Log, "Connection refused"), strings.Contains(r.Log, "Name or service not known"),
		strings.Contains(r.Log, "connection broken by"), strings.Contains(r.Log, "Connection reset"):
		return fmt.Errorf("%w: the package index is unreachable: %s", errdefs.ErrUnavailable, tail)
	case strings.Contains(r.Log, "No matching distribution found"), strings.Contains(r.Log, "Could not find a version"):
		return fmt.Errorf("%w: no compatible wheel on the index: %s", errdefs.ErrNotFound, tail)
	}
	return fmt.Errorf("%w: %s failed: %s", errdefs.ErrUnavailable, what, tail)
}

const downloadCode = `
import json, os, subprocess, sys
a = json.loads(%q)
os.makedirs("/workspace/dl", exist_ok=True)
cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--no-cache-dir",
       "--progress-bar", "off", "--retries", "1", "--timeout", "20", "--only-binary=:all:", "-d", "/workspace/dl", "--index-url", a["index"]]
for h in a["trusted"]:
    cmd += ["--trusted-host", h]
env = {"PATH": "/usr/bin:/bin", "HOME": "/workspace", "PIP_CONFIG_FILE": "/dev/null", "LANG": "C.UTF-8"}
r = {"code": -1, "log": "", "timeout": False}
try:
    p = subprocess.run(cmd + a["packages"], capture_output=True, text=True, env=env, timeout=a["timeout"])
    r["code"], r["log"] = p.returncode, (p.stdout + p.stderr)[-8000:]
except subprocess.TimeoutExpired as e:
    r["timeout"] = True
print(%q + json.dumps(r))
`

const installCode = `
def _airlock_install():
    import importlib, importlib.metadata, json, os, shutil, subprocess, sys
    a = json.loads(%q)
    site, wheels = a["site"], a["wheels"]
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-index",
           "--find-links", wheels, "--target", site, "--upgrade", "--no-warn-script-location"]
    env = dict(os.environ, PIP_CONFIG_FILE="/dev/null")
    r = {"code": -1, "log": "", "timeout": False, "installed": []}
    try:
        p = subprocess.run(cmd + a["packages"], capture_output=True, text=True, env=env, timeout=a["timeout"])
        r["code"], r["log"] = p.returncode, (p.stdout + p.stderr)[-8000:]
    except subprocess.TimeoutExpired:
        r["timeout"] = True
    shutil.rmtree(wheels, ignore_errors=True)
    if site not in sys.path:
        sys.path.insert(0, site)
    pp = os.environ.get("PYTHONPATH", "")
    if site not in pp.split(":"):
        os.environ["PYTHONPATH"] = site + (":" + pp if pp else "")
    importlib.invalidate_caches()
    seen = set()
    for d in importlib.metadata.distributions(path=[site]):
        n = d.metadata["Name"]
        if n and n not in seen:
            seen.add(n)
            r["installed"].append({"name": n, "version": d.version})
    print(%q + json.dumps(r))
_airlock_install()
del _airlock_install
`

// InstallPackages installs packages into a Python session: downloaded in a
// separate sandbox whose only egress is the operator's index, installed
// offline here. It runs as one execution of the session.
func (s *Session) InstallPackages(ctx context.Context, req apitype.PackagesRequest) (*apitype.PackagesResult, error) {
	return s.install(ctx, req, false)
}

// install is InstallPackages; slotHeld says the caller (a one-shot or
// program run) holds an execution slot that covers it.
func (s *Session) install(ctx context.Context, req apitype.PackagesRequest, slotHeld bool) (*apitype.PackagesResult, error) {
	start := time.Now()
	m := s.m
	if req.Manager == "npm" {
		return s.installNpm(ctx, req, start, slotHeld)
	}
	if req.Manager != "pip" {
		return nil, fmt.Errorf("%w: manager %q: \"pip\" or \"npm\"", errdefs.ErrInvalidArgument, req.Manager)
	}
	if !s.pkgMu.TryLock() {
		return nil, errInstalling
	}
	defer s.pkgMu.Unlock()
	if err := s.fetchPip(ctx, req.Packages, slotHeld); err != nil {
		return nil, err
	}
	timeout := m.cfg.Packages.Pip.Timeout.D()
	ws := s.workspace()

	// 3. Install offline, in the session's own sandbox.
	args, _ := json.Marshal(map[string]any{"site": "/workspace/" + siteDir, "wheels": "/workspace/" + wheelDir,
		"packages": req.Packages, "timeout": timeout.Seconds()})
	res, err := s.execute(ctx, request{code: fmt.Sprintf(installCode, string(args), marker), timeout: timeout + 10*time.Second, kind: ExecSession, pkg: strings.Join(req.Packages, " "), pkgSession: s.id}, nil, slotHeld)
	if err != nil {
		ws.Remove(wheelDir, true)
		return nil, err
	}
	rep, err := parseReport(res)
	if err != nil {
		return nil, err
	}
	if rep.Code != 0 || rep.Timeout {
		return nil, pipFailure("the install", rep)
	}
	m.log.Info("packages installed", "session", s.id, "manager", "pip", "packages", req.Packages, "installed", rep.Installed)
	if rep.Installed == nil {
		rep.Installed = []apitype.Package{}
	}
	return &apitype.PackagesResult{Installed: rep.Installed, DurationMs: ms(time.Since(start))}, nil
}

// fetchPip checks pkgs against the operator's policy, downloads them in
// a sandbox of their own and leaves the wheels in the session's
// /workspace/.packages/wheels, for an offline install there (by
// installCode, or by the runtime's %pip install).
func (s *Session) fetchPip(ctx context.Context, pkgs []string, slotHeld bool) error {
	m := s.m
	if s.lang.Lang != "python" {
		return fmt.Errorf("%w: pip installs into Python sessions only", errdefs.ErrInvalidArgument)
	}
	cfg := m.cfg.Packages.Pip
	if err := checkPip(cfg, pkgs); err != nil {
		return err
	}
	if m.egress == nil {
		return fmt.Errorf("%w: the server has no egress layer", errdefs.ErrUnavailable)
	}
	policy, index, err := indexPolicy(cfg)
	if err != nil {
		return err
	}
	if !s.End().Zero() {
		return gone(s.End())
	}
	timeout := cfg.Timeout.D()

	// 1. Download, in a sandbox of its own.
	var trusted []string
	if index.Scheme == "http" {
		trusted = append(trusted, index.Hostname())
	}
	args, _ := json.Marshal(map[string]any{"index": cfg.IndexURL, "trusted": trusted, "packages": pkgs, "timeout": timeout.Seconds()})
	dl, rep, done, err := m.download(ctx, policy, fmt.Sprintf(downloadCode, string(args), marker), timeout, strings.Join(pkgs, " "), s, slotHeld)
	if err != nil {
		return err
	}
	defer done()
	if rep.Code != 0 || rep.Timeout {
		return pipFailure("the download", rep)
	}
	// 2. Move the wheels into the session's workspace (they count
	// against its disk limit), by descriptor, never following links.
	files, _, err := dl.workspace().List("dl", false)
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the downloaded packages are unreadable", err)
	}
	ws := s.workspace()
	ws.Mkdir(pkgDir)
	ws.Remove(wheelDir, true)
	if err := ws.Mkdir(wheelDir); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "cannot prepare the session's package directory", err)
	}
	for _, f := range files {
		if f.Type != "file" || !strings.HasSuffix(f.Path, ".whl") {
			continue
		}
		if err := copyFile(dl, s, f.Path, wheelDir+"/"+path.Base(f.Path)); err != nil {
			ws.Remove(wheelDir, true)
			return err
		}
	}
	return nil
}

// copyFile copies one file from a sandbox's workspace to another's.
func copyFile(from, to *Session, src, dst string) error {
	f, e, err := from.workspace().Open(src)
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "a downloaded package is unreadable", err)
	}
	defer f.Close()
	if _, err := to.workspace().Write(dst, io.LimitReader(f, e.Size), e.Size, 0o644); err != nil {
		return err
	}
	return nil
}

// download runs code (which prints a report after the marker) in a
// fresh, short-lived Python sandbox whose only egress is policy. done
// ends that sandbox and waits for its teardown; it may be called twice.
func (m *Manager) download(ctx context.Context, policy egress.Policy, code string, timeout time.Duration, pkg string, into *Session, slotHeld bool) (_ *Session, _ pipReport, done func(), err error) {
	rt, err := m.lookup("python")
	if err != nil {
		return nil, pipReport{}, nil, err
	}
	limits, err := config.Resolve(config.Limits{Timeout: config.Duration(timeout + 10*time.Second)}, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, pipReport{}, nil, err
	}
	release := func() {}
	if !slotHeld {
		if release, err = m.acquire(ctx); err != nil {
			return nil, pipReport{}, nil, err
		}
	}
	// The server's own isolation: pip and npm run package code (an sdist's
	// build, install scripts) as any tenant code would.
	dl, err := m.start(ctx, m.cfg.Isolation, rt, limits, sessionEnv(rt, limits, nil), time.Hour, policy, true)
	if err != nil {
		release()
		return nil, pipReport{}, nil, err
	}
	var once sync.Once
	done = func() {
		once.Do(func() {
			dl.terminate(apitype.Ended(apitype.EndFinished))
			<-dl.gone
			release()
		})
	}
	res, err := dl.execute(ctx, request{code: code, timeout: limits.Timeout.D(), kind: ExecOneShot, pkg: pkg, pkgSession: into.id, who: into.callerOf(ctx)}, nil, true)
	if err != nil {
		done()
		return nil, pipReport{}, nil, err
	}
	rep, err := parseReport(res)
	if err != nil {
		done()
		return nil, pipReport{}, nil, err
	}
	return dl, rep, done, nil
}

// npmSpec: a name (optionally scoped) and an optional version or range.
var npmSpec = lazyRegexp(`^((?:@[a-z0-9][a-z0-9._-]{0,100}/)?[a-z0-9][a-z0-9._-]{0,213})(@[A-Za-z0-9.^~<>=*+ |_-]{1,64})?$`)

func checkNpm(cfg config.Npm, pkgs []string) error {
	if cfg.Registry == "" {
		return fmt.Errorf("%w: npm installs are not configured on this server (packages.npm.registry)", errdefs.ErrUnsupported)
	}
	if len(pkgs) == 0 {
		return fmt.Errorf("%w: packages is empty", errdefs.ErrInvalidArgument)
	}
	if len(pkgs) > cfg.MaxPackages {
		return fmt.Errorf("%w: more than %d packages (packages.npm.max_packages)", errdefs.ErrInvalidArgument, cfg.MaxPackages)
	}
	for _, p := range pkgs {
		m := npmSpec().FindStringSubmatch(p)
		if m == nil {
			return fmt.Errorf("%w: %q is not a package spec (NAME, @SCOPE/NAME, NAME@VERSION)", errdefs.ErrInvalidArgument, p)
		}
		if slices.Contains(cfg.Deny, m[1]) || (len(cfg.Allow) > 0 && !slices.Contains(cfg.Allow, m[1])) {
			return fmt.Errorf("%w: package %s is not allowed by the server's policy (packages.npm)", errdefs.ErrPermission, m[1])
		}
	}
	return nil
}

const npmDownloadCode = `
import json, os, subprocess
a = json.loads(%q)
os.makedirs("/workspace/dl", exist_ok=True)
with open("/workspace/dl/package.json", "w") as f:
    f.write('{"name": "airlock-download", "version": "0.0.0", "private": true}')
cmd = ["/usr/bin/npm", "install", "--prefix", "/workspace/dl", "--registry", a["registry"], "--ignore-scripts",
       "--no-audit", "--no-fund", "--no-update-notifier", "--no-package-lock", "--cache", "/workspace/.npm-cache",
       "--fetch-retries", "0", "--loglevel", "error", "--"]
env = {"PATH": "/usr/bin:/bin", "HOME": "/workspace", "NPM_CONFIG_USERCONFIG": "/dev/null", "LANG": "C.UTF-8"}
r = {"code": -1, "log": "", "timeout": False, "installed": []}
try:
    p = subprocess.run(cmd + a["packages"], capture_output=True, text=True, env=env, timeout=a["timeout"])
    r["code"], r["log"] = p.returncode, (p.stdout + p.stderr)[-8000:]
except subprocess.TimeoutExpired:
    r["timeout"] = True
nm = "/workspace/dl/node_modules"
if os.path.isdir(nm):
    for d in sorted(os.listdir(nm)):
        dirs = [os.path.join(d, s) for s in sorted(os.listdir(os.path.join(nm, d)))] if d.startswith("@") else [d]
        for x in dirs:
            try:
                with open(os.path.join(nm, x, "package.json")) as f:
                    pj = json.load(f)
                r["installed"].append({"name": pj["name"], "version": pj["version"]})
            except Exception:
                pass
print(%q + json.dumps(r))
`

// npmFailure turns a failed npm run into a clear error.
func npmFailure(r pipReport) error {
	tail := strings.TrimSpace(r.Log)
	if len(tail) > 1500 {
		tail = "..." + tail[len(tail)-1500:]
	}
	switch {
	case r.Timeout:
		return fmt.Errorf("%w: the download timed out (packages.npm.timeout): %s", errdefs.ErrTimeout, tail)
	case strings.Contains(r.Log, "ECONNREFUSED"), strings.Contains(r.Log, "ECONNRESET"), strings.Contains(r.Log, "ENOTFOUND"),
		strings.Contains(r.Log, "EAI_AGAIN"), strings.Contains(r.Log, "ETIMEDOUT"):
		return fmt.Errorf("%w: the package registry is unreachable: %s", errdefs.ErrUnavailable, tail)
	case strings.Contains(r.Log, "E404"), strings.Contains(r.Log, "ETARGET"):
		return fmt.Errorf("%w: no such package or version on the registry: %s", errdefs.ErrNotFound, tail)
	}
	return fmt.Errorf("%w: the npm install failed: %s", errdefs.ErrUnavailable, tail)
}

// installNpm installs packages into a JavaScript session: npm runs, with
// --ignore-scripts, in a separate sandbox whose only egress is the
// registry; the node_modules tree it built is copied (files and
// directories, by descriptor; no links) into the session's
// /workspace/node_modules, where require() from /workspace finds it.
func (s *Session) installNpm(ctx context.Context, req apitype.PackagesRequest, start time.Time, slotHeld bool) (*apitype.PackagesResult, error) {
	m := s.m
	if s.lang.Lang != "javascript" {
		return nil, fmt.Errorf("%w: npm installs into JavaScript sessions only", errdefs.ErrInvalidArgument)
	}
	cfg := m.cfg.Packages.Npm
	if err := checkNpm(cfg, req.Packages); err != nil {
		return nil, err
	}
	if m.egress == nil {
		return nil, fmt.Errorf("%w: the server has no egress layer", errdefs.ErrUnavailable)
	}
	policy, _, err := indexPolicy(config.Pip{IndexURL: cfg.Registry, Hosts: cfg.Hosts})
	if err != nil {
		return nil, err
	}
	if !s.End().Zero() {
		return nil, gone(s.End())
	}
	timeout := cfg.Timeout.D()
	args, _ := json.Marshal(map[string]any{"registry": cfg.Registry, "packages": req.Packages, "timeout": timeout.Seconds()})
	dl, rep, done, err := m.download(ctx, policy, fmt.Sprintf(npmDownloadCode, string(args), marker), timeout, strings.Join(req.Packages, " "), s, slotHeld)
	if err != nil {
		return nil, err
	}
	defer done()
	if rep.Code != 0 || rep.Timeout {
		return nil, npmFailure(rep)
	}
	entries, truncated, err := dl.workspace().List("dl/node_modules", true)
	if err != nil || truncated {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the downloaded packages are unreadable", err)
	}
	ws := s.workspace()
	ws.Mkdir("node_modules")
	for _, e := range entries {
		rel := strings.TrimPrefix(e.Path, "dl/")
		switch e.Type {
		case "dir":
			if err := ws.Mkdir(rel); err != nil {
				if _, serr := ws.Stat(rel); serr != nil {
					return nil, err
				}
			}
		case "file":
			if err := copyFile(dl, s, e.Path, rel); err != nil {
				return nil, err
			}
		}
	}
	m.log.Info("packages installed", "session", s.id, "manager", "npm", "packages", req.Packages, "installed", rep.Installed)
	if rep.Installed == nil {
		rep.Installed = []apitype.Package{}
	}
	s.Touch()
	return &apitype.PackagesResult{Installed: rep.Installed, DurationMs: ms(time.Since(start))}, nil
}

// checkPackages validates a one-shot's or program run's packages before
// any sandbox is built, and names the manager for its language.
func (m *Manager) checkPackages(lang string, pkgs []string) (string, error) {
	switch lang {
	case "python":
		return "pip", checkPip(m.cfg.Packages.Pip, pkgs)
	case "javascript":
		return "npm", checkNpm(m.cfg.Packages.Npm, pkgs)
	}
	return "", fmt.Errorf("%w: packages: python (pip) and javascript (npm) runs only", errdefs.ErrInvalidArgument)
}

// install answers a runtime's install request (%pip install, !pip
// install in a cell): the same checks and download as the API, then the
// wheels are left in /workspace/.packages/wheels and the runtime, which
// is waiting in the cell, installs them offline itself, its pip's output
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
		msg := runtimes.Message{Type: "installed", ID: r.id, Wheels: "/workspace/" + wheelDir, Log: log}
		if err != nil {
			msg.Wheels, msg.Error = "", errdefs.Message(err)
		}
		if err := r.s.inst.Reply(msg); err != nil {
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
	case m.Manager != "pip":
		err = fmt.Errorf("%w: manager %q: only pip installs can be asked for from a cell (JavaScript sessions: the API's packages)", errdefs.ErrInvalidArgument, m.Manager)
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
		err := r.s.fetchPip(ctx, pkgs, true)
		if err == nil {
			r.s.m.log.Info("packages fetched for a cell", "session", r.s.id, "manager", "pip", "packages", pkgs)
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

var errInstalling = fmt.Errorf("%w: another package install is under way in this session", errdefs.ErrConflict)
