package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
	"airlock/internal/workspace"
)

// persistConfig is the test configuration with persistence on, in a
// directory of the test's.
func persistConfig(t testing.TB) *config.Config {
	c := testConfig()
	c.Persistence.Enabled = true
	c.Persistence.Dir = t.TempDir()
	return &c
}

// writeFiles puts files into s's workspace as a client would.
// pausedWith creates a Python session of m holding files, and pauses it.
func pausedWith(t *testing.T, m *Manager, files map[string]string) *Session {
	t.Helper()
	s := create(t, m, "python")
	writeFiles(t, s, files)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkClosed fails unless every instance src made from the from-th on
// has been closed; what says what should have closed it.
func checkClosed(t *testing.T, src *fakeSource, from int, what string) {
	t.Helper()
	src.mu.Lock()
	defer src.mu.Unlock()
	for i, f := range src.all[from:] {
		if !f.closed.Load() {
			t.Errorf("instance %d outlived %s", from+i, what)
		}
	}
}

// damageImage rewrites the files of s's image with what damage makes of
// them, and returns the file's path and what it now holds.
func damageImage(t *testing.T, cfg *config.Config, s *Session, damage func([]byte) []byte) (string, []byte) {
	t.Helper()
	p := filepath.Join(cfg.Persistence.Dir, s.ID(), "files.tar")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = damage(b)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// pausedWithFiles creates a Python session of ctx's caller on m, writes
// someFiles into it and pauses it.
func pausedWithFiles(t *testing.T, m *Manager, ctx context.Context) *Session {
	t.Helper()
	s, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFiles(t *testing.T, s *Session, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if _, err := s.Files(context.Background()).Write(p, strings.NewReader(content), 1<<20, 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
}

// checkFiles checks s's workspace holds exactly files' contents.
func checkFiles(t *testing.T, s *Session, files map[string]string) {
	t.Helper()
	for p, want := range files {
		f, _, err := s.Files(context.Background()).Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != want {
			t.Errorf("%s: %q restored, want %q", p, got, want)
		}
	}
}

var someFiles = map[string]string{
	"notes.txt":        "hello",
	"data/table.csv":   "a,b\n1,2\n",
	"data/deep/x.json": `{"k": 1}`,
	"big.bin":          strings.Repeat("\x00\x01binary", 100000),
}

// TestPauseResume: a paused session keeps its id, files, limits,
// environment and lifecycle, has no sandbox, is listed as paused, refuses
// work with ErrPaused, and a resume brings it back in a fresh sandbox.
func TestPauseResume(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python", Env: map[string]string{"FOO": "bar"},
		Limits: config.Limits{Memory: 300 << 20}, AutoResume: false, Timeout: config.Duration(time.Hour), OnTimeout: "pause"})
	if err != nil {
		t.Fatal(err)
	}
	if info := s.Info(); info.Restores != apitype.RestoreFiles || info.ExpiresAt == nil || info.OnTimeout != "pause" {
		t.Errorf("a live session's info: %+v", info)
	}
	writeFiles(t, s, someFiles)
	if _, err := execute(t, s, "out x", nil); err != nil {
		t.Fatal(err)
	}
	first := src.last()
	info, err := m.PauseFor(context.Background(), s.ID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != apitype.StatePaused || info.Paused == nil || info.Paused.Files != 4 || info.Paused.Dirs != 2 || info.Paused.DiskBytes == 0 || info.Executions != 1 {
		t.Errorf("pause's answer: %+v %+v", info, info.Paused)
	}
	if end := ended(t, s); end.Code != apitype.EndPaused {
		t.Errorf("the live session ended for %q", end.Code)
	}
	<-s.gone
	if !first.closed.Load() {
		t.Error("the paused session's sandbox is not freed")
	}
	// Paused: described, listed, refused.
	if _, err := m.Get(s.ID()); !errors.Is(err, errdefs.ErrPaused) {
		t.Errorf("get of a paused session: %v", err)
	}
	if _, err := m.Reach(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrPaused) || !strings.Contains(err.Error(), "/resume") {
		t.Errorf("work in a paused session without auto_resume: %v", err)
	}
	if d, err := m.Describe(context.Background(), s.ID()); err != nil || d.State != apitype.StatePaused || d.Limits.Memory != 300<<20 {
		t.Errorf("describe: %+v, %v", d, err)
	}
	if l := m.List(); len(l) != 1 || l[0].State != apitype.StatePaused {
		t.Errorf("list: %+v", l)
	}
	if again, err := m.PauseFor(context.Background(), s.ID(), ""); err != nil || again.State != apitype.StatePaused {
		t.Errorf("a second pause: %+v, %v", again, err)
	}
	// Resumed: the same id, the files, a new sandbox.
	r, err := m.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if r.ID() != s.ID() || src.last() == first {
		t.Fatalf("resumed as %s on the same sandbox: %v", r.ID(), src.last() == first)
	}
	checkFiles(t, r, someFiles)
	ri := r.Info()
	if ri.State != apitype.StateIdle || ri.Restored != apitype.RestoreFiles || ri.Executions != 1 || ri.Limits.Memory != 300<<20 ||
		!ri.CreatedAt.Equal(s.Info().CreatedAt) || ri.ExpiresAt == nil {
		t.Errorf("resumed info: %+v", ri)
	}
	if r.made.Env["FOO"] != "bar" || r.runtimeEnv()["FOO"] != "bar" {
		t.Errorf("the environment was not restored: %v", r.runtimeEnv())
	}
	if again, err := m.ResumeFor(context.Background(), s.ID()); err != nil || again != r {
		t.Errorf("a second resume: %v", err)
	}
	// Set aside until the first point is sealed (issue #21), then gone.
	sealed(t, r)
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
		t.Errorf("the image outlived the resume: %v", ents)
	}
	if _, err := execute(t, r, "out y", nil); err != nil {
		t.Errorf("executing after the resume: %v", err)
	}
}

// TestPauseKeepsContexts: a resumed session has its code contexts again
// (fresh interpreters), under their ids, languages and directories.
func TestPauseKeepsContexts(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	s := create(t, m, "python")
	writeFiles(t, s, map[string]string{"sub/a": "1"})
	c, err := s.CreateContext(context.Background(), apitype.CreateContextRequest{Language: "bash", Cwd: "sub", Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Contexts()
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	r, err := m.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	after, _ := r.Contexts()
	if len(after) != len(before) || len(after) != 2 {
		t.Fatalf("contexts after the resume: %+v, before %+v", after, before)
	}
	got := after[1]
	if got.ID != c.ID || got.Language != "bash" || got.Cwd != c.Cwd {
		t.Errorf("restored context %+v, want %+v", got, *c)
	}
	next, err := r.CreateContext(context.Background(), apitype.CreateContextRequest{})
	if err != nil || next.ID == c.ID {
		t.Errorf("a new context after the resume: %+v %v", next, err)
	}
}

// TestAutoResume: work naming a paused session made with auto_resume
// resumes it.
func TestAutoResume(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, map[string]string{"a": "1"})
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	r, err := m.Reach(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, map[string]string{"a": "1"})
}

// TestAutoResumeAtOnce: calls that name a paused auto_resume session at
// the same time all get the one resumed session, none a conflict.
func TestAutoResumeAtOnce(t *testing.T) {
	m, src, _ := newTestManager(t, persistConfig(t))
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	before := len(src.all)
	const n = 4
	got := make(chan *Session, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			r, err := m.Reach(context.Background(), s.ID())
			got <- r
			errs <- err
		}()
	}
	var first *Session
	for i := 0; i < n; i++ {
		r, err := <-got, <-errs
		if err != nil {
			t.Errorf("call %d: %v", i, err)
			continue
		}
		if first == nil {
			first = r
		} else if r != first {
			t.Errorf("two sessions resumed for one id")
		}
	}
	if len(src.all) != before+1 {
		t.Errorf("%d sandboxes taken for one resume", len(src.all)-before)
	}
}

// TestPauseRefused: what a pause refuses leaves the session running as
// it was: an execution running (409), a shell command, persistence off,
// a tenant's quota of paused bytes.
func TestPauseRefused(t *testing.T) {
	t.Run("executing", func(t *testing.T) {
		m, _, _ := newTestManager(t, persistConfig(t))
		s := create(t, m, "python")
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
		}()
		busy(t, s)
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "interrupt") {
			t.Errorf("pause while executing: %v", err)
		}
		s.Interrupt()
		<-done
		if _, err := execute(t, s, "out x", nil); err != nil {
			t.Errorf("the session does not run after a refused pause: %v", err)
		}
		if _, err := s.Pause(context.Background(), ""); err != nil {
			t.Errorf("pause once idle: %v", err)
		}
	})
	t.Run("a command running", func(t *testing.T) {
		m, _, _ := newTestManager(t, persistConfig(t))
		s := create(t, m, "python")
		c, err := s.RunCommand(context.Background(), apitype.CommandRequest{Command: "sleep", Background: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("pause with a command running: %v", err)
		}
		s.SignalCommand(c.ID, "SIGKILL")
	})
	t.Run("persistence off", func(t *testing.T) {
		m, _, _ := newTestManager(t, nil)
		s := create(t, m, "python")
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("pause without persistence: %v", err)
		}
		if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{OnTimeout: "pause"}); !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("on_timeout pause without persistence: %v", err)
		}
	})
	t.Run("quota", func(t *testing.T) {
		cfg := persistConfig(t)
		cfg.Quotas.MaxPausedBytes = 4096
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, map[string]string{"big": strings.Repeat("x", 8192)})
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrQuota) {
			t.Errorf("pause over the quota: %v", err)
		}
		if _, err := execute(t, s, "out x", nil); err != nil {
			t.Errorf("the session does not run after a refused pause: %v", err)
		}
		if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
			t.Errorf("a refused pause left %v", ents)
		}
	})
}

