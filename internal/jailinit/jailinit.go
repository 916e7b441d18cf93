// Package jailinit owns the sandbox's init: PID 1 of every jail, the
// sealed executable of package exeseal (cmd/airlock-init, or the airlock
// binary re-executed) started by the host (package jail) with argv[0]
// InitArg0. It builds the root, brings up loopback, prepares the
// Landlock ruleset, then starts programs through the sandbox entry (the
// plan jail makes and sends: Entry) and reports their exits. It also owns
// the control protocol's wire (Message), which both ends speak, and a
// server's spawner (argv[0] SpawnerArg0), which clones inits for it.
//
// It is code every sandbox runs, so it must never import what only the
// server uses, nor anything that makes Go initialise it first: Go
// initialises the packages of a binary in the order of their import
// paths, each as soon as everything it imports is done, and the init
// starts from this package's initialiser, so every package that gets its
// turn before this one's imports are done has its initialisers run in
// every sandbox (SQLite's, Prometheus', the MCP SDK's...: memory in
// every idle init and time in every start). Its imports are therefore
// the standard library's low packages and the mechanisms it applies;
// net, runtime/debug, path/filepath, crypto/rand and airlock's shared
// packages (errdefs imports net/http) are out. TestInitDeps and
// TestInitInitialisers hold that. It must never run sandboxed code with
// more privilege than the sandbox user has, and never resolve a path
// for the host.
package jailinit

import (
	"fmt"
	"os"
	"runtime"
)

// InitArg0 is argv[0] of a re-executed sandbox init.
const InitArg0 = "airlock-init"

// This package's init function runs the sandbox init, there and then
// (see the package comment), with the main goroutine kept on the main
// thread (an init function is the one place that can): the template's
// exec and the sandbox's cgroup namespace are made there (see
// execTemplate and setup).
func init() {
	if IsInit() {
		runtime.LockOSThread()
		Main()
	}
	if IsSpawner() {
		Spawner()
	}
}

// IsInit says whether this process is a sandbox's init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// tracing prints the init's CPU time at its steps to stderr when
// AIRLOCK_TRACE is set (the host passes it on).
var tracing = os.Getenv("AIRLOCK_TRACE") != ""

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "airlock-init: %v\n", err)
	os.Exit(1)
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
