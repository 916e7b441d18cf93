package zygote

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			z, err := Start(ctx, h, cfg, slog.New(rec), nil)
			if err != nil {
				t.Fatal(err)
			}
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	z, err := Start(ctx, h, cfg, slog.New(newRecords()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
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
