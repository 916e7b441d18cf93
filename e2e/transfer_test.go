package e2e

// File transfers a client paces: stalled and slow uploads and downloads,
// the caps on transfers in progress, and whose memory an upload is
// charged to.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// transferServer is a server with low transfer caps and a short stall
// timeout, and only a bash pool.
func transferServer(t *testing.T, total, perSession int) *server {
	return startServer(t, map[string]any{
		"server": map[string]any{
			"max_concurrent_transfers": total,
			"max_session_transfers":    perSession,
			"transfer_stall_timeout":   "2s",
		},
		"pool": map[string]any{"size": map[string]int{"bash": 2}, "zygote": false},
	})
}

// serverThreads is the number of threads of the server process.
func serverThreads(t *testing.T, s *server) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	t.Fatal("no Threads")
	return 0
}

// smallBuffers makes a connection's receive buffer small and fixed: the
// kernel would otherwise let a whole test file wait in it (tcp_rmem
// autotunes up to 32M here), and the server's writes would never block.
func smallBuffers(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
}

// stalledUpload sends the headers of an upload of a megabyte and two
// bytes of its body, and no more.
func stalledUpload(t *testing.T, s *server, id, name string) net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(s.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// A loopback Host: a server without authentication refuses others.
	fmt.Fprintf(c, "PUT /v1/sessions/%s/files/%s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000\r\n\r\nab", id, name, addr)
	return c
}

// answer reads the status of the response on c, or returns 0 when the
// connection ends without one. It waits at most limit.
func answer(c net.Conn, limit time.Duration) (int, string) {
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *server) upload(id, name string, body []byte) (int, string) {
	s.t.Helper()
	code, b := s.raw("PUT", "/v1/sessions/"+id+"/files/"+name, body, nil)
	return code, string(b)
}

// A few hundred uploads that send headers and two bytes: beyond the caps
// they are refused at once; those within hold no thread, end after the
// stall timeout and leave nothing behind; meanwhile /healthz, other
// sessions and the stalled session itself answer.
func TestStalledUploadsDoNotStopTheServer(t *testing.T) {
	s := transferServer(t, 8, 4)
	a, b, c := s.newSession("bash", nil), s.newSession("bash", nil), s.newSession("bash", nil)
	threads := serverThreads(t, s)

	const n = 300
	start := time.Now() // before any upload's stall clock starts
	conns := make([]net.Conn, n)
	for i := range conns {
		id := a
		if i%2 == 1 {
			id = b
		}
		conns[i] = stalledUpload(t, s, id, fmt.Sprintf("stalled%d", i))
		defer conns[i].Close()
	}
	// Read every answer concurrently: the refusals come at once, the
	// accepted ones after the stall timeout.
	type res struct {
		i, code int
		body    string
		at      time.Time
	}
	answers := make(chan res, n)
	for i, conn := range conns {
		go func() {
			code, body := answer(conn, 2*time.Minute)
			answers <- res{i, code, body, time.Now()}
		}()
	}
	var refused int
	var firstRefusal string
	for wait := time.After(30 * time.Second); refused < n-8; {
		select {
		case r := <-answers:
			if r.code != 429 {
				t.Fatalf("upload %d answered %d %q before the stall timeout, want 429 for all but 8", r.i, r.code, r.body)
			}
			if firstRefusal == "" {
				firstRefusal = r.body
			}
			refused++
		case <-wait:
			t.Errorf("%d of %d uploads refused after 30s, want %d", refused, n, n-8)
			refused = n
		}
	}
	if !strings.Contains(firstRefusal, "max_concurrent_transfers") && !strings.Contains(firstRefusal, "max_session_transfers") {
		t.Errorf("refusal %q does not name the cap", firstRefusal)
	}

	// Eight uploads are stalled now. The server answers everyone else.
	if _, err := s.c.Health(context.Background()); err != nil {
		t.Errorf("/healthz: %v", err)
	}
	if r := s.exec(c, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("another session: %+v", r)
	}
	if r := s.exec(a, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("the stalled session: %+v", r)
	}
	if code, _ := s.raw("GET", "/v1/sessions/"+a+"/files", nil, nil); code != 200 {
		t.Errorf("listing the stalled session's files: %d", code)
	}
	if code, body := s.upload(c, "f", []byte("x")); code != 429 || !strings.Contains(body, "max_concurrent_transfers") {
		t.Errorf("an upload beyond the server's cap: %d %s, want 429 naming the cap", code, body)
	}
	// No thread per stalled upload (the old code held one locked OS
	// thread each, and the Go runtime aborts at 10000).
	if got := serverThreads(t, s); got > threads+40 {
		t.Errorf("the server has %d threads with %d uploads stalled, %d before", got, n, threads)
	}
	if t.Failed() {
		return // the rest would wait for uploads that never end
	}

	// The stalled ones end at their stall timeout, with a clear answer.
	for range 8 {
		select {
		case r := <-answers:
			if r.code != 400 || !strings.Contains(r.body, "stalled") {
				t.Errorf("stalled upload %d: %d %q, want 400 saying it stalled", r.i, r.code, r.body)
			}
			if d := r.at.Sub(start); d < 2*time.Second {
				t.Errorf("stalled upload %d ended after %v, before the stall timeout", r.i, d)
			}
		case <-time.After(time.Minute):
			t.Fatal("a stalled upload still runs a minute later")
		}
	}
	// The caps are free again, and nothing was left in the workspaces.
	if code, body := s.upload(c, "f", []byte("x")); code != 201 {
		t.Errorf("upload after the stalled ones ended: %d %s", code, body)
	}
	for _, id := range []string{a, b} {
		if l, err := s.c.ListFiles(context.Background(), id, "", true); err != nil || len(l.Entries) != 0 {
			t.Errorf("workspace after stalled uploads: %v %+v", err, l)
		}
	}
}