// TestPausedAcrossRestart: a shutdown pauses every live session; the
// next manager on the same directory lists them as paused, counting
// their size on disk, and resumes them with their files, for their
// tenant only. Checked against a mutant: the size read back as 0.
func TestPausedAcrossRestart(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"})
	s, err := m1.Create(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	m1.Close()
	if end := ended(t, s); end.Code != apitype.EndPaused {
		t.Fatalf("shutdown ended the session for %q, want paused", end.Code)
	}

	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	l := m2.List()
	if len(l) != 1 || l[0].ID != s.ID() || l[0].State != apitype.StatePaused || l[0].Tenant != "acme" || l[0].Language != "bash" {
		t.Fatalf("after the restart: %+v", l)
	}
	// What it takes on disk counts after the restart too (the tenant's
	// quotas.max_paused_bytes).
	var onDisk int64
	filepath.WalkDir(filepath.Join(cfg.Persistence.Dir, s.ID()), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			onDisk += fi.Size()
		}
		return err
	})
	if l[0].Paused.DiskBytes != onDisk || m2.PausedUsage()["acme"].DiskBytes != onDisk {
		t.Errorf("after the restart: %d bytes on disk counted (usage %+v), the image takes %d", l[0].Paused.DiskBytes, m2.PausedUsage()["acme"], onDisk)
	}
	other := identity.With(context.Background(), identity.Identity{Tenant: "other"})
	if _, err := m2.ResumeFor(other, s.ID()); !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrSessionLost) {
		var ot *OtherTenantError
		if !errors.As(err, &ot) {
			t.Errorf("another tenant's resume: %v", err)
		}
	}
	r, err := m2.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, someFiles)
	if r.Tenant() != "acme" {
		t.Errorf("resumed for tenant %q", r.Tenant())
	}
}

