package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/server"
	"airlock/internal/testenv"
)

// The sandboxes of the servers these tests start run the test binary as
// their init.
func TestMain(m *testing.M) { jail.RunTests(m) }

// resolver answers names from a table; any other is a failure of the
// upstream resolver.
type resolver map[string]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// `airlock run --allow-host` through a running server: --json carries the
// egress decisions, an upstream DNS failure is allowed-but-failed (not a
// denial), and the human output ends with one line naming what the
// network refused, and only that.
func TestRunReportsEgress(t *testing.T) {
	testenv.RequireRoot(t, "a server builds jails")
	dir := t.TempDir()
	env := []string{"AIRLOCK_STATE_DIR=/run/airlock-cli-test", "AIRLOCK_CGROUP_PARENT=airlock-cli-test", "AIRLOCK_ID_BASE=1140000000",
		"AIRLOCK_DATA_DIR=" + dir + "/data", "AIRLOCK_SERVER_LISTEN=127.0.0.1:0", "AIRLOCK_SERVER_AUTH=none",
		`AIRLOCK_POOL_SIZE={"python": 1}`, "AIRLOCK_POOL_ZYGOTE=false", "AIRLOCK_AUDIT_ENABLED=false"}
	withEnv(t, env...)
	cfg, err := config.LoadEnv("", env)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg, server.Options{Version: "test", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		os.RemoveAll(cfg.StateDir)
	})
	eg := s.Manager().Egress()
	eg.Dialer.Guard.SetTestHooks(netip.MustParsePrefix("127.0.0.2/32"))
	eg.Dialer.Resolver = resolver{"files.a.test": netip.MustParseAddr("127.0.0.2")}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go up.Serve(l)
	t.Cleanup(func() { up.Close() })
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	prog := filepath.Join(dir, "net.py")
	os.WriteFile(prog, []byte(`import urllib.request
for name in ["files.a.test", "gone.a.test", "evil.a.test"]:
    try:
        print(name, urllib.request.urlopen("http://%s:`+port+`/" % name, timeout=10).read().decode())
    except Exception as e:
        print(name, "failed")
`), 0o644)
	args := []string{"--allow-host", "files.a.test:" + port, "--allow-host", "gone.a.test:" + port, prog}

	var stdout, stderr bytes.Buffer
	if code := runCmd(append([]string{"--json"}, args...), nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r apitype.RunOutput
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if r.Stdout != "files.a.test hello\ngone.a.test failed\nevil.a.test failed\n" {
		t.Errorf("stdout %q", r.Stdout)
	}
	got := map[string]apitype.EgressDecision{}
	for _, d := range r.Egress {
		got[d.Kind+" "+d.Host] = d
	}
	for key, want := range map[string]struct {
		allowed bool
		reason  string
	}{
		"connect files.a.test": {true, ""},
		"connect gone.a.test":  {true, "upstream DNS failure: cannot resolve gone.a.test (no such host)"},
		"dns evil.a.test":      {false, "denied: evil.a.test is not in the allowlist"},
	} {
		d, ok := got[key]
		if !ok || d.Allowed != want.allowed || !strings.HasPrefix(d.Reason, want.reason) {
			t.Errorf("%s: %+v (present %v), want allowed %v, reason %q", key, d, ok, want.allowed, want.reason)
		}
	}
	if t.Failed() {
		t.Logf("egress: %+v", r.Egress)
	}

	stdout.Reset()
	stderr.Reset()
	if code := runCmd(args, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "airlock: the network refused the program: evil.a.test (--allow-host") ||
		strings.Contains(lines[0], "gone") || strings.Contains(lines[0], "files") {
		t.Errorf("stderr %q: want one hint naming evil.a.test only", stderr.String())
	}
}
