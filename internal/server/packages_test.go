package server

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// wheel builds a pure-Python wheel by hand: a module and its dist-info.
func wheel(t *testing.T, name, version, module, body string, requires ...string) (string, []byte) {
	dist := strings.ReplaceAll(name, "-", "_")
	files := map[string]string{
		module + "/__init__.py": body,
	}
	info := dist + "-" + version + ".dist-info/"
	meta := "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"
	for _, r := range requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files[info+"METADATA"] = meta
	files[info+"WHEEL"] = "Wheel-Version: 1.0\nGenerator: airlock-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, n := range []string{module + "/__init__.py", info + "METADATA", info + "WHEEL"} {
		w, err := z.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[n]))
		sum := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n]))
	}
	record.WriteString(info + "RECORD,,\n")
	w, _ := z.Create(info + "RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return dist + "-" + version + "-py3-none-any.whl", buf.Bytes()
}

// sdistTarball is a source distribution whose setup.py leaves a mark.
func sdistTarball(t *testing.T) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"airlock_sdist-1.0/setup.py", "open('/workspace/SETUP-PY-RAN', 'w').close()\nfrom setuptools import setup\nsetup(name='airlock-sdist', version='1.0')\n"},
		{"airlock_sdist-1.0/PKG-INFO", "Metadata-Version: 2.1\nName: airlock-sdist\nVersion: 1.0\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// pepIndex serves a PEP 503 simple index of wheels on 127.0.0.2.
func pepIndex(t *testing.T, wheels map[string][]byte, projects map[string]string, extra ...func(*http.ServeMux)) (*http.Server, int) {
	mux := http.NewServeMux()
	for _, f := range extra {
		f(mux)
	}
	for project, file := range projects {
		sum := sha256.Sum256(wheels[file])
		page := fmt.Sprintf(`<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, file, hex.EncodeToString(sum[:]), file)
		mux.HandleFunc("/simple/"+project+"/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(page)) })
	}
	for file, data := range wheels {
		mux.HandleFunc("/files/"+file, func(w http.ResponseWriter, r *http.Request) { w.Write(data) })
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return srv, l.Addr().(*net.TCPAddr).Port
}

func TestPackagesPip(t *testing.T) {
	demo, demoWhl := wheel(t, "airlock-demo", "1.0", "airlock_demo", "from airlock_dep import BASE\nVALUE = BASE + 1\n", "airlock-dep>=2")
	dep, depWhl := wheel(t, "airlock-dep", "2.1", "airlock_dep", "BASE = 41\n")
	// An sdist only: installing it would run its setup.py; wheels only.
	sdist := "airlock_sdist-1.0.tar.gz"
	index, port := pepIndex(t, map[string][]byte{demo: demoWhl, dep: depWhl, sdist: sdistTarball(t)},
		map[string]string{"airlock-demo": demo, "airlock-dep": dep, "airlock-sdist": sdist})
	c, _, _ := egressServer(t, func(cfg *config.Config) {
		cfg.Packages.Pip.IndexURL = fmt.Sprintf("http://pypi.a.test:%d/simple", port)
		cfg.Packages.Pip.Deny = []string{"Evil_Pkg"}
	})
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "pip", Packages: []string{"airlock-demo==1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range res.Installed {
		got[p.Name] = p.Version
	}
	if got["airlock-demo"] != "1.0" || got["airlock-dep"] != "2.1" {
		t.Errorf("installed %+v", res.Installed)
	}
	// It imports in the same session at once, and in its subprocesses;
	// the session still has no network of its own.
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `
import airlock_demo, subprocess, sys, socket
print(airlock_demo.VALUE)
print(subprocess.run([sys.executable, "-c", "import airlock_demo; print(airlock_demo.VALUE)"], capture_output=True, text=True).stdout.strip())
print(sys.path[0])
try:
    socket.gethostbyname("pypi.a.test"); print("resolved")
except OSError:
    print("unresolved")
listening = [l for f in ["/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp"] for l in open(f).readlines()[1:] if l.split()[3] in ("0A", "07")]
print(len(listening))
`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "42\n42\n/workspace/.packages/site\nunresolved\n0\n"; r.Stdout != want {
		t.Errorf("after the install: %q (stderr %q), want %q", r.Stdout, r.Stderr, want)
	}
	if st, _ := c.Session(ctx, sess.ID); st.Network != nil {
		t.Errorf("the install gave the session a network: %+v", st.Network)
	}

	for _, tc := range []struct {
		pkgs []string
		kind error
		msg  string
	}{
		{[]string{"nosuchpkg"}, errdefs.ErrNotFound, "No matching distribution"},
		// Refused at the download (wheels only), not after it: its
		// setup.py never ran.
		{[]string{"airlock-sdist"}, errdefs.ErrNotFound, "Looking in indexes"},
		{[]string{"evil-pkg==1"}, errdefs.ErrPermission, "not allowed by the server's policy"},
		{[]string{"git+https://example.com/x"}, errdefs.ErrInvalidArgument, "not a package requirement"},
		{[]string{"--index-url=http://evil"}, errdefs.ErrInvalidArgument, "not a package requirement"},
	} {
		_, err := c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "pip", Packages: tc.pkgs})
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("install %v: %v, want %v mentioning %q", tc.pkgs, err, tc.kind, tc.msg)
		}
	}
	// One-shots and program runs take packages too.
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Code: "import airlock_demo\nprint(airlock_demo.VALUE)", Packages: []string{"airlock-demo"}}, nil)
	if err != nil || one.Stdout != "42\n" || len(one.Files) != 0 {
		t.Errorf("one-shot with packages: %+v, %v", one, err)
	}
	prog, err := c.RunProgram(ctx, apitype.ProgramRequest{Language: "python", Code: "import sys, airlock_demo\nprint(airlock_demo.VALUE, sys.argv[1])", Args: []string{"x"}, Packages: []string{"airlock-demo==1.0"}}, nil)
	if err != nil || prog.Stdout != "42 x\n" || prog.ExitCode != 0 {
		t.Errorf("program run with packages: %+v, %v", prog, err)
	}
	if _, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "bash", Code: "true", Packages: []string{"x"}}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bash with packages: %v", err)
	}
	// An unreachable index is its own clear error.
	index.Close()
	_, err = c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "pip", Packages: []string{"airlock-dep"}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("unreachable index: %v", err)
	}
}

// npmTarball builds an npm package tarball: package/package.json and
// package/index.js.
func npmTarball(t *testing.T, name, version, index string, deps map[string]string) []byte {
	pj, _ := json.Marshal(map[string]any{"name": name, "version": version, "main": "index.js", "dependencies": deps,
		"scripts": map[string]string{"install": "touch INSTALL-SCRIPT-RAN"}})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{{"package/package.json", string(pj)}, {"package/index.js", index}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// npmRegistry serves packuments and tarballs on 127.0.0.2, as a static
// registry does.
func npmRegistry(t *testing.T, host string, pkgs map[string][]byte, deps map[string]map[string]string) int {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	for name, tgz := range pkgs {
		sum := sha512.Sum512(tgz)
		sha1sum := sha1.Sum(tgz)
		tarURL := fmt.Sprintf("http://%s:%d/%s/-/%s-1.0.0.tgz", host, port, name, name)
		doc, _ := json.Marshal(map[string]any{
			"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"name": name, "version": "1.0.0", "dependencies": deps[name],
				"hasInstallScript": true, "scripts": map[string]string{"install": "touch INSTALL-SCRIPT-RAN"},
				"dist": map[string]string{"tarball": tarURL, "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:]), "shasum": hex.EncodeToString(sha1sum[:])},
			}},
		})
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		})
		mux.HandleFunc("/"+name+"/-/"+name+"-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) { w.Write(tgz) })
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return port
}

func TestPackagesNpm(t *testing.T) {
	deps := map[string]map[string]string{"airlock-npm-demo": {"airlock-npm-dep": "^1.0.0"}}
	port := npmRegistry(t, "npm.a.test", map[string][]byte{
		"airlock-npm-demo": npmTarball(t, "airlock-npm-demo", "1.0.0", "module.exports = require('airlock-npm-dep') + 1;\n", deps["airlock-npm-demo"]),
		"airlock-npm-dep":  npmTarball(t, "airlock-npm-dep", "1.0.0", "module.exports = 41;\n", nil),
	}, deps)
	c, res, _ := egressServer(t, func(cfg *config.Config) {
		cfg.Packages.Npm.Registry = fmt.Sprintf("http://npm.a.test:%d/", port)
		cfg.Pool.Size = map[string]int{}
	})
	res.mu.Lock()
	res.addrs["npm.a.test"] = res.addrs["pypi.a.test"]
	res.mu.Unlock()
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "npm", Packages: []string{"airlock-npm-demo"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range out.Installed {
		got[p.Name] = p.Version
	}
	if got["airlock-npm-demo"] != "1.0.0" || got["airlock-npm-dep"] != "1.0.0" {
		t.Errorf("installed %+v", out.Installed)
	}
	// npm install as a shell command (run_command of an agent) takes the
	// same path, in a fresh session.
	sess3, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := c.RunCommand(ctx, sess3.ID, apitype.CommandRequest{Command: "npm install --no-fund airlock-npm-demo"}, nil)
	if err != nil || cr.ExitCode == nil || *cr.ExitCode != 0 || !strings.Contains(cr.Stdout, "airlock-npm-demo-1.0.0") {
		t.Fatalf("npm install as a command: %+v, %v", cr, err)
	}
	if r, err := c.Execute(ctx, sess3.ID, apitype.ExecuteRequest{Code: "console.log(require('airlock-npm-demo'))"}, nil); err != nil || r.Stdout != "42\n" {
		t.Errorf("after npm install as a command: %+v, %v", r, err)
	}
	cr, err = c.RunCommand(ctx, sess3.ID, apitype.CommandRequest{Command: "npm install no-such-npm-pkg"}, nil)
	if err != nil || cr.ExitCode == nil || *cr.ExitCode != 1 || !strings.Contains(cr.Stderr, "no-such-npm-pkg") {
		t.Errorf("npm install of a missing package as a command: %+v, %v", cr, err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `console.log(require('airlock-npm-demo')); console.log(require("fs").existsSync("/workspace/node_modules/airlock-npm-demo/INSTALL-SCRIPT-RAN"))`}, nil)
	if err != nil || r.Stdout != "42\nfalse\n" {
		t.Errorf("after the install: %q %q, %v", r.Stdout, r.Stderr, err)
	}
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "javascript", Code: "console.log(require('airlock-npm-demo'))", Packages: []string{"airlock-npm-demo"}}, nil)
	if err != nil || one.Stdout != "42\n" {
		t.Errorf("one-shot with npm packages: %+v, %v", one, err)
	}
	for _, tc := range []struct {
		pkgs []string
		kind error
	}{
		{[]string{"no-such-npm-pkg"}, errdefs.ErrNotFound},
		{[]string{"file:../x"}, errdefs.ErrInvalidArgument},
		{[]string{"git+https://example.com/x.git"}, errdefs.ErrInvalidArgument},
	} {
		if _, err := c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "npm", Packages: tc.pkgs}); !errors.Is(err, tc.kind) {
			t.Errorf("npm install %v: %v, want %v", tc.pkgs, err, tc.kind)
		}
	}
}

// TestPackagesPipMagic: %pip install and !pip install in a cell take the
// API's path (policy, download sandbox, offline install), the installer's
// output is the cell's stdout, and the package imports in the same cell.
func TestPackagesPipMagic(t *testing.T) {
	demo, demoWhl := wheel(t, "airlock-demo", "1.0", "airlock_demo", "from airlock_dep import BASE\nVALUE = BASE + 1\n", "airlock-dep>=2")
	dep, depWhl := wheel(t, "airlock-dep", "2.1", "airlock_dep", "BASE = 41\n")
	// slow-pkg's page never comes: the cell's timeout must end the wait.
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	_, port := pepIndex(t, map[string][]byte{demo: demoWhl, dep: depWhl},
		map[string]string{"airlock-demo": demo, "airlock-dep": dep}, func(mux *http.ServeMux) {
			mux.HandleFunc("/simple/slow-pkg/", func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-slow:
				}
			})
		})
	c, _, _ := egressServer(t, func(cfg *config.Config) {
		cfg.Packages.Pip.IndexURL = fmt.Sprintf("http://pypi.a.test:%d/simple", port)
		cfg.Packages.Pip.Deny = []string{"Evil_Pkg"}
	})
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "%pip install airlock-demo==1.0\nimport airlock_demo\nprint(airlock_demo.VALUE)"}, func(e apitype.Event) {
		if e.Type == apitype.EventStdout {
			streamed.WriteString(e.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Error != nil || !strings.Contains(r.Stdout, "Successfully installed airlock-demo-1.0") || !strings.HasSuffix(r.Stdout, "42\n") {
		t.Fatalf("%%pip install: stdout %q stderr %q error %+v", r.Stdout, r.Stderr, r.Error)
	}
	if !strings.Contains(streamed.String(), "Successfully installed") {
		t.Errorf("the installer's output was not streamed: %q", streamed.String())
	}
	// The shell spelling goes the same way; the session still has no
	// network of its own.
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "!pip install -q airlock-dep\nimport airlock_dep\nprint(airlock_dep.BASE)"}, nil)
	if err != nil || r.Error != nil || !strings.HasSuffix(r.Stdout, "41\n") {
		t.Errorf("!pip install: %+v, %v", r, err)
	}
	if st, _ := c.Session(ctx, sess.ID); st.Network != nil {
		t.Errorf("the install gave the session a network: %+v", st.Network)
	}
	// And as a shell command beside the interpreter (run_command).
	cr, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "python3 -m pip install --quiet airlock-demo==1.0"}, nil)
	if err != nil || cr.ExitCode == nil || *cr.ExitCode != 0 || !strings.Contains(cr.Stdout, "airlock-demo-1.0") {
		t.Errorf("pip install as a command: %+v, %v", cr, err)
	}
	if cr, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "pip install evil-pkg"}, nil); err != nil || cr.ExitCode == nil || *cr.ExitCode != 1 || !strings.Contains(cr.Stderr, "not allowed by the server's policy") {
		t.Errorf("pip install of a denied package as a command: %+v, %v", cr, err)
	}
	for _, tc := range []struct{ code, msg string }{
		{"%pip install evil-pkg", "not allowed by the server's policy"},
		{"!python3 -m pip install nosuchpkg", "No matching distribution"},
		{"%pip install 'x @ http://evil/x.whl'", "not a package requirement"},
	} {
		r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: tc.code}, nil)
		if err != nil || r.Error == nil || r.Error.Name != "PackageInstallError" || !strings.Contains(r.Error.Value, tc.msg) {
			t.Errorf("%s: %+v, %v; want PackageInstallError mentioning %q", tc.code, r, err, tc.msg)
		}
	}
	// The execution's timeout applies to the install; the session goes on.
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "%pip install slow-pkg", Timeout: config.Duration(2 * time.Second)}, nil)
	if err != nil || !r.Killed || r.Error == nil || r.Error.Name != "TimeoutError" {
		t.Errorf("slow install: %+v, %v", r, err)
	}
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "import airlock_demo\nprint(airlock_demo.VALUE)"}, nil)
	if err != nil || r.Stdout != "42\n" {
		t.Errorf("after the slow install: %+v, %v", r, err)
	}
}

// TestPackagesPipMagicNotConfigured: a server without an index says so.
func TestPackagesPipMagicNotConfigured(t *testing.T) {
	ctx := context.Background()
	c2, _, _ := egressServer(t)
	sess2, err := c2.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c2.Execute(ctx, sess2.ID, apitype.ExecuteRequest{Code: "%pip install airlock-demo"}, nil)
	if err != nil || r.Error == nil || !strings.Contains(r.Error.Value, "package installation is not configured on this server (packages.pip.index_url)") {
		t.Errorf("not configured: %+v, %v", r, err)
	}
	// pip install as a command fails at once and says why (a shell's pip
	// would retry a network it does not have).
	cr, err := c2.RunCommand(ctx, sess2.ID, apitype.CommandRequest{Command: "pip install airlock-demo"}, nil)
	if err != nil || cr.ExitCode == nil || *cr.ExitCode != 1 || !strings.Contains(cr.Stderr, "package installation is not configured on this server") {
		t.Errorf("pip install as a command, not configured: %+v, %v", cr, err)
	}
}

// On a server whose only isolation is gVisor, the download sandbox is a
// gVisor one too (pip and npm run package code as tenant code would):
// installs work, from the API and from a cell, for Python and JavaScript.
func TestPackagesOnGVisorOnlyServer(t *testing.T) {
	runsc := testenv.Runsc(t)
	demo, demoWhl := wheel(t, "airlock-demo", "1.0", "airlock_demo", "VALUE = 42\n")
	_, pipPort := pepIndex(t, map[string][]byte{demo: demoWhl}, map[string]string{"airlock-demo": demo})
	npmPort := npmRegistry(t, "npm.a.test", map[string][]byte{
		"airlock-npm-dep": npmTarball(t, "airlock-npm-dep", "1.0.0", "module.exports = 41;\n", nil),
	}, nil)
	c, res, _ := egressServer(t, func(cfg *config.Config) {
		cfg.Isolation = config.GVisor
		cfg.GVisor.Runsc = runsc
		cfg.Pool.Size = map[string]int{}
		cfg.Packages.Pip.IndexURL = fmt.Sprintf("http://pypi.a.test:%d/simple", pipPort)
		cfg.Packages.Npm.Registry = fmt.Sprintf("http://npm.a.test:%d/", npmPort)
	})
	res.mu.Lock()
	res.addrs["npm.a.test"] = res.addrs["pypi.a.test"]
	res.mu.Unlock()
	ctx := context.Background()
	py, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if py.Isolation != config.GVisor {
		t.Fatalf("session isolation %q", py.Isolation)
	}
	if _, err := c.InstallPackages(ctx, py.ID, apitype.PackagesRequest{Manager: "pip", Packages: []string{"airlock-demo"}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, py.ID, apitype.ExecuteRequest{Code: "%pip install airlock-demo==1.0\nimport airlock_demo\nprint(airlock_demo.VALUE)"}, nil)
	if err != nil || !strings.HasSuffix(r.Stdout, "42\n") {
		t.Errorf("%%pip install on gVisor: %+v, %v", r, err)
	}
	js, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstallPackages(ctx, js.ID, apitype.PackagesRequest{Manager: "npm", Packages: []string{"airlock-npm-dep"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Execute(ctx, js.ID, apitype.ExecuteRequest{Code: "console.log(require('airlock-npm-dep'))"}, nil); err != nil || r.Stdout != "41\n" {
		t.Errorf("after npm install on gVisor: %+v, %v", r, err)
	}
}

// Pip packages installed in a session are on the path of every new
// interpreter of it: after a pause and resume (its interpreter restarts),
// a fork, a server restart, in a code context restored or started later,
// and in its shell commands.
func TestPackagesAfterResume(t *testing.T) {
	demo, demoWhl := wheel(t, "airlock-demo", "1.0", "airlock_demo", "VALUE = 42\n")
	_, port := pepIndex(t, map[string][]byte{demo: demoWhl}, map[string]string{"airlock-demo": demo})
	images := t.TempDir()
	with := func(cfg *config.Config) {
		cfg.Packages.Pip.IndexURL = fmt.Sprintf("http://pypi.a.test:%d/simple", port)
		cfg.Persistence.Enabled, cfg.Persistence.Dir = true, images
		// A pooled interpreter is configured after it started: the
		// path must follow its configuration.
		cfg.Pool.Size = map[string]int{"python": 1}
	}
	c, _, _, srv := egressServerS(t, with)
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstallPackages(ctx, sess.ID, apitype.PackagesRequest{Manager: "pip", Packages: []string{"airlock-demo"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateContext(ctx, sess.ID, apitype.CreateContextRequest{Language: "python"}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, id, when string) {
		t.Helper()
		ctxs, err := c.Contexts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, cc := range ctxs {
			if cc.Language != "python" {
				continue
			}
			r, err := c.Execute(ctx, id, apitype.ExecuteRequest{Context: cc.ID, Code: "import airlock_demo, subprocess, sys\nprint(airlock_demo.VALUE)\n" +
				"print(subprocess.run([sys.executable, '-c', 'import airlock_demo; print(airlock_demo.VALUE)'], capture_output=True, text=True).stdout.strip())"}, nil)
			if err != nil || r.Stdout != "42\n42\n" {
				t.Errorf("%s, context %s: %+v, %v", when, cc.ID, r, err)
			}
		}
		out, err := c.RunCommand(ctx, id, apitype.CommandRequest{Command: "python3 -c 'import airlock_demo; print(airlock_demo.VALUE)'"}, nil)
		if err != nil || out.Stdout != "42\n" {
			t.Errorf("%s, a shell command: %+v, %v", when, out, err)
		}
		// A context started now has them too.
		cc, err := c.CreateContext(ctx, id, apitype.CreateContextRequest{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Execute(ctx, id, apitype.ExecuteRequest{Context: cc.ID, Code: "import airlock_demo; print(airlock_demo.VALUE)"}, nil)
		if err != nil || r.Stdout != "42\n" {
			t.Errorf("%s, a new context: %+v, %v", when, r, err)
		}
		if err := c.DeleteContext(ctx, id, cc.ID); err != nil {
			t.Fatal(err)
		}
	}
	check(t, sess.ID, "live")
	if _, err := c.PauseSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	fork, err := c.ForkSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	check(t, fork.ID, "forked")
	if _, err := c.ResumeSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	check(t, sess.ID, "resumed")

	// A restart: the shutdown pauses the session, the next server
	// resumes it.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv.Shutdown(sctx)
	c2, _, _, _ := egressServerS(t, with)
	if _, err := c2.ResumeSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	c = c2
	check(t, sess.ID, "after a restart")
}
