package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/workspace"
)

func TestClaims(t *testing.T) {
	for _, c := range []struct {
		path, sandbox string
		want          bool
	}{
		{"/sandboxes", "", true}, {"/v2/sandboxes", "", true}, {"/sandboxes/abc/timeout", "", true}, {"/v2/sandboxes/abc/connect", "", true},
		{"/execute", "", true}, {"/contexts/c1/restart", "", true}, {"/files", "", true}, {"/health", "", true},
		{"/filesystem.Filesystem/ListDir", "", true}, {"/process.Process/Start", "", true},
		{"/v1/sessions", "", false}, {"/healthz", "", false}, {"/mcp", "", false}, {"/sandboxesx", "", false}, {"/filesx", "", false},
		{"/v1/sessions", "abc", true}, // a data-plane request names its sandbox
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.sandbox != "" {
			r.Header.Set("E2b-Sandbox-Id", c.sandbox)
		}
		if got := (&Server{cfg: config.Default()}).Claims(r); got != c.want {
			t.Errorf("Claims(%s, %q) = %v, want %v", c.path, c.sandbox, got, c.want)
		}
	}
}

func TestWsPath(t *testing.T) {
	for _, c := range []struct{ in, rel, prefix string }{
		{"/home/user", "", home}, {"/home/user/a.txt", "a.txt", home}, {"a/b", "a/b", home}, {"~/x", "x", home},
		{"/workspace/d/e", "d/e", "/workspace"}, {"./a", "a", home},
	} {
		rel, prefix, err := wsPath(c.in)
		if err != nil || rel != c.rel || prefix != c.prefix {
			t.Errorf("wsPath(%q) = %q %q %v, want %q %q", c.in, rel, prefix, err, c.rel, c.prefix)
		}
	}
	for _, bad := range []string{"/etc/passwd", "/home/user/../x", "../x", "/home/userx", "/tmp/a", "/home/user/a\x00b"} {
		if rel, _, err := wsPath(bad); err == nil {
			t.Errorf("wsPath(%q) = %q, want an error", bad, rel)
		}
	}
}

func FuzzWsPath(f *testing.F) {
	for _, s := range []string{"/home/user/a", "~/../x", "/workspace/./b", "a//b", "/home/user/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, _, err := wsPath(p)
		if err != nil {
			return
		}
		if again, err := workspace.Clean(rel); err != nil || again != rel || strings.HasPrefix(rel, "/") || strings.Contains("/"+rel+"/", "/../") {
			t.Fatalf("wsPath(%q) = %q, not a clean path beneath the workspace", p, rel)
		}
	})
}

func TestMetadataFilter(t *testing.T) {
	// The JS SDK encodes keys and values, joins them as a query, and
	// sends that encoded once more as metadata=.
	got, err := metadataFilter("suite=e2b-sdk&a%2520b=c%2526d")
	if err != nil || got["suite"] != "e2b-sdk" || got["a b"] != "c&d" || len(got) != 2 {
		t.Errorf("metadataFilter = %v, %v", got, err)
	}
	if !matches(map[string]string{"suite": "e2b-sdk", "a b": "c&d", "x": "y"}, got) || matches(map[string]string{"suite": "e2b-sdk"}, got) {
		t.Error("matches")
	}
}

// An envd process runs its cmd and args as they are, but never as a
// login shell (whose profile would replace the session's PATH).
func TestProcessArgv(t *testing.T) {
	for _, c := range []struct {
		cfg  processConfig
		want []string
	}{
		{processConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi | tr h H"}}, []string{"/bin/bash", "-c", "echo hi | tr h H"}},
		{processConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}}, []string{"/bin/bash", "-i"}},
		{processConfig{Cmd: "python3", Args: []string{"-l", "x"}}, []string{"python3", "-l", "x"}},
		{processConfig{Cmd: "ls"}, []string{"ls"}},
	} {
		if got := processArgv(c.cfg); !slices.Equal(got, c.want) {
			t.Errorf("processArgv(%+v) = %q, want %q", c.cfg, got, c.want)
		}
	}
}

