package jail

import (
	"context"
	"strings"
	"testing"

	"airlock/internal/config"
)

// The ways a runtime starts in a sandbox, for the tests that must hold on
// every one of them (the escape suite and its positive control): spawned
// by the sandbox's init, or forked by the Python template. Both make the
// same sandbox entry (planEntry); these tests check they both end up
// where it says.

// startPath runs a request in a fresh sandbox, its program started one way.
type startPath struct {
	name string
	run  func(t testing.TB, h *Host, req RunRequest) *RunResult
}

// The template path is built in the external test package (zygote and
// instance import jail): template_path_test.go sets these.
var (
	// TemplateStart starts the shared template on the shared host; it
	// runs once, before any test takes its leak snapshot.
	TemplateStart func(h *Host) error
	// TemplateRun runs req in a fresh sandbox whose program the template
	// forks: a python3 FILE in the forked interpreter itself (program
	// mode), anything else exec'd from it.
	TemplateRun func(t testing.TB, h *Host, req RunRequest) *RunResult
	// TemplateStop stops the template.
	TemplateStop func()
	// templateErr is why the template did not start.
	templateErr error
)

func startPaths() []startPath {
	return []startPath{
		{"init", func(t testing.TB, h *Host, req RunRequest) *RunResult {
			t.Helper()
			res, err := runOnce(context.Background(), h, req)
			if err != nil {
				t.Fatalf("Run %v: %v", req.Argv, err)
			}
			return res
		}},
		{"template", func(t testing.TB, h *Host, req RunRequest) *RunResult {
			t.Helper()
			if TemplateRun == nil || templateErr != nil {
				t.Fatalf("the python template did not start: %v", templateErr)
			}
			return TemplateRun(t, h, req)
		}},
	}
}

// forEachStartPath runs body once per start path, as subtests named after
// them.
func forEachStartPath(t *testing.T, body func(t *testing.T, p startPath)) {
	for _, p := range startPaths() {
		t.Run(p.name, func(t *testing.T) { body(t, p) })
	}
}

func (p startPath) req(t testing.TB, h *Host, l config.Limits, req RunRequest) *RunResult {
	t.Helper()
	req.Spec = testSpec(l)
	return p.run(t, h, req)
}

// pythonArgs runs code as /workspace/main.py with extra arguments.
func (p startPath) pythonArgs(t testing.TB, h *Host, l config.Limits, code string, args ...string) *RunResult {
	t.Helper()
	return p.req(t, h, l, RunRequest{
		Argv:  append([]string{"/usr/bin/python3", "/workspace/main.py"}, args...),
		Files: []InputFile{{Path: "main.py", Data: strings.NewReader(code)}},
	})
}

// python runs code as /workspace/main.py.
func (p startPath) python(t testing.TB, h *Host, l config.Limits, code string) *RunResult {
	t.Helper()
	return p.pythonArgs(t, h, l, code)
}

// bash runs script with bash.
func (p startPath) bash(t testing.TB, h *Host, l config.Limits, script string) *RunResult {
	t.Helper()
	return p.req(t, h, l, RunRequest{
		Argv:  []string{"/bin/bash", "/workspace/main.sh"},
		Files: []InputFile{{Path: "main.sh", Data: strings.NewReader(script)}},
	})
}
