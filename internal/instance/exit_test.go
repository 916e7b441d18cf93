package instance

import (
	"syscall"
	"testing"
	"time"

	"airlock/internal/jail"
)

// exitsSandbox is a sandbox that only reports exits and its death.
type exitsSandbox struct {
	sandbox
	exits chan jail.Exit
	dead  chan struct{}
}

func (s *exitsSandbox) Exits() <-chan jail.Exit { return s.exits }
func (s *exitsSandbox) Dead() <-chan struct{}   { return s.dead }

// A program's exit reported well after its control socket closed (under
// gVisor runsc exec answers once the Sentry has torn the process down,
// later on a loaded host) is still its status, asked once: the session's
// Lost after ProgramExit gets the same answer without waiting again. A
// sandbox that died reports no exit.
func TestProgramExitReportedLate(t *testing.T) {
	sb := &exitsSandbox{exits: make(chan jail.Exit, 1), dead: make(chan struct{})}
	in := &Interp{sb: sb}
	go func() {
		time.Sleep(time.Second) // past the 200 ms a runtime's exit once had
		sb.exits <- jail.Exit{Pid: 5, Status: syscall.WaitStatus(2 << 8)}
	}()
	x, ok := in.ProgramExit()
	if !ok || x.Code != 2 {
		t.Fatalf("a late exit: %+v %v", x, ok)
	}
	if e, ok := in.runtimeExit(); !ok || e.Pid != 5 {
		t.Errorf("asked again: %+v %v", e, ok)
	}

	gone := &exitsSandbox{exits: make(chan jail.Exit), dead: make(chan struct{})}
	close(gone.dead)
	in = &Interp{sb: gone}
	if x, ok := in.ProgramExit(); ok {
		t.Errorf("an exit from a dead sandbox: %+v", x)
	}
}
