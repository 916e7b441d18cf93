package zygote

import (
	"context"
	"log/slog"
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
