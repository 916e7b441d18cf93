package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// runProgram runs a program through the API; an error response fails the
// test.
func (s *server) runProgram(req apitype.ProgramRequest) *apitype.OneShotResult {
	s.t.Helper()
	r, err := s.c.RunProgram(context.Background(), req, nil)
	if err != nil {
		s.t.Fatalf("POST /v1/run: %v", err)
	}
	return r
}

func TestRunProgramAPI(t *testing.T) { testRunProgramAPI(t, sharedServer(t)) }

func testRunProgramAPI(t *testing.T, s *server) {
	r := s.runProgram(apitype.ProgramRequest{
		Code: `import sys, os
print(sys.argv, __name__, os.getcwd(), os.environ["GREETING"])
print("warm:", "numpy" in sys.modules, file=sys.stderr)
data = open("in/data.txt").read()
open("out.txt", "w").write(data.upper())
open("in/data.txt", "a").write("!")
sys.exit(4)
`,
		Filename: "tool.py",
		Args:     []string{"x", "y z"},
		Env:      map[string]string{"GREETING": "hello"},
		Files:    []apitype.InputFile{{Path: "in/data.txt", Content: "abc"}, {Path: "unused.bin", ContentBase64: "AAE="}},
		Limits:   limits(t, map[string]any{"memory": "300M"}),
	})
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
	r = s.runProgram(apitype.ProgramRequest{
		Code: "import sys\nprint(sys.flags.hash_randomization, 'numpy' in sys.modules)",
		Env:  map[string]string{"PYTHONHASHSEED": "0"},
	})
	if r.Stdout != "0 False\n" || r.ExitCode != 0 {
		t.Fatalf("fresh interpreter: %+v", r)
	}

	for _, c := range []struct{ lang, code, want string }{
		{"bash", `echo "$0 $1 $#"; echo "${GREETING:-unset} ${HOME}"; exit 7`, "/workspace/main.sh a 1\nhi /workspace\n"},
		{"javascript", `console.log(process.argv.slice(2).join(','), process.env.GREETING); process.exitCode = 7`, "a hi\n"},
	} {
		r = s.runProgram(apitype.ProgramRequest{Language: c.lang, Code: c.code, Args: []string{"a"}, Env: map[string]string{"GREETING": "hi"}})
		if r.Stdout != c.want || r.ExitCode != 7 || r.Killed {
			t.Errorf("%s: %+v", c.lang, r)
		}
	}
}

func TestRunProgramLimitsAndCrashes(t *testing.T) { testRunProgramLimitsAndCrashes(t, sharedServer(t)) }

func testRunProgramLimitsAndCrashes(t *testing.T, s *server) {
	cases := []struct {
		name, code string
		limits     map[string]any
		reason     apitype.KillReason
	}{
		{name: "timeout", code: "import time\ntime.sleep(30)", limits: map[string]any{"timeout": "1s"}, reason: "timeout"},
		{name: "cpu", code: "while True: pass", limits: map[string]any{"cpu_time": "1s", "timeout": "20s"}, reason: "cpu_time"},
		{name: "memory", code: "b = []\nwhile True: b.append(bytearray(16 << 20))", limits: map[string]any{"memory": "64M"}, reason: "memory"},
		{name: "pids", code: "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", limits: map[string]any{"pids": "16", "timeout": "20s"}, reason: "pids"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.runProgram(apitype.ProgramRequest{Code: c.code, Limits: limits(t, c.limits)})
			if c.reason == "pids" && r.KillReason == "memory" && s.gvisor() {
				c.reason = "memory" // see PoolSurvivesAbuse's fork bomb
			}
			// The error names the limit (item 24 of the review).
			want := map[apitype.KillReason]string{"timeout": "TimeoutError", "cpu_time": "CPUTimeError", "memory": "MemoryError", "pids": "ProcessLimitError"}[c.reason]
			if !r.Killed || r.KillReason != c.reason || r.ExitCode != 137 || r.Error == nil || r.Error.Name != want || r.SessionEnded || r.EndCode != "" {
				t.Fatalf("%+v %+v", r.Result, r.Error)
			}
		})
	}
	// Output past max_output is dropped and counted; the program runs on
	// to its end.
	r := s.runProgram(apitype.ProgramRequest{Code: "for _ in range(1000): print('x' * 999)\nprint('end', file=__import__('sys').stderr)", Limits: limits(t, map[string]any{"max_output": "10K"})})
	if r.Killed || r.ExitCode != 0 || !r.StdoutTruncated || len(r.Stdout) != 10<<10 || r.StdoutDroppedBytes != 1000*1000-10<<10 || r.Stderr != "end\n" {
		t.Fatalf("output cap: killed %v exit %d truncated %v kept %d dropped %d stderr %q", r.Killed, r.ExitCode, r.StdoutTruncated, len(r.Stdout), r.StdoutDroppedBytes, r.Stderr)
	}
	// A program that ends its own interpreter: status from the process.
	for code, want := range map[string]int{
		"import os\nos._exit(9)":                           9,
		"import os, signal\nos.kill(os.getpid(), 11)":      139,
		"import os\nos.fork() or os._exit(0)\nos._exit(2)": 2,
	} {
		r := s.runProgram(apitype.ProgramRequest{Code: code})
		if r.ExitCode != want || r.Killed {
			t.Errorf("%q: exit code %d killed %v (%s) stdout %q stderr %q error %+v, want exit code %d", code, r.ExitCode, r.Killed, r.KillReason, r.Stdout, r.Stderr, r.Error, want)
		}
	}
	// Leftovers of one run are invisible to the next.
	s.runProgram(apitype.ProgramRequest{Code: "open('/tmp/left', 'w').write('x'); open('left', 'w').write('x')"})
	r = s.runProgram(apitype.ProgramRequest{Code: "import os\nprint(os.path.exists('/tmp/left'), os.path.exists('left'))"})
	if r.Stdout != "False False\n" {
		t.Fatalf("a later run sees an earlier one: %q", r.Stdout)
	}
}

