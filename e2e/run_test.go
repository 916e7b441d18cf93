package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runProgram posts to /v1/run and decodes the answer.
func (s *server) runProgram(body map[string]any) (int, execResult, apiError) {
	s.t.Helper()
	status, data := s.raw("POST", "/v1/run", body, nil)
	var r execResult
	var e apiError
	if status == 200 {
		if err := json.Unmarshal(data, &r); err != nil {
			s.t.Fatalf("decoding %s: %v", truncate(string(data), 300), err)
		}
	} else {
		json.Unmarshal(data, &e)
	}
	return status, r, e
}

func TestRunProgramAPI(t *testing.T) {
	s := sharedServer(t)
	status, r, e := s.runProgram(map[string]any{
		"code": `import sys, os
print(sys.argv, __name__, os.getcwd(), os.environ["GREETING"])
print("warm:", "numpy" in sys.modules, file=sys.stderr)
data = open("in/data.txt").read()
open("out.txt", "w").write(data.upper())
open("in/data.txt", "a").write("!")
sys.exit(4)
`,
		"filename": "tool.py",
		"args":     []string{"x", "y z"},
		"env":      map[string]string{"GREETING": "hello"},
		"files":    []map[string]string{{"path": "in/data.txt", "content": "abc"}, {"path": "unused.bin", "content_base64": "AAE="}},
		"limits":   map[string]string{"memory": "300M"},
	})
	if status != 200 {
		t.Fatalf("status %d: %+v", status, e)
	}
	if r.ExitCode != 4 || r.Killed || r.Error != nil ||
		r.Stdout != "['/workspace/tool.py', 'x', 'y z'] __main__ /workspace hello\n" || r.Stderr != "warm: True\n" {
		t.Fatalf("%+v", r)
	}
	// Created and modified files, with content; not the untouched input or
	// the program.
	got := map[string]string{}
	for _, f := range r.Files {
		b, _ := base64.StdEncoding.DecodeString(f.ContentBase64)
		got[f.Path] = string(b)
	}
	if len(got) != 2 || got["out.txt"] != "ABC" || got["in/data.txt"] != "abc!" {
		t.Fatalf("files %+v", r.Files)
	}

	// PYTHON* variables need a new interpreter, and get one.
	_, r, _ = s.runProgram(map[string]any{
		"code": "import sys\nprint(sys.flags.hash_randomization, 'numpy' in sys.modules)",
		"env":  map[string]string{"PYTHONHASHSEED": "0"},
	})
	if r.Stdout != "0 False\n" || r.ExitCode != 0 {
		t.Fatalf("fresh interpreter: %+v", r)
	}

	for _, c := range []struct{ lang, code, want string }{
		{"bash", `echo "$0 $1 $#"; echo "${GREETING:-unset} ${HOME}"; exit 7`, "/workspace/main.sh a 1\nhi /workspace\n"},
		{"javascript", `console.log(process.argv.slice(2).join(','), process.env.GREETING); process.exitCode = 7`, "a hi\n"},
	} {
		_, r, _ = s.runProgram(map[string]any{"language": c.lang, "code": c.code, "args": []string{"a"}, "env": map[string]string{"GREETING": "hi"}})
		if r.Stdout != c.want || r.ExitCode != 7 || r.Killed {
			t.Errorf("%s: %+v", c.lang, r)
		}
	}
}

func TestRunProgramLimitsAndCrashes(t *testing.T) {
	s := sharedServer(t)
	cases := []struct {
		name, code string
		limits     map[string]string
		reason     string
	}{
		{name: "timeout", code: "import time\ntime.sleep(30)", limits: map[string]string{"timeout": "1s"}, reason: "timeout"},
		{name: "cpu", code: "while True: pass", limits: map[string]string{"cpu_time": "1s", "timeout": "20s"}, reason: "cpu_time"},
		{name: "memory", code: "b = []\nwhile True: b.append(bytearray(16 << 20))", limits: map[string]string{"memory": "64M"}, reason: "memory"},
		{name: "output", code: "while True: print('x' * 1000)", limits: map[string]string{"max_output": "10K"}, reason: "output"},
		{name: "pids", code: "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", limits: map[string]string{"pids": "16", "timeout": "20s"}, reason: "pids"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, r, e := s.runProgram(map[string]any{"code": c.code, "limits": c.limits})
			if status != 200 || !r.Killed || r.KillReason != c.reason || r.ExitCode != 137 || r.Error != nil {
				t.Fatalf("status %d %+v %+v", status, r, e)
			}
		})
	}
	// A program that ends its own interpreter: status from the process.
	for code, want := range map[string]int{
		"import os\nos._exit(9)":                           9,
		"import os, signal\nos.kill(os.getpid(), 11)":      139,
		"import os\nos.fork() or os._exit(0)\nos._exit(2)": 2,
	} {
		_, r, _ := s.runProgram(map[string]any{"code": code})
		if r.ExitCode != want || r.Killed {
			t.Errorf("%q: %+v, want exit code %d", code, r, want)
		}
	}
	// Leftovers of one run are invisible to the next.
	s.runProgram(map[string]any{"code": "open('/tmp/left', 'w').write('x'); open('left', 'w').write('x')"})
	_, r, _ := s.runProgram(map[string]any{"code": "import os\nprint(os.path.exists('/tmp/left'), os.path.exists('left'))"})
	if r.Stdout != "False False\n" {
		t.Fatalf("a later run sees an earlier one: %q", r.Stdout)
	}
}

