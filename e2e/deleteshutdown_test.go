package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// TestDeleteDuringShutdown (issue #21): deletes in flight as SIGTERM
// stops a server with persistence, some of their sessions busy with code
// that ignores the interrupt (the shutdown cannot pause those: it ends
// them, keeping their recovery points), the others idle (paused). Each
// client gets a clear answer, and it holds after the restart: 204, and
// the session is never listed again; 503 saying it is kept, and it is
// listed paused (and can be deleted then); none (the listener closed
// first), and it is listed paused or gone. Nothing is left on the host
// after either server: no process, mount, cgroup or /run directory.
// Over HTTP most deletes meet the closed listener (a request is served
// in a few ms): the windows themselves are session's
// TestDeleteRacesShutdown.
func TestDeleteDuringShutdown(t *testing.T) {
	s := startServer(t, map[string]any{
		"persistence": map[string]any{"enabled": true, "shutdown_timeout": "1s"},
		"pool":        map[string]any{"size": map[string]int{"python": 1}},
	})
	ctx := context.Background()
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = s.newSession("python", nil)
		if r := s.exec(ids[i], "open('f.txt', 'w').write('x')"); r.Error != nil {
			t.Fatalf("writing a file: %+v", r.Error)
		}
	}
	var runs []<-chan string
	for _, id := range ids[:n/2] {
		started, ended := postEnding(s, "/v1/sessions/"+id+"/execute",
			`{"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('go', flush=True)\ntime.sleep(600)"}`)
		select {
		case <-started:
		case <-time.After(60 * time.Second):
			t.Fatal("the code ignoring interrupts never started")
		}
		runs = append(runs, ended)
	}

	// Deletes and SIGTERM at once (a plain client: its goroutines report
	// to no test). Those the server took before its listener closed are
	// in flight as it stops; the others get no answer.
	plain := client.New(s.URL)
	type answer struct {
		id  string
		err error
	}
	answers := make(chan answer, n)
	begin := make(chan struct{})
	for _, id := range ids {
		go func() {
			<-begin
			answers <- answer{id, plain.DeleteSession(ctx, id)}
		}()
	}
	close(begin)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := map[string]error{}
	for range ids {
		a := <-answers
		got[a.id] = a.err
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("server exit: %v\n%s", err, s.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not stop:\n%s", s.stderr.String())
	}
	for _, r := range runs {
		<-r
	}
	if left := checkNothingLeft(s.name); len(left) > 0 {
		t.Fatalf("left behind after the shutdown:\n%s", strings.Join(left, "\n"))
	}

	s2 := startServerNamed(t, s.name, s.cfg)
	counts := map[string]int{}
	for _, id := range ids {
		err := got[id]
		info, gerr := s2.c.Session(ctx, id)
		listed := gerr == nil && info.State == apitype.StatePaused
		gone := client.StatusOf(gerr) == http.StatusNotFound || client.StatusOf(gerr) == http.StatusGone
		var ce *client.Error
		switch {
		case err == nil:
			counts["204"]++
			if !gone {
				t.Errorf("%s: deleted (204), after the restart: %+v %v", id, info, gerr)
			}
		case client.StatusOf(err) == http.StatusServiceUnavailable:
			counts["503"]++
			if !listed || !strings.Contains(err.Error(), "next start") {
				t.Errorf("%s: %v, after the restart: %+v %v (want it listed paused)", id, err, info, gerr)
			}
		case !errors.As(err, &ce):
			counts["no answer"]++
			if !listed && !gone {
				t.Errorf("%s: no answer (%v), after the restart: %+v %v", id, err, info, gerr)
			}
		default:
			t.Errorf("%s: a delete during the shutdown answered %v", id, err)
		}
		if listed {
			if err := s2.c.DeleteSession(ctx, id); err != nil {
				t.Errorf("%s: deleting it after the restart: %v", id, err)
			}
		}
	}
	t.Logf("the deletes' answers: %v", counts)
	s2.stop()
	if left := checkNothingLeft(s2.name); len(left) > 0 {
		t.Fatalf("left behind after the restarted server:\n%s", strings.Join(left, "\n"))
	}
}
