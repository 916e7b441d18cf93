package e2e

// Defects an independent reliability test found, each pinned by a test
// that failed before its fix.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// A timeout below the floor is the client's mistake (400), never the end
// of the session; the shortest allowed one times the code out and keeps
// the session.
func TestTinyTimeouts(t *testing.T) { testTinyTimeouts(t, sharedServer(t)) }

func testTinyTimeouts(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	s.exec(id, "x = 41")
	_, err := s.execute(id, apitype.ExecuteRequest{Code: "x = 1", Timeout: duration(t, "1ns")})
	wantError(t, "timeout 1ns", err, 400, "invalid_argument")
	r, err := s.execute(id, apitype.ExecuteRequest{Code: "import time\ntime.sleep(5)", Timeout: duration(t, "1ms")})
	if err != nil || !r.Killed || r.KillReason != apitype.KillTimeout || r.SessionEnded {
		t.Fatalf("timeout 1ms: %+v %v", r, err)
	}
	if r := s.exec(id, "x + 1"); text(r, "result") != "42" {
		t.Fatalf("the session lost its state: %+v", r)
	}
}

// A request body cut short, or with a broken chunked encoding, is a 400
// with a JSON body on every JSON endpoint, never a 500.
func TestMalformedBodies(t *testing.T) {
	s := sharedServer(t)
	id := s.newSession("python", nil)
	addr := strings.TrimPrefix(s.URL, "http://")
	for _, path := range []string{"/v1/sessions", "/v1/sessions/" + id + "/execute", "/v1/execute", "/v1/run"} {
		for name, req := range map[string]string{
			"truncated": "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"code\": \"pri",
			"bad chunk": "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
		} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			io.WriteString(c, req)
			c.(*net.TCPConn).CloseWrite()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s %s: %v", name, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			c.Close()
			var e apitype.ErrorBody
			if json.Unmarshal(body, &e); resp.StatusCode != 400 || e.Error.Code != "invalid_argument" {
				t.Errorf("%s %s: %d %s, want 400 invalid_argument", name, path, resp.StatusCode, truncate(string(body), 200))
			}
		}
	}
}

// slowBody sends n chunks of size bytes, one every pause, and then ends;
// sent counts what went out.
type slowBody struct {
	n, size int
	pause   time.Duration
	sent    chan int
	i       int
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.i == b.n {
		return 0, io.EOF
	}
	if b.i > 0 {
		time.Sleep(b.pause) // the pace of a slow client, not a wait for an event
	}
	b.i++
	n := min(len(p), b.size)
	for i := range p[:n] {
		p[i] = 'x'
	}
	if b.sent != nil {
		select {
		case b.sent <- b.i:
		default:
		}
	}
	return n, nil
}

// A transfer in progress is use: a session whose idle timeout passes
// during a long upload or download is not ended under it.
func TestTransfersKeepTheSessionAlive(t *testing.T) {
	testTransfersKeepTheSessionAlive(t, sharedServer(t))
}

