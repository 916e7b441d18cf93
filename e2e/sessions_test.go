package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// One server for the session tests; each test makes its own sessions.
var (
	sharedOnce sync.Once
	shared     *server
)

func sharedServer(t *testing.T) *server {
	t.Helper()
	sharedOnce.Do(func() {
		shared = startServer(&persistentTB{T: t}, nil)
	})
	if shared == nil {
		t.Fatal("no server")
	}
	shared.t = t
	return shared
}

// persistentTB lets the shared server outlive the test that started it:
// it is stopped by TestMain.
type persistentTB struct {
	*testing.T
}

func (p *persistentTB) Cleanup(func()) {}

func (p *persistentTB) TempDir() string {
	d, err := os.MkdirTemp("", "airlock-e2e")
	if err != nil {
		p.Fatal(err)
	}
	return d
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []*server{shared, gvisorShared} {
		if s == nil {
			continue
		}
		s.t = &stopTB{}
		s.stop()
		left := checkNothingLeft(s.name)
		left = append(left, runscProcs(s.name)...)
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "left behind by the shared server %s:\n%s\n", s.name, strings.Join(left, "\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// stopTB reports failures of the final stop on stderr (no test is running).
type stopTB struct{ testing.TB }

func (stopTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	os.Exit(1)
}
func (stopTB) Helper() {}

func TestStatePersists(t *testing.T) { testStatePersists(t, sharedServer(t)) }

func testStatePersists(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	s.exec(id, "import math\nx = 41\ndef f(v):\n    return v + 1")
	r := s.exec(id, "f(x)")
	if got := text(r, "result"); got != "42" {
		t.Fatalf("final expression: got %q (%+v)", got, r)
	}
	r = s.exec(id, "print(math.pi > 3)")
	if r.Stdout != "True\n" || len(r.Results) != 0 {
		t.Fatalf("print: got stdout %q results %v", r.Stdout, r.Results)
	}
	r = s.exec(id, "x = 5;")
	if len(r.Results) != 0 {
		t.Fatalf("a statement has no value, got %v", r.Results)
	}
}

func TestPlotIsPNG(t *testing.T) { testPlotIsPNG(t, sharedServer(t)) }

func testPlotIsPNG(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	for _, code := range []string{
		"import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('without show')",
		"import matplotlib.pyplot as plt\nplt.figure()\nplt.bar(['a', 'b'], [3, 4])\nplt.show()",
	} {
		r := s.exec(id, code)
		var found bool
		for _, o := range r.Results {
			raw, ok := o.Data["image/png"]
			if !ok {
				continue
			}
			var b64 string
			if err := json.Unmarshal(raw, &b64); err != nil {
				t.Fatal(err)
			}
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if img.Bounds().Dx() < 100 {
				t.Fatalf("tiny image %v", img.Bounds())
			}
			found = true
		}
		if !found {
			t.Fatalf("no image/png for %q: %+v", code, r)
		}
	}
}

func TestDataFrameHTML(t *testing.T) { testDataFrameHTML(t, sharedServer(t)) }

func testDataFrameHTML(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	r := s.exec(id, "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3, 19]})")
	if len(r.Results) != 1 || r.Results[0].Type != "result" {
		t.Fatalf("results: %+v", r.Results)
	}
	var html, text string
	json.Unmarshal(r.Results[0].Data["text/html"], &html)
	json.Unmarshal(r.Results[0].Data["text/plain"], &text)
	if !strings.Contains(html, "<table") || !strings.Contains(html, "Oslo") || !strings.Contains(text, "Lima") {
		t.Fatalf("html %q text %q", truncate(html, 200), text)
	}
}

func TestExceptionThenNormalCall(t *testing.T) { testExceptionThenNormalCall(t, sharedServer(t)) }

func testExceptionThenNormalCall(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	s.exec(id, "y = 7")
	r := s.exec(id, "def g():\n    return 1 / 0\ng()")
	if r.Error == nil || r.Error.Name != "ZeroDivisionError" || r.ExitCode != 1 {
		t.Fatalf("error: %+v exit %d", r.Error, r.ExitCode)
	}
	tb := strings.Join(r.Error.Traceback, "\n")
	if !strings.Contains(tb, "1 / 0") || strings.Contains(tb, "airlock_runtime") {
		t.Fatalf("traceback should show the user's code only:\n%s", tb)
	}
	r = s.exec(id, "y * 6")
	if r.Error != nil || text(r, "result") != "42" {
		t.Fatalf("after an exception: %+v", r)
	}
	r = s.exec(id, "def broken(:\n  pass")
	if r.Error == nil || r.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", r.Error)
	}
	if r := s.exec(id, "y"); text(r, "result") != "7" {
		t.Fatalf("after a syntax error: %+v", r)
	}
}

func TestTimeoutKeepsState(t *testing.T) { testTimeoutKeepsState(t, sharedServer(t)) }

func testTimeoutKeepsState(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	s.exec(id, "kept = 'still here'")
	for _, code := range []string{"while True:\n    pass", "import time\ntime.sleep(60)"} {
		start := time.Now()
		r, err := s.execute(id, apitype.ExecuteRequest{Code: code, Timeout: duration(t, "1s")})
		if err != nil || !r.Killed || r.KillReason != "timeout" || r.Error == nil || r.Error.Name != "TimeoutError" {
			t.Fatalf("%q: %v, result %+v", code, err, r)
		}
		// (a timeout not applied lasts the code's 60 s; a loaded host
		// may take seconds to apply one)
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("timeout took %v", d)
		}
		if r := s.exec(id, "kept"); text(r, "result") != "'still here'" {
			t.Fatalf("state lost after a timeout: %+v", r)
		}
	}
}

// A limit's error says what happened, in every runtime and every kind of
// run, streamed or not: the limit and its value, how long the code ran,
// and whether the session's state was kept; never an empty
// KeyboardInterrupt.
func TestLimitErrorsSayWhatHappened(t *testing.T) { testLimitErrorsSayWhatHappened(t, sharedServer(t)) }

func testLimitErrorsSayWhatHappened(t *testing.T, s *server) {
	ctx := context.Background()
	check := func(where string, r *apitype.Result, name string, says ...string) {
		t.Helper()
		if r == nil || r.Error == nil || r.Error.Name != name || !r.Killed {
			t.Errorf("%s: %+v, want killed with %s", where, r, name)
			return
		}
		for _, w := range says {
			if !strings.Contains(r.Error.Value, w) {
				t.Errorf("%s: error %q does not say %q", where, r.Error.Value, w)
			}
		}
		if tb := r.Error.Traceback; len(tb) == 0 || tb[len(tb)-1] != name+": "+r.Error.Value {
			t.Errorf("%s: traceback %q does not end with the error", where, tb)
		}
	}
	kept := "the session and its state (variables, files) were kept"
	for lang, code := range map[string]string{
		"python":     "import time\ntime.sleep(60)",
		"javascript": "while (true) {}",
		"bash":       "sleep 60",
	} {
		id := s.newSession(lang, nil)
		r, err := s.execute(id, apitype.ExecuteRequest{Code: code, Timeout: duration(t, "1s")})
		if err != nil {
			t.Fatal(err)
		}
		check(lang, r, "TimeoutError", "timeout of 1s (wall clock)", "interrupted after 1", kept)
		// Streamed: the error event is the limit's too, before the end.
		var errs []string
		r, err = s.c.Execute(ctx, id, apitype.ExecuteRequest{Code: code, Timeout: duration(t, "500ms")}, func(ev apitype.Event) {
			if ev.Type == apitype.EventError {
				errs = append(errs, ev.Error.Name)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		check(lang+" streamed", r, "TimeoutError", "timeout of 500ms", kept)
		if strings.Join(errs, ",") != "TimeoutError" {
			t.Errorf("%s streamed: error events %q, want one TimeoutError", lang, errs)
		}
	}
	id := s.newSession("python", map[string]any{"limits": map[string]any{"cpu_time": "1s"}})
	check("cpu_time", s.exec(id, "while True: pass"), "CPUTimeError", "CPU time (cpu_time 1s)", kept)
	one, err := s.c.RunOnce(ctx, apitype.OneShotRequest{Code: "while True: pass", Limits: limits(t, map[string]any{"timeout": "1s"})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("one-shot", one.Result, "TimeoutError", "timeout of 1s", "a one-shot run keeps no state")
	prog := s.runProgram(apitype.ProgramRequest{Language: "bash", Code: "sleep 60", Limits: limits(t, map[string]any{"timeout": "1s"})})
	check("program", prog.Result, "TimeoutError", "timeout of 1s", "the program was killed after 1", "exit code 137")
}

// Output past max_output is dropped and counted, stdout and stderr each,
// and the code runs on to its end: its later statements take effect.
func TestOutputCapKeepsRunning(t *testing.T) { testOutputCapKeepsRunning(t, sharedServer(t)) }

func testOutputCapKeepsRunning(t *testing.T, s *server) {
	for lang, code := range map[string]string{
		"python":     "import sys\nfor _ in range(300): print('o' * 99); print('e' * 99, file=sys.stderr)\nafter = 'ran'",
		"javascript": "for (let i = 0; i < 300; i++) { console.log('o'.repeat(99)); console.error('e'.repeat(99)) }\nglobalThis.after = 'ran'",
		"bash":       "for i in $(seq 300); do printf '%099d\\n' 0; printf '%099d\\n' 0 >&2; done; after=ran",
	} {
		id := s.newSession(lang, map[string]any{"limits": map[string]any{"max_output": "10K"}})
		r := s.exec(id, code)
		if r.Killed || r.Error != nil || !r.StdoutTruncated || !r.StderrTruncated || len(r.Stdout) != 10<<10 || len(r.Stderr) != 10<<10 ||
			r.StdoutDroppedBytes != 300*100-10<<10 || r.StderrDroppedBytes != 300*100-10<<10 {
			t.Errorf("%s: killed %v error %+v, stdout %d kept %d dropped, stderr %d kept %d dropped", lang, r.Killed, r.Error,
				len(r.Stdout), r.StdoutDroppedBytes, len(r.Stderr), r.StderrDroppedBytes)
		}
		check := map[string]string{"python": "after", "javascript": "after", "bash": "echo $after"}[lang]
		if r := s.exec(id, check); !strings.Contains(r.Stdout+text(r, "result"), "ran") {
			t.Errorf("%s: the code did not run on past the cap: %+v", lang, r)
		}
	}
}

func TestCPUTimeKeepsState(t *testing.T) { testCPUTimeKeepsState(t, sharedServer(t)) }

func testCPUTimeKeepsState(t *testing.T, s *server) {
	id := s.newSession("python", map[string]any{"limits": map[string]any{"cpu_time": "1s"}})
	s.exec(id, "z = 3")
	r := s.exec(id, "while True:\n    pass")
	if !r.Killed || r.KillReason != "cpu_time" {
		t.Fatalf("got %+v", r)
	}
	if r := s.exec(id, "z"); text(r, "result") != "3" {
		t.Fatalf("state lost: %+v", r)
	}
}

func TestOOMEndsSessionCleanly(t *testing.T) { testOOMEndsSessionCleanly(t, sharedServer(t)) }

func testOOMEndsSessionCleanly(t *testing.T, s *server) {
	id := s.newSession("python", map[string]any{"limits": map[string]any{"memory": "128M"}})
	r := s.exec(id, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))")
	if !r.Killed || r.KillReason != "memory" || !r.SessionEnded || r.EndReason != "out of memory" || r.EndCode != apitype.EndOOM {
		t.Fatalf("got %+v", r)
	}
	_, err := s.execute(id, apitype.ExecuteRequest{Code: "1"})
	e := wantError(t, "after OOM", err, 410, "session_ended")
	if !strings.Contains(e.Message, "session ended: out of memory") || e.EndCode != apitype.EndOOM {
		t.Fatalf("after OOM: %+v", e)
	}
	_, err = s.c.Session(context.Background(), id)
	wantError(t, "GET after OOM", err, 410, "session_ended")
	// Other sessions are unaffected.
	other := s.newSession("python", nil)
	if r := s.exec(other, "1 + 1"); text(r, "result") != "2" {
		t.Fatalf("a new session after an OOM: %+v", r)
	}
}

func TestStreamedEventsInOrderAndEarly(t *testing.T) {
	testStreamedEventsInOrderAndEarly(t, sharedServer(t))
}

func testStreamedEventsInOrderAndEarly(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	// The code goes on only once the test has received its first event
	// (a file the test uploads then): an event held until the end never
	// lets it, and the execution ends with "held" in its output instead.
	body, _ := json.Marshal(map[string]any{"code": `import os, sys, time
print('first', flush=True)
for _ in range(2000):
    if os.path.exists('/workspace/go'):
        break
    time.sleep(0.01)
else:
    print('held')
print('oops', file=sys.stderr)
display({'text/plain': 'shown'}, raw=True)
1 / 0`})
	req, _ := http.NewRequest("POST", s.URL+"/v1/sessions/"+id+"/execute", bytes.NewReader(body))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var types []string
	var end struct {
		Result apitype.Result `json:"result"`
	}
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad event %q: %v", sc.Text(), err)
		}
		if len(types) == 0 {
			if ev.Type != "stdout" || ev.Text != "first\n" {
				t.Fatalf("first event %+v", ev)
			}
			upload(t, s.c, id, "go", "1")
		}
		types = append(types, ev.Type)
		if ev.Type == "end" {
			json.Unmarshal(sc.Bytes(), &end)
		}
	}
	want := []string{"stdout", "stderr", "display", "error", "end"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", types, want)
	}
	if end.Result.Stdout != "first\n" || end.Result.Stderr != "oops\n" || end.Result.Error == nil {
		t.Fatalf("end event result %+v", end.Result)
	}
}

func TestBinaryFileRoundTrip(t *testing.T) { testBinaryFileRoundTrip(t, sharedServer(t)) }

func testBinaryFileRoundTrip(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	ctx := context.Background()
	up, err := s.c.Upload(ctx, id, "in/blob.bin", bytes.NewReader(data), int64(len(data)))
	if err != nil || up.Size != int64(len(data)) || up.Path != "in/blob.bin" {
		t.Fatalf("upload: %v %+v", err, up)
	}
	r := s.exec(id, "import hashlib\nb = open('in/blob.bin', 'rb').read()\nopen('out.bin', 'wb').write(b[::-1])\nhashlib.sha256(b).hexdigest()")
	if len(r.FilesChanged) != 1 || r.FilesChanged[0].Path != "out.bin" || r.FilesChanged[0].Change != "created" {
		t.Fatalf("files_changed %+v", r.FilesChanged)
	}
	download := func(p string) ([]byte, error) {
		rc, err := s.c.Download(ctx, id, p)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	got, err := download("in/blob.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("download: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, data))
	}
	got, err = download("out.bin")
	rev := make([]byte, len(data))
	for i := range data {
		rev[i] = data[len(data)-1-i]
	}
	if err != nil || !bytes.Equal(got, rev) {
		t.Fatalf("download of a file written by code: %v", err)
	}
	list, err := s.c.ListFiles(ctx, id, "in", false)
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Path != "in/blob.bin" || list.Entries[0].Type != "file" || list.Entries[0].Size != int64(len(data)) {
		t.Fatalf("list: %v %+v", err, list)
	}
	if err := s.c.DeleteFile(ctx, id, "out.bin", false); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = download("out.bin")
	wantError(t, "deleted file", err, 404, "not_found")
	// Over the file cap: refused without keeping anything.
	small := s.newSession("python", map[string]any{"limits": map[string]any{"disk": "1M"}})
	_, err = s.c.Upload(ctx, small, "big", bytes.NewReader(make([]byte, 2<<20)), 2<<20)
	wantError(t, "oversized upload", err, 413, "too_large")
}

func TestTraversalRejected(t *testing.T) { testTraversalRejected(t, sharedServer(t)) }

func testTraversalRejected(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	// Code plants links that point outside its workspace.
	r := s.exec(id, `import os
os.symlink('/etc/passwd', 'passwd-link')
os.symlink('/', 'root-link')
os.makedirs('d', exist_ok=True)
os.symlink('/etc', 'd/etc')
os.mkfifo('fifo')
try:
    os.link('/etc/passwd', 'hard')
except OSError as e:
    print('hardlink refused:', e.errno)
`)
	if !strings.Contains(r.Stdout, "hardlink refused") {
		t.Fatalf("hardlink to a host file: %+v", r)
	}
	base := "/v1/sessions/" + id + "/files/"
	// Literal dot segments are refused before routing (no redirect, see
	// TestNoRedirects); every other trick reaches workspace.Clean or
	// openat2 and is refused there: 400 either way.
	for _, p := range []string{
		"../etc/passwd", "..%2fetc%2fpasswd", "%2e%2e/%2e%2e/etc/passwd", "a/../../etc/passwd",
		"passwd-link", "root-link/etc/passwd", "d/etc/passwd", "fifo", "%00", "x%00y",
		"%2fetc%2fpasswd", strings.Repeat("a", 300), strings.Repeat("d/", 40) + "f", "d",
	} {
		want := 400
		if p == "fifo" && s.gvisor() {
			// gVisor keeps the FIFOs its sandbox makes in its own kernel:
			// the host, and so the file API, never sees one.
			want = 404
		}
		check := func(method string, status int, body []byte) {
			t.Helper()
			var e apitype.ErrorBody
			json.Unmarshal(body, &e)
			if status != want || bytes.Contains(body, []byte("root:x:0:0")) || (want == 400 && e.Error.Code != "invalid_argument") {
				t.Errorf("%s %s: status %d body %q, want %d", method, truncate(p, 40), status, truncate(string(body), 120), want)
			}
		}
		status, body := s.raw("GET", base+p, nil, nil)
		check("GET", status, body)
		switch p {
		case "passwd-link", "fifo", "d":
			// Writing these names replaces the link or FIFO itself (see
			// below) or fails on a directory; they are not traversals.
			continue
		}
		status, body = s.raw("PUT", base+p, "x", nil)
		check("PUT", status, body)
	}
	// Writing through a planted link must not follow it.
	status, _ := s.raw("PUT", base+"d/etc/evil", "x", nil)
	if status == 201 {
		t.Fatal("PUT through a symlinked directory was accepted")
	}
	if _, err := os.Stat("/etc/evil"); err == nil {
		t.Fatal("/etc/evil exists on the host")
	}
	// Replacing a link by a file through the API replaces the link, never
	// its target.
	if status, _ := s.raw("PUT", base+"passwd-link", "replaced", nil); status != 201 {
		t.Fatalf("PUT over a symlink: %d", status)
	}
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	if bytes.Equal(hostPasswd, []byte("replaced")) {
		t.Fatal("the host's /etc/passwd was overwritten")
	}
}

// A file swapped for a symlink while the server reads it never yields the
// link's target.
func TestSwapRace(t *testing.T) { testSwapRace(t, sharedServer(t)) }

func testSwapRace(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	secret := fmt.Sprintf("host-secret-%d", time.Now().UnixNano())
	hostFile := filepath.Join("/tmp", "airlock-e2e-secret")
	os.WriteFile(hostFile, []byte(secret), 0o644)
	defer os.Remove(hostFile)
	// The swaps go on until the test says stop (a file it uploads), so
	// the reads race with them however slow the host is to start either;
	// the reads go on for 3 s and until both states were seen.
	_, done := postEnding(s, "/v1/sessions/"+id+"/execute", `{"timeout": "120s", "code": "import os, time\nend = time.time() + 100\nwhile time.time() < end and not os.path.exists('stop'):\n    open('f.tmp', 'w').write('innocent')\n    os.replace('f.tmp', 'target')\n    os.symlink('/tmp/airlock-e2e-secret', 'l.tmp')\n    os.replace('l.tmp', 'target')\n"}`)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.c.Upload(context.Background(), id, "stop", strings.NewReader("1"), 1)
			<-done
		})
	}
	defer stop() // also when the test fails below
	start := time.Now()
	files, links := 0, 0
	for time.Since(start) < 3*time.Second || files == 0 || links == 0 {
		if time.Since(start) > 90*time.Second {
			break // the check below says the race never happened
		}
		status, body := s.raw("GET", "/v1/sessions/"+id+"/files/target", nil, nil)
		switch {
		case bytes.Contains(body, []byte("host-secret")):
			t.Fatalf("read the host file through a swapped symlink (status %d)", status)
		case status == 200 && string(body) == "innocent":
			files++
		case status == 400:
			links++ // found the symlink, and refused it
		case status >= 500:
			t.Fatalf("server error %d", status)
		}
	}
	stop()
	t.Logf("%d reads of the file, %d of the symlink", files, links)
	// Both states were seen: the reads really raced with the swaps.
	if files == 0 || links == 0 {
		t.Errorf("the race never happened: %d reads of the file, %d of the symlink", files, links)
	}
}

