package zygote

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/jail/jailtest"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { jail.RunTests(m) }

func testHost(t *testing.T) (*jail.Host, config.Config) {
	t.Helper()
	return jailtest.Host(t, "zygote", func(c *config.Config) {
		c.Pool.Preload = []string{"json"} // quick to start
	})
}

// startTemplate starts a template on h for the rest of the test, with
// rec's log (nil: one of its own).
func startTemplate(t *testing.T, h *jail.Host, cfg config.Config, rec *records) *Zygote {
	t.Helper()
	if rec == nil {
		r := newRecords()
		rec = &r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	z, err := Start(ctx, h, cfg, slog.New(*rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	return z
}

// subreaper makes the test process a child subreaper, as the server is,
// for the rest of the test.
func subreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// records is a slog.Handler that keeps what is logged.
type records struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newRecords() records { return records{mu: &sync.Mutex{}, msgs: new([]string)} }

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r records) WithGroup(string) slog.Handler            { return r }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.msgs = append(*r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

func (r records) contains(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range *r.msgs {
		if strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

// The template's end is warned about when it is unexpected (it died), not
// when Close ends it (a clean shutdown).
func TestEndWarnedOnlyWhenUnexpected(t *testing.T) {
	h, cfg := testHost(t)
	for _, tc := range []struct {
		name string
		end  func(*Zygote)
		warn bool
	}{
		{"closed", func(z *Zygote) { z.Close() }, false},
		{"died", func(z *Zygote) {
			syscall.Kill(z.Pid(), syscall.SIGKILL)
			select {
			case <-z.Dead():
			case <-time.After(30 * time.Second):
				t.Error("the killed template was not noticed")
			}
			z.Close()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecords()
			z := startTemplate(t, h, cfg, &rec)
			tc.end(z) // Close returns once the reader has ended
			if got := rec.contains("WARN python template ended"); got != tc.warn {
				t.Errorf("warned of the template's end: %v, want %v; log: %q", got, tc.warn, *rec.msgs)
			}
		})
	}
}

// A forked runtime is in its sandbox's cgroup, in every hierarchy, by the
// time it says hello: it moved itself in (on
// cgroup v1 through the tasks files, see cgroup.ProcsFiles) before it ran
// anything.
func TestForkedIntoTheSandboxCgroup(t *testing.T) {
	h, cfg := testHost(t)
	z := startTemplate(t, h, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := h.Start(ctx, jail.Spec{Name: "zygote-cgroup", Slot: jail.ServerSlotBase + 7, Limits: cfg.Defaults})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var stdio [4]*os.File
	var host [4]*os.File
	for i := range stdio {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		host[i], stdio[i] = os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "runtime")
		defer host[i].Close()
		defer stdio[i].Close()
	}
	fk, err := z.Fork(ctx, sb, cfg.Defaults, stdio)
	if err != nil {
		t.Fatal(err)
	}
	defer fk.Pidfd.Close()
	host[3].SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := host[3].Read(make([]byte, 1)); err != nil {
		t.Fatalf("no hello from the runtime: %v", err)
	}
	if in, err := sb.Cgroup().Holds(fk.Pid); !in || err != nil {
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(fk.Pid) + "/cgroup")
		t.Errorf("the runtime is not in its sandbox's cgroup (%v):\n%s", err, cg)
	}
}

// stdioPairs are a runtime's fds 0-3 and the host's ends of them, closed
// as the test ends.
func stdioPairs(t *testing.T) (stdio, host [4]*os.File) {
	t.Helper()
	for i := range stdio {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		host[i], stdio[i] = os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "runtime")
		t.Cleanup(func() { host[i].Close(); stdio[i].Close() })
	}
	return stdio, host
}

// gone waits until no process pid is left, not even a zombie, and
// reports whether that happened within 30 s.
func gone(pid int) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func state(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return string(b)
}

// TestOrphansReaped: the runtimes of a template that died are the
// server's children (a child subreaper), and none is left behind: one
// whose caller gives up on it then is killed and reaped by the time
// Close returns; one in use is reaped when its session ends it, with
// nobody else waiting for it. (Close's single WNOHANG pass left the
// first running, then a zombie, and the second a zombie.)
func TestOrphansReaped(t *testing.T) {
	subreaper(t)
	h, cfg := testHost(t)
	z := startTemplate(t, h, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sbs [2]*jail.Sandbox
	var pids [2]int
	for i := range sbs {
		sb, err := h.Start(ctx, jail.Spec{Name: "zygote-orphan-" + strconv.Itoa(i), Slot: jail.ServerSlotBase + 8 + uint32(i), Limits: cfg.Defaults})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		sbs[i] = sb
		stdio, host := stdioPairs(t)
		fk, err := z.Fork(ctx, sb, cfg.Defaults, stdio)
		if err != nil {
			t.Fatal(err)
		}
		fk.Pidfd.Close() // no instance watches it here
		host[3].SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := host[3].Read(make([]byte, 1)); err != nil {
			t.Fatalf("no hello from the runtime: %v", err)
		}
		pids[i] = fk.Pid
	}
	syscall.Kill(z.Pid(), syscall.SIGKILL)
	<-z.Dead()
	// The caller of the second gives up on it now (as forget does when
	// its answer comes too late).
	z.mu.Lock()
	z.abandonLocked(pids[1])
	z.mu.Unlock()
	z.Close()
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[1])); err == nil {
		t.Errorf("the abandoned runtime %d is left after Close: %s", pids[1], state(pids[1]))
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[0])); err != nil {
		t.Fatalf("the runtime in use ended with its template: %v", err)
	}
	sbs[0].Close() // its session ends it
	if !gone(pids[0]) {
		t.Errorf("the runtime in use, ended, was not reaped: %s", state(pids[0]))
	}
}

// TestAbandonedForkKilled: a runtime forked for a caller that gave up
// (its context ended before the template answered) is killed at once
// and reaped, even while its sandbox lives on.
func TestAbandonedForkKilled(t *testing.T) {
	h, cfg := testHost(t)
	z := startTemplate(t, h, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	abandoned := make(chan int, 1)
	z.mu.Lock()
	z.onAbandon = func(pid int) { abandoned <- pid }
	z.mu.Unlock()
	sb, err := h.Start(ctx, jail.Spec{Name: "zygote-abandoned", Slot: jail.ServerSlotBase + 10, Limits: cfg.Defaults})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	stdio, _ := stdioPairs(t)
	given, giveUp := context.WithCancel(ctx)
	giveUp()
	if _, err := z.Fork(given, sb, cfg.Defaults, stdio); err == nil {
		t.Fatal("a fork whose caller gave up was handed over")
	}
	select {
	case pid := <-abandoned:
		if !gone(pid) {
			t.Errorf("the abandoned runtime %d is left: %s", pid, state(pid))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the template's answer to a fork nobody waits for was never taken")
	}
}

// TestUnansweredForkReaped: a template that dies after forking a runtime
// but before telling the server of it leaves a runtime nobody knows,
// which becomes the server's child (a child subreaper). Its sandbox's
// teardown kills it; it must not stay a zombie of the server, which
// would also hold the sandbox's init in its exit (the init of a pid
// namespace waits for every process of it to be reaped), and the
// teardown with it. checked against a mutant: without adoptOrphans, the
// teardown hung on the runtime's zombie.
func TestUnansweredForkReaped(t *testing.T) {
	subreaper(t)
	h, cfg := testHost(t)
	dieAfterFork = true
	z := startTemplate(t, h, cfg, nil)
	dieAfterFork = false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := h.Start(ctx, jail.Spec{Name: "zygote-unanswered", Slot: jail.ServerSlotBase + 11, Limits: cfg.Defaults})
	if err != nil {
		t.Fatal(err)
	}
	before := children()
	stdio, _ := stdioPairs(t)
	if _, err := z.Fork(ctx, sb, cfg.Defaults, stdio); err == nil {
		t.Fatal("a fork whose template died before replying was handed over")
	}
	<-z.Dead()
	closed := make(chan struct{})
	go func() { sb.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Error("the sandbox's teardown hangs on the runtime nobody reaped")
	}
	// Whatever was born since, but the template, is the runtime; it must
	// be gone, not a zombie.
	for pid := range children() {
		if before[pid] || pid == z.Pid() {
			continue
		}
		t.Errorf("the runtime %d is left: %s", pid, state(pid))
		unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED, nil) // for the leak guards
	}
	<-closed
}

// children lists the test process's children, of all its threads.
func children() map[int]bool {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	pids := map[int]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(c); err == nil {
				pids[pid] = true
			}
		}
	}
	return pids
}
