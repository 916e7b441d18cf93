package gvisor

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The host↔relay wire is a contract across versions: a sandbox restored
// from a checkpoint runs the keeper (and so the relays) of the build
// that paused it, and a newer server speaks to them. These frames are
// what builds since the keeper's copies (28fdf28) send and read; a change
// that fails here breaks the resume of sessions paused by them (add a
// new form beside the old instead, and keep reading the old).
// checked against mutants: a JSON tag renamed ("duplex"), the exit
// line's prefix changed, the relay's argv reordered, the request and
// report descriptors swapped, the pipes out numbered from n+3.

// wireProc is a spawn's program as the host describes it.
var wireProc = ociProcess{
	User: ociUser{UID: 1000, GID: 1000},
	Args: []string{"python3", "-u", "runtime.py"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/workspace"}, Cwd: "/workspace",
	Capabilities: map[string][]string{"ambient": {}, "bounding": {}, "effective": {}, "inheritable": {}, "permitted": {}},
	Rlimits:      []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 256, Soft: 256}, {Type: "RLIMIT_NPROC", Hard: 64, Soft: 64}},

	NoNewPrivileges: true,
}

var wireRequests = []struct {
	name   string
	req    keeperReq
	golden string
}{
	{"spawn", keeperReq{Op: "spawn", Proc: &wireProc},
		`{"op":"spawn","proc":{"terminal":false,"user":{"uid":1000,"gid":1000},"args":["python3","-u","runtime.py"],"env":["PATH=/usr/bin:/bin","HOME=/workspace"],"cwd":"/workspace","capabilities":{"ambient":[],"bounding":[],"effective":[],"inheritable":[],"permitted":[]},"rlimits":[{"type":"RLIMIT_NOFILE","hard":256,"soft":256},{"type":"RLIMIT_NPROC","hard":64,"soft":64}],"noNewPrivileges":true}}` + "\n"},
	{"spawn with a socket", keeperReq{Op: "spawn", Proc: &ociProcess{Args: []string{"sh"}, Cwd: "/"}, Duplex: map[int]int{3: 6, 4: 7}},
		`{"op":"spawn","proc":{"terminal":false,"user":{"uid":0,"gid":0},"args":["sh"],"env":null,"cwd":"/","capabilities":null,"rlimits":null,"noNewPrivileges":false},"duplex":{"3":6,"4":7}}` + "\n"},
	{"attach", keeperReq{Op: "attach", Pid: 7},
		`{"op":"attach","pid":7}` + "\n"},
}

func TestRelayWire(t *testing.T) {
	// The relay's command line, inside the sandbox.
	if got, want := relayArgv(4), []string{"/dev/.airlock-keeper", "__airlock-gvisor-keeper", "relay", "4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("relay argv %q, want %q", got, want)
	}
	// Its descriptors: the program's 0..n-1, the request n, the report
	// n+1, the sockets' pipes out from n+2.
	name := map[*os.File]string{}
	files := func(names ...string) []*os.File {
		var out []*os.File
		for _, n := range names {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			name[f] = n
			out = append(out, f)
		}
		return out
	}
	var names []string
	for _, f := range relayDescriptors(files("0", "1", "2", "3", "4"), files("request")[0], files("report")[0], files("out-3", "out-4")) {
		names = append(names, name[f])
	}
	if want := []string{"0", "1", "2", "3", "4", "request", "report", "out-3", "out-4"}; !reflect.DeepEqual(names, want) {
		t.Errorf("the relay's descriptors %q, want %q", names, want)
	}
	if got := []int{duplexFd(5, 0), duplexFd(5, 1)}; !reflect.DeepEqual(got, []int{7, 8}) {
		t.Errorf("the pipes out of a 5-descriptor program are %v, want [7 8]", got)
	}

	// The request, both ways: what this build writes is the golden
	// frame, and the golden frame (an earlier build's) reads as it did.
	for _, c := range wireRequests {
		var b bytes.Buffer
		if err := writeRelayReq(&b, c.req); err != nil || b.String() != c.golden {
			t.Errorf("%s: written as\n%s\nwant\n%s(%v)", c.name, b.String(), c.golden, err)
		}
		got, err := readRelayReq(strings.NewReader(c.golden))
		if err != nil || !reflect.DeepEqual(got, c.req) {
			t.Errorf("%s: the golden frame reads as %+v (%v), want %+v", c.name, got, err, c.req)
		}
	}

	// The report: the pid (or why not), then the wait status.
	var rep bytes.Buffer
	reportStarted(&rep, 42)
	reportEnded(&rep, 256)
	reportFailed(&rep, "the keeper: no such file\nor directory")
	if want := "42\nx 256\n!the keeper: no such file or directory\n"; rep.String() != want {
		t.Errorf("the report %q, want %q", rep.String(), want)
	}
	for _, c := range []struct {
		line string
		pid  int
		why  string
	}{
		{"42\n", 42, ""}, {"!the keeper: gone\n", 0, "the keeper: gone"}, {"1\n", 0, ""}, {"\n", 0, ""}, {"x 0\n", 0, ""},
	} {
		if pid, why := parseStarted(c.line); pid != c.pid || why != c.why {
			t.Errorf("first line %q read as %d %q, want %d %q", c.line, pid, why, c.pid, c.why)
		}
	}
	for _, c := range []struct {
		line   string
		status int
		ok     bool
	}{
		{"x 256\n", 256, true}, {"x 0\n", 0, true}, {"x 9", 9, true}, {"256\n", 0, false}, {"", 0, false},
	} {
		if status, ok := parseEnded(c.line); status != c.status || ok != c.ok {
			t.Errorf("end line %q read as %d %v, want %d %v", c.line, status, ok, c.status, c.ok)
		}
	}
}
