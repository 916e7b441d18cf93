package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/image"
	"airlock/internal/image/imagetest"
)

// templateServer serves the tests' shared store, holding the
// code-interpreter and python recipes, code-interpreter with a Python
// pool (and so a Python template interpreter of its own).
func templateServer(t *testing.T, adjust ...func(*config.Config)) (*Server, *client.Client) {
	t.Helper()
	store := imagetest.Store(t, "code-interpreter", "python")
	s, _ := testServer(t, newRecorder(), append([]func(*config.Config){func(c *config.Config) {
		c.Templates.Dir = store.Dir()
		c.Templates.Pool = map[string]map[string]int{"code-interpreter": {"python": 1}}
		c.Pool.Zygote = true
		c.Pool.Size = map[string]int{"python": 1}
	}}, adjust...)...)
	c := client.New("http://" + s.Addr().String())
	t.Cleanup(c.CloseIdleConnections)
	return s, c
}

// Sessions on two templates and on the host's root at once, each with
// its own packages: seaborn and requests in code-interpreter, neither in
// python (a minimal Debian root, without numpy either); a template is
// named by the session's info, and refused when unknown or without the
// language's interpreter.
func TestTemplatesTwoAtOnce(t *testing.T) {
	_, c := templateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(id, code string) apitype.Result {
		t.Helper()
		res, err := c.Execute(ctx, id, apitype.ExecuteRequest{Code: code}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return *res
	}
	ci, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "code-interpreter"})
	if err != nil {
		t.Fatal(err)
	}
	py, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "python"})
	if err != nil {
		t.Fatal(err)
	}
	host, err := c.CreateSession(ctx, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ci.Template != "code-interpreter" || ci.TemplateVersion == "" || py.Template != "python" || host.Template != "" {
		t.Fatalf("templates: %q %q %q %q", ci.Template, ci.TemplateVersion, py.Template, host.Template)
	}
	if r := run(ci.ID, "import seaborn, requests, bs4, openpyxl, scipy, sklearn, statsmodels, sympy, plotly, tabulate, xlsxwriter, networkx, PIL, lxml\nprint('ok', requests.__name__)"); r.Stdout != "ok requests\n" {
		t.Errorf("code-interpreter: %+v", r)
	}
	// The real IPython (python3-ipython is in code-interpreter): its own
	// display() gives rich output, not "<IPython.core.display.HTML object>".
	r := run(ci.ID, "import IPython\nfrom IPython.display import display, HTML, Markdown\n"+
		"display(HTML('<b>real</b>'))\ndisplay(Markdown('*md*'))\nprint(IPython.__file__.startswith('/usr/lib/python3/dist-packages/'))")
	if r.Stdout != "True\n" || len(r.Results) != 2 || string(r.Results[0].Data["text/html"]) != `"<b>real</b>"` || string(r.Results[1].Data["text/markdown"]) != `"*md*"` {
		t.Errorf("IPython's display on code-interpreter: %+v", r)
	}
	if r := run(py.ID, "import numpy"); r.Error == nil || r.Error.Name != "ModuleNotFoundError" {
		t.Errorf("python template has numpy: %+v", r)
	}
	if r := run(host.ID, "import numpy; print('ok')"); r.Stdout != "ok\n" {
		t.Errorf("host root: %+v", r)
	}
	// The sessions' state is their own: the one on python still works.
	if r := run(py.ID, "import sys; print(sys.version_info[0])"); r.Stdout != "3\n" {
		t.Errorf("python: %+v", r)
	}
	// Node.js and its modules in code-interpreter; none in python.
	js, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "code-interpreter", Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	jr, err := c.Execute(ctx, js.ID, apitype.ExecuteRequest{Code: "const _ = require('lodash'); console.log(_.sum([1, 2, 3]))"}, nil)
	if err != nil || jr.Stdout != "6\n" {
		t.Errorf("node in code-interpreter: %v %+v", err, jr)
	}
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "python", Language: "javascript"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/usr/bin/node") {
		t.Errorf("javascript on python: %v", err)
	}
	// A code context of a language the template's root lacks is refused
	// with why, as a session of it is; one it has starts.
	_, err = c.CreateContext(ctx, py.ID, apitype.CreateContextRequest{Language: "javascript"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/usr/bin/node") {
		t.Errorf("javascript context on python: %v", err)
	}
	// So is an execution naming the language (its default context would
	// start on first use).
	if _, err := c.Execute(ctx, py.ID, apitype.ExecuteRequest{Code: "1", Language: "javascript"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/usr/bin/node") {
		t.Errorf("javascript execution on python: %v", err)
	}
	if _, err := c.CreateContext(ctx, py.ID, apitype.CreateContextRequest{Language: "bash"}); err != nil {
		t.Errorf("bash context on python: %v", err)
	}
	// GET /v1/templates says what each template runs and its pool.
	list, err := c.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	langs := map[string][]string{}
	for _, tm := range list.Templates {
		langs[tm.Name] = tm.Languages
		if tm.Name == "code-interpreter" && (tm.Pool["python"] != 1 || tm.Version != ci.TemplateVersion || tm.Source != "debian") {
			t.Errorf("code-interpreter listed as %+v", tm)
		}
	}
	if !slices.Equal(langs["code-interpreter"], []string{"bash", "javascript", "python"}) || !slices.Equal(langs["python"], []string{"bash", "python"}) || list.Default != "" {
		t.Errorf("templates listed: %+v", list)
	}
	if tm, err := c.Template(ctx, "code-interpreter"); err != nil || !slices.Contains(tm.Packages, "python3-seaborn") {
		t.Errorf("GET code-interpreter: %v %+v", err, tm)
	}
	if _, err := c.Template(ctx, "nonexistent"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GET an unknown template: %v", err)
	}
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "nonexistent"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not registered on this server; it has code-interpreter, python") {
		t.Errorf("unknown template: %v", err)
	}
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "../etc"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
	// One-shot runs name a template too.
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Template: "code-interpreter", Code: "import seaborn; print('one')"}, nil)
	if err != nil || one.Stdout != "one\n" {
		t.Errorf("one-shot: %v %+v", err, one)
	}
	prog, err := c.RunProgram(ctx, apitype.ProgramRequest{Template: "python", Code: "import sys\ntry:\n    import numpy\nexcept ImportError:\n    print('no numpy')\n"}, nil)
	if err != nil || prog.Stdout != "no numpy\n" {
		t.Errorf("program: %v %+v", err, prog)
	}
}

