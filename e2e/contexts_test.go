package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// execIn runs code in a session's context (or language); an error
// response fails the test.
func (s *server) execIn(id string, req apitype.ExecuteRequest) *apitype.Result {
	s.t.Helper()
	res, err := s.execute(id, req)
	if err != nil {
		s.t.Fatalf("execute %q in %q/%q: %v", truncate(req.Code, 80), req.Context, req.Language, err)
	}
	if res.Error != nil {
		s.t.Fatalf("execute %q in %q/%q: %s: %s", truncate(req.Code, 80), req.Context, req.Language, res.Error.Name, res.Error.Value)
	}
	return res
}

// One sandbox, many contexts: Python writes sales.csv, and bash and
// JavaScript contexts of the same session read it; two Python contexts
// keep their own variables, each context its own directory; one context
// is interrupted while another runs and keeps its state; and the
// session's end takes every interpreter with it (no process, no cgroup
// left).
func TestContexts(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}}})
	ctx := context.Background()
	id := s.newSession("python", nil)

	s.execIn(id, apitype.ExecuteRequest{Code: "import pandas as pd\npd.DataFrame({'region': ['north', 'south'], 'sales': [3, 4]}).to_csv('sales.csv', index=False)\nx = 1"})
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "awk -F, 'NR > 1 { s += $2 } END { print s }' sales.csv", Language: "bash"}); r.Stdout != "7\n" {
		t.Errorf("bash read sales.csv: %+v", r)
	}
	js := "const rows = require('fs').readFileSync('sales.csv', 'utf8').trim().split('\\n').slice(1);\nrows.reduce((s, r) => s + Number(r.split(',')[1]), 0)"
	if r := s.execIn(id, apitype.ExecuteRequest{Code: js, Language: "js"}); text(r, "result") != "7" {
		t.Errorf("javascript read sales.csv: %+v", r)
	}

	// A second Python context: its own variables.
	py2, err := s.c.CreateContext(ctx, id, apitype.CreateContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	s.execIn(id, apitype.ExecuteRequest{Code: "x = 2\ny = 5", Context: py2.ID})
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "x, 'y' in dir()"}); text(r, "result") != "(1, False)" {
		t.Errorf("the default context's variables: %+v", r)
	}
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "x, y", Context: py2.ID}); text(r, "result") != "(2, 5)" {
		t.Errorf("the second context's variables: %+v", r)
	}

	// A directory of its own.
	if _, err := s.c.CreateContext(ctx, id, apitype.CreateContextRequest{Language: "javascript", Cwd: "data"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a context in a missing directory: %v", err)
	}
	s.execIn(id, apitype.ExecuteRequest{Code: "import os; os.mkdir('data')"})
	jsData, err := s.c.CreateContext(ctx, id, apitype.CreateContextRequest{Language: "javascript", Cwd: "data", Env: map[string]string{"WHO": "js-data"}})
	if err != nil {
		t.Fatal(err)
	}
	if jsData.Cwd != "/workspace/data" {
		t.Errorf("created: %+v", jsData)
	}
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "[process.cwd(), process.env.WHO, require('fs').existsSync('../sales.csv')]", Context: jsData.ID}); text(r, "result") != "[ '/workspace/data', 'js-data', true ]" {
		t.Errorf("a context's directory and environment: %+v", r)
	}
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "import os; os.getcwd(), os.environ.get('WHO')"}); text(r, "result") != "('/workspace', None)" {
		t.Errorf("the default context's directory and environment: %+v", r)
	}

	// py2 sleeps; the default context runs meanwhile, then py2 alone is
	// interrupted and keeps its state.
	started := make(chan struct{})
	slept := make(chan *apitype.Result, 1)
	go func() {
		var once sync.Once
		r, _ := s.c.Execute(ctx, id, apitype.ExecuteRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(600)", Context: py2.ID}, func(ev apitype.Event) {
			if ev.Type == apitype.EventStdout {
				once.Do(func() { close(started) })
			}
		})
		slept <- r
	}()
	<-started
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "x + 40"}); text(r, "result") != "41" {
		t.Errorf("the default context while another runs: %+v", r)
	}
	if ok, err := s.c.InterruptContext(ctx, id, py2.ID); !ok || err != nil {
		t.Fatalf("interrupt %s: %v %v", py2.ID, ok, err)
	}
	if r := <-slept; r == nil || r.Error == nil || r.Error.Name != "KeyboardInterrupt" || r.SessionEnded || r.ContextEnded {
		t.Fatalf("the interrupted context: %+v", r)
	}
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "x", Context: py2.ID}); text(r, "result") != "2" {
		t.Errorf("the interrupted context's state: %+v", r)
	}

	list, err := s.c.Contexts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range list {
		got = append(got, c.ID+":"+c.Language)
	}
	if want := "python:python bash:bash javascript:javascript ctx1:python ctx2:javascript"; strings.Join(got, " ") != want {
		t.Errorf("contexts %q, want %q", got, want)
	}
	// A restart: the same context, its state empty, its directory and
	// environment kept.
	s.execIn(id, apitype.ExecuteRequest{Code: "globalThis.kept = 1", Context: jsData.ID})
	if c, err := s.c.RestartContext(ctx, id, jsData.ID); err != nil || c.ID != jsData.ID || c.Cwd != "/workspace/data" || c.Executions != 0 || c.State != apitype.ContextIdle {
		t.Fatalf("restart: %+v %v", c, err)
	}
	if r := s.execIn(id, apitype.ExecuteRequest{Code: "[typeof kept, process.cwd(), process.env.WHO]", Context: jsData.ID}); text(r, "result") != "[ 'undefined', '/workspace/data', 'js-data' ]" {
		t.Errorf("after a restart: %+v", r)
	}
	if c, err := s.c.Context(ctx, id, jsData.ID); err != nil || c.Executions != 1 {
		t.Errorf("described: %+v %v", c, err)
	}
	// The session's default restarts too: its first interpreter (and
	// what it started) ended for good, the session alive, its files kept.
	s.execIn(id, apitype.ExecuteRequest{Code: "import subprocess, os\nold = subprocess.Popen(['sleep', '600']).pid\nopen('kept.txt', 'w').write(str(os.getpid()))"})
	if c, err := s.c.RestartContext(ctx, id, "python"); err != nil || c.ID != "python" || !c.Default || c.Executions != 0 {
		t.Fatalf("restart the default context: %+v %v", c, err)
	}
	r := s.execIn(id, apitype.ExecuteRequest{Code: "import os, subprocess\n('old' in dir(), open('kept.txt').read() != str(os.getpid()), subprocess.run(['pgrep', '-c', 'sleep'], capture_output=True, text=True).stdout.strip())"})
	if text(r, "result") != "(False, True, '0')" {
		t.Errorf("after restarting the default context: %+v", r)
	}
	if info, err := s.c.Session(ctx, id); err != nil || info.State == apitype.StateEnded {
		t.Errorf("the session after its default context's restart: %+v %v", info, err)
	}
	if err := s.c.DeleteContext(ctx, id, jsData.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.execute(id, apitype.ExecuteRequest{Code: "1", Context: jsData.ID}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted context: %v", err)
	}

	// Every interpreter is in the session's one sandbox, and goes with it.
	info, err := s.c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	procs := cgroupProcs(s.name, info.Sandbox)
	if len(procs) < 4 { // the init, python twice, bash, javascript
		t.Fatalf("the session's cgroup holds %v, want its init and four interpreters", procs)
	}
	if err := s.c.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a loaded host ends them late; a leak never
	for {
		var left []string
		for _, p := range procs {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(p))); err == nil {
				left = append(left, strconv.Itoa(p))
			}
		}
		for _, hier := range []string{"memory", "pids"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", hier, s.name, info.Sandbox)); err == nil {
				left = append(left, hier+" cgroup")
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left after the session ended: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupProcs lists the host pids in the sandbox cgroup name of the
// server whose cgroup parent is parent.
func cgroupProcs(parent, name string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			if strings.HasSuffix(line, "/"+parent+"/"+name) && strings.Contains(line, ":pids:") {
				out = append(out, pid)
			}
		}
	}
	sort.Ints(out)
	return out
}

