package packages

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
)

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
	if err := checkCount(pkgs, cfg.MaxPackages, "packages.pip.max_packages"); err != nil {
		return err
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

// pipFailure turns a failed pip run into a clear error with the tail of
// its log.
func pipFailure(what string, r report) error {
	tail := r.tail()
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

// installPip fetches pkgs (see FetchPip), then installs them offline in
// the session's own sandbox.
func (i *Installer) installPip(ctx context.Context, t Target, pkgs []string) ([]apitype.Package, error) {
	if err := i.FetchPip(ctx, t, pkgs); err != nil {
		return nil, err
	}
	timeout := i.cfg.Pip.Timeout.D()
	args, _ := json.Marshal(map[string]any{"site": "/workspace/" + siteDir, "wheels": "/workspace/" + wheelDir,
		"packages": pkgs, "timeout": timeout.Seconds()})
	res, err := t.Run(ctx, fmt.Sprintf(installCode, string(args), marker), timeout+10*time.Second)
	if err != nil {
		t.Workspace().Remove(wheelDir, true)
		return nil, err
	}
	rep, err := parseReport(res)
	if err != nil {
		return nil, err
	}
	if rep.Code != 0 || rep.Timeout {
		return nil, pipFailure("the install", rep)
	}
	return rep.Installed, nil
}

// FetchPip checks pkgs against the operator's policy, downloads them in
// a sandbox of their own and leaves the wheels in the session's
// /workspace/.packages/wheels, for an offline install there (by the
// install code, or by the runtime's %pip install, whose wheels these
// are: Wheels).
func (i *Installer) FetchPip(ctx context.Context, t Target, pkgs []string) error {
	cfg := i.cfg.Pip
	if err := checkPip(cfg, pkgs); err != nil {
		return err
	}
	policy, index, err := indexPolicy("packages.pip.index_url", cfg.IndexURL, cfg.Hosts)
	if err != nil {
		return err
	}
	timeout := cfg.Timeout.D()

	// 1. Download, in a sandbox of its own.
	var trusted []string
	if index.Scheme == "http" {
		trusted = append(trusted, index.Hostname())
	}
	args, _ := json.Marshal(map[string]any{"index": cfg.IndexURL, "trusted": trusted, "packages": pkgs, "timeout": timeout.Seconds()})
	dl, rep, done, err := download(ctx, t, policy, fmt.Sprintf(downloadCode, string(args), marker), timeout)
	if err != nil {
		return err
	}
	defer done()
	if rep.Code != 0 || rep.Timeout {
		return pipFailure("the download", rep)
	}
	// 2. Move the wheels into the session's workspace (they count
	// against its disk limit), by descriptor, never following links.
	files, _, err := dl.List("dl", false)
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the downloaded packages are unreadable", err)
	}
	ws := t.Workspace()
	ws.Mkdir(pkgDir)
	ws.Remove(wheelDir, true)
	if err := ws.Mkdir(wheelDir); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "cannot prepare the session's package directory", err)
	}
	for _, f := range files {
		if f.Type != "file" || !strings.HasSuffix(f.Path, ".whl") {
			continue
		}
		if err := copyFile(dl, ws, f.Path, wheelDir+"/"+path.Base(f.Path)); err != nil {
			ws.Remove(wheelDir, true)
			return err
		}
	}
	return nil
}

// Wheels is where FetchPip leaves the wheels, inside the sandbox.
const Wheels = "/workspace/" + wheelDir
