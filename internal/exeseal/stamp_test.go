package exeseal

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// copyCheckout copies what scripts/build.sh builds from into a new
// directory named name, and returns it.
func copyCheckout(t *testing.T, name string) string {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "go.sum", "cmd", "internal", "scripts/build.sh"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(repo, f), filepath.Join(dir, f)).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", f, err, out)
		}
	}
	os.Remove(filepath.Join(dir, "internal/exeseal/airlock-init")) // a build's leftover
	return dir
}

// Two scripts/build.sh in one checkout take turns: the embedded init has
// one path, which one build would otherwise remove or replace under the
// other. The test holds the build's lock: the build must wait for it
// (its flock is seen waiting) without having touched the init, then
// finish once it is released. checked against a mutant: without the
// lock, the build ran through and no flock ever waited.
func TestBuildTakesTurns(t *testing.T) {
	dir := copyCheckout(t, "checkout")
	lock, err := os.Open(filepath.Join(dir, "internal/exeseal"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "airlock")
	cmd := exec.Command(filepath.Join(dir, "scripts/build.sh"), out)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waiting := false
	for !waiting {
		select {
		case err := <-done:
			t.Fatalf("the build ran while another held its lock: %v\n%s", err, log.String())
		case <-time.After(10 * time.Millisecond):
		}
		waiting = childNamed(cmd.Process.Pid, "flock")
	}
	if _, err := os.Stat(filepath.Join(dir, "internal/exeseal/airlock-init")); err == nil {
		t.Error("the waiting build wrote the init")
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if err := <-done; err != nil {
		t.Fatalf("build.sh: %v\n%s", err, log.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "internal/exeseal/airlock-init")); err == nil {
		t.Error("the build left its init behind")
	}
}

// childNamed says whether a child of pid runs the command name.
func childNamed(pid int, name string) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if comm, _ := os.ReadFile("/proc/" + c + "/comm"); strings.TrimSpace(string(comm)) == name {
				return true
			}
		}
	}
	return false
}

// scripts/build.sh's stamp is the same from any checkout: it names each
// source file by its import path, never by where the checkout is, so a
// build is reproducible in another directory. checked against a mutant:
// with absolute paths hashed, the two copies' stamps differed.
func TestStampAnyCheckout(t *testing.T) {
	var stamps []string
	for _, name := range []string{"a", "checkout-b"} {
		dir := copyCheckout(t, name)
		out, err := exec.Command(filepath.Join(dir, "scripts/build.sh"), "--stamp").CombinedOutput()
		if err != nil {
			t.Fatalf("build.sh --stamp: %v\n%s", err, out)
		}
		s := strings.TrimSpace(string(out))
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(s) {
			t.Fatalf("build.sh --stamp printed %q, want a SHA-256", s)
		}
		stamps = append(stamps, s)
	}
	if stamps[0] != stamps[1] {
		t.Errorf("two checkouts of the same sources got stamps %s and %s", stamps[0], stamps[1])
	}
}
