package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/errdefs"
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
	_, err = c.CreateSession(ctx, apitype.CreateSessionRequest{Template: "nonexistent"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not registered") {
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
