package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/image"
	"airlock/internal/image/imagetest"
)

// GET /v1/templates over real HTTP, by API keys of two tenants: one
// limited to the python template sees only it, is refused another by
// name (listing and session alike) and runs on its own; the other sees
// every template, code-interpreter with its languages and pool.
func TestTemplatesByTenant(t *testing.T) {
	store := imagetest.Store(t, "code-interpreter", "python")
	s := keysServer(t, map[string]any{
		"pool": map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}},
		"templates": map[string]any{
			"dir": store.Dir(), "pool": map[string]any{"python": map[string]int{"python": 1}},
		},
		"tenants": map[string]any{"limited": map[string]any{"templates": []string{"python"}}},
	})
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	limited, open := s.as(s.newKey("limited")), s.as(s.newKey("open"))

	l, err := limited.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Templates) != 1 || l.Templates[0].Name != "python" || l.Templates[0].Pool["python"] != 1 || l.Default != "" {
		t.Fatalf("limited tenant's templates: %+v", l)
	}
	if _, err := limited.Template(ctx, "code-interpreter"); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("limited tenant GETs code-interpreter: %v", err)
	}
	if _, err := limited.CreateSession(ctx, apitype.CreateSessionRequest{Template: "code-interpreter"}); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("limited tenant's session on code-interpreter: %v", err)
	}
	sess, err := limited.CreateSession(ctx, apitype.CreateSessionRequest{Template: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.TemplateVersion != l.Templates[0].Version {
		t.Errorf("session on version %q, listed %q", sess.TemplateVersion, l.Templates[0].Version)
	}
	limited.DeleteSession(ctx, sess.ID)

	all, err := open.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tm := range all.Templates {
		if tm.Name == "code-interpreter" {
			found = true
			if len(tm.Languages) != 3 || tm.Source != "debian" || tm.Size < 100<<20 || tm.Packages != nil {
				t.Errorf("code-interpreter listed as %+v", tm)
			}
		}
	}
	if !found || len(all.Templates) < 2 {
		t.Fatalf("open tenant's templates: %+v", all)
	}
	if _, err := open.Template(ctx, "no-such-template"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown template: %v", err)
	}
}

// airlock doctor checks every template in a jail on its root: its
// interpreters' versions and the pools' preloads; a template whose
// interpreter cannot run is a warning, and a failure (exit 69) once the
// configuration names it, as the server would refuse to start on it.
func TestDoctorTemplates(t *testing.T) {
	store := imagetest.Store(t, "code-interpreter", "python")
	checks := func(cfgJSON string, wantCode int) map[string]struct{ Status, Detail string } {
		t.Helper()
		out, errOut, code := runCLI(t, "", "doctor", "--json", "--config", writeFile(t, "c.json", cfgJSON))
		if code != wantCode {
			t.Fatalf("doctor exited %d, want %d: %s %s", code, wantCode, out, errOut)
		}
		var r struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		m := map[string]struct{ Status, Detail string }{}
		for _, c := range r.Checks {
			m[c.Name] = struct{ Status, Detail string }{c.Status, c.Detail}
		}
		return m
	}
	m := checks(`{"templates": {"dir": "`+store.Dir()+`", "default": "code-interpreter"}}`, 0)
	ci := m["template code-interpreter"]
	if ci.Status != "ok" || !strings.Contains(ci.Detail, "python 3.11") || !strings.Contains(ci.Detail, "pandas") || !strings.Contains(ci.Detail, "node v") || !strings.Contains(ci.Detail, "GNU bash") {
		t.Errorf("template code-interpreter: %+v", ci)
	}
	// The python recipe has no numpy or pandas: its pool imports what it
	// has, and doctor says what is missing.
	if py := m["template python"]; py.Status != "warn" || !strings.Contains(py.Detail, "missing preloads") || !strings.Contains(py.Detail, "numpy") {
		t.Errorf("template python: %+v", py)
	}

	// A root whose python3 is not one: a warning, a failure once named.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(src, "usr/bin/python3"), []byte("#!/nonexistent/interpreter\n"), 0o755)
	own, err := image.Open(filepath.Join(t.TempDir(), "templates"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Import(context.Background(), "broken", src, image.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	m = checks(`{"templates": {"dir": "`+own.Dir()+`"}}`, 0)
	if b := m["template broken"]; b.Status != "warn" || !strings.Contains(b.Detail, "python3 does not run in a jail on it") {
		t.Errorf("template broken, not named: %+v", b)
	}
	m = checks(`{"templates": {"dir": "`+own.Dir()+`", "default": "broken", "pool": {"missing": {"python": 1}}}}`, 69)
	if b := m["template broken"]; b.Status != "FAIL" {
		t.Errorf("template broken, the default: %+v", b)
	}
	if b := m["template missing"]; b.Status != "FAIL" || !strings.Contains(b.Detail, "not registered") {
		t.Errorf("template missing: %+v", b)
	}
}
