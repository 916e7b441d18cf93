package packages

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// npmSpec: a name (optionally scoped) and an optional version or range.
var npmSpec = lazyRegexp(`^((?:@[a-z0-9][a-z0-9._-]{0,100}/)?[a-z0-9][a-z0-9._-]{0,213})(@[A-Za-z0-9.^~<>=*+ |_-]{1,64})?$`)

func checkNpm(cfg config.Npm, pkgs []string) error {
	if cfg.Registry == "" {
		return fmt.Errorf("%w: npm installs are not configured on this server (packages.npm.registry)", errdefs.ErrUnsupported)
	}
	if err := checkCount(pkgs, cfg.MaxPackages, "packages.npm.max_packages"); err != nil {
		return err
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
func npmFailure(r report) error {
	tail := r.tail()
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
func (i *Installer) installNpm(ctx context.Context, t Target, pkgs []string) ([]apitype.Package, error) {
	cfg := i.cfg.Npm
	if err := checkNpm(cfg, pkgs); err != nil {
		return nil, err
	}
	policy, _, err := indexPolicy("packages.npm.registry", cfg.Registry, cfg.Hosts)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout.D()
	args, _ := json.Marshal(map[string]any{"registry": cfg.Registry, "packages": pkgs, "timeout": timeout.Seconds()})
	dl, rep, done, err := download(ctx, t, policy, fmt.Sprintf(npmDownloadCode, string(args), marker), timeout)
	if err != nil {
		return nil, err
	}
	defer done()
	if rep.Code != 0 || rep.Timeout {
		return nil, npmFailure(rep)
	}
	entries, truncated, err := dl.List("dl/node_modules", true)
	if err != nil || truncated {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the downloaded packages are unreadable", err)
	}
	ws := t.Workspace()
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
			if err := copyFile(dl, ws, e.Path, rel); err != nil {
				return nil, err
			}
		}
	}
	return rep.Installed, nil
}