// The session's limits are the sandbox's, whatever context uses them:
// memory taken in Python and in JavaScript is counted together (the two
// allocations, each under the limit, run the sandbox out of memory and
// end the session), and so are processes.
func TestContextsShareLimits(t *testing.T) {
	s := sharedServer(t)
	id := s.newSession("python", map[string]any{"limits": map[string]any{"memory": "256M"}})
	s.execIn(id, apitype.ExecuteRequest{Code: "b = bytearray(150 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"})
	r, err := s.execute(id, apitype.ExecuteRequest{Code: "globalThis.b = Buffer.alloc(150 << 20, 1); b.length", Language: "javascript"})
	if err != nil || !r.SessionEnded || r.KillReason != apitype.KillMemory || r.EndCode != apitype.EndOOM {
		t.Fatalf("memory of two contexts past the limit: %+v %v", r, err)
	}

	id = s.newSession("bash", map[string]any{"limits": map[string]any{"pids": 24}})
	s.execIn(id, apitype.ExecuteRequest{Code: "import subprocess\nps = [subprocess.Popen(['sleep', '600']) for _ in range(12)]", Language: "python"})
	r, err = s.execute(id, apitype.ExecuteRequest{Code: "for i in $(seq 12); do sleep 600 & done; wait"})
	if err != nil || !r.SessionEnded || r.KillReason != apitype.KillPids {
		t.Fatalf("processes of two contexts past the limit: %+v %v", r, err)
	}
}