// A template imported from outside (here a directory) never gets a Python
// template interpreter (it runs as host root and would run the image's
// code there): its pooled runtimes import the preloads in their own
// sandboxes. A built one (Debian's signed packages) gets one.
func TestImportedTemplateHasNoZygote(t *testing.T) {
	store := imagetest.Store(t, "python")
	if _, err := store.Get("python-imported"); err != nil {
		if _, err := store.Import(context.Background(), "python-imported", imagetest.Debian(t, "python"), image.ImportOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s, c := templateServer(t, func(cfg *config.Config) {
		cfg.Templates.Dir = store.Dir()
		cfg.Templates.Pool = map[string]map[string]int{"python": {"python": 1}, "python-imported": {"python": 1}}
		cfg.Pool.Preload = []string{"json"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"python", "python-imported"} {
		info, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: name})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "import sys; print('json' in sys.modules)"}, nil)
		if err != nil || r.Stdout != "True\n" {
			t.Errorf("%s: the preload is not imported: %v %+v", name, err, r)
		}
	}
	stats := s.poolStats()
	if _, ok := stats[apitype.TemplateKey+"@python"]; !ok {
		t.Errorf("the built template has no Python template interpreter: %v", stats)
	}
	if _, ok := stats[apitype.TemplateKey+"@python-imported"]; ok {
		t.Errorf("the imported template has a Python template interpreter: %v", stats)
	}
}

// A new version of a template (an import under the same name) goes to new
// sessions; a running session keeps its own, which is removed once the
// session ends, and `rm` while a session runs keeps its version until then.
//
// Both for an imported template (its pool without a Python template
// interpreter) and for a built one, whose pooled sessions were forked
// from a template interpreter laid out on the old version: retiring that
// interpreter with the old pool must not take its sessions with it.
func TestTemplateUpgradeKeepsRunningSessions(t *testing.T) {
	root := imagetest.Debian(t, "python")
	t.Run("imported", func(t *testing.T) {
		testTemplateUpgrade(t, func(ctx context.Context, store *image.Store) (image.Template, error) {
			return store.Import(ctx, "py", root, image.ImportOptions{})
		})
	})
	t.Run("built", func(t *testing.T) {
		testTemplateUpgrade(t, func(ctx context.Context, store *image.Store) (image.Template, error) {
			// The cached root: an import of it, as a build.
			return store.Build(ctx, "py", imagetest.CacheDir(), image.Recipes["python"], image.ImportOptions{})
		})
	})
}

