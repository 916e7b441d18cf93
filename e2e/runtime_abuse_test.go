package e2e

// Code in a session can reach its runtime's control socket and stop the
// runtime itself. None of that may cost the server memory it did not
// bound, or hold an execution past its timeout.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// serverRSS is the server process's resident memory in bytes.
func serverRSS(t *testing.T, s *server) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Frames written to the control socket between executions are dropped by
// the server, not queued.
func TestStrayFramesAreNotQueued(t *testing.T) {
	s := startServer(t, nil)
	id := s.newSession("python", nil)
	// After the execution ends, a forked child (the runtime's own threads
	// do not run between executions) writes 96 frames of 4 MiB each, for
	// an execution that does not exist, to every socket it inherited. It
	// starts when the test says so (a file it uploads once it has measured
	// the server), not after a time a loaded host may stretch: a flood
	// under way before that measure would hide what it costs.
	r := s.exec(id, `
import json, os, struct, time
if os.fork() == 0:
    for _ in range(12000):
        if os.path.exists("/workspace/go"):
            break
        time.sleep(0.01)
    body = json.dumps({"type": "display", "id": "stray", "data": {"text/plain": "x" * (4 << 20)}}).encode()
    frame = struct.pack(">I", len(body)) + body
    fds = []
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + n).startswith("socket:"):
                fds.append(int(n))
        except OSError:  # the listing's own descriptor
            pass
    sent = 0
    for _ in range(96):
        for fd in fds:
            try:
                sent += os.write(fd, frame)
            except OSError:
                pass
    with open("/workspace/sent", "w") as f:
        f.write(str(sent))
    os._exit(0)
print("started")
`)
	if !strings.Contains(r.Stdout, "started") {
		t.Fatalf("setup failed: %+v", r)
	}
	before := serverRSS(t, s)
	upload(t, s.c, id, "go", "1")
	// The flood is over when its child writes what it sent.
	var body []byte
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var status int
		if status, body = s.raw("GET", "/v1/sessions/"+id+"/files/sent", nil, nil); status == 200 && len(body) > 0 || time.Now().After(deadline) {
			break
		}
	}
	// The flood reached the server: without that, no growth proves nothing.
	if n, err := strconv.ParseInt(string(body), 10, 64); err != nil || n < 256<<20 {
		t.Fatalf("the flood did not run as planned: sent %q", body)
	}
	grown := serverRSS(t, s) - before
	t.Logf("server RSS grew by %d MiB while the runtime sent 384 MiB of stray frames", grown>>20)
	if grown > 128<<20 {
		t.Errorf("server RSS grew by %d MiB: stray frames are being kept", grown>>20)
	}
	// The session still works, and none of the stray output shows up.
	r = s.exec(id, "print(6 * 7)")
	if strings.TrimSpace(r.Stdout) != "42" || len(r.Results) != 0 {
		t.Errorf("after the flood: stdout %q, %d results", r.Stdout, len(r.Results))
	}
}

// A runtime that stopped reading (here: stopped by its own code) cannot
// hold an execution request past its timeout, even one too large for the
// socket's buffer.
func TestStoppedRuntimeDoesNotHangExecute(t *testing.T) {
	s := startServer(t, nil)
	id := s.newSession("python", nil)
	// The runtime stops itself once its execution has ended, when the
	// test says so (a file it uploads), not after a time a loaded host
	// may take to send the execution's end.
	s.exec(id, `
import os, signal, threading, time
def stop():
    for _ in range(3000):
        if os.path.exists('/workspace/stop'):
            break
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGSTOP)
threading.Thread(target=stop, daemon=True).start()
`)
	upload(t, s.c, id, "stop", "1")
	// Wait until the runtime is stopped.
	for deadline := time.Now().Add(30 * time.Second); !anyStopped(s.name); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runtime did not stop itself")
		}
	}
	code := "x = '" + strings.Repeat("a", 2<<20) + "'"
	body, _ := json.Marshal(map[string]any{"code": code, "timeout": "2s"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	status, data := postCtx(ctx, t, s.URL+"/v1/sessions/"+id+"/execute", body)
	took := time.Since(start)
	t.Logf("execute against a stopped runtime: %d after %v: %s", status, took, truncate(string(data), 200))
	if ctx.Err() != nil {
		t.Fatal("execute against a stopped runtime hung")
	}
	// Generous: only an execute held far past its timeout fails (a loaded
	// host takes seconds to end the session).
	if took > 25*time.Second {
		t.Errorf("execute against a stopped runtime took %v with a 2s timeout", took)
	}
	if status != 410 {
		t.Errorf("status %d, want 410 (the session ended)", status)
	}
}

func postCtx(ctx context.Context, t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rawClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// What code leaves in its workspace for the file API to trip on: a bound
// socket, a sparse file larger than the workspace (the sandbox may make
// one; the download refuses it), and odd query values. Each is a clear
// client error, never a 500 or an endless download.
func TestFileAPIOddities(t *testing.T) { testFileAPIOddities(t, sharedServer(t)) }

func testFileAPIOddities(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	r := s.exec(id, `import os, socket
sock = socket.socket(socket.AF_UNIX)
sock.bind('sock')
with open('sparse', 'wb') as f:
    f.truncate(1 << 40)
print('sparse', os.stat('sparse').st_size)
os.makedirs('dir/sub', exist_ok=True)
`)
	if strings.TrimSpace(r.Stdout) != "sparse 1099511627776" {
		t.Fatalf("setup: %+v", r)
	}
	base := "/v1/sessions/" + id + "/files"
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", base + "/sock", 400},
		{"GET", base + "/sparse", 413},
		{"GET", base + "?path=dir&recursive=yes", 400},
		{"GET", base + "?path=dir&recursive=true", 200},
		{"DELETE", base + "/dir?recursive=please", 400},
		{"DELETE", base + "/dir?recursive=1", 204},
	} {
		if strings.HasSuffix(tc.path, "/sock") && s.gvisor() {
			// gVisor keeps the sockets its sandbox binds in its own
			// kernel: the host, and so the file API, never sees one.
			tc.want = 404
		}
		status, body := s.raw(tc.method, tc.path, nil, nil)
		if status != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, truncate(string(body), 200), tc.want)
		}
	}
}

