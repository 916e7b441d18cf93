package session

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
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

// A one-shot's teardown, which nobody waits for, takes only spare CPU
// (its sandbox yields before the kill) and holds no execution slot: with
// one slot on the server, a session's execution runs while a one-shot's
// teardown goes on. A one-shot that must wait for a teardown (one-shot
// sandboxes at the maximum) first gives those teardowns the normal CPU
// weight back. Checked against mutants: the execution slot held until
// the teardown ended (as before: the session's execution got ErrLimit);
// no Yield (the teardown at the normal weight); no hurry when a one-shot
// waits (the teardown kept yielding).
func TestOneShotTeardownsStandAside(t *testing.T) {
	cfg := testConfig()
	cfg.Server.MaxConcurrentExecutions = 1
	m, src, _ := newTestManager(t, &cfg)
	s := create(t, m, "python")
	var (
		first   *fakeInstance
		reached <-chan struct{}
		release func()
	)
	src.setup = func(f *fakeInstance) {
		if f.oneShot && first == nil {
			first = f
			reached, release = holdClose(t, f)
		}
	}
	res, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Code: "out 1"}, nil)
	if err != nil || res.Stdout != "1" {
		t.Fatalf("the one-shot: %v, %+v", err, res)
	}
	<-reached
	if !first.yielding.Load() {
		t.Error("the one-shot's sandbox was torn down at the normal CPU weight")
	}
	if r, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "out 2"}, nil); err != nil || r.Stdout != "2" {
		t.Errorf("a session's execution while a one-shot is torn down: %v, %+v", err, r)
	}
	// The one-shot sandboxes at their maximum: the next one-shot waits
	// (up to the queue timeout), hurrying the teardown.
	if _, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Code: "out 3"}, nil); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("a one-shot while the one before is torn down, one at most: %v, want ErrLimit", err)
	}
	if first.yielding.Load() {
		t.Error("a one-shot waited for a teardown that kept the lowest CPU weight")
	}
	release()
}

// A one-shot's teardown yields for a while only: then it gets the normal
// CPU weight back, whether or not anything waits. Checked against a
// mutant: no timer (the teardown yielded for good).
func TestOneShotTeardownYieldsForAWhile(t *testing.T) {
	m, src, clock := newTestManager(t, nil)
	var (
		first   *fakeInstance
		reached <-chan struct{}
		release func()
	)
	src.setup = func(f *fakeInstance) {
		if first == nil {
			first = f
			reached, release = holdClose(t, f)
		}
	}
	if _, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Code: "out 1"}, nil); err != nil {
		t.Fatal(err)
	}
	<-reached
	if !first.yielding.Load() {
		t.Fatal("the one-shot's sandbox was torn down at the normal CPU weight")
	}
	clock.Fire(oneShotYield)
	<-first.foregrounded
	if first.yielding.Load() {
		t.Error("the teardown yields on")
	}
	release()
}

// TestOneShotQueueTimeoutShared: a one-shot waits for its teardown slot
// and its execution slot within one server.queue_timeout (as the
// configuration and executeOnce say), not one each: the timeout that
// ran while it waited for the first refuses it while it waits for the
// second. Checked against a mutant: each slot's wait with its own timer
// (as before) made a second timer, and firing the first left the
// one-shot waiting.
func TestOneShotQueueTimeoutShared(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	made := make(chan chan time.Time, 4)
	m.queueTimer = func(time.Duration) (<-chan time.Time, func()) {
		c := make(chan time.Time, 1)
		made <- c
		return c, func() {}
	}
	// Every slot of both kinds taken.
	for range cap(m.teardowns) {
		m.teardowns <- struct{}{}
	}
	for range cap(m.execs) {
		m.execs <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.RunOnce(context.Background(), apitype.OneShotRequest{Code: "out x"}, nil)
		done <- err
	}()
	first := <-made
	// Its teardown slot freed: it waits for an execution slot now, as
	// long as its queue timeout has left.
	<-m.teardowns
	for len(m.teardowns) < cap(m.teardowns) {
		runtime.Gosched() // until it has taken the slot freed
	}
	first <- time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrLimit) || !strings.Contains(err.Error(), "executions are running") {
			t.Fatalf("refused with %v, want the execution slots' limit", err)
		}
	case c := <-made:
		c <- time.Now()
		t.Fatalf("a second queue timeout for the execution slot: %v", <-done)
	}
	for range cap(m.execs) {
		<-m.execs
	}
	for range cap(m.teardowns) - 1 {
		<-m.teardowns
	}
	if len(m.teardowns) != 0 || len(m.execs) != 0 {
		t.Errorf("slots left taken: %d teardowns, %d executions", len(m.teardowns), len(m.execs))
	}
}

// While a one-shot waits for a teardown slot, a teardown that begins
// meanwhile does not yield: the waiter's hurry reached only the
// teardowns already yielding, and one that began after it would
// otherwise hold the slot at the lowest weight for up to oneShotYield.
// Checked against a mutant: yieldTeardown not reading the waiters (the
// late teardown yielded).
func TestOneShotTeardownNoYieldWhileWaited(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "python")
	late := s.inst.(*fakeInstance)
	fired := make(chan time.Time, 1)
	m.queueTimer = func(time.Duration) (<-chan time.Time, func()) { return fired, func() {} }
	for range cap(m.teardowns) {
		m.teardowns <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.acquireTeardownBy(context.Background(), fired)
		done <- err
	}()
	for {
		m.mu.Lock()
		n := m.teardownWaiters
		m.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched() // until it waits
	}
	m.yieldTeardown(s)
	if late.yielding.Load() {
		t.Error("a teardown yielded while a one-shot waited for a teardown slot")
	}
	fired <- time.Now()
	if err := <-done; !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("the waiter: %v, want ErrLimit", err)
	}
	m.mu.Lock()
	n := m.teardownWaiters
	m.mu.Unlock()
	if n != 0 {
		t.Errorf("%d teardown waiters counted after the wait", n)
	}
	for range cap(m.teardowns) {
		<-m.teardowns
	}
	// Nobody waits: a teardown yields again.
	m.yieldTeardown(s)
	if !late.yielding.Load() {
		t.Error("a teardown did not yield with nobody waiting")
	}
	m.hurryTeardown(s)
}
