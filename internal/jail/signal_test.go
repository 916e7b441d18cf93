package jail

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSignalDeliveredOnReturn checks that Signal returns only once the
// signal is pending in its target, as gVisor's does: the instance layer
// signals an execution only while it is under way (conn.whileCurrent),
// which holds only if nothing it sends the runtime afterwards can get
// there first. The program blocks the signals, so that each stays
// pending where the host can see it, and each is looked for right after
// Signal returns.
func TestSignalDeliveredOnReturn(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, testLimits())
	sigs := []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2}
	for s := syscall.Signal(34); s <= 64; s++ { // the real-time ones, glibc's SIGRTMIN on
		sigs = append(sigs, s)
	}
	var nums []string
	for _, s := range sigs {
		nums = append(nums, strconv.Itoa(int(s)))
	}
	r := spawnPipes(t, sb, "/usr/bin/python3", "-c", `
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [`+strings.Join(nums, ",")+`])
print(os.getpid(), flush=True)
sys.stdin.read()
`)
	if got := strings.TrimSpace(r.readLine(t)); got != strconv.Itoa(r.pid) {
		t.Fatalf("the program says it is %q, Spawn said %d", got, r.pid)
	}
	hostPid := hostPidOf(t, sb, r.pid)
	for _, s := range sigs {
		if err := sb.Signal(r.pid, s, true); err != nil {
			t.Fatalf("Signal %d: %v", s, err)
		}
		if !pending(t, hostPid, s) {
			t.Fatalf("signal %d is not pending when Signal returns", s)
		}
	}
	if err := sb.Signal(1, syscall.SIGKILL, false); err == nil {
		t.Errorf("Signal of pid 1: no error")
	}
}

// hostPidOf finds the host's pid of the process pid inside sb.
func hostPidOf(t *testing.T, sb *Sandbox, pid int) int {
	t.Helper()
	pids, err := sb.cg.Pids()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == strconv.Itoa(pid) {
				return p
			}
		}
	}
	t.Fatalf("no process of the sandbox is %d inside", pid)
	return 0
}

// pending reports whether sig is pending in the host's process pid, for
// it or for its thread group.
func pending(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || (f[0] != "SigPnd:" && f[0] != "ShdPnd:") {
			continue
		}
		set, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if set&(1<<(uint(sig)-1)) != 0 {
			return true
		}
	}
	return false
}
