package gvisor

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/jail"
)

// Orphans of programs started in the sandbox are reaped by its init: a
// killed command's background jobs leave no zombies.
func TestInitReapsOrphans(t *testing.T) {
	h, _ := testHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: "g-reap", Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	e, _, _ := runIn(t, sb, []string{"/bin/sh", "-c", "sleep 0.2 >/dev/null 2>&1 & exit 0"})
	if e.Status.ExitStatus() != 0 {
		t.Fatal(e)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := runIn(t, sb, []string{"/bin/sh", "-c", "ps -eo stat,comm | grep sleep || true"})
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans left: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A `runsc run` still there after its sandbox was killed is killed
// itself; its children (the Sentry's and the gofer's processes, whose
// ends it never reaped) then become the server's (a child subreaper),
// and must not stay its zombies. checked against a mutant: without the
// pidfds taken in stop, both stayed zombies of the test process.
func TestStuckRunscChildrenReaped(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	defer func(d time.Duration) { runscStuck = d }(runscStuck)
	runscStuck = 100 * time.Millisecond
	h, _ := testHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: "g-stuck", Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	kids := jail.ChildrenOf(sb.run.Process.Pid)
	if len(kids) < 2 {
		t.Fatalf("runsc run has children %v, want the sandbox's and the gofer's", kids)
	}
	// Stuck: it reaps nothing, and does not end when its sandbox does.
	if err := sb.run.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sb.Close()
	for _, pid := range kids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil {
				break // reaped
			}
			if time.Now().After(deadline) {
				t.Errorf("runsc's child %d is left: %s", pid, b)
				unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED, nil) // for the leak guards
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
