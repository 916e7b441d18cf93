package gvisor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/egress"
)

// A sandbox given a network namespace of airlock's (runsc's host network
// inside it) runs in that namespace with none of the capabilities runsc
// would hand the Sentry there: code cannot listen on the egress gate's
// privileged ports (127.0.0.1:53, :443) before the gate, nor force a
// socket buffer, nor signal the init. On both platforms.
func TestNetworkNamespace(t *testing.T) {
	for _, p := range []string{"systrap", "ptrace"} {
		t.Run(p, func(t *testing.T) { testNetworkNamespace(t, p) })
	}
}

func testNetworkNamespace(t *testing.T, platform string) {
	h, _ := testHostOn(t, platform)
	ns, err := egress.NewNamespace()
	if err != nil {
		t.Fatal(err)
	}
	var want unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	sb, err := h.Start(context.Background(), Spec{Name: "g-net", Limits: limits(), NetNS: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pids, err := sb.cg.Pids()
	if err != nil || len(pids) == 0 {
		t.Fatalf("pids %v, %v", pids, err)
	}
	in := 0
	for _, pid := range pids {
		if id, err := nsID(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && id == [2]uint64{want.Dev, want.Ino} {
			in++
		}
		if caps, err := netCapsOf(pid); err == nil && caps != 0 {
			t.Errorf("process %d of the sandbox holds network capabilities %#x", pid, caps)
		}
	}
	if in == 0 {
		t.Error("no process of the sandbox is in its network namespace")
	}
	e, out, stderr := runIn(t, sb, []string{"/usr/bin/python3", "-c", `
import os, socket
def try_(f):
    try:
        f(); return "ok"
    except OSError as e:
        return type(e).__name__
def bind(fam, typ, addr):
    s = socket.socket(fam, typ); s.bind(addr)
print(try_(lambda: bind(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 53))),
      try_(lambda: bind(socket.AF_INET6, socket.SOCK_STREAM, ("::", 443))),
      try_(lambda: socket.socket().setsockopt(socket.SOL_SOCKET, 33, 1 << 29)),
      try_(lambda: os.kill(1, 9)),
      try_(lambda: bind(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 8080))))
`})
	if e.Status.ExitStatus() != 0 || strings.TrimSpace(out) != "PermissionError PermissionError PermissionError PermissionError ok" {
		t.Errorf("in the sandbox: %v %q %q", e, out, stderr)
	}
}