func TestRunProgramStreamsBytes(t *testing.T) { testRunProgramStreamsBytes(t, sharedServer(t)) }

func testRunProgramStreamsBytes(t *testing.T, s *server) {
	var stdout, stderr []byte
	var end *apitype.Result
	res, err := s.c.RunProgram(context.Background(), apitype.ProgramRequest{
		Code: "import sys\nsys.stdout.buffer.write(b'text\\n'); sys.stdout.buffer.write(b'\\xff\\x00bin'); print('err', file=sys.stderr)",
	}, func(ev apitype.Event) {
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
	})
	if err != nil || string(stdout) != "text\n\xff\x00bin" || string(stderr) != "err\n" || end == nil || end.ExitCode != 0 || res.Result != end {
		t.Fatalf("%v: stdout %q stderr %q end %+v", err, stdout, stderr, end)
	}
}

func TestRunProgramBadRequests(t *testing.T) {
	s := sharedServer(t)
	for _, c := range []struct {
		req apitype.ProgramRequest
		msg string
	}{
		{apitype.ProgramRequest{Code: "1", Filename: "../x.py"}, "filename"},
		{apitype.ProgramRequest{Code: "1", Filename: "main.py", Files: []apitype.InputFile{{Path: "main.py", Content: "x"}}}, "program's own"},
		{apitype.ProgramRequest{Code: "1", Args: []string{"a\x00b"}}, "NUL"},
		{apitype.ProgramRequest{Code: "1", Language: "cobol"}, "unknown language"},
		{apitype.ProgramRequest{Code: "1", Limits: limits(t, map[string]any{"memory": "999T"})}, "maximum"},
	} {
		_, err := s.c.RunProgram(context.Background(), c.req, nil)
		if e := apiError(err); e == nil || e.Status != 400 || e.Code != "invalid_argument" || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%+v: %v, want 400 and %q", c.req, err, c.msg)
		}
	}
	// A request the client would never send.
	status, body := s.raw("POST", "/v1/run", map[string]any{"code": "1", "argv": []string{"x"}}, nil)
	var e apitype.ErrorBody
	if json.Unmarshal(body, &e); status != 400 || !strings.Contains(e.Error.Message, "unknown field") {
		t.Errorf("an unknown field: %d %s", status, body)
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
		"server": map[string]any{"token": "s3cret", "auth": "keys"},
		"pool":   map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}},
	})
	sock := filepath.Join("/run", s.name, "airlock.sock")
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v", sock, st.Mode(), err)
	}
	ctx := context.Background()
	_, err = s.c.Sessions(ctx)
	wantError(t, "TCP without the token", err, 401, "unauthorized")
	if _, err := client.New(s.URL, client.WithToken("s3cret")).Sessions(ctx); err != nil {
		t.Fatalf("TCP with the token: %v", err)
	}
	if _, err := client.Unix(sock).Sessions(ctx); err != nil {
		t.Fatalf("unix socket without the token: %v", err)
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
