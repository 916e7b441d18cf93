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
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
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

// pipSpec is a requirement a client may ask for: a name, optional extras
// and at most one version clause. No URLs, paths or options.
var pipSpec = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)(\[[A-Za-z0-9._,-]{1,100}\])?((?:==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]{1,64})?$`)

var nameSep = regexp.MustCompile(`[-_.]+`)

// pipName is the PEP 503 normalised form of a project name.
func pipName(s string) string { return strings.ToLower(nameSep.ReplaceAllString(s, "-")) }

// checkPip validates a request's packages against the operator's lists.
func checkPip(cfg config.Pip, pkgs []string) error {
	if cfg.IndexURL == "" {
		return fmt.Errorf("%w: pip installs are not configured on this server (packages.pip.index_url)", errdefs.ErrUnsupported)
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
		m := pipSpec.FindStringSubmatch(p)
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
	start := time.Now()
	m := s.m
	if req.Manager != "pip" {
		return nil, fmt.Errorf("%w: manager %q: only \"pip\" is supported", errdefs.ErrInvalidArgument, req.Manager)
	}
	if s.lang.Lang != "python" {
		return nil, fmt.Errorf("%w: pip installs into Python sessions only", errdefs.ErrInvalidArgument)
	}
	cfg := m.cfg.Packages.Pip
	if err := checkPip(cfg, req.Packages); err != nil {
		return nil, err
	}
	if m.egress == nil {
		return nil, fmt.Errorf("%w: the server has no egress layer", errdefs.ErrUnavailable)
	}
	policy, index, err := indexPolicy(cfg)
	if err != nil {
		return nil, err
	}
	if !s.End().Zero() {
		return nil, gone(s.End())
	}
	timeout := cfg.Timeout.D()

	// 1. Download, in a sandbox of its own.
	rt, err := m.lookup("python")
	if err != nil {
		return nil, err
	}
	limits, err := config.Resolve(config.Limits{Timeout: config.Duration(timeout + 10*time.Second)}, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, err
	}
	release, err := m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	dl, err := m.start(ctx, config.Native, rt, limits, sessionEnv(rt, limits, nil), time.Hour, policy)
	if err != nil {
		return nil, err
	}
	defer func() {
		dl.terminate(apitype.Ended(apitype.EndFinished))
		<-dl.gone
	}()
	var trusted []string
	if index.Scheme == "http" {
		trusted = append(trusted, index.Hostname())
	}
	args, _ := json.Marshal(map[string]any{"index": cfg.IndexURL, "trusted": trusted, "packages": req.Packages, "timeout": timeout.Seconds()})
	res, err := dl.execute(ctx, request{code: fmt.Sprintf(downloadCode, string(args), marker), timeout: limits.Timeout.D(), kind: ExecOneShot, pkg: strings.Join(req.Packages, " "), pkgSession: s.id}, nil, true)
	if err != nil {
		return nil, err
	}
	rep, err := parseReport(res)
	if err != nil {
		return nil, err
	}
	if rep.Code != 0 || rep.Timeout {
		return nil, pipFailure("the download", rep)
	}
	// 2. Move the wheels into the session's workspace (they count
	// against its disk limit), by descriptor, never following links.
	files, _, err := dl.workspace().List("dl", false)
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the downloaded packages are unreadable", err)
	}
	ws := s.workspace()
	ws.Mkdir(pkgDir)
	ws.Remove(wheelDir, true)
	if err := ws.Mkdir(wheelDir); err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "cannot prepare the session's package directory", err)
	}
	for _, f := range files {
		if f.Type != "file" || !strings.HasSuffix(f.Path, ".whl") {
			continue
		}
		if err := copyFile(dl, s, f.Path, wheelDir+"/"+path.Base(f.Path)); err != nil {
			ws.Remove(wheelDir, true)
			return nil, err
		}
	}
	dl.terminate(apitype.Ended(apitype.EndFinished))

	// 3. Install offline, in the session's own sandbox.
	args, _ = json.Marshal(map[string]any{"site": "/workspace/" + siteDir, "wheels": "/workspace/" + wheelDir,
		"packages": req.Packages, "timeout": timeout.Seconds()})
	res, err = s.execute(ctx, request{code: fmt.Sprintf(installCode, string(args), marker), timeout: timeout + 10*time.Second, kind: ExecSession, pkg: strings.Join(req.Packages, " "), pkgSession: s.id}, nil, false)
	if err != nil {
		ws.Remove(wheelDir, true)
		return nil, err
	}
	rep, err = parseReport(res)
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
