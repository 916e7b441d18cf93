package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/exeseal"
)

// runCLI runs the airlock binary with args and stdin.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(airlockBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// runFunc runs `airlock run ...` (args start with "run") in one mode.
type runFunc func(stdin string, args ...string) (stdout, stderr string, code int)

// runModes runs f twice: with `airlock run` building its own jail
// (--cold), and with it sending the program to a running server's socket.
// Both must behave the same.
func runModes(t *testing.T, f func(t *testing.T, run runFunc)) {
	t.Run("cold", func(t *testing.T) {
		f(t, func(stdin string, args ...string) (string, string, int) {
			out, errOut, code := runCLI(t, stdin, withFlags(args, "--cold")...)
			// The default configuration's cgroup parent goes with the
			// run, unless a server of that configuration uses it.
			if _, err := os.Stat("/run/airlock/airlock.sock"); errors.Is(err, os.ErrNotExist) {
				if left := checkNothingLeft("airlock"); len(left) > 0 {
					t.Errorf("airlock run --cold %v left:\n%s", args, strings.Join(left, "\n"))
				}
			}
			return out, errOut, code
		})
	})
	t.Run("server", func(t *testing.T) {
		s := sharedServer(t)
		f(t, func(stdin string, args ...string) (string, string, int) {
			before := s.poolUses()
			out, errOut, code := runCLI(t, stdin, withFlags(args, "--config", s.cfgPath)...)
			// Mistakes the CLI catches itself never reach the server.
			if code != 64 && code != 66 && s.poolUses() == before {
				t.Errorf("airlock run %v did not go through the server", args)
			}
			return out, errOut, code
		})
	})
}

// withFlags puts flags right after the subcommand.
func withFlags(args []string, flags ...string) []string {
	if len(args) == 0 {
		return args
	}
	return append(append([]string{args[0]}, flags...), args[1:]...)
}

// poolUses counts the sandboxes the server's pools have handed out.
func (s *server) poolUses() int {
	h, err := s.c.Health(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for k, raw := range h.Pool {
		if k == apitype.TemplateKey {
			continue
		}
		var q apitype.PoolStats
		json.Unmarshal(raw, &q)
		n += int(q.Hits + q.Misses)
	}
	return n
}

// runJSON is what airlock run --json prints.
type runJSON = apitype.RunOutput

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunStreamsAndPassesStatus(t *testing.T) { runModes(t, testRunStreamsAndPassesStatus) }

func testRunStreamsAndPassesStatus(t *testing.T, runCLI runFunc) {
	prog := writeFile(t, "hello.py", "import sys\nprint('out', sys.argv[1:])\nprint('err', file=sys.stderr)\nsys.exit(3)\n")
	out, errOut, code := runCLI("", "run", prog, "a", "b c")
	if out != "out ['a', 'b c']\n" || errOut != "err\n" || code != 3 {
		t.Fatalf("stdout %q stderr %q code %d", out, errOut, code)
	}
}

func TestRunJSON(t *testing.T) { runModes(t, testRunJSON) }

func testRunJSON(t *testing.T, runCLI runFunc) {
	prog := writeFile(t, "fit.py", `import numpy as np, pandas as pd, matplotlib.pyplot as plt
from sklearn.linear_model import LinearRegression
assert open("data/in.csv").read() == "a,b\n1,2\n"
x = np.arange(20.0)
df = pd.DataFrame({"x": x, "y": 2 * x + 1})
m = LinearRegression().fit(df[["x"]], df["y"])
plt.plot(df.x, m.predict(df[["x"]]))
plt.savefig("fit.png")
open("notes.txt", "w").write("slope %.1f" % m.coef_[0])
print(round(m.coef_[0], 3))
import sys; sys.stdout.buffer.write(b"\xff\xfe\n")
`)
	data := writeFile(t, "in.csv", "a,b\n1,2\n")
	out, errOut, code := runCLI("", "run", "--json", "--file", data+":data/in.csv", prog)
	if code != 0 {
		t.Fatalf("code %d stderr %s", code, errOut)
	}
	var r runJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "2.0\n") || !strings.Contains(r.Stdout, "\uFFFD") || r.Killed || r.KillReason != "" {
		t.Fatalf("%+v", r)
	}
	if r.DurationMs <= 0 || r.CPUMs <= 0 || r.PeakMemoryBytes <= 0 {
		t.Fatalf("missing measurements: %+v", r)
	}
	files := map[string]int64{}
	for _, f := range r.Files {
		files[f.Path] = f.Size
	}
	// What the program wrote, not its inputs or itself.
	if len(files) != 2 || files["fit.png"] < 1000 || files["notes.txt"] != 9 {
		t.Fatalf("files %+v", r.Files)
	}
}