// TestShutdownPausesBusySessions: a shutdown pauses a session whose code
// runs (interrupted) and one with a background command (killed), rather
// than ending them.
func TestShutdownPausesBusySessions(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Persistence.ShutdownTimeout = config.Duration(5 * time.Second)
	m, _, _ := newTestManager(t, cfg)
	busyOne, withCmd := create(t, m, "python"), create(t, m, "python")
	go busyOne.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
	busy(t, busyOne)
	if _, err := withCmd.RunCommand(context.Background(), apitype.CommandRequest{Command: "sleep", Background: true}, nil); err != nil {
		t.Fatal(err)
	}
	m.Close()
	for _, s := range []*Session{busyOne, withCmd} {
		if end := ended(t, s); end.Code != apitype.EndPaused {
			t.Errorf("%s ended for %q at shutdown, want paused", s.ID(), end.Code)
		}
	}
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 2 {
		t.Errorf("%d images after the shutdown, want 2", len(ents))
	}
}

// TestPauseKillsSayWhy: what a shutdown's pause or a lifetime's pause
// interrupts or kills says why: the execution killed, kill_reason
// "shutdown" or "lifetime", its error SessionPaused (not a bare
// KeyboardInterrupt with killed false); the shell command killed with
// the same reason (not a bare SIGKILL). Checked against a mutant: the
// pause interrupting and killing as a client would ("" reasons: the
// execution not killed, the command's kill_reason empty).
func TestPauseKillsSayWhy(t *testing.T) {
	for _, c := range []struct {
		name string
		why  apitype.KillReason
	}{{"shutdown", apitype.KillShutdown}, {"lifetime", apitype.KillLifetime}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := persistConfig(t)
			cfg.Persistence.ShutdownTimeout = config.Duration(5 * time.Second)
			m, _, _ := newTestManager(t, cfg)
			req := apitype.CreateSessionRequest{Language: "python"}
			if c.why == apitype.KillLifetime {
				req.Timeout, req.OnTimeout = config.Duration(time.Second), apitype.OnTimeoutPause
			}
			s, err := m.Create(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			cr, err := s.RunCommand(context.Background(), apitype.CommandRequest{Command: "sleep", Background: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.cmds.mu.Lock()
			cmd := s.cmds.byID[cr.ID]
			s.cmds.mu.Unlock()
			type result struct {
				res *apitype.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
				done <- result{res, err}
			}()
			busy(t, s)
			if c.why == apitype.KillShutdown {
				m.Close()
			}
			if end := ended(t, s); end.Code != apitype.EndPaused {
				t.Fatalf("ended for %q, want paused", end.Code)
			}
			r := <-done
			if r.err != nil || r.res == nil || !r.res.Killed || r.res.KillReason != c.why || r.res.Error == nil || r.res.Error.Name != "SessionPaused" {
				t.Errorf("the execution: %+v %v, want killed for %s", r.res, r.err, c.why)
			}
			<-cmd.done
			cmd.mu.Lock()
			res := cmd.res
			cmd.mu.Unlock()
			if res == nil || !res.Killed || res.KillReason != c.why {
				t.Errorf("the command: %+v, want killed for %s", res, c.why)
			}
		})
	}
}

// TestShutdownBounded: a shutdown's pauses are bounded by
// persistence.shutdown_timeout: a session whose code ignores the
// interrupt is not paused in time and ends (shutdown), with no image
// left of it, while the others are paused; the shutdown does not wait
// for it any longer. checked against a mutant: pauseAll without the
// bound (the shutdown never returned).
func TestShutdownBounded(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Persistence.ShutdownTimeout = config.Duration(300 * time.Millisecond)
	m, _, _ := newTestManager(t, cfg)
	stuck, idle := create(t, m, "python"), create(t, m, "python")
	go stuck.Execute(context.Background(), apitype.ExecuteRequest{Code: "hang"}, nil)
	busy(t, stuck)
	closed := make(chan struct{})
	go func() { defer close(closed); m.Close() }()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Error("the shutdown waited past persistence.shutdown_timeout for a session that cannot be paused")
		stuck.terminate(apitype.Ended(apitype.EndShutdown)) // let it return
		<-closed
	}
	if end := ended(t, stuck); end.Code != apitype.EndShutdown {
		t.Errorf("the stuck session ended for %q, want shutdown", end.Code)
	}
	if end := ended(t, idle); end.Code != apitype.EndPaused {
		t.Errorf("the idle session ended for %q, want paused", end.Code)
	}
	ents, _ := persisted(cfg.Persistence.Dir)
	if len(ents) != 1 || ents[0].Name() != idle.ID() {
		t.Errorf("images after the shutdown: %v, want only %s", ents, idle.ID())
	}
}

