package egress

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/testenv"
)

// A handle naming the server's own network namespace (a sandbox's
// descriptor number closed and reused, or the server's just opened in its
// place) is refused: the gate's routes (every address local) and its
// listeners never land on the host. The attach runs in a child process in
// a scratch namespace of its own, so that a mutant without the check
// changes only that namespace.
func TestAttachRefusesTheServersNamespace(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_OWN_NETNS") == "1" {
		attachOwnNamespace()
		return
	}
	testenv.RequireRoot(t, "a scratch network namespace")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttachRefusesTheServersNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_OWN_NETNS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused: egress: the handle names the server's own network namespace") {
		t.Errorf("attach to the server's own namespace: %v\n%s", err, out)
	}
}

// attachOwnNamespace, in the child (its own namespace is "the server's"),
// attaches a gate to it and says what happened.
func attachOwnNamespace() {
	if err := loUp(); err != nil {
		fmt.Println("lo:", err)
		os.Exit(2)
	}
	own, err := os.Open("/proc/self/ns/net")
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	p, err := ParsePolicy([]string{"a.test"})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	g, err := Attach(int(own.Fd()), Options{Session: "s", Policy: p})
	if err == nil {
		g.Close()
		fmt.Println("attached to its own namespace")
		os.Exit(1)
	}
	// Nothing was left behind: 127.0.0.1:53 is free.
	if l, err := net.ListenPacket("udp4", "127.0.0.1:53"); err != nil {
		fmt.Println("127.0.0.1:53 taken:", err)
		os.Exit(1)
	} else {
		l.Close()
	}
	fmt.Println("refused:", err)
}
