package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// A failure inside the host (here a runtime that cannot be started, whose
// init and exec errors name host paths) reaches the client as a code, a
// message it can act on and a request id; the detail is in the server's
// log under that id, and nowhere in the response. (Every error body of
// the suite is also checked for host internals: see checkErrorBody.)
func TestErrorsKeepHostInternalsInTheLog(t *testing.T) {
	const missing = "/usr/bin/python3-airlock-e2e-missing"
	s := startServer(t, map[string]any{
		"runtimes": map[string]any{"python": missing},
		"pool":     map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": false},
	})
	_, err := s.c.CreateSession(context.Background(), apitype.CreateSessionRequest{Language: "python"})
	e := wantError(t, "a session whose runtime is missing", err, 503, "unavailable")
	if e.RequestID == "" || !strings.Contains(e.Message, "python runtime") {
		t.Errorf("error %+v: want a request id and a message naming the runtime", e)
	}
	for _, internal := range []string{missing, "no such file", s.name} {
		if strings.Contains(e.Message, internal) {
			t.Errorf("the message %q names %q", e.Message, internal)
		}
	}
	// The log has the detail, under the request's id (written before the
	// response; it reaches s.stderr through a pipe).
	logged := func() bool {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, "request="+e.RequestID) && strings.Contains(line, missing) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !logged() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !logged() {
		t.Errorf("no log line has request %s and the detail:\n%s", e.RequestID, s.stderr.String())
	}
}