// TestCorruptImageKept: a resume from a damaged image is refused with
// ErrImageCorrupt, starts nothing, and keeps the image (described with
// its error) until the session is deleted.
func TestCorruptImageKept(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	s := pausedWith(t, m, someFiles)
	tarPath, b := damageImage(t, cfg, s, func(b []byte) []byte { return b[:len(b)/2] })
	before := len(src.all)
	_, err := m.ResumeFor(context.Background(), s.ID())
	if !errors.Is(err, errdefs.ErrImageCorrupt) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("resume of a truncated image: %v", err)
	}
	if len(src.all) != before {
		t.Error("a sandbox was started for a corrupt image")
	}
	d, err := m.Describe(context.Background(), s.ID())
	if err != nil || d.State != apitype.StatePaused || d.Paused.Error == "" {
		t.Errorf("describe after the failed resume: %+v, %v", d.Paused, err)
	}
	if got, _ := os.ReadFile(tarPath); !bytes.Equal(got, b) {
		t.Error("the corrupt image was not kept as it was")
	}
	if err := m.DeleteFor(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Persistence.Dir, s.ID())); !os.IsNotExist(err) {
		t.Errorf("delete kept the image: %v", err)
	}
	if _, err := m.Get(s.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("get after delete: %v", err)
	}
}

// TestCorruptFilesNeverHandedOver: an image whose files fail their
// checksum only once they are read (restored, once, as they are summed)
// is refused with ErrImageCorrupt: the sandbox they were written into is
// discarded, never handed over or listed, and the image kept as it was.
func TestCorruptFilesNeverHandedOver(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	s := pausedWith(t, m, someFiles)
	tarPath, b := damageImage(t, cfg, s, func(b []byte) []byte {
		b[len(b)/2] ^= 0x55 // in big.bin's contents: the size is right
		return b
	})
	before := len(src.all)
	_, err := m.ResumeFor(context.Background(), s.ID())
	if !errors.Is(err, errdefs.ErrImageCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("resume of a damaged image: %v", err)
	}
	checkClosed(t, src, before, "the refused resume (the damaged files went into it)")
	if _, err := m.Get(s.ID()); err == nil {
		t.Error("the session is live after a refused resume")
	}
	d, err := m.Describe(context.Background(), s.ID())
	if err != nil || d.State != apitype.StatePaused || !strings.Contains(d.Paused.Error, "checksum") {
		t.Errorf("describe after the refused resume: %+v, %v", d.Paused, err)
	}
	if got, _ := os.ReadFile(tarPath); !bytes.Equal(got, b) {
		t.Error("the damaged image was not kept as it was")
	}
}

// TestResumeCancelled: a resume whose client leaves (or whose server
// shuts down) returns at once, leaving no sandbox, nothing beside the
// image, and the session paused with its image whole: it resumes later.
func TestResumeCancelled(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	files := map[string]string{}
	for i := range 16 {
		files[fmt.Sprintf("part%02d.bin", i)] = strings.Repeat(fmt.Sprint(i), 512<<10)
	}
	writeFiles(t, s, files)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(cfg.Persistence.Dir, s.ID(), "files.tar")
	image, _ := os.ReadFile(tarPath)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.ResumeFor(ctx, s.ID()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled resume: %v", err)
	}
	checkClosed(t, src, 0, "the cancelled resume")
	d, err := m.Describe(context.Background(), s.ID())
	if err != nil || d.State != apitype.StatePaused || d.Paused.Error != "" {
		t.Errorf("after the cancelled resume: %+v, %v", d.Paused, err)
	}
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 1 {
		t.Errorf("beside the image: %v", ents)
	}
	if got, _ := os.ReadFile(tarPath); !bytes.Equal(got, image) {
		t.Error("the image changed")
	}
	r, err := m.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, r, files)
}

