package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// poolOf reads the pool figures of one language.
func (s *server) poolOf(lang string) (ready, target int) {
	h, err := s.c.Health(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var q apitype.PoolStats
	json.Unmarshal(h.Pool[lang], &q)
	return q.Ready, q.Target
}

// checkFresh makes a few sessions and checks that they work and start
// clean: nothing from earlier sessions is visible.
func checkFresh(t *testing.T, s *server, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := s.newSession("python", nil)
		r := s.exec(id, "import os, pandas\nsorted(os.listdir('/workspace')) + sorted(os.listdir('/tmp'))")
		if r.Error != nil || text(r, "result") != "['matplotlib']" {
			t.Fatalf("session %d after abuse: %+v", i, r)
		}
		if err := s.c.DeleteSession(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPoolSurvivesAbuse(t *testing.T) { testPoolSurvivesAbuse(t, sharedServer(t)) }

func testPoolSurvivesAbuse(t *testing.T, s *server) {
	abuses := []struct {
		name, code string
		limits     map[string]any
		endReason  string
		endCode    apitype.EndCode
	}{
		{"out of memory", "b = []\nwhile True:\n    b.append(bytearray(32 << 20))", map[string]any{"memory": "160M"}, "out of memory", apitype.EndOOM},
		{"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", map[string]any{"pids": 32}, "process limit reached", apitype.EndPids},
		{"interpreter exits", "import os\nos._exit(7)", nil, "the interpreter exited with status 7", apitype.EndInterpreterExited},
		{"interpreter crashes", "import ctypes\nctypes.string_at(0)", nil, "killed by signal 11", apitype.EndInterpreterExited},
		{"interpreter kills itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", nil, "killed by signal 9", apitype.EndInterpreterExited},
	}
	for _, a := range abuses {
		t.Run(a.name, func(t *testing.T) {
			extra := map[string]any{}
			if a.limits != nil {
				extra["limits"] = a.limits
			}
			id := s.newSession("python", extra)
			s.exec(id, "open('/workspace/left-behind', 'w').write('x')\nopen('/tmp/left-behind', 'w').write('x')")
			r, err := s.execute(id, apitype.ExecuteRequest{Code: a.code, Timeout: duration(t, "20s")})
			if err == nil && r.EndCode == apitype.EndOOM && a.endCode == apitype.EndPids && s.gvisor() {
				// Under gVisor a guest process is not a host process: a
				// fork bomb meets the memory limit or the pids limit
				// (gVisor's threads), whichever comes first.
				a.endReason, a.endCode = "out of memory", apitype.EndOOM
			}
			if err != nil || !r.SessionEnded || !strings.Contains(r.EndReason, a.endReason) || r.EndCode != a.endCode {
				t.Fatalf("%v, result %+v", err, r)
			}
			if strings.Contains(r.Stderr, "runsc") || strings.Contains(r.Stderr, "urpc") {
				t.Errorf("runsc's own words reached the client: %q", r.Stderr)
			}
			_, err = s.execute(id, apitype.ExecuteRequest{Code: "1"})
			if e := wantError(t, "after the abuse", err, 410, "session_ended"); e.EndCode != a.endCode {
				t.Fatalf("after the abuse: %+v", e)
			}
			checkFresh(t, s, 3)
		})
	}
}

// A pooled sandbox whose interpreter is killed while it waits is never
// handed out.
func TestKilledWhilePooled(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 3, "bash": 0, "javascript": 0}}})
	// The pooled interpreters: children of the template running as a
	// sandbox user, in no session yet.
	var killed []int
	for _, p := range sandboxProcs(s.name) {
		pid, _ := strconv.Atoi(strings.Fields(p)[0])
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		// Pooled interpreters run as a sandbox user; the template, in
		// the same cgroup tree, as root.
		if strings.Contains(string(cmd), "airlock_zygote") && !strings.Contains(p, "(uid 0)") {
			syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, pid)
		}
	}
	if len(killed) == 0 {
		t.Fatal("found no pooled interpreter to kill")
	}
	for i := 0; i < 5; i++ {
		id := s.newSession("python", nil)
		if r := s.exec(id, "21 * 2"); text(r, "result") != "42" {
			t.Fatalf("session %d after pooled interpreters were killed: %+v", i, r)
		}
	}
	// The pool refills.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, target := s.poolOf("python")
		if ready >= target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool did not refill: %d/%d", ready, target)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// templatePid finds the server's template interpreter: the one that
// runs as root in the server's cgroups.
func templatePid(t *testing.T, s *server) int {
	t.Helper()
	zpid := findTemplatePid(s)
	if zpid == 0 {
		t.Fatal("template not found")
	}
	return zpid
}

