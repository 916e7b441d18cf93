package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/jail"
)

// heavyInits are package initialisers of this binary that a sandbox's
// init must never run (see package jailinit): the server's storage,
// metrics, MCP and HTTP stacks.
var heavyInits = []string{
	"modernc.org/sqlite", "modernc.org/libc", "github.com/jackc/pgx/v5", "github.com/prometheus/procfs",
	"github.com/prometheus/client_golang/prometheus", "github.com/modelcontextprotocol/go-sdk/mcp",
	"github.com/google/jsonschema-go/jsonschema", "github.com/opencontainers/go-digest", "net/http", "crypto/tls",
}

// initBudget caps what the package initialisers that run before a
// sandbox's init allocate (GODEBUG=inittrace=1): 742 KB before the init
// had a package of its own, 276 KB after (2026-11-27).
const initBudget = 400 << 10

// A sandbox's init starts before the initialisers only the server needs:
// the binary (this test binary links all of airlock's main package),
// re-executed as an init, is traced until it finds no setup message.
func TestInitInitialisers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[0]) // the init reads EOF where its setup would be
	initEnd := os.NewFile(uintptr(fds[1]), "ctl-init")
	defer initEnd.Close()
	var stderr bytes.Buffer
	cmd := &exec.Cmd{Path: exe, Args: []string{jail.InitArg0}, Env: []string{"GODEBUG=inittrace=1"},
		ExtraFiles: []*os.File{initEnd}, Stderr: &stderr}
	if err := cmd.Run(); err == nil {
		t.Fatal("an init without a host exited 0")
	}
	if !strings.Contains(stderr.String(), "airlock-init: no setup message") {
		t.Fatalf("the init did not run:\n%s", stderr.String())
	}
	var n, total int
	for _, line := range strings.Split(stderr.String(), "\n") {
		// init <package> @0.1 ms, 0.02 ms clock, <bytes> bytes, <n> allocs
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		b, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("inittrace line %q", line)
		}
		n, total = n+1, total+b
		for _, heavy := range heavyInits {
			if f[1] == heavy {
				t.Errorf("a sandbox's init runs the initialisers of %s (%d bytes)", heavy, b)
			}
		}
	}
	t.Logf("%d packages initialised before the init, %d bytes allocated", n, total)
	if n == 0 {
		t.Fatalf("no inittrace output:\n%s", stderr.String())
	}
	if total > initBudget {
		t.Errorf("the initialisers before a sandbox's init allocate %d bytes, over %d: something the init imports (or what sorts before it) grew; see package jailinit", total, initBudget)
	}
}