// anyStopped reports whether a process in one of parent's sandboxes is
// stopped (SIGSTOP).
func anyStopped(parent string) bool {
	for _, p := range sandboxPids(parent) {
		if strings.HasPrefix(procStatus(p)["State"], "T") {
			return true
		}
	}
	return false
}

// serverCPU is the server process's CPU time so far.
func serverCPU(t *testing.T, s *server) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// Code that floods its stdout past max_output runs on (Jupyter drops the
// excess too): what is past the cap is dropped unread and counted, exactly.
// The flood costs the server neither memory nor much CPU (the pipe's pages
// go to /dev/null uncopied, a pipeful at a time with a pause between), and
// the server answers others meanwhile. What is bounded is the flood's
// work, not its time: a loaded host stretches the flood, never the bounds.
func TestOutputFloodIsDroppedCheaply(t *testing.T) {
	s := startServer(t, nil)
	id := s.newSession("python", map[string]any{"limits": map[string]any{"max_output": "1M"}})
	other := s.newSession("python", nil)
	rss, cpu := serverRSS(t, s), serverCPU(t, s)
	type flood struct {
		r   *apitype.Result
		err error
	}
	done := make(chan flood, 1)
	var events []apitype.Event
	go func() {
		r, err := s.c.Execute(context.Background(), id, apitype.ExecuteRequest{Code: `
import fcntl, os, time
chunk, n, start = b'x' * 65536, 0, time.monotonic()
while n < 128 << 20:
    n += os.write(1, chunk)
took_ms = (time.monotonic() - start) * 1000
os.write(2, b'end\n')
pipe = fcntl.fcntl(1, getattr(fcntl, 'F_GETPIPE_SZ', 1032))
`}, func(ev apitype.Event) {
			if ev.Type != apitype.EventStdout {
				events = append(events, ev)
			}
		})
		done <- flood{r, err}
	}()
	// The server serves another session while the flood runs (a few
	// times: each costs the server CPU too).
	answered := 0
	for ; answered < 5; answered++ {
		if r := s.exec(other, "6 * 7"); text(r, "result") != "42" {
			t.Fatalf("another session during the flood: %+v", r)
		}
	}
	fl := <-done
	if fl.err != nil || fl.r == nil {
		t.Fatalf("the flood: %v", fl.err)
	}
	r := fl.r
	used, grown := serverCPU(t, s)-cpu, serverRSS(t, s)-rss
	var n, tookMs, pipe int64
	if got := s.exec(id, "print(n, int(took_ms), pipe)").Stdout; !scanInts(got, &n, &tookMs, &pipe) || tookMs <= 0 || pipe <= 0 {
		t.Fatalf("the flood's figures: %q", got)
	}
	took := time.Duration(tookMs) * time.Millisecond
	t.Logf("flooded %d MiB in %v (%.0f ms of the sandbox's CPU, a pipe of %d KiB); the server used %v of CPU and grew by %d MiB; another session answered %d times",
		n>>20, took, r.CPUMs, pipe>>10, used, grown>>20, answered)
	if r.Killed || r.Error != nil || !r.StdoutTruncated || len(r.Stdout) != 1<<20 || r.Stderr != "end\n" {
		t.Fatalf("the flood: %+v", r)
	}
	if n != 128<<20 || r.StdoutDroppedBytes != n-1<<20 {
		t.Errorf("flooded %d bytes: %d dropped, want %d", n, r.StdoutDroppedBytes, n-1<<20)
	}
	if len(events) < 3 || events[0].Type != apitype.EventTruncated || events[0].Stream != "stdout" || !strings.Contains(events[0].Text, "max_output") {
		t.Errorf("streamed events %+v: want one truncated event for stdout first", events)
	}
	if grown > 64<<20 {
		t.Errorf("the server grew by %d MiB during the flood", grown>>20)
	}
	// Past the cap the server takes at most a pipeful, then pauses a
	// millisecond (instance's dropPause): the writer waits on a full
	// pipe. The first MiB is read and kept; a pipeful is there before the
	// first drop and one after the last. A load can only slow the flood.
	if most := 1<<20 + pipe*(tookMs+2); n > most {
		t.Errorf("%d MiB went through the pipe in %v (at most %d MiB with a pause after each pipeful): the server drops without pausing",
			n>>20, took, most>>20)
	}
	// Reading what is dropped as fast as it comes would cost the server
	// about a core while the flood runs; dropping it a pipeful a
	// millisecond, a small fraction of one.
	if used > took/3 {
		t.Errorf("the server used %v of CPU during a flood of %v", used, took)
	}
}

// scanInts parses s (blank-separated) into the integers ps, all or none.
func scanInts(s string, ps ...*int64) bool {
	a := make([]any, len(ps))
	for i, p := range ps {
		a[i] = p
	}
	n, err := fmt.Sscan(s, a...)
	return err == nil && n == len(ps)
}
