package cgroup

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"airlock/internal/testenv"
)

// Processes that share an address space count once; one that cannot be
// read counts nothing, and the ones after it still count.
func TestPssOnce(t *testing.T) {
	pss := map[int]int64{1: 10 << 20, 2: 10 << 20, 3: 7 << 20, 4: 3 << 20, 5: 10 << 20}
	read := func(pid int) (int64, bool) {
		n, ok := pss[pid]
		return n, ok && pid != 4
	}
	vm := map[int]int{1: 1, 2: 1, 3: 3, 4: 4, 5: 1}
	same := func(a, b int) bool { return vm[a] == vm[b] }
	if got, want := pssOnce([]int{1, 2, 3, 4, 5, 6}, read, same), int64(17<<20); got != want {
		t.Fatalf("pssOnce = %d, want %d (1, 2 and 5 share one address space; 4 unreadable; 6 gone)", got, want)
	}
	if got := pssOnce(nil, read, same); got != 0 {
		t.Fatalf("pssOnce of no process = %d", got)
	}
}

// The kernel tells a process that shares its parent's address space
// (clone with CLONE_VM, as gVisor's systrap stubs are made) from one that
// does not, and pssOnce counts the pair once.
func TestSameVM(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Skip(t, "python3 not found: %v", err)
	}
	// The child runs pause() on a stack of its own, in its parent's
	// address space, until killed.
	cmd := exec.Command(py, "-c", `
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
stack = ctypes.create_string_buffer(1 << 16)
top = (ctypes.addressof(stack) + len(stack)) & ~15
pid = libc.clone(ctypes.cast(libc.pause, ctypes.c_void_p), ctypes.c_void_p(top), 0x100 | signal.SIGCHLD, None)
print(pid, flush=True)
sys.stdin.read()
if pid > 0:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
`)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || child <= 0 {
		t.Fatalf("clone: %q", line)
	}
	parent, self := cmd.Process.Pid, os.Getpid()
	if !SameAddressSpace(parent, child) {
		t.Fatalf("a CLONE_VM child (%d) is not seen sharing its parent's (%d) address space", child, parent)
	}
	if SameAddressSpace(parent, self) || SameAddressSpace(child, self) {
		t.Fatal("processes with address spaces of their own are seen sharing one")
	}
	if SameAddressSpace(parent, 1<<22+12345) {
		t.Fatal("a process that does not exist is seen sharing an address space")
	}
	one := func(int) (int64, bool) { return 1 << 20, true }
	if got, want := pssOnce([]int{parent, child, self}, one, SameAddressSpace), int64(2<<20); got != want {
		t.Fatalf("pssOnce = %d, want %d: the pair counts once", got, want)
	}
	if n, ok := readPss(parent); !ok || n <= 0 {
		t.Fatalf("readPss(%d) = %d, %v", parent, n, ok)
	}
	if _, ok := readPss(1<<22 + 12345); ok {
		t.Fatal("readPss of a process that does not exist succeeded")
	}
}
