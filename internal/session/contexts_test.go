package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// executeIn runs code in the context req names and returns the result.
func executeIn(t *testing.T, s *Session, req apitype.ExecuteRequest) (*apitype.Result, error) {
	t.Helper()
	return s.Execute(context.Background(), req, nil)
}

// beside is the runtime of context id, started beside the first.
func beside(t *testing.T, s *Session, id string) *fakeInterp {
	t.Helper()
	s.mu.Lock()
	c := s.ctxs[id]
	s.mu.Unlock()
	if c == nil || c.beside == nil {
		t.Fatalf("no context %q beside the first", id)
	}
	return c.beside.(*fakeInterp)
}

// Contexts are interpreters in the session's one sandbox: an execution
// naming a language starts its default context once (however many ask at
// once), a created context gets its own runtime with its cwd and
// environment, code goes to the runtime of the context it names, and
// listing shows them all, the default first.
func TestContexts(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python", Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	f := src.last()

	// Four executions ask for javascript at once: one runtime starts.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				res, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out js", Language: "js"})
				if errors.Is(err, errdefs.ErrConflict) {
					continue // another of the four is running there
				}
				if err != nil || res.Stdout != "js" {
					t.Errorf("javascript: %+v %v", res, err)
				}
				return
			}
		})
	}
	wg.Wait()
	if n := len(f.besides); n != 1 {
		t.Fatalf("%d runtimes started for javascript, want 1", n)
	}
	js := beside(t, s, "javascript")
	if js.rt.Lang != "javascript" || js.cwd != "/workspace" || js.env["A"] != "1" {
		t.Errorf("javascript's runtime: %s in %s with A=%q", js.rt.Lang, js.cwd, js.env["A"])
	}

	if err := s.workspace().Mkdir("sub"); err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateContext(context.Background(), apitype.CreateContextRequest{Cwd: "sub", Env: map[string]string{"B": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "ctx1" || c.Language != "python" || c.Cwd != "/workspace/sub" || c.Default || c.State != apitype.ContextIdle {
		t.Errorf("created: %+v", c)
	}
	py2 := beside(t, s, c.ID)
	if py2.cwd != "/workspace/sub" || py2.env["A"] != "1" || py2.env["B"] != "2" {
		t.Errorf("ctx1's runtime: in %s with %v", py2.cwd, py2.env)
	}
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out two", Context: c.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out one"}); err != nil {
		t.Fatal(err)
	}
	if got := py2.execs; len(got) != 1 || got[0] != "out two" {
		t.Errorf("ctx1 ran %q", got)
	}
	if got := f.execs; len(got) != 1 || got[0] != "out one" {
		t.Errorf("the default context ran %q", got)
	}

	list, err := s.Contexts()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	if len(list) != 3 || !list[0].Default || ids[0] != "python" || ids[1] != "javascript" || ids[2] != "ctx1" || list[2].Executions != 1 {
		t.Errorf("contexts: %+v", list)
	}

	for _, bad := range []struct {
		req  apitype.ExecuteRequest
		want error
	}{
		{apitype.ExecuteRequest{Code: "out x", Context: "nope"}, errdefs.ErrNotFound},
		{apitype.ExecuteRequest{Code: "out x", Context: "ctx1", Language: "bash"}, errdefs.ErrInvalidArgument},
		{apitype.ExecuteRequest{Code: "out x", Language: "cobol"}, errdefs.ErrInvalidArgument},
	} {
		if _, err := executeIn(t, s, bad.req); !errors.Is(err, bad.want) {
			t.Errorf("%+v: %v, want %v", bad.req, err, bad.want)
		}
	}
	for _, bad := range []apitype.CreateContextRequest{{Cwd: "missing"}, {Cwd: "../x"}, {Cwd: "/nope"}, {Language: "cobol"}} {
		if _, err := s.CreateContext(context.Background(), bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want invalid argument", bad, err)
		}
	}
	if n := len(f.besides); n != 3 { // javascript, ctx1, and /nope's, which was freed
		t.Errorf("%d runtimes started, want 3", n)
	} else if !f.besides[2].freed.Load() {
		t.Error("the runtime of a context that could not start was not freed")
	}

	// The default context ends with the session only; another ends
	// alone, its runtime freed.
	if err := s.DeleteContext("python"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("deleting the default context: %v", err)
	}
	if err := s.DeleteContext("ctx1"); err != nil {
		t.Fatal(err)
	}
	if !py2.freed.Load() {
		t.Error("a deleted context's runtime was not freed")
	}
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out x", Context: "ctx1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("running in a deleted context: %v", err)
	}
	if err := s.DeleteContext("ctx1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleting it again: %v", err)
	}

	// The session's end frees every runtime.
	if err := m.Delete(s.ID()); err != nil {
		t.Fatal(err)
	}
	<-s.gone
	if !js.freed.Load() {
		t.Error("the session ended, and a context's runtime was not freed")
	}
	if _, err := s.Contexts(); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("listing an ended session's contexts: %v", err)
	}
}