func testTransfersKeepTheSessionAlive(t *testing.T, s *server) {
	// The idle timeout is longer than what the kernel's socket buffers
	// hold of a download (a few MiB, under 1 s of this slow reader): the
	// server's part of a transfer ends that long before the client's.
	id := s.newSession("python", map[string]any{"timeout_idle": "2s"})
	// An upload of about 3 s, one and a half idle timeouts.
	up, err := s.c.Upload(context.Background(), id, "slow.bin", &slowBody{n: 30, size: 1024, pause: 100 * time.Millisecond}, -1)
	if err != nil || up.Size != 30*1024 {
		t.Fatalf("slow upload: %+v %v", up, err)
	}
	s.exec(id, "open('big.bin', 'wb').write(b'y' * (48 << 20))")
	// A download read slowly for about 5 s.
	rc, err := s.c.Download(context.Background(), id, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	var got int
	buf := make([]byte, 1<<20)
	for {
		n, err := rc.Read(buf)
		got += n
		if err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // a slow reader
	}
	rc.Close()
	if got != 48<<20 {
		t.Fatalf("slow download: %d bytes", got)
	}
	if r := s.exec(id, "print('alive')"); strings.TrimSpace(r.Stdout) != "alive" {
		t.Fatalf("after the transfers: %+v", r)
	}
}

// An upload whose session is deleted while it runs answers 410: the file
// is nowhere.
func TestUploadIntoADeletedSession(t *testing.T) { testUploadIntoADeletedSession(t, sharedServer(t)) }

func testUploadIntoADeletedSession(t *testing.T, s *server) {
	id := s.newSession("python", nil)
	sent := make(chan int, 1)
	type answer struct {
		res *apitype.UploadResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.c.Upload(context.Background(), id, "f.bin", &slowBody{n: 40, size: 64 << 10, pause: 50 * time.Millisecond, sent: sent}, -1)
		done <- answer{res, err}
	}()
	// Once the server is reading the body, the session goes away.
	for i := range sent {
		if i >= 5 {
			break
		}
	}
	if err := s.c.DeleteSession(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	a := <-done
	wantError(t, "upload into a deleted session", a.err, 410, "session_ended")
}

// A client that gives up on a creation leaves no session behind: nobody
// could ever learn its id. (A guard: creation already stopped at most
// points when its client left; Create now also checks once the sandbox is
// ready, the last window.)
func TestAbandonedCreateLeavesNoSession(t *testing.T) {
	// No pool: every creation builds a jail, which takes long enough for
	// the client to leave first.
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": false}})
	defer s.stop()
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := s.c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		cancel()
		if err == nil {
			t.Log("a creation finished within 5ms; it proves nothing")
		}
	}
	// Creations finish in the background; each must end with no session.
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := s.c.Health(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if h.Sessions == 0 && len(sandboxCgroups(s.name)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned creations left %d sessions, sandboxes %v", h.Sessions, sandboxCgroups(s.name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sandboxCgroups lists the sandbox cgroups (s-*) under parent.
func sandboxCgroups(parent string) []string {
	dir := filepath.Join("/sys/fs/cgroup/memory", parent)
	if isCgroup2() {
		dir = filepath.Join("/sys/fs/cgroup", parent)
	}
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "s-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// SIGTERM while sessions are being created: shutdown waits for them, and
// nothing is left. (A guard: the next start's sweep used to hide a
// creation that outlived Close.)
func TestSIGTERMDuringCreations(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": false}})
	started := make(chan struct{}, 8)
	for i := 0; i < 8; i++ {
		go func() {
			started <- struct{}{}
			s.c.CreateSession(context.Background(), apitype.CreateSessionRequest{Language: []string{"python", "bash"}[i%2]})
		}()
	}
	for i := 0; i < 8; i++ {
		<-started
	}
	// Wait for the first sandbox to exist: creations are under way.
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxCgroups(s.name)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no creation started")
		}
		time.Sleep(time.Millisecond)
	}
	s.stop()
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind after SIGTERM during creations:\n%s", strings.Join(left, "\n"))
	}
}

// procStatus reads fields of /proc/<pid>/status.
func procStatus(pid int) map[string]string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// When the template dies, the runtimes it forked become the server's
// children (a child subreaper), not the host init's, and are reaped when
// they end: nothing waits on a slow host init.
func TestRuntimesOutliveTheirTemplate(t *testing.T) {
	s := startServer(t, map[string]any{"pool": map[string]any{"size": map[string]int{"python": 2, "bash": 0, "javascript": 0}}})
	defer s.stop()
	s.waitWarm()
	zpid := templatePid(t, s)
	// Sessions until two runtimes are the template's children (one built
	// while the template was starting would be the init's).
	var ids []string
	var pids []int
	for len(pids) < 2 && len(ids) < 8 {
		id := s.newSession("python", nil)
		ids = append(ids, id)
		info, err := s.c.Session(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sandboxPids(s.name + "/" + info.Sandbox) {
			if procStatus(p)["PPid"] == strconv.Itoa(zpid) {
				pids = append(pids, p)
			}
		}
	}
	if len(pids) < 2 {
		t.Fatalf("found %d runtimes of the template after %d sessions, want at least 2", len(pids), len(ids))
	}
	syscall.Kill(zpid, syscall.SIGKILL)
	server := strconv.Itoa(s.cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range pids {
		for procStatus(p)["PPid"] != server {
			if time.Now().After(deadline) {
				t.Fatalf("runtime %d: parent %s after its template died, want the server %s", p, procStatus(p)["PPid"], server)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, id := range ids {
		if r := s.exec(id, "print('still here')"); strings.TrimSpace(r.Stdout) != "still here" {
			t.Fatalf("a session after its template died: %+v", r)
		}
		if err := s.c.DeleteSession(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	// Ended, reaped: no zombie of the server remains.
	deadline = time.Now().Add(30 * time.Second)
	for _, p := range pids {
		for {
			st := procStatus(p)
			if len(st) == 0 || st["PPid"] != server {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runtime %d is left as %q, a child of the server", p, st["State"])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// sandboxPids are the host pids of processes in cgroups under parent (a
// server's cgroup parent, or parent/sandbox for one sandbox).
func sandboxPids(parent string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if bytes.Contains(cg, []byte("/"+parent+"/s-")) || bytes.Contains(cg, []byte("/"+parent+"\n")) {
			out = append(out, pid)
		}
	}
	return out
}

// One execution's rich output cannot raise the server's memory far: what
// is kept is bounded by server.max_rich_output, whatever max_output the
// session has, and the rest is counted as dropped.
func TestRichOutputIsBounded(t *testing.T) {
	s := startServer(t, map[string]any{"server": map[string]any{"max_rich_output": "16M"}})
	defer s.stop()
	id := s.newSession("python", map[string]any{"limits": map[string]any{"max_output": "64M", "memory": "2G"}})
	r := s.exec(id, `
blob = "x" * (4 << 20)
for i in range(64):
    display({"text/plain": blob}, raw=True)
print("done")`)
	if strings.TrimSpace(r.Stdout) != "done" {
		t.Fatalf("%+v", r.Error)
	}
	kept := 0
	for _, o := range r.Results {
		for _, v := range o.Data {
			kept += len(v)
		}
	}
	if kept > 16<<20 || r.ResultsDropped == 0 || len(r.Results)+r.ResultsDropped != 64 {
		t.Errorf("kept %d bytes in %d results, dropped %d; want at most 16M kept and the rest dropped", kept, len(r.Results), r.ResultsDropped)
	}
	hwm := procStatus(s.cmd.Process.Pid)["VmHWM"]
	kb, _ := strconv.Atoi(strings.TrimSuffix(hwm, " kB"))
	if kb > 400<<10 {
		t.Errorf("the server's memory peaked at %s for one execution's rich output", hwm)
	}
	t.Logf("server peak memory %s", hwm)
}

// No client names a file with a control character (C0, DEL, C1): not in
// the files API, a run's files and filename, nor a command's cwd. A file
// the code made with one is listed under its exact name (JSON escapes it),
// a one-shot run returns it with its content, and a command renames it.
func TestControlCharacterNames(t *testing.T) { testControlCharacterNames(t, sharedServer(t)) }

func testControlCharacterNames(t *testing.T, s *server) {
	ctx := context.Background()
	names := []string{"a\x1b[31mb", "tab\there", "new\nline", "del\x7f", "csi\u009b2J", "bell\a"}
	id := s.newSession("python", nil)
	for _, name := range names {
		escaped := url.PathEscape(name)
		for _, op := range []struct {
			method, path string
			body         any
		}{
			{"PUT", "/files/" + escaped, "x"},
			{"GET", "/files/" + escaped, nil},
			{"DELETE", "/files/" + escaped, nil},
			{"GET", "/files?path=" + url.QueryEscape(name), nil},
			{"POST", "/commands", map[string]any{"command": "true", "cwd": name}},
		} {
			code, body := s.raw(op.method, "/v1/sessions/"+id+op.path, op.body, nil)
			if code != 400 || !strings.Contains(string(body), "control character") {
				t.Errorf("%s %s: %d %s, want 400 naming the control character", op.method, op.path, code, truncate(string(body), 200))
			}
		}
		_, err := s.c.RunOnce(ctx, apitype.OneShotRequest{Code: "1", Files: []apitype.InputFile{{Path: name, Content: "x"}}}, nil)
		wantError(t, "/v1/execute files", err, 400, "invalid_argument")
		_, err = s.c.RunProgram(ctx, apitype.ProgramRequest{Code: "1", Files: []apitype.InputFile{{Path: "d/" + name, Content: "x"}}}, nil)
		wantError(t, "/v1/run files", err, 400, "invalid_argument")
		_, err = s.c.RunProgram(ctx, apitype.ProgramRequest{Code: "1", Filename: name + ".py"}, nil)
		wantError(t, "/v1/run filename", err, 400, "invalid_argument")
	}
	// The code made one: it is listed and reported as is, and a command
	// renames it.
	name := names[0]
	r := s.exec(id, "open('a\\x1b[31mb', 'w').write('odd')")
	if len(r.FilesChanged) != 1 || r.FilesChanged[0].Path != name {
		t.Fatalf("files_changed %+v", r.FilesChanged)
	}
	code, body := s.raw("GET", "/v1/sessions/"+id+"/files", nil, nil)
	if code != 200 || !strings.Contains(string(body), `"path":"a\u001b[31mb"`) {
		t.Fatalf("listing: %d %s", code, body)
	}
	if res, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: `mv -- "$(printf 'a\033[31mb')" renamed`}, nil); err != nil || exitOf(res) != 0 {
		t.Fatalf("rename: %+v %v", res, err)
	}
	if rc, err := s.c.Download(ctx, id, "renamed"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "odd" {
			t.Fatalf("renamed: %q", b)
		}
	}
	// A one-shot run returns such a file with its content.
	out, err := s.c.RunOnce(ctx, apitype.OneShotRequest{Code: "open('\\u009b2J', 'w').write('c1')"}, nil)
	if err != nil || len(out.Files) != 1 || out.Files[0].Path != "\u009b2J" || out.Files[0].ContentBase64 != "YzE=" {
		t.Fatalf("one-shot output file: %+v %v", out, err)
	}
}