func TestRunOut(t *testing.T) { runModes(t, testRunOut) }

// --out copies what the program wrote into a host directory, nested
// directories included, never through a symlink in it: a symlink the
// operator left there is replaced by the file, not followed, and a file
// beneath a symlinked directory is not copied (said on stderr, exit 73);
// nothing outside the directory changes.
func testRunOut(t *testing.T, runCLI runFunc) {
	prog := writeFile(t, "w.py", `import os
os.makedirs("deep/er", exist_ok=True)
open("deep/er/a.txt", "w").write("nested")
open("top.bin", "wb").write(bytes(range(256)) * 1000)
open("victim", "w").write("from the sandbox")
os.makedirs("link", exist_ok=True)
open("link/x", "w").write("x")
os.symlink("/etc/passwd", "sym")
print("done")
`)
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	os.WriteFile(target, []byte("host file"), 0o644)
	dir := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(dir, 0o755)
	os.Symlink(target, filepath.Join(dir, "victim"))
	os.Symlink(outside, filepath.Join(dir, "link"))
	stdout, stderr, code := runCLI("", "run", "--out", dir, prog)
	if stdout != "done\n" || code != 73 || !strings.Contains(stderr, "--out: not copied: link/x") || strings.Count(stderr, "not copied") != 1 {
		t.Fatalf("stdout %q, exit %d (want 73), stderr %q", stdout, code, stderr)
	}
	for name, want := range map[string]string{"deep/er/a.txt": "nested", "victim": "from the sandbox"} {
		p := filepath.Join(dir, name)
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: %v %v, want a regular file", name, st, err)
		}
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "top.bin")); len(b) != 256000 || b[255] != 255 {
		t.Errorf("top.bin: %d bytes", len(b))
	}
	if b, _ := os.ReadFile(target); string(b) != "host file" {
		t.Errorf("the symlink's target outside --out was written: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("something was written beneath the symlinked directory: %v", ents)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sym")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a symlink the program made was copied out: %v", err)
	}
	// The same run into a fresh directory copies everything and keeps the
	// program's status; --json lists the files.
	fresh := filepath.Join(t.TempDir(), "new", "dir")
	stdout, stderr, code = runCLI("", "run", "--json", "--out", fresh, prog)
	var r runJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 || len(r.Files) != 4 {
		t.Fatalf("exit %d, %+v, %v; stderr %s", code, r, err, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, "link", "x")); string(b) != "x" {
		t.Errorf("link/x in a fresh directory: %q", b)
	}
}

// An isolation the server does not allow is refused like a jail the host
// cannot build: exit 69, as the exit statuses' table says (it was 70), and
// nothing runs.
func TestRunRefusedIsolationExits69(t *testing.T) {
	s := sharedServer(t)
	prog := writeFile(t, "p.py", "print('ran')")
	out, errOut, code := runCLI(t, "", "run", "--config", s.cfgPath, "--isolation", "gvisor", prog)
	if code != 69 || out != "" || !strings.Contains(errOut, "not allowed by this server") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 69 and the server's refusal", code, out, errOut)
	}
}

func TestRunKillsAndFlags(t *testing.T) { runModes(t, testRunKillsAndFlags) }

