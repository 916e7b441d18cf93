package lockfile

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helper processes: one takes the lock and starts a child that gets
// a copy of its descriptor (as a child between fork and exec has one),
// then waits to be killed; the child waits for its stdin to close.
func TestMain(m *testing.M) {
	switch os.Getenv("LOCKFILE_TEST_ROLE") {
	case "holder":
		f, held, err := TryLock(os.Getenv("LOCKFILE_TEST_PATH"))
		if err != nil || held {
			os.Exit(3)
		}
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "LOCKFILE_TEST_ROLE=child")
		child.Stdin, child.ExtraFiles = os.Stdin, []*os.File{f}
		if err := child.Start(); err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString("ready\n")
		// Not select{}: Go's deadlock check would end the holder at once.
		time.Sleep(time.Hour)
		os.Exit(5)
	case "child":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startHolder starts a process that holds path's lock, with a child that
// holds a copy of it until childGo is closed.
func startHolder(t *testing.T, path string) (holder *exec.Cmd, childGo io.Closer) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	holder = exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), "LOCKFILE_TEST_ROLE=holder", "LOCKFILE_TEST_PATH="+path)
	holder.Stdin = r
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() {
		w.Close()
		holder.Process.Kill()
		holder.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	return holder, w
}

// A lock its taker holds is refused at once; one whose taker was killed
// while a child of it still held the descriptor is taken as soon as the
// child lets go (checked against a mutant: Alive always true, TryLock
// refused at once, as before the fix); one the child keeps past the
// bound is refused as orphaned.
func TestLockOutlivingItsTaker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.lock")
	holder, childGo := startHolder(t, path)
	if Holder(path) != holder.Process.Pid {
		t.Fatalf("holder recorded as %d, want %d", Holder(path), holder.Process.Pid)
	}
	if f, held, err := TryLock(path); !held || err != nil {
		t.Fatalf("a live holder's lock: %v %v %v, want held", f, held, err)
	}

	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	if f, held, err := tryLock(path, time.Millisecond); !held || !errors.Is(err, ErrOrphaned) {
		t.Fatalf("a lock a child keeps: %v %v %v, want ErrOrphaned", f, held, err)
	}
	got := make(chan error, 1)
	go func() {
		f, held, err := TryLock(path)
		if err == nil && held {
			err = errors.New("held")
		}
		if f != nil {
			if Holder(path) != os.Getpid() {
				err = errors.New("this process not recorded as the holder")
			}
			f.Close()
		}
		got <- err
	}()
	childGo.Close()
	if err := <-got; err != nil {
		t.Fatalf("once the dead taker's child let go: %v", err)
	}
}

// In one process, a second lock of the same file is refused too.
func TestLockTwiceInOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	f, held, err := TryLock(path)
	if err != nil || held {
		t.Fatal(held, err)
	}
	if g, held, err := TryLock(path); !held || err != nil {
		t.Fatalf("second lock: %v %v %v", g, held, err)
	}
	f.Close()
	g, held, err := TryLock(path)
	if err != nil || held {
		t.Fatalf("after release: %v %v", held, err)
	}
	g.Close()
}

// Held tells a lock held from one nobody holds (or no file), and takes
// nothing: a TryLock right after it succeeds, and the file is unchanged.
func TestHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	if Held(path) {
		t.Error("no file: held")
	}
	f, _, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(path) {
		t.Error("a lock taken: not held")
	}
	f.Close()
	before, _ := os.ReadFile(path)
	if Held(path) {
		t.Error("a lock let go: held")
	}
	g, held, err := TryLock(path)
	if err != nil || held {
		t.Fatalf("a lock after Held: %v %v", held, err)
	}
	g.Close()
	if after, _ := os.ReadFile(path); string(before) != string(after) || len(after) == 0 {
		t.Errorf("the lock file changed: %q, %q", before, after)
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) || !Alive(0) {
		t.Error("this process, or an unknown one, is not alive")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Wait()
	if Alive(pid) {
		t.Errorf("reaped process %d is alive", pid)
	}
}

// A process on its way out is not taken to live: it keeps its locks for
// a moment after its exit began (checked against a mutant: only Z and X
// read as gone, as before, and the exiting rows fail).
func TestRunning(t *testing.T) {
	const (
		live    = "4242 (airlock) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 9 0 100 0 0"
		exiting = "4242 (airlock) D 1 4242 4242 0 -1 4194636 1 0 0 0 0 0 0 0 20 0 9 0 100 0 0"
		quiet   = "SigQ:\t0/63\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"
	)
	for _, c := range []struct {
		name, stat, status string
		want               bool
	}{
		{"sleeping", live, quiet, true},
		{"running", strings.Replace(live, " S ", " R ", 1), quiet, true},
		{"no status", live, "", true},
		{"a SIGTERM pending", live, "SigPnd:\t0000000000004000\nShdPnd:\t0000000000000000\n", true},
		{"a name like a zombie's", "4242 (x) Z 1 (y) S 1 4242 4242 0 -1 4194560 1 0", quiet, true},
		{"zombie", strings.Replace(live, " S ", " Z ", 1), quiet, false},
		{"dead", strings.Replace(live, " S ", " X ", 1), quiet, false},
		{"exiting", exiting, quiet, false},
		{"exiting, running", strings.Replace(exiting, " D ", " R ", 1), quiet, false},
		{"SIGKILL pending", live, "SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", false},
		{"SIGKILL pending, shared", live, "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", false},
	} {
		if got := running([]byte(c.stat), []byte(c.status)); got != c.want {
			t.Errorf("%s: running %v, want %v", c.name, got, c.want)
		}
	}
}

// A lock whose taker is not alive but still there past the bound (on its
// way out, as Alive sees it here) is refused as still exiting, not as a
// lock a child of it kept (checked against a mutant: ErrOrphaned always).
func TestLockOfATakerStillExiting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.lock")
	holder, _ := startHolder(t, path)
	alive = func(pid int) bool { return pid != holder.Process.Pid && Alive(pid) }
	defer func() { alive = Alive }()
	f, held, err := tryLock(path, time.Millisecond)
	if !held || !errors.Is(err, ErrExiting) || !strings.Contains(err.Error(), strconv.Itoa(holder.Process.Pid)) {
		t.Fatalf("a lock its exiting taker holds: %v %v %v, want ErrExiting naming its pid", f, held, err)
	}
}