// A command's end is envd's EndEvent: a signal's is exit code -1, not
// exited; airlock's kill says why.
func TestEndEvent(t *testing.T) {
	three, killed := 3, 137
	for _, c := range []struct {
		res  apitype.CommandResult
		want string
	}{
		{apitype.CommandResult{ExitCode: new(int)}, `{"exitCode":0,"exited":true,"status":"exit status 0"}`},
		{apitype.CommandResult{ExitCode: &three}, `{"error":"exit status 3","exitCode":3,"exited":true,"status":"exit status 3"}`},
		{apitype.CommandResult{ExitCode: &killed, Signal: "SIGKILL"}, `{"error":"signal: killed","exitCode":-1,"exited":false,"status":"signal: killed"}`},
		{apitype.CommandResult{ExitCode: &killed, Signal: "SIGKILL", Killed: true, KillReason: apitype.KillTimeout},
			`{"error":"signal: killed (airlock killed it: it ran past its timeoutMs)","exitCode":-1,"exited":false,"status":"signal: killed"}`},
	} {
		if got, _ := json.Marshal(endEvent(&c.res)); string(got) != c.want {
			t.Errorf("endEvent(%+v) = %s, want %s", c.res, got, c.want)
		}
	}
}

func envelope(flags byte, msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func TestReadRPC(t *testing.T) {
	s := &Server{cfg: config.Default()}
	for _, c := range []struct {
		name, ctype string
		body        []byte
		ok          bool
	}{
		{"unary", "application/json", []byte(`{"path":"/home/user"}`), true},
		{"stream", "application/connect+json", envelope(0, `{"path":"/home/user"}`), true},
		{"short", "application/connect+json", []byte{0, 0}, false},
		{"long length", "application/connect+json", append(envelope(0, `{}`)[:1], 0xff, 0xff, 0xff, 0xff, '{', '}'), false},
		{"compressed", "application/connect+json", envelope(1, `{}`), false},
		{"not json", "application/json", []byte(`{`), false},
	} {
		r := httptest.NewRequest("POST", "/filesystem.Filesystem/Stat", bytes.NewReader(c.body))
		r.Header.Set("Content-Type", c.ctype)
		var v struct{ Path string }
		err := s.readRPC(httptest.NewRecorder(), r, &v)
		if (err == nil) != c.ok || c.ok && v.Path != "/home/user" {
			t.Errorf("%s: %v %+v", c.name, err, v)
		}
	}
}

func TestDiff(t *testing.T) {
	t0 := time.Unix(1, 0)
	old := snapshot{"d/a": {Path: "d/a", Type: "file", Size: 1, ModTime: t0}, "d/gone": {Path: "d/gone", Type: "file"}}
	cur := snapshot{"d/a": {Path: "d/a", Type: "file", Size: 2, ModTime: t0}, "d/new": {Path: "d/new", Type: "dir"}}
	got := map[string]string{}
	for _, e := range diff("d", old, cur) {
		got[e.Name] = e.Type
	}
	want := map[string]string{"a": "EVENT_TYPE_WRITE", "new": "EVENT_TYPE_CREATE", "gone": "EVENT_TYPE_REMOVE"}
	if len(got) != len(want) || got["a"] != want["a"] || got["new"] != want["new"] || got["gone"] != want["gone"] {
		t.Errorf("diff = %v, want %v", got, want)
	}
}

// A clustered session's id is one DNS label in E2B's form (getHost's
// <port>-<id>.<domain> is then a host the router routes); both forms
// name the session; a server's own ids are the same in both.
func TestWireID(t *testing.T) {
	for _, c := range []struct{ id, wire string }{
		{"airlock-3.k2f9x1.q7xabc9zt3mn2plk4sr8vwe1d", "airlock-3-k2f9x1-q7xabc9zt3mn2plk4sr8vwe1d"},
		{"0123456789abcdef01234567", "0123456789abcdef01234567"},
	} {
		if got := wireID(c.id); got != c.wire {
			t.Errorf("wireID(%q) = %q, want %q", c.id, got, c.wire)
		}
		for _, in := range []string{c.wire, c.id} {
			if got := sessionID(in); got != c.id {
				t.Errorf("sessionID(%q) = %q, want %q", in, got, c.id)
			}
		}
	}
	if got := sessionID("Not-An-Id"); got != "Not-An-Id" {
		t.Errorf("sessionID of another string: %q", got)
	}
}

// The token key: made once (0600), read back the same; a damaged one is
// refused rather than silently replaced.
func TestTokenKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := loadKey(dir)
	if err != nil || len(k1) != 32 {
		t.Fatalf("a new key: %d bytes, %v", len(k1), err)
	}
	k2, err := loadKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the key read back differs: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, keyFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode())
	}
	s := &Server{key: k1}
	if s.derive("envd", "a") == s.derive("traffic", "a") || s.derive("envd", "a") == s.derive("envd", "b") {
		t.Error("tokens of another kind or sandbox are the same")
	}
	os.WriteFile(filepath.Join(dir, keyFile), []byte("short"), 0o600)
	if _, err := loadKey(dir); err == nil {
		t.Error("a damaged key was accepted")
	}
}