// TestShutdownStopsARestore: a server shutting down (Close) does not wait
// for a resume to read its image: the restore stops, its sandbox goes,
// and the session stays paused with its image whole, for the next start.
func TestShutdownStopsARestore(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Persistence.OnShutdown = "end"
	m, src, _ := newTestManager(t, cfg)
	s := pausedWith(t, m, someFiles)
	closed := make(chan struct{})
	m.hook = func(point, _ string) {
		if point == "restoring" {
			go func() { m.Close(); close(closed) }()
			<-m.stopping.Done()
		}
	}
	if _, err := m.ResumeFor(context.Background(), s.ID()); !errors.Is(err, context.Canceled) {
		t.Errorf("a resume during a shutdown: %v", err)
	}
	<-closed
	checkClosed(t, src, 0, "the shutdown")
	im, err := pauseimage.Open(cfg.Persistence.Dir, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	ws, err := workspace.OpenOut(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := im.Restore(context.Background(), ws, 4<<20); err != nil {
		t.Errorf("the image after the shutdown: %v", err)
	}
}

// TestLifetime: a session's lifetime ends it (on_timeout end) or pauses
// it (pause); PUT timeout sets it again from now.
func TestLifetime(t *testing.T) {
	t.Run("end", func(t *testing.T) {
		m, _, _ := newTestManager(t, nil)
		s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Timeout: config.Duration(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if end := ended(t, s); end.Code != apitype.EndLifetime {
			t.Errorf("ended for %q", end.Code)
		}
	})
	t.Run("pause", func(t *testing.T) {
		m, _, _ := newTestManager(t, persistConfig(t))
		s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Timeout: config.Duration(time.Second), OnTimeout: "pause"})
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, s, map[string]string{"kept": "yes"})
		if end := ended(t, s); end.Code != apitype.EndPaused {
			t.Fatalf("ended for %q", end.Code)
		}
		r, err := m.ResumeFor(context.Background(), s.ID())
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, r, map[string]string{"kept": "yes"})
	})
	t.Run("idle pause", func(t *testing.T) {
		m, _, _ := newTestManager(t, persistConfig(t))
		s, err := m.Create(context.Background(), apitype.CreateSessionRequest{OnTimeout: "pause"})
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.lastUsed = time.Now().Add(-2 * s.idle)
		s.mu.Unlock()
		s.checkIdle()
		if end := ended(t, s); end.Code != apitype.EndPaused {
			t.Errorf("idle ended for %q, want paused", end.Code)
		}
	})
	// A timeout is a bound, not a wish: a pause refused (here the
	// tenant's quota) ends the session with the timeout's code, saying
	// why it was not paused, and leaves nothing; it never runs on.
	// Checked against a mutant: the refused pause touching the session
	// (it ran on past its lifetime, "the session never ended").
	for _, c := range []struct {
		name string
		code apitype.EndCode
	}{{"pause refused", apitype.EndLifetime}, {"idle pause refused", apitype.EndIdle}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := persistConfig(t)
			cfg.Quotas.MaxPausedBytes = 4096
			m, _, _ := newTestManager(t, cfg)
			req := apitype.CreateSessionRequest{OnTimeout: "pause"}
			if c.code == apitype.EndLifetime {
				req.Timeout = config.Duration(time.Second)
			}
			s, err := m.Create(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			writeFiles(t, s, map[string]string{"big": strings.Repeat("x", 8192)})
			if c.code == apitype.EndIdle {
				s.mu.Lock()
				s.lastUsed = time.Now().Add(-2 * s.idle)
				s.mu.Unlock()
				s.checkIdle()
			}
			end := ended(t, s)
			if end.Code != c.code || !strings.Contains(end.Reason, "it could not be paused: ") || !strings.Contains(end.Reason, "quotas.max_paused_bytes") {
				t.Errorf("ended %+v, want %s saying the pause was refused for the quota", end, c.code)
			}
			if _, err := execute(t, s, "out x", nil); !errors.Is(err, errdefs.ErrGone) || !strings.Contains(err.Error(), "max_paused_bytes") {
				t.Errorf("the next call: %v, want gone, saying why", err)
			}
			<-s.gone
			m.seals.Wait()
			if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
				t.Errorf("the refused pause left %v", ents)
			}
		})
	}
	t.Run("set", func(t *testing.T) {
		m, _, _ := newTestManager(t, nil)
		s := create(t, m, "")
		if s.Info().ExpiresAt != nil {
			t.Error("a lifetime nobody asked for")
		}
		for _, bad := range []time.Duration{0, time.Millisecond, 8 * 24 * time.Hour} {
			if err := s.SetTimeout(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("timeout %s: %v", bad, err)
			}
		}
		if err := s.SetTimeout(time.Hour); err != nil {
			t.Fatal(err)
		}
		if exp := s.Info().ExpiresAt; exp == nil || time.Until(*exp) < 59*time.Minute {
			t.Errorf("expires at %v", exp)
		}
		if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{OnTimeout: "sleep"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("on_timeout sleep: %v", err)
		}
	})
}

// TestFork: a fork of a live session, and of a paused one, has the
// source's files and settings under a new id; the source goes on as it
// was (live, or paused); a fork while the source executes is refused.
func TestFork(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python", Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	f, err := m.ForkFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if f.ID() == s.ID() || f.Info().Restored != apitype.RestoreFiles || f.made.Env["FOO"] != "bar" {
		t.Errorf("fork: %+v", f.Info())
	}
	checkFiles(t, f, someFiles)
	// The two go their own ways.
	writeFiles(t, f, map[string]string{"notes.txt": "the fork's"})
	checkFiles(t, s, map[string]string{"notes.txt": "hello"})
	if _, err := execute(t, s, "out x", nil); err != nil {
		t.Errorf("the source after a fork: %v", err)
	}
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
		t.Errorf("a fork left %v", ents)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
	}()
	busy(t, s)
	if _, err := m.ForkFor(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("fork while executing: %v", err)
	}
	s.Interrupt()
	<-done

	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	f2, err := m.ForkFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, f2, someFiles)
	if d, err := m.Describe(context.Background(), s.ID()); err != nil || d.State != apitype.StatePaused {
		t.Errorf("the paused source after a fork: %+v %v", d, err)
	}
}

// TestLoadPausedAtStart: what a start finds under persistence.dir: the
// remains of a pause a crash interrupted are removed, an image whose
// description is damaged is kept for the operator and not listed, a
// good one is listed.
func TestLoadPausedAtStart(t *testing.T) {
	cfg := persistConfig(t)
	m1, _, _ := newTestManager(t, cfg)
	s := pausedWith(t, m1, map[string]string{"a": "1"})
	dir := cfg.Persistence.Dir
	os.MkdirAll(filepath.Join(dir, ".tmp-s-crashed-123"), 0o700)
	os.WriteFile(filepath.Join(dir, ".tmp-s-crashed-123", "files.tar"), []byte("partial"), 0o600)
	os.MkdirAll(filepath.Join(dir, "s-damaged"), 0o700)
	os.WriteFile(filepath.Join(dir, "s-damaged", "meta.json"), []byte(`{"version":1,"sha256":"00","body":{}}`), 0o600)

	m2, _, _ := newTestManager(t, cfg)
	if err := m2.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	if l := m2.List(); len(l) != 1 || l[0].ID != s.ID() {
		t.Errorf("listed after the start: %+v", l)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-s-crashed-123")); !os.IsNotExist(err) {
		t.Errorf("the interrupted pause's remains were kept: %v", err)
	}
	// The damaged one is kept aside for the operator, whole
	// (TestDamagedDescriptionKept).
	if kept, _ := filepath.Glob(filepath.Join(dir, ".kept-image-s-damaged-*", "image", "meta.json")); len(kept) != 1 {
		t.Errorf("the damaged image was not kept for inspection: %v", kept)
	}
}