// findTemplatePid is the host pid of s's template (the full one, not the
// lean one beside it), 0 if none runs.
func findTemplatePid(s *server) int {
	var zpid int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		if strings.Contains(string(cmd), "airlock_zygote") && strings.Contains(string(st), "Uid:\t0\t") {
			cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
			if strings.Contains(string(cg), "/"+s.name+"/") && !strings.Contains(string(cg), "/zygote-python-lean") {
				zpid = pid
			}
		}
	}
	return zpid
}

// The template interpreter can die; sessions keep coming, and it is
// restarted.
func TestTemplateRestarts(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}}})
	old := templatePid(t, s)
	syscall.Kill(old, syscall.SIGKILL)
	for i := 0; i < 3; i++ {
		id := s.newSession("python", nil)
		if r := s.exec(id, "import pandas\n'ok'"); text(r, "result") != "'ok'" {
			t.Fatalf("session %d after the template died: %+v", i, r)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err := s.c.Health(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var tmpl apitype.TemplateStats
		json.Unmarshal(h.Pool[apitype.TemplateKey], &tmpl)
		// Running, and a new process: the health report alone may still
		// describe the dead one.
		if tmpl.Running && findTemplatePid(s) > 0 && findTemplatePid(s) != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the template was not restarted")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// zygoteZombies lists the template's children that have exited but were
// not reaped. One left there keeps its sandbox's pid namespace, and so its
// init and the server's teardown, from ending.
func zygoteZombies(t *testing.T, s *server) []int {
	t.Helper()
	var zombies []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		if !strings.Contains(string(st), "State:\tZ") {
			continue
		}
		var ppid int
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:\t"); ok {
				ppid, _ = strconv.Atoi(v)
			}
		}
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/cmdline")
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/cgroup")
		if strings.Contains(string(cmd), "airlock_zygote") && strings.Contains(string(cg), "/"+s.name+"/") {
			zombies = append(zombies, pid)
		}
	}
	return zombies
}

// Runtimes that end in quick succession, while the template has nothing
// else to do, are all reaped at once: a SIGCHLD that arrives as the
// template goes back to waiting for work must not wait for the next
// request.
func TestTemplateReapsEveryRuntime(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}}})
	zpid := templatePid(t, s)
	for round := 0; round < 6; round++ {
		var ids []string
		for i := 0; i < 10; i++ {
			ids = append(ids, s.newSession("python", nil))
		}
		s.waitWarm() // no fork request will wake the template from here on
		// Extra SIGCHLDs keep the template's handler busy, so that real
		// deaths keep landing while it runs (where a handler-only reaper
		// misses them).
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					syscall.Kill(zpid, syscall.SIGCHLD)
					time.Sleep(20 * time.Microsecond)
				}
			}
		}()
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 300 * time.Microsecond)
				s.execute(id, apitype.ExecuteRequest{Code: "import os\nos._exit(0)"})
			}()
		}
		wg.Wait()
		close(stop)
		// A reaper that works reaps them in milliseconds; a broken one
		// leaves them for good: a long deadline costs a passing run
		// nothing and a loaded host no false failure.
		deadline := time.Now().Add(30 * time.Second)
		for len(zygoteZombies(t, s)) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if z := zygoteZombies(t, s); len(z) > 0 {
			t.Fatalf("round %d: the template left runtimes unreaped: %v", round, z)
		}
	}
}

// The first Python sessions after a server starts are forked from the
// template, with its libraries already imported, as every later one is:
// building waits for the template's first start instead of starting
// interpreters cold meanwhile.
func TestFirstSessionsAfterStartAreForked(t *testing.T) {
	s := launchServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}}})
	// Created as soon as the server listens, before the template is up.
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Go(func() {
			ctx := context.Background()
			info, err := s.c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			// A runtime the template forked has pandas imported already;
			// one started cold has not.
			r, err := s.c.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "import sys\n'pandas' in sys.modules"}, nil)
			if err != nil || text(r, "result") != "True" {
				t.Errorf("a session created right after the start got a cold interpreter: %v %+v", err, r)
			}
		})
	}
	wg.Wait()
	s.waitWarm()
	h, err := s.c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var q apitype.PoolStats
	if err := json.Unmarshal(h.Pool["python"], &q); err != nil {
		t.Fatal(err)
	}
	if q.Cold != 0 || q.Hits+q.Misses != 3 {
		t.Errorf("python pool after the first sessions: %+v, want 3 handed out, none cold", q)
	}
	// The pooled ones are forked too.
	id := s.newSession("python", nil)
	if r := s.exec(id, "import sys\n'pandas' in sys.modules"); text(r, "result") != "True" {
		t.Errorf("a pooled session got a cold interpreter: %+v", r)
	}
}