// keepMemory that the request and the configuration alone refuse is
// refused by lifecycle, before create builds a sandbox only to discard
// it. checked against a mutant: with the network check left to
// keepsMemory, a create with network.allowOut passed lifecycle.
// keepMemory false is a files-only pause on the timeout wherever it is
// asked, never with autoResume (as E2B's API).
func TestLifecycleRefusesMemory(t *testing.T) {
	off := false
	for _, c := range []struct {
		body, why string
		native    bool
		noCkpt    bool
		restores  string
	}{
		{body: `{"templateID":"base","autoPause":true,"autoPauseMemory":true}`, restores: apitype.RestoreMemory},
		{body: `{"templateID":"base","autoPause":true}`},
		{body: `{"templateID":"base","lifecycle":{"onTimeout":"pause"},"autoPauseMemory":false}`, restores: apitype.RestoreFiles},
		{body: `{"templateID":"my-template","autoPause":true,"autoPauseMemory":false,"network":{"allowOut":["example.com"]}}`, native: true, restores: apitype.RestoreFiles},
		{body: `{"templateID":"base","lifecycle":{"onTimeout":"pause","autoResume":true},"autoPauseMemory":false}`, why: "autoResume cannot be combined"},
		{body: `{"templateID":"base","autoPause":true,"autoResume":{"enabled":true},"autoPauseMemory":false}`, why: "autoResume cannot be combined"},
		{body: `{"templateID":"base","autoPauseMemory":false}`, why: "needs lifecycle.onTimeout"},
		{body: `{"templateID":"base","autoPause":true,"autoPauseMemory":true,"network":{"allowOut":["example.com"]}}`, why: "network.allowOut"},
		{body: `{"templateID":"my-template","autoPause":true,"autoPauseMemory":true}`, why: "template"},
		{body: `{"templateID":"base","autoPause":true,"autoPauseMemory":true}`, noCkpt: true, why: "gvisor.checkpoint: false"},
		{body: `{"templateID":"base","autoPause":true,"autoPauseMemory":true}`, native: true, why: "natively"},
		{body: `{"templateID":"my-template","autoPause":true,"network":{"allowOut":["example.com"]}}`},
	} {
		var s Server
		s.cfg.Isolation, s.cfg.Persistence.Enabled = apitype.GVisor, true
		if c.native {
			s.cfg.Isolation = apitype.Native
		}
		if c.noCkpt {
			s.cfg.GVisor.Checkpoint = &off
		}
		var req createRequest
		if err := json.Unmarshal([]byte(c.body), &req); err != nil {
			t.Fatal(err)
		}
		_, _, restores, err := s.lifecycle(req)
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.why == "" && restores != c.restores:
			t.Errorf("%s: restores %q, want %q", c.body, restores, c.restores)
		case c.why != "" && (err == nil || !strings.Contains(err.Error(), c.why)):
			t.Errorf("%s: %v, want a refusal saying %q", c.body, err, c.why)
		}
	}
}
