package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// attached collects what an attached client hears.
type attached struct {
	mu     sync.Mutex
	text   strings.Builder
	events []apitype.Event
	err    error
	done   chan struct{}
}

func attach(ctx context.Context, s *Session, id string, replay bool) *attached {
	a := &attached{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		err := s.AttachCommand(ctx, id, replay, func(ev apitype.Event) {
			a.mu.Lock()
			a.text.WriteString(ev.Text)
			a.events = append(a.events, ev)
			a.mu.Unlock()
		})
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
	}()
	return a
}

func (a *attached) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		a.mu.Lock()
		got := a.text.String()
		a.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heard %q, want %q", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// watching waits until n clients follow command id.
func watching(t *testing.T, s *Session, id string, n int) {
	t.Helper()
	cmd, err := s.command(id)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		cmd.mu.Lock()
		got := len(cmd.follow.watchers)
		cmd.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clients follow %s, want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (a *attached) end(t *testing.T) (*apitype.CommandResult, error) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(wait):
		t.Fatal("the attached client never returned")
	}
	var res *apitype.CommandResult
	if n := len(a.events); n > 0 && a.events[n-1].Type == apitype.EventEnd {
		res = a.events[n-1].Command
	}
	return res, a.err
}

// Clients follow a background command by id: from the start (replay) or
// from now, several at once, leaving and coming back; each hears the end.
func TestAttachCommand(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	ctx := context.Background()
	cmd, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "out first;cat", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := attach(ctx, s, cmd.ID, true)
	a.waitFor(t, "first")
	if err := s.CommandStdin(cmd.ID, []byte("second"), false); err != nil {
		t.Fatal(err)
	}
	a.waitFor(t, "second")
	// Another client, replayed what was printed, leaves.
	bctx, leave := context.WithCancel(ctx)
	b := attach(bctx, s, cmd.ID, true)
	b.waitFor(t, "firstsecond")
	leave()
	if _, err := b.end(t); !errors.Is(err, context.Canceled) {
		t.Errorf("a client that left: %v", err)
	}
	// One from now on hears only what comes.
	c := attach(ctx, s, cmd.ID, false)
	watching(t, s, cmd.ID, 2)
	if err := s.CommandStdin(cmd.ID, []byte("third"), true); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*attached{a, c} {
		res, err := x.end(t)
		if err != nil || res == nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout != "firstsecondthird" {
			t.Errorf("the end: %+v %v", res, err)
		}
	}
	if got := c.text.String(); got != "third" {
		t.Errorf("attached without replay: %q", got)
	}
	// After its end: its output, then the end.
	d := attach(ctx, s, cmd.ID, true)
	if res, err := d.end(t); err != nil || res == nil || d.text.String() != "firstsecondthird" {
		t.Errorf("attached after the end: %q %+v %v", d.text.String(), res, err)
	}
	if err := s.AttachCommand(ctx, "c99", true, func(apitype.Event) {}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown command: %v", err)
	}
}

// A client that falls too far behind is detached with ErrLimit (it
// attaches again), rather than hold the command's output or queue for
// it without end.
func TestAttachCommandSlowClient(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := s.RunCommand(ctx, apitype.CommandRequest{Command: "sleep", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := s.command(res.ID)
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	first := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		errc <- s.AttachCommand(ctx, res.ID, false, func(apitype.Event) {
			once.Do(func() { close(first) })
			<-blocked
		})
	}()
	watching(t, s, res.ID, 1)
	cmd.mu.Lock()
	for range watcherBuffer + 2 {
		cmd.publishLocked(apitype.Event{Type: apitype.EventStdout, Text: "x"})
	}
	cmd.mu.Unlock()
	<-first
	close(blocked)
	if err := <-errc; !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("a client that fell behind: %v", err)
	}
	s.SignalCommand(res.ID, "KILL")
}