func testRunKillsAndFlags(t *testing.T, runCLI runFunc) {
	cases := []struct {
		name, code string
		args       []string
		reason     apitype.KillReason
	}{
		{"timeout", "import time\ntime.sleep(30)", []string{"--timeout", "1s"}, "timeout"},
		{"cpu", "while True: pass", []string{"--cpu-time", "1s", "--timeout", "20s"}, "cpu_time"},
		{"memory", "b = []\nwhile True: b.append(bytearray(16 << 20))", []string{"--memory", "64M"}, "memory"},
		{"pids", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", []string{"--pids", "16", "--timeout", "20s"}, "pids"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prog := writeFile(t, "p.py", c.code)
			out, errOut, code := runCLI("", append(append([]string{"run", "--json"}, c.args...), prog)...)
			var r runJSON
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s %s", err, out, errOut)
			}
			if code != 137 || !r.Killed || r.KillReason != c.reason {
				t.Fatalf("code %d result %+v", code, r)
			}
		})
	}
	// Output past --max-output is dropped and counted; the program runs on.
	prog := writeFile(t, "o.py", "for _ in range(1000): print('x' * 999)\nprint('end')")
	out, errOut, code := runCLI("", "run", "--json", "--max-output", "10K", prog)
	var r runJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Killed || !r.StdoutTruncated || len(r.Stdout) != 10<<10 || r.StdoutDroppedBytes != 1000*1000+4-10<<10 {
		t.Fatalf("output cap: code %d %v %+v %s", code, err, r, errOut)
	}
	// An endless printer: capped and said so, and it runs on until its
	// timeout (the documented rule), which kills it.
	prog = writeFile(t, "flood.py", "while True: print('x' * 1000)")
	out, errOut, code = runCLI("", "run", "--json", "--max-output", "10K", "--timeout", "2s", prog)
	r = runJSON{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 137 || !r.Killed || r.KillReason != apitype.KillTimeout ||
		!r.StdoutTruncated || len(r.Stdout) != 10<<10 || r.StdoutDroppedBytes <= 0 {
		t.Fatalf("endless printer: code %d %v %+v %s", code, err, r, errOut)
	}
	_, errOut, code = runCLI("", "run", "--max-output", "10K", "--timeout", "1s", prog)
	if code != 137 || !strings.Contains(errOut, "stdout truncated at 10K (--max-output)") || !strings.Contains(errOut, "killed: wall-clock limit of 1s") {
		t.Fatalf("endless printer, streamed: code %d stderr %q", code, errOut)
	}
	// Without --json, the reason goes to stderr.
	prog = writeFile(t, "s.py", "import time\ntime.sleep(30)")
	_, errOut, code = runCLI("", "run", "--timeout", "500ms", prog)
	if code != 137 || !strings.Contains(errOut, "killed: wall-clock limit of 500ms") {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
}

func TestRunStdinAndLanguages(t *testing.T) { runModes(t, testRunStdinAndLanguages) }

func testRunStdinAndLanguages(t *testing.T, runCLI runFunc) {
	out, _, code := runCLI("print(6 * 7)\n", "run", "-")
	if out != "42\n" || code != 0 {
		t.Fatalf("python from stdin: %q %d", out, code)
	}
	out, _, code = runCLI("echo $((6 * 7)); echo \"$GREETING\"\n", "run", "--lang", "bash", "--env", "GREETING=hi there", "-")
	if out != "42\nhi there\n" || code != 0 {
		t.Fatalf("bash: %q %d", out, code)
	}
	js := writeFile(t, "p.js", "console.log([1, 2, 3].map(x => x * 2).join(','))\n")
	out, _, code = runCLI("", "run", js)
	if out != "2,4,6\n" || code != 0 {
		t.Fatalf("javascript by extension: %q %d", out, code)
	}
}

func TestRunBadInput(t *testing.T) { runModes(t, testRunBadInput) }

func testRunBadInput(t *testing.T, runCLI runFunc) {
	prog := writeFile(t, "p.py", "print(1)")
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run"}, 64, "missing FILE"},
		{[]string{"run", "--memory", "lots", prog}, 64, "--memory"},
		{[]string{"run", "--timeout", "-5s", prog}, 64, "--timeout"},
		{[]string{"run", "--memory", "999T", prog}, 64, "exceeds the server maximum"},
		{[]string{"run", "--cpus", "NaN", prog}, 64, "--cpus"},
		{[]string{"run", "--lang", "cobol", prog}, 64, "unknown language"},
		{[]string{"run", "--env", "1BAD=x", prog}, 64, "--env"},
		{[]string{"run", "--env", "NOEQUALS", prog}, 64, "--env"},
		{[]string{"run", "--no-such-flag", prog}, 64, "not defined"},
		{[]string{"run", "/nonexistent/p.py"}, 66, "cannot read the program"},
		{[]string{"run", "/etc"}, 66, "not a regular file"},
		{[]string{"run", "--file", "/nonexistent", prog}, 66, "--file"},
		{[]string{"run", "--file", prog + ":../escape", prog}, 64, "bad name"},
		{[]string{"frobnicate"}, 64, "unknown command"},
	}
	for _, c := range cases {
		_, errOut, code := runCLI("", c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) || strings.Contains(errOut, "panic") {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

func TestDoctor(t *testing.T) {
	out, errOut, code := runCLI(t, "", "doctor", "--json")
	if code != 0 {
		t.Fatalf("doctor failed (%d): %s %s", code, out, errOut)
	}
	var r struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Detail string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	seen, detail := map[string]string{}, map[string]string{}
	for _, c := range r.Checks {
		seen[c.Name], detail[c.Name] = c.Status, c.Detail
	}
	// The way the server takes: the init built into the binary (its copy
	// in the state directory, or a memfd copy if that is on a noexec
	// mount), not the binary itself.
	if d := detail["sealed init"]; !strings.Contains(d, " of "+exeseal.FromEmbedded) {
		t.Errorf("sealed init: %q", d)
	}
	for _, name := range []string{"namespaces", "cgroups", "ptys", "seccomp", "landlock", "sealed init", "jail", "python", "python packages", "bash", "node"} {
		if seen[name] != "ok" {
			t.Errorf("check %q: %q", name, seen[name])
		}
	}
	// A configuration that requires a layer the host cannot give fails.
	cfg := writeFile(t, "c.json", `{"protections": {"seccomp": "sometimes"}}`)
	_, errOut, code = runCLI(t, "", "doctor", "--config", cfg)
	if code != 78 || !strings.Contains(errOut, "protections.seccomp") {
		t.Fatalf("bad config: %d %q", code, errOut)
	}
}

func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	r, _ := benchSmoke(t)
	if len(r.Errors) > 0 || len(r.Rows) < 10 {
		t.Fatalf("errors %v, %d rows", r.Errors, len(r.Rows))
	}
	for _, row := range r.Rows {
		if row.Value <= 0 {
			t.Errorf("%s %s: %v", row.Scenario, row.Metric, row.Value)
		}
	}
}

// The capacity scenario (alone, on a server of its own) holds its idle
// sessions and measures them.
func TestBenchCapacitySmoke(t *testing.T) {
	r, _ := benchSmoke(t, "--only", "capacity")
	alive := 0.0
	for _, row := range r.Rows {
		if row.Metric == "alive at once" {
			alive = row.Value
		}
	}
	if len(r.Errors) > 0 || len(r.Rows) < 8 || alive != 3 {
		t.Fatalf("errors %v, %d rows, %v alive (want 3): %+v", r.Errors, len(r.Rows), alive, r.Rows)
	}
}

// benchReport is what `airlock bench --json` prints, as far as the
// smoke tests read it.
type benchReport struct {
	Rows []struct {
		Scenario string  `json:"scenario"`
		Metric   string  `json:"metric"`
		Value    float64 `json:"value"`
	} `json:"rows"`
	Errors []string `json:"errors"`
}

// benchSmoke runs `airlock bench --smoke --json` with args and decodes
// its report; it also returns everything the command printed.
func benchSmoke(t *testing.T, args ...string) (benchReport, string) {
	t.Helper()
	out, errOut, code := runCLI(t, "", append([]string{"bench", "--smoke", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("bench --smoke %v failed (%d): %s\n%s", args, code, out, errOut)
	}
	var r benchReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r, out + errOut
}