// TestPauseBounded: a pause is sized before anything is written, as a
// restore would expand it (a sparse file's holes, every name of a hard
// link), and refused, the session running on, over the session's disk
// limit (such an image could never be resumed), over the tenant's quota
// counting the pauses and forks under way, and for a fork as for a pause.
func TestPauseBounded(t *testing.T) {
	t.Run("sparse over the disk limit", func(t *testing.T) {
		cfg := persistConfig(t)
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, map[string]string{"z": "x"})
		if err := os.Truncate(filepath.Join(s.inst.(*fakeInstance).dir, "z"), int64(s.limits.Disk)+1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrTooLarge) {
			t.Errorf("pause of a sparse file over the disk limit: %v", err)
		}
		if _, err := m.ForkFor(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrTooLarge) {
			t.Errorf("fork of a sparse file over the disk limit: %v", err)
		}
		if _, err := execute(t, s, "out x", nil); err != nil {
			t.Errorf("the session does not run after a refused pause: %v", err)
		}
		if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
			t.Errorf("a refused pause left %v", ents)
		}
	})
	t.Run("hard links over the disk limit", func(t *testing.T) {
		cfg := persistConfig(t)
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		dir := s.inst.(*fakeInstance).dir
		writeFiles(t, s, map[string]string{"z": "x"})
		if err := os.Truncate(filepath.Join(dir, "z"), int64(s.limits.Disk)/2+1); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, "z"), filepath.Join(dir, "z2")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrTooLarge) {
			t.Errorf("pause of two names of a file over the disk limit: %v", err)
		}
	})
	t.Run("quota counts pauses under way", func(t *testing.T) {
		cfg := persistConfig(t)
		cfg.Quotas.MaxPausedBytes = 1 << 20
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, map[string]string{"a": "hello"})
		release, err := m.reserveImage("", "", 1<<20-1024, 1<<20-1024)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.reserveImage("", "", 4096, 4096); !errors.Is(err, errdefs.ErrQuota) {
			t.Errorf("a second reservation past the quota: %v", err)
		}
		if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrQuota) {
			t.Errorf("pause while another takes the quota: %v", err)
		}
		release()
		if _, err := s.Pause(context.Background(), ""); err != nil {
			t.Errorf("pause once the other is done: %v", err)
		}
	})
	t.Run("fork within the quota", func(t *testing.T) {
		cfg := persistConfig(t)
		cfg.Quotas.MaxPausedBytes = 4096
		m, _, _ := newTestManager(t, cfg)
		s := create(t, m, "python")
		writeFiles(t, s, map[string]string{"big": strings.Repeat("x", 8192)})
		if _, err := m.ForkFor(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrQuota) {
			t.Errorf("fork over the quota: %v", err)
		}
	})
}

// TestDeleteWhilePausing: a session deleted while its image is written
// stays deleted (410), and its image goes; one deleted once paused too.
func TestDeleteWhilePausing(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	writeFiles(t, s, someFiles)
	m.hook = func(point, id string) {
		if point != "written" {
			return
		}
		if err := m.DeleteFor(context.Background(), id); err != nil {
			t.Errorf("delete during the pause: %v", err)
		}
	}
	if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("pause of a session deleted meanwhile: %v", err)
	}
	m.hook = nil
	if _, err := m.Find(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("the deleted session: %v", err)
	}
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
		t.Errorf("a deleted session's image was kept: %v", ents)
	}

	// Deleted once listed as paused, before its sandbox ended: the
	// paused session goes.
	s2 := create(t, m, "python")
	writeFiles(t, s2, someFiles)
	m.hook = func(point, id string) {
		if point == "listed" {
			if err := m.DeleteFor(context.Background(), id); err != nil {
				t.Errorf("delete as the pause ends: %v", err)
			}
		}
	}
	if _, err := s2.Pause(context.Background(), ""); err != nil {
		t.Errorf("pause: %v", err)
	}
	m.hook = nil
	if _, err := m.Find(context.Background(), s2.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("the session deleted as its pause ended: %v", err)
	}
	if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
		t.Errorf("its image was kept: %v", ents)
	}
}

// TestForkWhileDeleted: a paused source resumed or deleted while a fork
// of it begins is a conflict to retry, never a corrupt image (422).
func TestForkWhileDeleted(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := pausedWith(t, m, someFiles)
	m.hook = func(point, id string) {
		if point == "fork" {
			if err := m.DeleteFor(context.Background(), id); err != nil {
				t.Errorf("delete during the fork: %v", err)
			}
		}
	}
	if _, err := m.ForkFor(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("fork of a session deleted meanwhile: %v", err)
	}
	if d, err := m.Describe(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("the deleted source: %+v %v", d, err)
	}
}

