package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// airlock top shows the running execution of a session through the
// local server's socket and a remote server's URL, the escape sequences
// of its code escaped; airlock audit --follow prints records as they
// are written and exits 0 on SIGINT.
func TestTopAndAuditFollow(t *testing.T) {
	s := startServer(t, nil)
	ctx := context.Background()
	id := s.newSession("python", nil)
	s.exec(id, "x = 1")

	// audit --follow: the records so far, then a new one.
	cmd := exec.Command(airlockBinary(t), "audit", "--config", s.cfgPath, "--follow", "--interval", "200ms", "--kind", "execution", "--json", "--session", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ids := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r apitype.AuditRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				ids <- r.ID
			}
		}
		close(ids)
	}()
	next := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case got, ok := <-ids:
				if !ok {
					t.Fatalf("audit --follow ended before %s", want)
				}
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("audit --follow never printed %s", want)
			}
		}
	}
	next("e1")

	// A running execution, as top shows it.
	done := make(chan error, 1)
	go func() {
		_, err := s.c.Execute(ctx, id, apitype.ExecuteRequest{Code: "# top-marker \x1b]0;owned\x07\x1b[2J\nimport time\ntime.sleep(600)"}, nil)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.c.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Current != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the execution never showed as current")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Through the local socket, and a remote server's URL: the code's
	// escape sequences are shown escaped, never written.
	local, err := s.airlockCLI("top", "--once")
	if err != nil {
		t.Fatal(err)
	}
	remote, err := exec.Command(airlockBinary(t), "top", "--once", "--url", s.URL).Output()
	if err != nil {
		t.Fatalf("airlock top --url: %v", err)
	}
	for _, top := range []string{local, string(remote)} {
		if !strings.Contains(top, id) || !strings.Contains(top, "e2 ") || !strings.Contains(top, `# top-marker \x1b]0;owned\x07\x1b[2J`) || !strings.Contains(top, "busy") || strings.Contains(top, "\x1b") {
			t.Errorf("airlock top:\n%q", top)
		}
	}
	if _, err := s.c.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	next("e2")

	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("audit --follow after SIGINT: %v", err)
	}
}
