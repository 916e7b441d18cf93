package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// nobody is the user the bridge tests run `airlock mcp --url` as.
const nobody = 65534

// userBinary is a copy of the airlock binary that an unprivileged user
// may run (the tests build theirs in a directory only root can enter).
func userBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-user-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(airlockBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// bridge starts `airlock mcp --url` as nobody, with args after the URL
// and env, and connects an MCP client to it.
func bridge(t *testing.T, bin, url string, env []string, args ...string) (*exec.Cmd, *sdk.ClientSession, io.WriteCloser, *syncBuffer, error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp", "--url", url}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/"}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
	return cmd, cs, stdin, stderr, err
}

// `airlock mcp --url` is a stdio bridge to a remote server's /mcp that
// runs as an ordinary user: the tools work through it with the key it
// was given (its tenant's sessions), a bad key is an error that says so
// (not a hang, not an OAuth flow), and when its client leaves, the
// server ends the sessions it opened.
func TestMCPBridgeAsUser(t *testing.T) {
	s := keysServer(t, nil)
	key := s.newKey("team-a")
	bin := userBinary(t)
	keyFile := filepath.Join(filepath.Dir(bin), "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(keyFile, nobody, nobody)

	for _, how := range []string{"--key-file", "AIRLOCK_API_KEY", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			var env, args []string
			if how == "--key-file" {
				args = []string{"--key-file", keyFile}
			} else {
				env = []string{"AIRLOCK_API_KEY=" + key}
			}
			cmd, cs, stdin, stderr, err := bridge(t, bin, s.URL+"/mcp", env, args...)
			if err != nil {
				t.Fatalf("connect through the bridge: %v\n%s", err, stderr.String())
			}
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
			if !regexp.MustCompile(`(?m)^Uid:\s+65534\s`).Match(status) {
				t.Fatalf("the bridge does not run as nobody:\n%s", status)
			}
			def := mcpCall(t, cs, "execute_code", map[string]any{"code": "x = 41"})["session_id"].(string)
			if out := mcpCall(t, cs, "execute_code", map[string]any{"code": "x + 1"}); out["result"] != "42" || out["session_id"] != def {
				t.Errorf("state through the bridge: %v", out)
			}
			if info, err := s.as(key).Session(context.Background(), def); err != nil || info.Tenant != "team-a" {
				t.Errorf("the bridge's session: %+v %v", info, err)
			}
			if how == "SIGTERM" {
				cmd.Process.Signal(syscall.SIGTERM)
			} else {
				stdin.Close()
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("the bridge after %s: %v\n%s", how, err, stderr.String())
			}
			cs.Close()
			if strings.Contains(stderr.String(), "ERROR") {
				t.Errorf("the bridge logged an error:\n%s", stderr.String())
			}
			s.waitEnded(s.as(key), def, 30*time.Second)
		})
	}

	t.Run("a bad key", func(t *testing.T) {
		_, cs, _, stderr, err := bridge(t, bin, s.URL+"/mcp", []string{"AIRLOCK_API_KEY=alk_nope"})
		if err == nil {
			cs.Close()
			t.Fatal("a bad key connected")
		}
		if !strings.Contains(err.Error(), "bad or missing API key") || !strings.Contains(err.Error(), "AIRLOCK_API_KEY") {
			t.Errorf("the error for a bad key: %v\n%s", err, stderr.String())
		}
	})
}