// Contexts run at once and are stopped one by one: an interrupt of one
// leaves the other running; a context whose code ends its interpreter, or
// that does not stop after an interrupt, ends alone (the session and its
// other contexts live on); a language's default context that ended is
// started anew when the language is asked for, another stays ended; and
// memory is the sandbox's: running out of it in any context ends the
// session.
func TestContextsEndAlone(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "python")
	c, err := s.CreateContext(context.Background(), apitype.CreateContextRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// Both sleep; interrupting ctx1 ends its execution only.
	type answer struct {
		res *apitype.Result
		err error
	}
	run := func(req apitype.ExecuteRequest) chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := s.Execute(context.Background(), req, nil)
			ch <- answer{res, err}
		}()
		return ch
	}
	first := run(apitype.ExecuteRequest{Code: "sleep"})
	second := run(apitype.ExecuteRequest{Code: "sleep", Context: c.ID})
	for _, id := range []string{"python", c.ID} {
		contextBusy(t, s, id)
	}
	if ok, err := s.InterruptContext(c.ID); !ok || err != nil {
		t.Fatalf("interrupting ctx1: %v %v", ok, err)
	}
	if a := <-second; a.err != nil || a.res.Error == nil || a.res.Error.Name != "KeyboardInterrupt" {
		t.Errorf("ctx1's interrupted execution: %+v %v", a.res, a.err)
	}
	if info := contextOf(t, s, "python"); info.State != apitype.ContextBusy {
		t.Errorf("the default context stopped too: %+v", info)
	}
	if ok, err := s.Interrupt(); !ok || err != nil {
		t.Fatalf("interrupting the session: %v %v", ok, err)
	}
	if a := <-first; a.err != nil || a.res.Error == nil || a.res.Error.Name != "KeyboardInterrupt" {
		t.Errorf("the default context's interrupted execution: %+v %v", a.res, a.err)
	}

	// ctx1's code ends its interpreter: the context ends, not the session.
	res, err := executeIn(t, s, apitype.ExecuteRequest{Code: "exit 3", Context: c.ID})
	if err != nil || !res.ContextEnded || res.SessionEnded || res.Error == nil || res.Error.Name != "ContextEnded" ||
		res.EndCode != apitype.EndInterpreterExited {
		t.Fatalf("ending ctx1's interpreter: %+v %v", res, err)
	}
	var ce *ContextEndedError
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out x", Context: c.ID}); !errors.As(err, &ce) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("running in an ended context: %v", err)
	}
	if info := contextOf(t, s, c.ID); info.State != apitype.ContextEnded || info.EndCode != apitype.EndInterpreterExited {
		t.Errorf("ended ctx1: %+v", info)
	}
	if res, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out alive"}); err != nil || res.Stdout != "alive" {
		t.Fatalf("the default context after ctx1 ended: %+v %v", res, err)
	}
}