// slowReader yields chunk bytes every pause, n times.
type slowReader struct {
	chunk []byte
	n     int
	pause time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause) // the client's pace, not synchronisation
	r.n--
	return copy(p, r.chunk), nil
}

// An upload and a download that take longer than the stall timeout but
// keep moving succeed.
func TestSlowTransfersSucceed(t *testing.T) {
	s := transferServer(t, 8, 4)
	id := s.newSession("bash", nil)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4)
	body := &slowReader{chunk: chunk, n: 10, pause: 500 * time.Millisecond}
	req, _ := http.NewRequest("PUT", s.URL+"/v1/sessions/"+id+"/files/slow", body)
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("slow upload (5s, stall timeout 2s): %d %s", resp.StatusCode, b)
	}
	if code, got := s.raw("GET", "/v1/sessions/"+id+"/files/slow", nil, nil); code != 200 || !bytes.Equal(got, bytes.Repeat(chunk, 10)) {
		t.Errorf("slow upload stored %d bytes (status %d), want %d", len(got), code, 10*len(chunk))
	}

	// A download the client reads slowly: 32 MiB, far more than the
	// socket buffers, a MiB at a time.
	big := bytes.Repeat([]byte("z"), 32<<20)
	if code, body := s.upload(id, "big", big); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	slow := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			smallBuffers(t, c)
		}
		return c, err
	}}}
	resp, err = slow.Get(s.URL + "/v1/sessions/" + id + "/files/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got int64
	buf := make([]byte, 1<<20)
	begin := time.Now()
	for {
		n, err := io.ReadFull(resp.Body, buf)
		got += int64(n)
		if err != nil {
			break
		}
		time.Sleep(150 * time.Millisecond) // the client's pace
	}
	if got != int64(len(big)) {
		t.Errorf("slow download got %d of %d bytes in %v", got, len(big), time.Since(begin))
	}
}