// TestNoChangesWhilePausing: a code context, network policy or lifetime
// change while the image is written is refused (409), not lost on
// resume. Checked against a mutant: SetTimeout not checking.
func TestNoChangesWhilePausing(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	s := create(t, m, "python")
	c, err := s.CreateContext(context.Background(), apitype.CreateContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.hook = func(point, _ string) {
		if point != "written" {
			return
		}
		ctx := context.Background()
		if _, err := s.CreateContext(ctx, apitype.CreateContextRequest{}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a context created during a pause: %v", err)
		}
		if _, err := s.RestartContext(ctx, c.ID); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a context restarted during a pause: %v", err)
		}
		if _, err := s.SetNetwork(ctx, &apitype.NetworkPolicy{Allow: []string{"pypi.org"}}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a network policy set during a pause: %v", err)
		}
		if err := s.SetTimeout(time.Hour); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a lifetime set during a pause: %v", err)
		}
	}
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
}

// TestPauseObserved: every pause, resume and fork tried is reported once
// with its outcome (a shutdown's pause that waited for the session
// once, not per try), and the paused sessions' disk by tenant.
func TestPauseObserved(t *testing.T) {
	cfg := persistConfig(t)
	cfg.Quotas.MaxPausedBytes = 900 << 10
	m, _, _ := newTestManager(t, cfg)
	var mu sync.Mutex
	var got []string
	m.OnPause(func(e PauseEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.Duration <= 0 {
			t.Errorf("%+v: no duration", e)
		}
		got = append(got, e.Op+" "+e.Kind+" "+e.Outcome)
	})
	s := create(t, m, "python")
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
	}()
	busy(t, s)
	s.Pause(context.Background(), "") // busy
	s.Interrupt()
	<-done
	writeFiles(t, s, map[string]string{"big": strings.Repeat("x", 1000<<10)})
	s.Pause(context.Background(), "") // over the quota
	s.Files(context.Background()).Remove("big", false)
	writeFiles(t, s, someFiles)
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if u := m.PausedUsage()[""]; u.Sessions != 1 || u.DiskBytes == 0 {
		t.Errorf("paused usage: %+v", m.PausedUsage())
	}
	if _, err := m.ForkFor(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	r, err := m.ResumeFor(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	sealed(t, r)
	if u := m.PausedUsage()[""]; u.Sessions != 0 || u.DiskBytes != liveBytes(m, "") {
		t.Errorf("paused usage after the resume: %+v, want the live point's %d bytes only", u, liveBytes(m, ""))
	}
	// A shutdown's pause waits for the execution to stop: one event.
	go r.Execute(context.Background(), apitype.ExecuteRequest{Code: "sleep"}, nil)
	busy(t, r)
	if _, err := r.pauseWhenIdle(context.Background(), PauseAsk{}); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(cfg.Persistence.Dir, s.ID(), "files.tar")
	b, _ := os.ReadFile(tarPath)
	os.WriteFile(tarPath, b[:len(b)/2], 0o600)
	m.ResumeFor(context.Background(), s.ID()) // corrupt
	want := []string{"pause files busy", "pause files quota", "pause files ok", "fork files ok", "resume files ok", "pause files ok", "resume files corrupt"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// TestValidateMetadata: metadata within the bounds passes; each bound
// and each forbidden character is refused.
func TestValidateMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range 5 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	for _, tc := range []struct {
		md map[string]string
		ok bool
	}{
		{nil, true},
		{map[string]string{"team": "a", "ünï code": "välue with spaces & = ?"}, true},
		{map[string]string{strings.Repeat("k", 256): strings.Repeat("v", 2048)}, true},
		{many, false}, // over max 4
		{map[string]string{"": "v"}, false},
		{map[string]string{strings.Repeat("k", 257): "v"}, false},
		{map[string]string{"k": strings.Repeat("v", 2049)}, false},
		{map[string]string{"a\nb": "v"}, false},
		{map[string]string{"a\x1bb": "v"}, false},
		{map[string]string{"a\u0085b": "v"}, false},
		{map[string]string{"\xff": "v"}, false},
		{map[string]string{"k": "\xff"}, false},
		{map[string]string{"k": "a\x00b"}, false},
		{map[string]string{"k1": strings.Repeat("v", 2048), "k2": strings.Repeat("v", 2048), "k3": strings.Repeat("v", 2048),
			"k4": strings.Repeat("v", 2048)}, true},
	} {
		err := ValidateMetadata(tc.md, 4)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("%.40q: %v, want ok %v", fmt.Sprint(tc.md), err, tc.ok)
		}
	}
	big := map[string]string{}
	for i := range 17 {
		big[fmt.Sprint(i)] = strings.Repeat("v", 2048)
	}
	if err := ValidateMetadata(big, 64); err == nil || !strings.Contains(err.Error(), "32 KiB") {
		t.Errorf("34 KiB of metadata: %v", err)
	}
}

// settleRecorder is a Listing that records what each Settle finds the
// session to be (what a cluster's directory would write).
type settleRecorder struct {
	m   *Manager
	mu  sync.Mutex
	got []string // "id state", or "id gone"
}

func (r *settleRecorder) Settle(ctx context.Context, id string) error {
	st := "gone"
	if info, err := r.m.Describe(context.Background(), id); err == nil {
		st = info.State
	}
	r.mu.Lock()
	r.got = append(r.got, id+" "+st)
	r.mu.Unlock()
	return nil
}

func (r *settleRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestListingSettled: a client's delete, pause and resume (an
// auto_resume's too) return only once the cluster's listing has the
// session as it now is, so that no server lists it as it was after the
// client was answered (a deleted session listed live elsewhere failed
// the shared-store e2e test).
func TestListingSettled(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	rec := &settleRecorder{m: m}
	m.SetListing(rec)
	ctx := tenantCtx("a")
	s, err := m.Create(ctx, apitype.CreateSessionRequest{AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	for _, step := range []struct {
		what string
		do   func() error
		want string
	}{
		{"pause", func() error { _, err := m.PauseFor(ctx, id, ""); return err }, "paused"},
		{"resume", func() error { _, err := m.ResumeFor(ctx, id); return err }, "idle"},
		{"pause again", func() error { _, err := m.PauseFor(ctx, id, ""); return err }, "paused"},
		{"auto_resume", func() error { _, err := m.Reach(ctx, id); return err }, "idle"},
		{"delete", func() error { return m.DeleteFor(ctx, id) }, "gone"},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if got := rec.take(); len(got) != 1 || got[0] != id+" "+step.want {
			t.Errorf("%s settled %v, want [%s %s]", step.what, got, id, step.want)
		}
	}
	// A paused session deleted.
	s, err = m.Create(ctx, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PauseFor(ctx, s.ID(), ""); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if err := m.DeleteFor(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 1 || got[0] != s.ID()+" gone" {
		t.Errorf("a paused session's delete settled %v", got)
	}
}

// TestDiscardSettled: a session its creator never hears of (the
// cluster's directory could not list it: a 503) is ended, and the
// creator answered, only once the listing has it gone, as a client's
// delete is: other servers listed it live for a moment after the 503.
func TestDiscardSettled(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	rec := &settleRecorder{m: m}
	m.SetListing(rec)
	ctx := tenantCtx("a")
	s, err := m.Create(ctx, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.Discard(ctx, s.ID())
	if got := rec.take(); len(got) != 1 || got[0] != s.ID()+" gone" {
		t.Errorf("a discarded session settled %v, want [%s gone]", got, s.ID())
	}
	if end := s.End(); end.Code != apitype.EndDeleted {
		t.Errorf("a discarded session ended %+v", end)
	}
	// Gone already: nothing to settle.
	m.Discard(ctx, s.ID())
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a second discard settled %v", got)
	}
}

// TestListedOnceWhilePausing: a session listed as paused, its sandbox
// not yet ended, is listed once, paused: a listing that also held it
// ended had a cluster's directory write it ended (for good: a later
// write of it paused or resumed never revives an end).
func TestListedOnceWhilePausing(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	s := create(t, m, "python")
	var listed []apitype.Session
	m.hook = func(point, id string) {
		if point == "listed" {
			listed = m.List()
		}
	}
	if _, err := s.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	m.hook = nil
	if len(listed) != 1 || listed[0].State != apitype.StatePaused {
		t.Errorf("listed while its pause ends: %+v", listed)
	}
}

// TestResumeCountsForTheOwner: a paused session resumed, or forked, by
// an admin of another tenant (or the operator) takes its place among its
// owner's sessions, whose end gives it back: counted against the
// admin's, the place leaked there and the owner's count fell below
// what it holds when the session ended.
func TestResumeCountsForTheOwner(t *testing.T) {
	m, _, _ := newTestManager(t, persistConfig(t))
	q := &tenantQuotas{held: map[string]int{}}
	m.SetAdmitter(NewTenants(m.cfg, q))
	m.Observe(q)
	owner := tenantCtx("a")
	admin := identity.With(context.Background(), identity.Identity{Tenant: "ops", Admin: true})
	s, err := m.Create(owner, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PauseFor(admin, s.ID(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ResumeFor(admin, s.ID()); err != nil {
		t.Fatal(err)
	}
	if got := q.count(); got["a"] != 1 || got["ops"] != 0 {
		t.Errorf("resumed by an admin: %v held, want a:1", got)
	}
	f, err := m.ForkFor(admin, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := q.count(); got["a"] != 2 || got["ops"] != 0 {
		t.Errorf("forked by an admin: %v held, want a:2", got)
	}
	for _, id := range []string{s.ID(), f.ID()} {
		if err := m.DeleteFor(admin, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := q.count(); got["a"] != 0 || got["ops"] != 0 {
		t.Errorf("all ended: %v held, want none", got)
	}
}

// tenantQuotas counts sessions held by tenant as package quota does:
// admitted for the caller's tenant, given back by the end's (the
// owner's).
type tenantQuotas struct {
	mu   sync.Mutex
	held map[string]int
}

func (q *tenantQuotas) Of(identity.Identity) config.Quotas { return config.Quotas{} }
func (q *tenantQuotas) AdmitSession(_ context.Context, who identity.Identity) (func(), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[who.Tenant]++
	return func() { q.gone(who.Tenant) }, nil
}
func (q *tenantQuotas) AdmitExecution(context.Context, identity.Identity) (func(), error) {
	return func() {}, nil
}
func (q *tenantQuotas) gone(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[tenant]--
}
func (q *tenantQuotas) count() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.held)
}
func (q *tenantQuotas) SessionCreated(SessionEvent) {}
func (q *tenantQuotas) SessionEnded(e SessionEvent) {
	if e.End.Code != "" {
		q.gone(e.Tenant)
	}
}
func (q *tenantQuotas) ExecutionStarted(ExecutionEvent)  {}
func (q *tenantQuotas) ExecutionFinished(ExecutionEvent) {}
func (q *tenantQuotas) FileTransferred(FileEvent)        {}
func (q *tenantQuotas) NetworkChanged(NetworkEvent)      {}
func (q *tenantQuotas) PortUsed(PortEvent)               {}
func (q *tenantQuotas) ToolCalled(ToolCallEvent)         {}