func testTemplateUpgrade(t *testing.T, mk func(context.Context, *image.Store) (image.Template, error)) {
	store, err := image.Open(filepath.Join(t.TempDir(), "templates"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v1, err := mk(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	s, c := templateServer(t, func(cfg *config.Config) {
		cfg.Templates.Dir = store.Dir()
		cfg.Templates.Pool = map[string]map[string]int{"py": {"python": 1}}
	})
	old, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if _, zygote := s.poolStats()[apitype.TemplateKey+"@py"]; zygote != (v1.Source == "debian") {
		t.Fatalf("a %s template with a Python template interpreter: %v", v1.Source, zygote)
	}
	if old.TemplateVersion != v1.Version {
		t.Fatalf("version %q, want %q", old.TemplateVersion, v1.Version)
	}
	if _, err := c.Execute(ctx, old.ID, apitype.ExecuteRequest{Code: "kept = 41"}, nil); err != nil {
		t.Fatal(err)
	}
	v2, err := mk(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "py"})
	if err != nil || fresh.TemplateVersion != v2.Version {
		t.Fatalf("new session: %v %q, want version %q", err, fresh.TemplateVersion, v2.Version)
	}
	// The running session is undisturbed: its state, its root.
	r, err := c.Execute(ctx, old.ID, apitype.ExecuteRequest{Code: "import os; print(kept + 1, os.path.exists('/usr/bin/python3'))"}, nil)
	if err != nil || r.Stdout != "42 True\n" {
		t.Fatalf("running session after the import: %v %+v", err, r)
	}
	if _, err := os.Stat(v1.Root); err != nil {
		t.Fatalf("the running session's version was removed: %v", err)
	}
	if err := c.DeleteSession(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	// Gone once its last sandbox is (the pool of v1 was retired when v2
	// came; the session's sandbox held it until now).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(v1.Root); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			vs, _ := store.Versions("py")
			t.Fatalf("version %s still on disk after its last session ended: %v", v1.Version, vs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// rm while a session runs: gone for new sessions, kept for it.
	kept, err := store.Remove("py")
	if err != nil || len(kept) != 1 || kept[0] != v2.Version {
		t.Fatalf("rm: %v %v", kept, err)
	}
	if _, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "py"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a session on a removed template: %v", err)
	}
	if r, err := c.Execute(ctx, fresh.ID, apitype.ExecuteRequest{Code: "print('still here')"}, nil); err != nil || r.Stdout != "still here\n" {
		t.Errorf("session after rm: %v %+v", err, r)
	}
}

// An image whose Python is /usr/local/bin/python3 (the official python
// images put theirs there, with no /usr/bin/python3): sessions, pooled
// and cold, contexts and one-shots run that interpreter.
func TestTemplateInterpreterInUsrLocal(t *testing.T) {
	debian := imagetest.Debian(t, "python")
	// A copy of the cached root (hard links: no file of it is written)
	// with its python3 link in /usr/local/bin instead of /usr/bin.
	src := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-al", debian, src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	os.MkdirAll(filepath.Join(src, "usr/local/bin"), 0o755)
	if err := os.Remove(filepath.Join(src, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3.11", filepath.Join(src, "usr/local/bin/python3")); err != nil {
		t.Fatal(err)
	}
	store, err := image.Open(filepath.Join(t.TempDir(), "templates"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tm, err := store.Import(ctx, "py-local", src, image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tm.Runtimes["python"] != "/usr/local/bin/python3" {
		t.Fatalf("runtimes %v", tm.Runtimes)
	}
	for _, pooled := range []bool{true, false} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) { testUsrLocal(t, ctx, store, pooled) })
	}
}

func testUsrLocal(t *testing.T, ctx context.Context, store *image.Store, pooled bool) {
	_, c := templateServer(t, func(cfg *config.Config) {
		cfg.Templates.Dir = store.Dir()
		cfg.Templates.Pool = nil
		if pooled {
			cfg.Templates.Pool = map[string]map[string]int{"py-local": {"python": 1}}
		}
	})
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "py-local"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "import sys; print(sys.executable)"}, nil)
	if err != nil || r.Stdout != "/usr/local/bin/python3\n" {
		t.Errorf("session: %v %+v", err, r)
	}
	// A second Python context in the session runs the same one.
	cc, err := c.CreateContext(ctx, sess.ID, apitype.CreateContextRequest{Language: "python"})
	if err != nil {
		t.Fatalf("context: %v", err)
	}
	r, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Context: cc.ID, Code: "import sys; print(sys.executable)"}, nil)
	if err != nil || r.Stdout != "/usr/local/bin/python3\n" {
		t.Errorf("context: %v %+v", err, r)
	}
	one, err := c.RunOnce(ctx, apitype.OneShotRequest{Template: "py-local", Code: "import sys; print(sys.executable)"}, nil)
	if err != nil || one.Stdout != "/usr/local/bin/python3\n" {
		t.Errorf("one-shot: %v %+v", err, one)
	}
}
