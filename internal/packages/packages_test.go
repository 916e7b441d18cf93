package packages

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// fakeTarget is a session and its download sandboxes, as directories:
// a download "produces" files and a report, an install step reports.
type fakeTarget struct {
	t  *testing.T
	ws *workspace.Dir
	// dlFiles are what a download leaves in its sandbox's /workspace;
	// dlReport and runReport what the download and the install print
	// (nil: nothing, the report is missing).
	dlFiles              map[string]string
	dlReport, runReport  *report
	policies             []string // each download's allowlist
	downloads, done, run int
}

func newTarget(t *testing.T) *fakeTarget {
	return &fakeTarget{t: t, ws: openDir(t), dlFiles: map[string]string{}}
}

func openDir(t *testing.T) *workspace.Dir {
	d, err := workspace.OpenOut(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func printed(r *report) *apitype.Result {
	if r == nil {
		return &apitype.Result{Stderr: "Traceback: boom"}
	}
	b, _ := json.Marshal(r)
	return &apitype.Result{Stdout: "noise\n" + marker + string(b) + "\n"}
}

func (f *fakeTarget) Workspace() *workspace.Dir { return f.ws }

func (f *fakeTarget) Run(ctx context.Context, code string, timeout time.Duration) (*apitype.Result, error) {
	f.run++
	return printed(f.runReport), nil
}

func (f *fakeTarget) Download(ctx context.Context, policy egress.Policy, code string, timeout time.Duration) (*workspace.Dir, *apitype.Result, func(), error) {
	f.downloads++
	f.policies = append(f.policies, strings.Join(policy.Entries(), " "))
	dl := openDir(f.t)
	if err := dl.Mkdir("dl"); err != nil {
		f.t.Fatal(err)
	}
	for p, data := range f.dlFiles {
		if _, err := dl.Write(p, strings.NewReader(data), int64(len(data)), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	return dl, printed(f.dlReport), func() { f.done++ }, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testPackages() config.Packages {
	p := config.DefaultPackages()
	p.Pip.IndexURL, p.Pip.Hosts = "https://pypi.example/simple", []string{"files.example"}
	p.Npm.Registry = "https://npm.example"
	return p
}

// A pip install: the download's wheels (and nothing else) land in the
// session's wheels directory, the offline install runs in the session,
// and the download's sandbox is ended; its only egress is the index.
func TestInstallPip(t *testing.T) {
	in := New(testPackages(), quiet)
	f := newTarget(t)
	f.dlFiles = map[string]string{"dl/demo-1.0-py3-none-any.whl": "wheel", "dl/demo-1.0.tar.gz": "sdist", "dl/notes.txt": "x"}
	f.dlReport = &report{}
	f.runReport = &report{Installed: []apitype.Package{{Name: "demo", Version: "1.0"}}}
	got, err := in.Install(context.Background(), f, Pip, []string{"demo==1.0"}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "demo" {
		t.Errorf("installed %+v", got)
	}
	entries, _, err := f.ws.List(wheelDir, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, filepath.Base(e.Path))
	}
	if !slices.Equal(names, []string{"demo-1.0-py3-none-any.whl"}) {
		t.Errorf("wheels %q, want the wheel only", names)
	}
	if f.downloads != 1 || f.done != 1 || f.run != 1 {
		t.Errorf("%d downloads, %d ended, %d install runs; want one each", f.downloads, f.done, f.run)
	}
	if want := "pypi.example files.example"; f.policies[0] != want {
		t.Errorf("the download's egress %q, want %q", f.policies[0], want)
	}
}

// A failed download or install says why, in the client's terms, and
// leaves no download sandbox behind.
func TestInstallFailures(t *testing.T) {
	for _, c := range []struct {
		name          string
		manager       string
		dl, run       *report
		want          error
		wantInMessage string
	}{
		{"no wheel", Pip, &report{Code: 1, Log: "ERROR: No matching distribution found for nope"}, nil, errdefs.ErrNotFound, "no compatible wheel"},
		{"index unreachable", Pip, &report{Code: 1, Log: "Failed to establish a new connection"}, nil, errdefs.ErrUnavailable, "unreachable"},
		{"download timeout", Pip, &report{Timeout: true}, nil, errdefs.ErrTimeout, "packages.pip.timeout"},
		{"the download never reported", Pip, nil, nil, errdefs.ErrUnavailable, "did not report"},
		{"the install fails", Pip, &report{}, &report{Code: 1, Log: "ERROR: broken"}, errdefs.ErrUnavailable, "the install failed"},
		{"no such npm package", Npm, &report{Code: 1, Log: "npm error code E404"}, nil, errdefs.ErrNotFound, "no such package"},
		{"registry unreachable", Npm, &report{Code: 1, Log: "ENOTFOUND"}, nil, errdefs.ErrUnavailable, "unreachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newTarget(t)
			f.dlReport, f.runReport = c.dl, c.run
			_, err := New(testPackages(), quiet).Install(context.Background(), f, c.manager, []string{"demo"}, "s1")
			if !errors.Is(err, c.want) || !strings.Contains(errdefs.Message(err), c.wantInMessage) {
				t.Errorf("%v, want %v with %q", err, c.want, c.wantInMessage)
			}
			if f.done != f.downloads {
				t.Errorf("%d downloads, %d ended", f.downloads, f.done)
			}
		})
	}
}

// An npm install copies the node_modules tree the download built into
// the session's /workspace/node_modules.
func TestInstallNpm(t *testing.T) {
	f := newTarget(t)
	f.dlFiles = map[string]string{
		"dl/node_modules/left-pad/package.json":      `{"name":"left-pad","version":"1.3.0"}`,
		"dl/node_modules/left-pad/index.js":          "module.exports = 1",
		"dl/node_modules/@scope/x/lib/deep/index.js": "x",
	}
	f.dlReport = &report{Installed: []apitype.Package{{Name: "left-pad", Version: "1.3.0"}}}
	got, err := New(testPackages(), quiet).Install(context.Background(), f, Npm, []string{"left-pad"}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Version != "1.3.0" || f.run != 0 {
		t.Errorf("installed %+v, %d runs in the session", got, f.run)
	}
	for p, want := range f.dlFiles {
		r, _, err := f.ws.Open(strings.TrimPrefix(p, "dl/"))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		b, _ := io.ReadAll(r)
		r.Close()
		if string(b) != want {
			t.Errorf("%s: %q", p, b)
		}
	}
	if want := "npm.example"; f.policies[0] != want {
		t.Errorf("the download's egress %q, want %q", f.policies[0], want)
	}
}

// What the operator's policy refuses, before any sandbox is built.
func TestCheck(t *testing.T) {
	cfg := testPackages()
	cfg.Pip.Allow, cfg.Pip.Deny = []string{"Demo_Pkg", "requests"}, []string{"requests"}
	cfg.Npm.Deny = []string{"evil"}
	off := config.DefaultPackages()
	for _, c := range []struct {
		name    string
		cfg     config.Packages
		manager string
		pkgs    []string
		want    error
	}{
		{"allowed, by its normalised name", cfg, Pip, []string{"demo-pkg[extra]>=1.0"}, nil},
		{"denied", cfg, Pip, []string{"requests"}, errdefs.ErrPermission},
		{"not in the allow list", cfg, Pip, []string{"numpy"}, errdefs.ErrPermission},
		{"a URL", cfg, Pip, []string{"demo @ https://x/y.whl"}, errdefs.ErrInvalidArgument},
		{"an option", cfg, Pip, []string{"--index-url=http://evil"}, errdefs.ErrInvalidArgument},
		{"none", cfg, Pip, nil, errdefs.ErrInvalidArgument},
		{"too many", cfg, Pip, make([]string, 33), errdefs.ErrInvalidArgument},
		{"pip not configured", off, Pip, []string{"demo"}, errdefs.ErrUnsupported},
		{"an npm package", cfg, Npm, []string{"@scope/x@^1.2"}, nil},
		{"npm denied", cfg, Npm, []string{"evil"}, errdefs.ErrPermission},
		{"an npm path", cfg, Npm, []string{"../x"}, errdefs.ErrInvalidArgument},
		{"npm not configured", off, Npm, []string{"x"}, errdefs.ErrUnsupported},
		{"an unknown manager", cfg, "cargo", []string{"x"}, errdefs.ErrInvalidArgument},
	} {
		if err := New(c.cfg, quiet).Check(c.manager, c.pkgs); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// A program finds what pip installed in a new interpreter; npm's needs
// nothing.
func TestProgramEnv(t *testing.T) {
	env := map[string]string{"PYTHONPATH": "/mine"}
	if !ProgramEnv(Pip, env) || env["PYTHONPATH"] != "/workspace/"+siteDir+":/mine" {
		t.Errorf("pip: %q", env["PYTHONPATH"])
	}
	env = map[string]string{}
	if ProgramEnv(Npm, env) || len(env) != 0 {
		t.Errorf("npm: %v", env)
	}
}
