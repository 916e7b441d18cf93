package session

import (
	"context"
	"testing"

	"airlock/internal/apitype"
)

// One-shot and program runs: each in a sandbox of its own, freed after;
// a program's result is its exit status, or how airlock killed it.
func TestOneShotRuns(t *testing.T) {
	for _, c := range []struct {
		name    string
		lang    string
		program bool
		code    string
		stdout  string
		exit    int
		reason  apitype.KillReason
	}{
		{"code", "", false, "out hi", "hi", 0, ""},
		{"code that raises", "", false, "raise ValueError", "", 1, ""},
		{"a program's exit status", "", true, "out hi;exit 3", "hi", 3, ""},
		{"a program out of memory", "", true, "oom", "", 137, apitype.KillMemory},
		// A JavaScript program whose V8 heap was full once said only
		// that it aborted (134), where a session's interpreter dying so
		// said out of memory (issue 19: one answer per question).
		{"a JavaScript program at the end of its heap", "javascript", true, "abort", "", 137, apitype.KillMemory},
		{"a Python program that aborts", "", true, "abort", "", 134, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, _ := newTestManager(t, nil)
			var res *apitype.OneShotResult
			var err error
			if c.program {
				res, err = m.RunProgram(context.Background(), apitype.ProgramRequest{Language: c.lang, Code: c.code}, nil)
			} else {
				res, err = m.RunOnce(context.Background(), apitype.OneShotRequest{Code: c.code}, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != c.stdout || res.ExitCode != c.exit || res.KillReason != c.reason || res.Killed != (c.reason != "") {
				t.Errorf("stdout %q, exit %d, killed %v (%q); want %q, %d, %q", res.Stdout, res.ExitCode, res.Killed, res.KillReason, c.stdout, c.exit, c.reason)
			}
			if res.SessionEnded {
				t.Errorf("a one-shot run reports its sandbox's end: %+v", res.Result)
			}
			m.Close()
			if n := len(src.all); n != 1 || !src.last().closed.Load() {
				t.Errorf("%d sandboxes, the last one closed: %v", n, src.last().closed.Load())
			}
		})
	}
}

// One-shots and programs ask their source for a one-shot's sandbox (a
// pool leaves those it keeps for session creations); sessions do not.
// A one-shot or program whose code needs none of the template's preloads,
// and brings nothing else that could import them, asks for a lean
// sandbox; anything else for the full template's. A program run of such
// code that does not read sys.flags asks for a runtime without site.
func TestOneShotsAskForTheirSandboxes(t *testing.T) {
	py := func(code string) func(*Manager) error {
		return func(m *Manager) error {
			_, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Language: "python", Code: code}, nil)
			return err
		}
	}
	for _, c := range []struct {
		name string
		run  func(*Manager) error
		lean bool
		// oneShot: asked for as a one-shot's sandbox.
		oneShot bool
		// leanProgram: its runtime may start without site.
		leanProgram bool
	}{
		// The fake runtime's steps, read by the scan as Python.
		{"lean code", py("out 1"), true, true, false},
		{"standard modules", py("out import math, json"), true, true, false},
		{"pandas", py("out import pandas"), false, true, false},
		{"a module looked up by name", py("out __import__"), false, true, false},
		{"with files", func(m *Manager) error {
			_, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Language: "python", Code: "out 1",
				Files: []apitype.InputFile{{Path: "helper.py", Content: "import pandas"}}}, nil)
			return err
		}, false, true, false},
		{"a program", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Language: "python", Code: "out 1"}, nil)
			return err
		}, true, true, true},
		{"a program that reads sys.flags", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Language: "python", Code: "out sys.flags"}, nil)
			return err
		}, true, true, false},
		{"a program importing pandas", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Language: "python", Code: "out import pandas"}, nil)
			return err
		}, false, true, false},
		{"a program with files", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Language: "python", Code: "out 1",
				Files: []apitype.InputFile{{Path: "helper.py", Content: "import pandas"}}}, nil)
			return err
		}, false, true, false},
		{"a program in a new interpreter", func(m *Manager) error {
			_, err := m.RunProgram(context.Background(), apitype.ProgramRequest{Language: "python", Code: "out 1",
				Env: map[string]string{"PYTHONHASHSEED": "0"}}, nil)
			return err
		}, false, true, false},
		{"bash", func(m *Manager) error {
			_, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Language: "bash", Code: "out 1"}, nil)
			return err
		}, false, true, false},
		{"a session", func(m *Manager) error {
			_, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python"})
			return err
		}, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, src, _ := newTestManager(t, nil)
			if err := c.run(m); err != nil {
				t.Fatal(err)
			}
			if got := src.last().lean; got != c.lean {
				t.Errorf("asked for a lean sandbox: %v, want %v", got, c.lean)
			}
			if got := src.last().oneShot; got != c.oneShot {
				t.Errorf("its sandbox asked for as a one-shot's: %v, want %v", got, c.oneShot)
			}
			if got := src.last().leanProgram; got != c.leanProgram {
				t.Errorf("asked for a runtime without site: %v, want %v", got, c.leanProgram)
			}
		})
	}
}
