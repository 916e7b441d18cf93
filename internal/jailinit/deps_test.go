package jailinit

import (
	"os/exec"
	"strings"
	"testing"
)

// lateDeps are packages the init must not import: each makes Go
// initialise dozens of unrelated packages of the binary before the init
// starts, because its import path sorts after theirs (net waits for
// vendor/golang.org/x/net/...; runtime/debug, path/filepath and
// crypto/rand for most of github.com/...), or is what only the server
// uses, or the seccomp filter's compiler (the host compiles; the init
// installs the bytes, and go-seccomp-bpf's syscall tables would be
// initialised in every init of cmd/airlock-init). TestInitInitialisers in
// cmd/airlock measures the result.
var lateDeps = []string{
	"airlock/internal/seccomp", "github.com/elastic/go-seccomp-bpf", "golang.org/x/net/bpf",
	"net", "net/http", "runtime/debug", "path/filepath", "crypto/rand", "crypto/tls", "database/sql",
	"airlock/internal/errdefs", "airlock/internal/config", "airlock/internal/apitype",
	"modernc.org/", "github.com/jackc/", "github.com/prometheus/", "github.com/modelcontextprotocol/",
	"github.com/google/jsonschema-go/", "github.com/opencontainers/go-digest",
}

// The init's imports stay small: every package it reaches, and every one
// Go initialises before those are done, runs in each sandbox's init.
func TestInitDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range lateDeps {
			if dep == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad) {
				t.Errorf("jailinit reaches %s: see the package comment (go list -deps ./internal/jailinit)", dep)
			}
		}
	}
}