// A download whose client reads nothing ends after the stall timeout and
// frees its place under the caps; the caps per session and per server
// answer 429 and recover as soon as transfers end.
func TestTransferCaps(t *testing.T) {
	s := transferServer(t, 3, 2)
	a, b, c := s.newSession("bash", nil), s.newSession("bash", nil), s.newSession("bash", nil)
	inProgress := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			h, err := s.c.Health(context.Background())
			if err == nil && h.Transfers == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/healthz says %+v (%v) a minute later, want %d transfers in progress", h, err, want)
			}
		}
	}
	// A download nobody reads: 32 MiB is far more than the buffers.
	if code, body := s.upload(a, "big", bytes.Repeat([]byte("z"), 32<<20)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	dl, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	smallBuffers(t, dl)
	fmt.Fprintf(dl, "GET /v1/sessions/%s/files/big HTTP/1.1\r\nHost: %s\r\n\r\n", a, strings.TrimPrefix(s.URL, "http://"))
	inProgress(1)
	up := stalledUpload(t, s, a, "stalled")
	defer up.Close()
	inProgress(2)

	if code, body := s.upload(a, "third", []byte("x")); code != 429 || !strings.Contains(body, "max_session_transfers") {
		t.Errorf("a third transfer of one session: %d %s, want 429 naming the cap", code, body)
	}
	// Another session is not held by a's cap; the server's cap is 3.
	if code, body := s.upload(b, "f", []byte("x")); code != 201 {
		t.Errorf("another session's upload: %d %s", code, body)
	}
	up2 := stalledUpload(t, s, b, "stalled")
	defer up2.Close()
	inProgress(3)
	if code, body := s.upload(c, "f", []byte("x")); code != 429 || !strings.Contains(body, "max_concurrent_transfers") {
		t.Errorf("a fourth transfer on the server: %d %s, want 429 naming the cap", code, body)
	}

	// A client that gives up frees its place at once.
	up.Close()
	up2.Close()
	inProgress(1)
	if code, body := s.upload(c, "f", []byte("x")); code != 201 {
		t.Errorf("upload once places are free: %d %s", code, body)
	}
	// The unread download ends at its stall timeout: the connection
	// closes before all 32 MiB are through.
	inProgress(0)
	dl.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(dl), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n >= 32<<20 || isTimeout(err) {
		t.Errorf("unread download: %d bytes, %v; want the server to cut it off", n, err)
	}
	if code, body := s.upload(a, "third", []byte("x")); code != 201 {
		t.Errorf("upload after the download ended: %d %s", code, body)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// sandboxMemory is the memory charged to a session's sandbox cgroup.
func sandboxMemory(t *testing.T, s *server, id string) int64 {
	t.Helper()
	info, err := s.c.Session(context.Background(), id)
	if err != nil || info.Sandbox == "" {
		t.Fatalf("session %s: %v %+v", id, err, info)
	}
	file := filepath.Join("/sys/fs/cgroup/memory", s.name, info.Sandbox, "memory.usage_in_bytes")
	if isCgroup2() {
		file = filepath.Join("/sys/fs/cgroup", s.name, info.Sandbox, "memory.current")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An uploaded file is charged to the session's memory, like a file its
// code writes: it shows in the sandbox's cgroup, not in the server, and
// one that does not fit is refused while the session lives on. Both ways
// a runtime starts (spawned by the sandbox's init; forked by the Python
// template) have the same init, which writes the file.
func TestUploadChargedToSandbox(t *testing.T) {
	t.Run("bash", func(t *testing.T) {
		checkUploadCharged(t, transferServer(t, 8, 4), "bash", "wc -c < charged; ls -A | wc -l")
	})
	t.Run("python-template", func(t *testing.T) {
		checkUploadCharged(t, sharedServer(t), "python", "import os; print(os.path.getsize('charged')); print(len(os.listdir('.')))")
	})
}

func checkUploadCharged(t *testing.T, s *server, lang, check string) {
	id := s.newSession(lang, map[string]any{"limits": map[string]any{"memory": "64M", "disk": "512M"}})
	defer s.c.DeleteSession(context.Background(), id)
	rss := serverRSS(t, s)
	before := sandboxMemory(t, s, id)
	const size = 16 << 20
	if code, body := s.upload(id, "charged", bytes.Repeat([]byte("c"), size)); code != 201 {
		t.Fatalf("upload of 16M into 64M: %d %s", code, body)
	}
	if after := sandboxMemory(t, s, id); after < before+size-(1<<20) {
		t.Errorf("the sandbox's memory went from %d to %d with a %d-byte file uploaded: not charged to it", before, after, size)
	}

	// 250M into 64M of memory (and 512M of disk): refused, not an OOM.
	code, body := s.upload(id, "huge", bytes.Repeat([]byte("h"), 250<<20))
	if code != 413 || !strings.Contains(body, "memory") {
		t.Errorf("upload of 250M into 64M: %d %s, want 413 naming the memory", code, body)
	}
	if r := s.exec(id, check); r.Stdout != fmt.Sprintf("%d\n1\n", size) || r.SessionEnded {
		t.Errorf("after the refused upload: %+v, want the session alive with only the first file", r)
	}
	if got := serverRSS(t, s); got > rss+64<<20 {
		t.Errorf("the server's RSS went from %d to %d", rss, got)
	}
	if info, err := s.c.Session(context.Background(), id); err != nil || info.State == "ended" {
		t.Errorf("the session ended: %v %+v", err, info)
	}
}