func TestRunProgramStreamsBytes(t *testing.T) {
	s := sharedServer(t)
	body, _ := json.Marshal(map[string]any{
		"code": "import sys\nsys.stdout.buffer.write(b'text\\n'); sys.stdout.buffer.write(b'\\xff\\x00bin'); print('err', file=sys.stderr)",
	})
	req, _ := http.NewRequest("POST", s.URL+"/v1/run", bytes.NewReader(body))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stdout, stderr []byte
	var end *execResult
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct {
			Type       string      `json:"type"`
			Text       string      `json:"text"`
			DataBase64 string      `json:"data_base64"`
			Result     *execResult `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		chunk := []byte(ev.Text)
		if ev.DataBase64 != "" {
			chunk, _ = base64.StdEncoding.DecodeString(ev.DataBase64)
		}
		switch ev.Type {
		case "stdout":
			stdout = append(stdout, chunk...)
		case "stderr":
			stderr = append(stderr, chunk...)
		case "end":
			end = ev.Result
		}
	}
	if string(stdout) != "text\n\xff\x00bin" || string(stderr) != "err\n" || end == nil || end.ExitCode != 0 {
		t.Fatalf("stdout %q stderr %q end %+v", stdout, stderr, end)
	}
}

func TestRunProgramBadRequests(t *testing.T) {
	s := sharedServer(t)
	for _, c := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"code": "1", "filename": "../x.py"}, "filename"},
		{map[string]any{"code": "1", "filename": "main.py", "files": []map[string]string{{"path": "main.py", "content": "x"}}}, "program's own"},
		{map[string]any{"code": "1", "args": []string{"a\x00b"}}, "NUL"},
		{map[string]any{"code": "1", "language": "cobol"}, "unknown language"},
		{map[string]any{"code": "1", "limits": map[string]string{"memory": "999T"}}, "maximum"},
		{map[string]any{"code": "1", "argv": []string{"x"}}, "unknown field"},
	} {
		status, _, e := s.runProgram(c.body)
		if status != 400 || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%v: %d %+v, want 400 and %q", c.body, status, e, c.msg)
		}
	}
}

// The CLI runs cold when no server answers on the socket, whether there is
// no socket or a stale one.
func TestRunFallsBackWithoutServer(t *testing.T) {
	dir := t.TempDir()
	// A socket whose server is gone, as a SIGKILL leaves it.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	prog := writeFile(t, "p.py", "print('cold')")
	for _, socket := range []string{filepath.Join(dir, "none.sock"), stale} {
		cfg := writeFile(t, "c.json", `{"server": {"socket": "`+socket+`"}}`)
		out, errOut, code := runCLI(t, "", "run", "--config", cfg, prog)
		if out != "cold\n" || code != 0 {
			t.Errorf("socket %s: %q %q %d", socket, out, errOut, code)
		}
	}
}

// Inputs too large for one request to the server (server.max_body_bytes,
// 8M by default) make airlock run build the jail itself.
func TestRunLargeInputFallsBackToCold(t *testing.T) {
	s := sharedServer(t)
	big := writeFile(t, "big.bin", strings.Repeat("x", 9<<20))
	prog := writeFile(t, "size.py", "import os\nprint(os.path.getsize('big.bin'))")
	out, errOut, code := runCLI(t, "", "run", "--config", s.cfgPath, "--file", big, prog)
	if out != "9437184\n" || code != 0 {
		t.Fatalf("%q %q %d", out, errOut, code)
	}
}

// The server's unix socket is its user's alone, and serves the API without
// the token the TCP listener requires.
func TestUnixSocket(t *testing.T) {
	s := startServer(t, map[string]any{
		"server": map[string]any{"token": "s3cret"},
		"pool":   map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	sock := filepath.Join("/run", s.name, "airlock.sock")
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v", sock, st.Mode(), err)
	}
	if status, _ := s.raw("GET", "/v1/sessions", nil, nil); status != 401 {
		t.Fatalf("TCP without the token: %d", status)
	}
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := uc.Get("http://airlock/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("unix socket without the token: %d", resp.StatusCode)
	}
	// airlock run finds the server there, token or not.
	prog := writeFile(t, "p.py", "print('via socket')")
	before := s.poolUses()
	out, errOut, code := runCLI(t, "", "run", "--config", s.cfgPath, prog)
	if out != "via socket\n" || code != 0 || s.poolUses() == before {
		t.Fatalf("%q %q %d", out, errOut, code)
	}
	// A server that stops removes its socket.
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.done; err != nil {
		t.Fatalf("server exit: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left after the server stopped: %v", err)
	}
}