func TestSessionsAreIsolated(t *testing.T) { testSessionsAreIsolated(t, sharedServer(t)) }

func testSessionsAreIsolated(t *testing.T, s *server) {
	a := s.newSession("python", nil)
	b := s.newSession("python", nil)
	s.exec(a, "secret = 'only-in-a'\nopen('a.txt', 'w').write('a')\nimport subprocess\np = subprocess.Popen(['sleep', '300'])")
	r := s.exec(b, `import os
print(sorted(os.listdir('/workspace')))
print([open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()])
print('secret' in globals())
`)
	if strings.Contains(r.Stdout, "a.txt") || strings.Contains(r.Stdout, "sleep") || !strings.Contains(r.Stdout, "False") {
		t.Fatalf("session b sees session a: %q", r.Stdout)
	}
	// Same name in both, different values.
	s.exec(b, "secret = 'only-in-b'")
	if r := s.exec(a, "secret"); text(r, "result") != "'only-in-a'" {
		t.Fatalf("%+v", r)
	}
	// Random state differs although both came from the same template:
	// Python's (reseeded by os.fork) and numpy's global generator (by the
	// template's child), each on its own.
	for _, draw := range []string{"import random\nrandom.random()", "import numpy\nfloat(numpy.random.rand())"} {
		ra, rb := s.exec(a, draw), s.exec(b, draw)
		if text(ra, "result") == "" || text(ra, "result") == text(rb, "result") {
			t.Fatalf("two sessions drew the same random number (%q): %s", draw, text(ra, "result"))
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	s := sharedServer(t)
	id := s.newSession("python", nil)
	big := `{"code": "` + strings.Repeat("x", 9<<20) + `"}`
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/sessions", `{`, 400},
		{"POST", "/v1/sessions", `[]`, 400},
		{"POST", "/v1/sessions", `{"language": 3}`, 400},
		{"POST", "/v1/sessions", `{"language": "cobol"}`, 400},
		{"POST", "/v1/sessions", `{"nope": 1}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"memory": -1}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"memory": "99999999999T"}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"memory": 1e300}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"memory": "64G"}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"timeout": "forever"}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"pids": 1.5e20}}`, 400},
		{"POST", "/v1/sessions", `{"limits": {"cpus": "lots"}}`, 400},
		{"POST", "/v1/sessions", `{"env": {"BAD NAME": "x"}}`, 400},
		{"POST", "/v1/sessions", `{"timeout_idle": -5}`, 400},
		{"POST", "/v1/sessions", `{} {}`, 400},
		{"POST", "/v1/sessions", `{}]`, 400},
		{"POST", "/v1/sessions", `{"language": "python"}}`, 400},
		{"POST", "/v1/sessions/" + id + "/execute", `{"code": 1}`, 400},
		{"POST", "/v1/sessions/" + id + "/execute", `{"code": "1", "timeout": "99h"}`, 400},
		{"POST", "/v1/sessions/" + id + "/execute", big, 413},
		{"POST", "/v1/sessions/nope/execute", `{"code": "1"}`, 404},
		{"PATCH", "/v1/sessions", `{}`, 405},
		{"GET", "/v2/whatever", ``, 404},
		{"POST", "/v1/execute", `{"files": [{"path": "../x", "content": "y"}], "code": "1"}`, 400},
		{"POST", "/v1/execute", `{"files": [{"path": "a", "content_base64": "!!"}], "code": "1"}`, 400},
	}
	for _, c := range cases {
		status, body := s.raw(c.method, c.path, c.body, map[string]string{"Content-Type": "application/json"})
		if status != c.status {
			t.Errorf("%s %s %s: status %d, want %d: %s", c.method, c.path, truncate(c.body, 60), status, c.status, truncate(string(body), 200))
			continue
		}
		var e apitype.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.RequestID == "" {
			t.Errorf("%s %s: not a JSON error: %q", c.method, c.path, truncate(string(body), 200))
		}
	}
	// The session is still fine.
	if r := s.exec(id, "2 + 2"); text(r, "result") != "4" {
		t.Fatalf("%+v", r)
	}
}

func TestConcurrentExecutionConflicts(t *testing.T) {
	testConcurrentExecutionConflicts(t, sharedServer(t))
}

func testConcurrentExecutionConflicts(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	// The first execution runs until the test lets it end (a file in its
	// workspace), so the second one meets it running however slow the
	// host is; the bound only ends it should the test never get there.
	type answer struct {
		r   *apitype.Result
		err error
	}
	first := make(chan answer, 1)
	running := make(chan struct{})
	go func() {
		// Not s.execute, nor t: the test may have ended when it does.
		var once sync.Once
		r, err := s.c.Execute(context.Background(), id, apitype.ExecuteRequest{Code: `import os, time
print('running', flush=True)
for _ in range(12000):
    if os.path.exists('/workspace/go'):
        break
    time.sleep(0.01)
else:
    raise TimeoutError('the test never said go')
print('released')`}, func(ev apitype.Event) {
			if ev.Type == apitype.EventStdout {
				once.Do(func() { close(running) })
			}
		})
		first <- answer{r, err}
	}()
	select {
	case <-running:
	case a := <-first:
		t.Fatalf("the first execution ended before it ran: %+v %v", a.r, a.err)
	}
	info, err := s.c.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "busy" {
		t.Fatalf("a session executing code is %q, want busy", info.State)
	}
	_, err = s.execute(id, apitype.ExecuteRequest{Code: "1"})
	wantError(t, "second execution", err, 409, "conflict")
	upload(t, s.c, id, "go", "1")
	a := <-first
	if a.err != nil || a.r == nil || a.r.Error != nil || !strings.Contains(a.r.Stdout, "released") {
		t.Fatalf("first execution: %+v %v", a.r, a.err)
	}
}

func TestInterrupt(t *testing.T) { testInterrupt(t, sharedServer(t)) }

func testInterrupt(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	s.exec(id, "n = 0")
	type answer struct {
		r   *apitype.Result
		err error
	}
	res := make(chan answer, 1)
	running := make(chan struct{})
	go func() {
		// Not s.exec, nor t: the test may have ended when it does.
		var once sync.Once
		r, err := s.c.Execute(context.Background(), id, apitype.ExecuteRequest{Code: "import time\nn += 1\nprint('running', flush=True)\nwhile True:\n    n += 1\n    time.sleep(0.01)"},
			func(ev apitype.Event) {
				if ev.Type == apitype.EventStdout {
					once.Do(func() { close(running) })
				}
			})
		res <- answer{r, err}
	}()
	<-running // the loop has begun: the interrupt lands in it
	if interrupted, err := s.c.Interrupt(context.Background(), id); err != nil || !interrupted {
		t.Fatalf("interrupt: %v %v", err, interrupted)
	}
	a := <-res
	if r := a.r; a.err != nil || r == nil || r.Error == nil || r.Error.Name != "KeyboardInterrupt" || r.Killed {
		t.Fatalf("interrupted execution: %+v %v", r, a.err)
	}
	if r := s.exec(id, "n > 0"); text(r, "result") != "True" {
		t.Fatalf("state after interrupt: %+v", r)
	}
}

func TestOneShotExecute(t *testing.T) { testOneShotExecute(t, sharedServer(t)) }

func testOneShotExecute(t *testing.T, s *server) {
	r, err := s.c.RunOnce(context.Background(), apitype.OneShotRequest{
		Language: "python",
		Code:     "import pandas as pd\ndf = pd.read_csv('in.csv')\ndf['b'] = df['a'] * 2\ndf.to_csv('out.csv', index=False)\nprint(df['b'].sum())",
		Files:    []apitype.InputFile{{Path: "in.csv", Content: "a\n1\n2\n3\n"}},
	}, nil)
	if err != nil || r.Stdout != "12\n" || r.Error != nil {
		t.Fatalf("one-shot: %v %+v", err, r)
	}
	if len(r.Files) != 1 || r.Files[0].Path != "out.csv" {
		t.Fatalf("files %+v", r.Files)
	}
	got, _ := base64.StdEncoding.DecodeString(r.Files[0].ContentBase64)
	if string(got) != "a,b\n1,2\n2,4\n3,6\n" {
		t.Fatalf("out.csv = %q", got)
	}
	// A one-shot run leaves no session behind.
	list, err := s.c.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range list {
		if si.State == "busy" {
			t.Fatalf("busy session after a one-shot: %+v", si)
		}
	}
}

func TestDeleteAndIdle(t *testing.T) { testDeleteAndIdle(t, sharedServer(t)) }

func testDeleteAndIdle(t *testing.T, s *server) {
	id := s.newSession("python", map[string]any{"timeout_idle": "1s"})
	ctx := context.Background()
	// Wait for the idle timeout to end it (the check runs once a second).
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err = s.c.Session(ctx, id); err != nil || time.Now().After(deadline) {
			break
		}
	}
	if e := wantError(t, "idle session", err, 410, "session_ended"); !strings.Contains(e.Message, "idle") || e.EndCode != apitype.EndIdle {
		t.Fatalf("idle session: %+v", e)
	}
	id = s.newSession("python", nil)
	if err := s.c.DeleteSession(ctx, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = s.execute(id, apitype.ExecuteRequest{Code: "1"})
	if e := wantError(t, "after delete", err, 410, "session_ended"); e.EndCode != apitype.EndDeleted {
		t.Fatalf("after delete: %+v", e)
	}
}

func TestBashSession(t *testing.T) { testBashSession(t, sharedServer(t)) }

func testBashSession(t *testing.T, s *server) {
	id := s.newSession("bash", map[string]any{"env": map[string]string{"PROJECT": "demo"}})
	r := s.exec(id, "mkdir -p work && cd work && export STAGE=two && f() { echo \"f:$1\"; }")
	if r.ExitCode != 0 {
		t.Fatalf("%+v", r)
	}
	r = s.exec(id, "pwd; echo $STAGE $PROJECT; f x; echo oops >&2; false")
	if r.Stdout != "/workspace/work\ntwo demo\nf:x\n" || r.Stderr != "oops\n" || r.ExitCode != 1 {
		t.Fatalf("%+v", r)
	}
	res, err := s.execute(id, apitype.ExecuteRequest{Code: "sleep 30", Timeout: duration(t, "1s")})
	if err != nil || !res.Killed || res.KillReason != "timeout" {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	if r := s.exec(id, "echo still $STAGE"); r.Stdout != "still two\n" {
		t.Fatalf("after timeout: %+v", r)
	}
	_, err = s.execute(id, apitype.ExecuteRequest{Code: "echo a\x00b"})
	wantError(t, "NUL in bash code", err, 400, "invalid_argument")
}

func TestJavaScriptSession(t *testing.T) { testJavaScriptSession(t, sharedServer(t)) }

func testJavaScriptSession(t *testing.T, s *server) {
	id := s.newSession("javascript", nil)
	s.exec(id, "let total = 40\nconst add = (a, b) => a + b")
	r := s.exec(id, "console.log('adding'); add(total, 2)")
	if r.Stdout != "adding\n" || text(r, "result") != "42" {
		t.Fatalf("%+v", r)
	}
	r = s.exec(id, "let total = 1; total")
	if r.Error != nil || text(r, "result") != "1" {
		t.Fatalf("redeclaration: %+v", r)
	}
	r = s.exec(id, "await new Promise(r => setTimeout(r, 20)); 'awaited'")
	if text(r, "result") != "'awaited'" {
		t.Fatalf("top-level await: %+v", r)
	}
	r = s.exec(id, "null.x")
	if r.Error == nil || r.Error.Name != "TypeError" {
		t.Fatalf("error: %+v", r)
	}
	r = s.exec(id, "display({'text/html': '<b>hi</b>'}); require('fs').readdirSync('/workspace').length")
	if len(r.Results) != 2 || r.Results[0].Type != "display" {
		t.Fatalf("display: %+v", r)
	}
	res, err := s.execute(id, apitype.ExecuteRequest{Code: "while (true) {}", Timeout: duration(t, "1s")})
	if err != nil || !res.Killed || res.KillReason != "timeout" {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	if r := s.exec(id, "total + 1"); text(r, "result") != "2" {
		t.Fatalf("after timeout: %+v", r)
	}
}

// An empty cell does nothing and keeps the session: {"code": ""}, {} or
// blanks in a session of each language, and an empty one-shot execution.
// (The runtimes' frames used to drop an empty code, which ended the
// session with a protocol error.)
func TestEmptyCell(t *testing.T) { testEmptyCell(t, sharedServer(t)) }

func testEmptyCell(t *testing.T, s *server) {
	state := map[string][2]string{ // code that binds a value, code that reads it
		"python":     {"kept = 41", "print(kept + 1)"},
		"javascript": {"var kept = 41", "console.log(kept + 1)"},
		"bash":       {"kept=41", "echo $((kept + 1))"},
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	for _, lang := range []string{"python", "javascript", "bash"} {
		t.Run(lang, func(t *testing.T) {
			id := s.newSession(lang, nil)
			s.exec(id, state[lang][0])
			for _, body := range []string{`{"code": ""}`, `{}`, `{"code": " \n\t"}`} {
				status, data := s.raw("POST", "/v1/sessions/"+id+"/execute", body, hdr)
				var r apitype.Result
				if err := json.Unmarshal(data, &r); status != 200 || err != nil || r.Error != nil || r.Killed || r.SessionEnded ||
					r.ExitCode != 0 || r.Stdout != "" || r.Stderr != "" || len(r.Results) != 0 {
					t.Fatalf("%s: %d %s", body, status, data)
				}
				if r := s.exec(id, state[lang][1]); r.Stdout != "42\n" || r.Error != nil {
					t.Fatalf("after %s: %+v", body, r)
				}
			}
		})
	}
	for _, lang := range []string{"python", "javascript", "bash"} {
		status, data := s.raw("POST", "/v1/execute", map[string]any{"language": lang, "code": ""}, hdr)
		var r apitype.OneShotResult
		if err := json.Unmarshal(data, &r); status != 200 || err != nil || r.Result == nil || r.Error != nil || r.Killed || r.ExitCode != 0 || r.Stdout != "" || r.Stderr != "" {
			t.Errorf("one-shot %s with empty code: %d %s", lang, status, data)
		}
	}
}

// A JavaScript session can use the memory it was granted, though pooled
// runtimes start with the pool's (V8 sizes its heap once, at start), and
// running out of it, which V8 reports by aborting, is reported as memory.
func TestJavaScriptMemory(t *testing.T) { testJavaScriptMemory(t, sharedServer(t)) }

func testJavaScriptMemory(t *testing.T, s *server) {
	s.waitWarm()
	discarded := func() uint64 {
		t.Helper()
		h, err := s.c.Health(context.Background())
		var st apitype.PoolStats
		if err == nil {
			err = json.Unmarshal(h.Pool["javascript"], &st)
		}
		if err != nil || st.Target == 0 {
			t.Fatalf("health: %v %+v", err, h)
		}
		return st.Discarded
	}
	before := discarded()
	// Most of a 2G grant, over three times the heap of the pool's 512M.
	id := s.newSession("javascript", map[string]any{"limits": map[string]any{"memory": "2G"}})
	r, err := s.execute(id, apitype.ExecuteRequest{Timeout: duration(t, "60s"), Code: `
const keep = [];
for (let mb = 0; mb < 1200; mb++) keep.push(new Array(128 * 1024).fill(mb)); // 1 MiB each
console.log(keep.length, require('v8').getHeapStatistics().used_heap_size > 1200e6);`})
	if err != nil || r.Error != nil || r.Stdout != "1200 true\n" {
		t.Fatalf("allocating 1200 MiB in a 2G session: %v %+v", err, r)
	}
	// The heap follows the grant both ways: a small session's V8 gives up
	// (and aborts) before the sandbox's memory limit is reached; that is
	// running out of memory all the same.
	id = s.newSession("javascript", map[string]any{"limits": map[string]any{"memory": "256M"}})
	r, err = s.execute(id, apitype.ExecuteRequest{Timeout: duration(t, "60s"), Code: `
const keep = [];
for (;;) keep.push(new Array(128 * 1024).fill(1));`})
	if err != nil || !r.Killed || r.KillReason != "memory" || !r.SessionEnded || r.EndReason != "out of memory" || r.EndCode != apitype.EndOOM {
		t.Fatalf("exhausting a 256M session: %v %+v", err, r)
	}
	if !strings.Contains(r.Stderr, "JavaScript heap out of memory") {
		t.Fatalf("V8 did not run out of heap itself (the test means to check how its abort is reported): %q", truncate(r.Stderr, 2000))
	}
	// The pool's runtime, which could not serve them, is left for others.
	if n := discarded(); n != before {
		t.Errorf("%d pooled javascript runtimes discarded", n-before)
	}
	// Spoofing V8's message and aborting is no memory exhaustion.
	id = s.newSession("javascript", nil)
	r, err = s.execute(id, apitype.ExecuteRequest{Code: `
console.error('FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory');
process.abort();`})
	if err != nil || !r.SessionEnded || r.KillReason == "memory" || r.EndCode == apitype.EndOOM {
		t.Fatalf("a plain abort: %v %+v", err, r)
	}
}

// No API answer is a redirect: Go's router would redirect a path with
// empty or dot segments to its cleaned form, another resource (files/..
// is the session itself), and a client that follows redirects (curl -L,
// python-requests) would then delete or read that. Each is a 400 and
// nothing happens to either session.
func TestNoRedirects(t *testing.T) {
	s := sharedServer(t)
	id := s.newSession("python", nil)
	other := s.newSession("python", nil)
	s.exec(other, "open('secret.txt', 'w').write('other session')")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct{ method, path string }{
		{"DELETE", "/v1/sessions/" + id + "/files/.."},
		{"DELETE", "/v1/sessions/" + id + "/files/./.."},
		{"GET", "/v1/sessions/" + id + "/files/a/../../../" + other + "/files/secret.txt"},
		{"DELETE", "/v1/sessions/" + id + "/files/a/../../../" + other},
		{"GET", "/v1/sessions/" + id + "/files//etc/passwd"},
		{"GET", "/v1//sessions"},
		{"GET", "/v1/sessions/./" + id},
		{"POST", "/v1/sessions/" + id + "/execute/.."},
		{"GET", "/v1/sessions/" + id + "/files/%2e%2e"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e apitype.ErrorBody
		json.Unmarshal(body, &e)
		if resp.StatusCode != 400 || e.Error.Code != "invalid_argument" || resp.Header.Get("Location") != "" {
			t.Errorf("%s %s: %d %s (Location %q), want 400 invalid_argument", tc.method, tc.path, resp.StatusCode, truncate(string(body), 200), resp.Header.Get("Location"))
		}
	}
	if r := s.exec(id, "print('alive')"); strings.TrimSpace(r.Stdout) != "alive" {
		t.Errorf("the session after the requests: %+v", r)
	}
	if r := s.exec(other, "print(open('secret.txt').read())"); strings.TrimSpace(r.Stdout) != "other session" {
		t.Errorf("the other session's file: %+v", r)
	}
}

func TestHomeUserIsWorkspace(t *testing.T) { testHomeUserIsWorkspace(t, sharedServer(t)) }

// testHomeUserIsWorkspace: /home/user (E2B's home) is the sandbox's
// /workspace under a second name, in sessions and one-shots, with the
// same mount restrictions.
func testHomeUserIsWorkspace(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	r := s.exec(id, `import os
open('/home/user/x.txt', 'w').write('via home')
os.makedirs('/workspace/sub', exist_ok=True)
open('/workspace/sub/y.txt', 'w').write('via workspace')
opts = {l.split()[4]: sorted(l.split()[5].split(',')) for l in open('/proc/self/mountinfo')}
print(open('/workspace/x.txt').read(), open('/home/user/sub/y.txt').read(),
      os.stat('/home/user').st_ino == os.stat('/workspace').st_ino,
      opts.get('/home/user') == opts['/workspace'] and 'nosuid' in opts['/workspace'])`)
	// The same tree, mounted with the same restrictions (nosuid, and
	// nodev where the kernel shows it: TestRootMounts checks it natively).
	if r.Error != nil || r.Stdout != "via home via workspace True True\n" {
		t.Fatalf("/home/user is not /workspace: %+v", r)
	}
	rc, err := s.c.Download(context.Background(), id, "x.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "via home" {
		t.Fatalf("files API read %q", got)
	}
	one, err := s.c.RunOnce(context.Background(), apitype.OneShotRequest{
		Language: "python",
		Code:     "open('/home/user/out.txt', 'w').write(open('/home/user/in.txt').read().upper())",
		Files:    []apitype.InputFile{{Path: "in.txt", Content: "abc"}},
	}, nil)
	if err != nil || one.Error != nil || len(one.Files) != 1 || one.Files[0].Path != "out.txt" {
		t.Fatalf("one-shot: %v %+v", err, one)
	}
	if b, _ := base64.StdEncoding.DecodeString(one.Files[0].ContentBase64); string(b) != "ABC" {
		t.Fatalf("one-shot out.txt = %q", b)
	}
}
