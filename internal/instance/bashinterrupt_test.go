package instance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/runtimes"
)

// An interrupt of a bash execution whose first SIGINT a child of the
// shell takes (as the shell's child does between its fork and its exec:
// here a subshell whose trap then runs sleep) still ends it, with 130,
// in a real sandbox: the server repeats SIGINT (checked against a mutant
// that sends it once: the block runs on, to sleep's end).
func TestBashInterruptWhoseSIGINTAChildTook(t *testing.T) {
	h, cfg := testHost(t)
	rt, err := runtimes.Lookup(cfg, "bash")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := (&Cold{Kernel: Native{Host: h}, Slots: &Slots{}}).Get(ctx, rt, cfg.Defaults, false)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	var mu sync.Mutex
	var stderr strings.Builder
	running := make(chan struct{})
	if err := inst.Attach(OutputFunc(func(p []byte, isErr bool) {
		mu.Lock()
		defer mu.Unlock()
		if isErr {
			if stderr.Write(p); strings.Contains(stderr.String(), "<running>") && running != nil {
				close(running)
				running = nil
			}
		}
	})); err != nil {
		t.Fatal(err)
	}
	if err := inst.Configure(ctx, runtimes.EnvMap(RuntimeEnv(rt, cfg.Defaults)), "/workspace"); err != nil {
		t.Fatal(err)
	}
	code := "( trap 'exec sleep 100' INT; echo '<running>' >&2; while :; do :; done ); echo not reached"
	if err := inst.Execute("e1", code, nil, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second) // sleep's 100 s, unless interrupted
	select {
	case <-running:
	case <-timeout:
		t.Fatal("the block did not start")
	}
	inst.Interp.Interrupt("e1")
	if m := awaitDone(t, inst, "e1", timeout, "the interrupted block ran on: its SIGINT was lost"); m.ExitCode != 130 {
		t.Errorf("the interrupted block: exit code %d, want 130", m.ExitCode)
	}
}
