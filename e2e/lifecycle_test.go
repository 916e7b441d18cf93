package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// sandboxProcs lists host processes whose real uid is one of the ids the
// test server named parent hands out (see idBases), or that sit in a
// cgroup under parent.
func sandboxProcs(parent string) []string {
	const serverSlotBase = 1 << 22
	idBasesMu.Lock()
	base, ok := idBases[parent]
	idBasesMu.Unlock()
	lo, hi := base+2*serverSlotBase, base+2*(serverSlotBase+1<<20)
	if !ok {
		lo, hi = -1, -1
	}
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		uid := -1
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "Uid:" {
				uid, _ = strconv.Atoi(f[1])
			}
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if (uid >= lo && uid < hi) || strings.Contains(string(cg), "/"+parent+"/") {
			out = append(out, fmt.Sprintf("%d (uid %d)", pid, uid))
		}
	}
	return out
}

// isCgroup2 says whether /sys/fs/cgroup is the unified hierarchy (and so
// holds cgroups, not the v1 mount points).
func isCgroup2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// checkNothingLeft reports leftovers of a server that used parent as its
// cgroup parent and /run/parent as its state directory.
func checkNothingLeft(parent string) []string {
	var left []string
	deadline := time.Now().Add(30 * time.Second) // a loaded host ends them late; a leak never
	for {
		left = nil
		if p := sandboxProcs(parent); len(p) > 0 {
			left = append(left, "processes: "+strings.Join(p, ", "))
		}
		for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct", "unified", ""} {
			dir := filepath.Join("/sys/fs/cgroup", ctl, parent)
			ents, err := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					left = append(left, "cgroup "+filepath.Join(ctl, parent, e.Name()))
				}
			}
			if err == nil && (ctl != "" || isCgroup2()) {
				left = append(left, "cgroup parent "+dir)
			}
		}
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			// The parent's own directory, not another whose name it
			// begins (airlock vs airlock-e2e-…).
			if strings.Contains(line, " /run/"+parent+"/") || strings.Contains(line, " /run/"+parent+" ") {
				left = append(left, "mount "+line)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postEnding posts body to path in the background, streaming, and reports
// how the answer ended its session: "status ended=bool reason", or the
// transport error. started is closed at the first output the code prints.
// Not s.raw: that fails the test from another goroutine on a dropped
// connection, which is what callers check for.
func postEnding(s *server, path, body string) (started <-chan struct{}, ended <-chan string) {
	out := make(chan string, 1)
	first := make(chan struct{})
	go func() {
		var once sync.Once
		defer once.Do(func() { close(first) })
		req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := rawClient.Do(req)
		if err != nil {
			out <- err.Error()
			return
		}
		defer resp.Body.Close()
		var r apitype.Result
		dec := json.NewDecoder(resp.Body)
		for {
			var ev apitype.Event
			if err := dec.Decode(&ev); err != nil {
				break
			}
			if ev.Type == apitype.EventStdout {
				once.Do(func() { close(first) })
			}
			if ev.Type == apitype.EventEnd && ev.Result != nil {
				r = *ev.Result
			}
		}
		out <- fmt.Sprintf("%d ended=%v %s", resp.StatusCode, r.SessionEnded, r.EndReason)
	}()
	return first, out
}

func TestSIGTERMLeavesNothing(t *testing.T) {
	s := startServer(t, nil)
	ids := []string{s.newSession("python", nil), s.newSession("bash", nil), s.newSession("python", nil)}
	s.exec(ids[0], "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)")
	s.exec(ids[1], "nohup sleep 600 >/dev/null 2>&1 &")
	busyStarted, busy := postEnding(s, "/v1/sessions/"+ids[2]+"/execute", `{"code": "import time\nprint('started', flush=True)\ntime.sleep(600)"}`)
	// A one-shot run in flight ends with the server too, not at its own
	// timeout.
	oneShotStarted, oneShot := postEnding(s, "/v1/execute", `{"code": "import time\nprint('started', flush=True)\ntime.sleep(600)", "limits": {"timeout": "60s"}}`)
	<-busyStarted
	<-oneShotStarted
	if p := sandboxProcs(s.name); len(p) == 0 {
		t.Fatal("no sandbox processes found before SIGTERM: the check below would prove nothing")
	}
	start := time.Now()
	s.stop()
	t.Logf("SIGTERM to exit: %v", time.Since(start))
	select {
	case got := <-oneShot:
		if want := "200 ended=true server shut down"; got != want {
			t.Errorf("one-shot running at SIGTERM: %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Error("a running one-shot did not end with the server")
	}
	select {
	case got := <-busy:
		// The client of the running execution hears why, rather than
		// seeing its connection drop.
		if want := "200 ended=true server shut down"; got != want {
			t.Errorf("running execution at SIGTERM: %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Error("a running execution did not end with the server")
	}
	// An execution that held the shutdown would end only at its 10 s
	// bound; a loaded host may take seconds to stop without it.
	if took := time.Since(start); took >= 10*time.Second {
		t.Errorf("SIGTERM with an execution running took %v: the execution held the shutdown", took)
	}
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind after SIGTERM:\n%s", strings.Join(left, "\n"))
	}
}

// cgroupInodes maps the cgroups under parent on the memory (v1) or
// unified hierarchy to their inode numbers: a name the next server uses
// again is a new directory.
func cgroupInodes(parent string) map[string]uint64 {
	dir := filepath.Join("/sys/fs/cgroup/memory", parent)
	if isCgroup2() {
		dir = filepath.Join("/sys/fs/cgroup", parent)
	}
	ents, _ := os.ReadDir(dir)
	out := map[string]uint64{}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && e.IsDir() {
			out[e.Name()] = info.Sys().(*syscall.Stat_t).Ino
		}
	}
	return out
}

func TestSIGKILLThenRestartCleansUp(t *testing.T) {
	s := startServer(t, nil)
	id := s.newSession("python", nil)
	s.exec(id, "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)")
	cfg := s.cfg
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.done
	// The inits notice their server is gone and end their sandboxes
	// (late on a loaded host; never, were they broken).
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxProcs(s.name)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p := sandboxProcs(s.name); len(p) > 0 {
		t.Fatalf("sandbox processes survived the server's SIGKILL: %v", p)
	}
	// The dead server's (empty) cgroups are still there...
	left := cgroupInodes(s.name)
	if len(left) == 0 {
		t.Fatal("no cgroups left by the killed server: the check below would prove nothing")
	}
	// ...until a new server on the same state removes them. Its own pool
	// lives under the same parent, with the same names: none of the dead
	// server's directories may remain.
	s2 := startServerNamed(t, s.name, cfg)
	now := cgroupInodes(s.name)
	for n, ino := range left {
		if now[n] == ino {
			t.Errorf("cgroup %s of the killed server survived the restart", n)
		}
	}
	s2.stop()
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// A warm pool ends with the server, and quickly: its runtimes are the
// template's children, so the template must outlive them (orphaned to the
// host's init, each teardown would wait for that init to reap).
func TestSIGTERMWithWarmPoolIsQuick(t *testing.T) {
	const pooled = 12
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": pooled, "bash": 0, "javascript": 0}}})
	s.waitWarm()
	if p := sandboxProcs(s.name); len(p) < pooled {
		t.Fatalf("%d sandbox processes before SIGTERM, want at least %d: the check below would prove little", len(p), pooled)
	}
	start := time.Now()
	s.stop()
	took := time.Since(start)
	t.Logf("SIGTERM to exit with %d pooled sessions: %v", pooled, took)
	// Generous: a healthy stop takes well under a second per dozen.
	if took > 10*time.Second {
		t.Errorf("stopping a warm pool of %d took %v", pooled, took)
	}
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind after SIGTERM:\n%s", strings.Join(left, "\n"))
	}
}

// A server killed with SIGKILL while it refills its pools (sessions being
// taken as fast as clients can) is restarted at once on the same state
// directory and lock directory: it must start. The children the dead
// server was forking (jail inits not yet exec'd) held a copy of its lock
// files' descriptors, and flock locks follow the descriptor: the restart
// was refused as "another airlock server uses ..." until they went.
func TestSIGKILLDuringRefillThenRestart(t *testing.T) {
	s := launchServer(t, map[string]any{"pool": map[string]any{
		"size":     map[string]int{"python": 4, "bash": 4, "javascript": 0},
		"max_size": map[string]int{"python": 6, "bash": 6, "javascript": 0},
	}})
	for round := 0; round < 3; round++ {
		// Take sessions from several clients until a few have been made:
		// the pools refill while the server dies.
		made := make(chan struct{}, 64)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hc := &http.Client{Timeout: 30 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := hc.Post(s.URL+"/v1/sessions", "application/json", strings.NewReader(`{"language":"bash"}`))
					if err != nil {
						return // the server is gone
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusCreated {
						select {
						case made <- struct{}{}:
						default:
						}
					}
				}
			}()
		}
		for i := 0; i < 3; i++ {
			select {
			case <-made:
			case <-time.After(60 * time.Second):
				t.Fatalf("round %d: no sessions made:\n%s", round, s.stderr.String())
			}
		}
		if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-s.done
		close(stop)
		wg.Wait()
		// At once: launchServerNamed fails the test if the server exits.
		s = launchServerNamed(t, "", s.name, s.cfg)
	}
	s.stop()
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}