func TestContextUnresponsive(t *testing.T) {
	m, src, clock := newTestManager(t, nil)
	s := create(t, m, "python")
	f := src.last()
	type answer struct {
		res *apitype.Result
		err error
	}
	run := func(req apitype.ExecuteRequest) chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := s.Execute(context.Background(), req, nil)
			ch <- answer{res, err}
		}()
		return ch
	}

	// JavaScript hangs past its timeout and its grace: killed alone.
	res, err := func() (*apitype.Result, error) {
		ch := run(apitype.ExecuteRequest{Code: "hang", Language: "javascript"})
		clock.Fire(testTimeout)
		clock.Fire(testGrace)
		a := <-ch
		return a.res, a.err
	}()
	if err != nil || !res.ContextEnded || res.SessionEnded || res.KillReason != apitype.KillTimeout || res.Error == nil || res.Error.Name != "TimeoutError" {
		t.Fatalf("an unresponsive context: %+v %v", res, err)
	}
	if !s.End().Zero() {
		t.Fatalf("the session ended with its context: %v", s.End())
	}
	// Named by its language, it starts anew.
	if res, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out again", Language: "javascript"}); err != nil || res.Stdout != "again" {
		t.Fatalf("javascript again: %+v %v", res, err)
	}
	if n := len(f.besides); n != 2 {
		t.Errorf("%d runtimes started beside the first, want 2", n)
	}

	// Memory is the sandbox's.
	res, err = executeIn(t, s, apitype.ExecuteRequest{Code: "oom", Language: "javascript"})
	if err != nil || !res.SessionEnded || res.KillReason != apitype.KillMemory {
		t.Fatalf("out of memory in a context: %+v %v", res, err)
	}
	if end := ended(t, s); end.Code != apitype.EndOOM {
		t.Errorf("the session ended for %v", end)
	}
}

// contextOf describes context id of s.
func contextOf(t *testing.T, s *Session, id string) apitype.CodeContext {
	t.Helper()
	list, err := s.Contexts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no context %q", id)
	return apitype.CodeContext{}
}

// contextBusy waits until an execution runs in context id of s.
func contextBusy(t *testing.T, s *Session, id string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for contextOf(t, s, id).State != apitype.ContextBusy {
		if time.Now().After(deadline) {
			t.Fatalf("no execution started in %s", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// A session holds at most server.max_session_contexts contexts.
func TestContextsLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Server.MaxSessionContexts = 2
	m, _, _ := newTestManager(t, &cfg)
	s := create(t, m, "bash")
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out x", Language: "python"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateContext(context.Background(), apitype.CreateContextRequest{}); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("a third context: %v", err)
	}
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out x", Language: "javascript"}); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("a third language: %v", err)
	}
	if err := s.DeleteContext("python"); err != nil {
		t.Fatal(err)
	}
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out x", Language: "javascript"}); err != nil {
		t.Errorf("a language in the place of a deleted context: %v", err)
	}
}

// The session's default context restarts too, as E2B's SDKs expect
// (checked against a mutant: the old 409): its new interpreter runs
// beside the sandbox's first, which is ended for good while the session
// lives on; the new one is the default (listed first, not deletable,
// restartable again); a restart while it executes is refused.
func TestRestartDefaultContext(t *testing.T) {
	m, src, _ := newTestManager(t, nil)
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python", Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	f := src.last()
	if _, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out one"}); err != nil {
		t.Fatal(err)
	}
	c, err := s.RestartContext(context.Background(), "python")
	if err != nil {
		t.Fatalf("restarting the default context: %v", err)
	}
	if !c.Default || c.ID != "python" || c.State != apitype.ContextIdle || !f.retired.Load() {
		t.Errorf("restarted: %+v, first runtime retired %v", c, f.retired.Load())
	}
	again := beside(t, s, "python")
	if again.env["A"] != "1" || again.cwd != "/workspace" {
		t.Errorf("its new runtime: in %s with %v", again.cwd, again.env)
	}
	if res, err := executeIn(t, s, apitype.ExecuteRequest{Code: "out two"}); err != nil || res.Stdout != "two" {
		t.Fatalf("executing after the restart: %+v %v", res, err)
	}
	if got := again.execs; len(got) != 1 || got[0] != "out two" {
		t.Errorf("the new runtime ran %q", got)
	}
	if got := f.execs; len(got) != 1 {
		t.Errorf("the first runtime ran %q after its retirement", got)
	}
	if end := s.End(); !end.Zero() {
		t.Fatalf("the session ended: %+v", end)
	}
	list, _ := s.Contexts()
	if len(list) != 1 || !list[0].Default {
		t.Errorf("contexts: %+v", list)
	}
	if err := s.DeleteContext("python"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("deleting the restarted default context: %v", err)
	}
	if _, err := s.RestartContext(context.Background(), "python"); err != nil {
		t.Fatalf("restarting it again: %v", err)
	}
	if !again.freed.Load() {
		t.Error("the second restart did not free the first restart's runtime")
	}

	s2, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	s2.def.execMu.Lock() // an execution under way
	if _, err := s2.RestartContext(context.Background(), "python"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("restarting a default context that executes: %v", err)
	}
	s2.def.execMu.Unlock()
}
