package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/pauseimage"
)

// killedAt is persistence.dir as a server killed (kill -9) at this
// moment leaves it: a copy, which a new manager then starts on.
func killedAt(t *testing.T, cfg *config.Config) *config.Config {
	t.Helper()
	c, err := copyPersistence(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// copyPersistence copies cfg's persistence.dir into dst (from any
// goroutine: it reports to no test).
func copyPersistence(cfg *config.Config, dst string) (*config.Config, error) {
	if out, err := exec.Command("cp", "-a", cfg.Persistence.Dir+"/.", dst).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cp: %v: %s", err, out)
	}
	c := *cfg
	c.Persistence.Dir = dst
	return &c, nil
}

// restarted is a manager started on the persistence.dir a killed server
// left, with its paused sessions loaded.
func restarted(t *testing.T, cfg *config.Config) *Manager {
	t.Helper()
	m, _, _ := newTestManager(t, cfg)
	if err := m.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	return m
}

// sealed waits until s's recovery point is sealed as of its last
// operation: no seal runs.
func sealed(t *testing.T, s *Session) {
	t.Helper()
	for {
		s.live.mu.Lock()
		idle := s.live.idle
		s.live.mu.Unlock()
		if idle == nil {
			return
		}
		<-idle
	}
}

// recoveredFiles checks that m lists s paused, recovered, and that its
// resume holds exactly files.
func recoveredFiles(t *testing.T, m *Manager, id string, files map[string]string, execs int) {
	t.Helper()
	l := m.List()
	if len(l) != 1 || l[0].ID != id || l[0].State != apitype.StatePaused || l[0].Paused == nil ||
		!strings.Contains(l[0].Paused.Recovered, "recovered after the server ended unexpectedly: workspace as of its last completed operation (an execution, a command or a file change) at ") {
		t.Fatalf("after the kill: %+v", l)
	}
	if l[0].Executions != execs || l[0].Tenant != "acme" {
		t.Errorf("recovered with %d executions for tenant %q, want %d for acme", l[0].Executions, l[0].Tenant, execs)
	}
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	r, err := m.ResumeFor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info := r.Info(); info.Restored != apitype.RestoreFiles || info.RestoredReason != l[0].Paused.Recovered {
		t.Errorf("resumed: restored %q, reason %q", info.Restored, info.RestoredReason)
	}
	ents, _, err := r.Files(ctx).List("", true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range ents {
		if e.Type == "file" {
			got[e.Path] = ""
		}
	}
	for p := range files {
		delete(got, p)
	}
	if len(got) != 0 {
		t.Errorf("recovered files no execution left: %v", got)
	}
	checkFiles(t, r, files)
}

// TestRecoveredAfterKill: a server killed (kill -9: persistence.dir as
// it is at that moment) between executions, during one, or as a seal
// begins, comes back with the session paused, its workspace that of the
// last completed operation, never a half state: an execution still
// running is not in it, and a seal not yet sealed leaves the last
// point; an execution that begins while the last one's seal runs waits
// for it. Checked against mutants: no wait for the seal before an
// execution (the point mixes two executions' files), and no seal after
// an execution (the kill between executions recovers the state of
// before them).
func TestRecoveredAfterKill(t *testing.T) {
	cfg := persistConfig(t)
	m, src, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme", KeyID: "k1"})
	s, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	f := src.all[len(src.all)-1]
	run := func(code string) {
		t.Helper()
		if _, err := execute(t, s, code, nil); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, s, map[string]string{"up.txt": "uploaded"})
	run("write a.txt 1")
	beforeLast := time.Now()
	run("write a.txt 2; write b.txt 2")
	sealed(t, s)
	between := killedAt(t, cfg)
	// The session says what a kill now recovers: the last operation's
	// point (checked against the recovered session's paused_at below).
	pointAt := s.Info().RecoveryPointAt
	if pointAt == nil || pointAt.Before(beforeLast) || pointAt.After(time.Now()) {
		t.Fatalf("recovery_point_at %v, want the last execution's end (after %v)", pointAt, beforeLast)
	}
	want := map[string]string{"up.txt": "uploaded", "a.txt": "2", "b.txt": "2"}

	// An execution under way when the server is killed.
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "write a.txt 3; mark; sleep"}, nil)
		done <- err
	}()
	<-f.marks
	during := killedAt(t, cfg)
	s.Interrupt()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sealed(t, s)

	// A seal under way: killed as it begins, the last point stands; as
	// it ends, the new one. (The hook runs on the seal's goroutine: it
	// reports on what it returns, read once the seal is over.)
	type kill struct {
		cfg *config.Config
		err error
	}
	var atSealing, atSealed *kill
	sealingDir, sealedDir := t.TempDir(), t.TempDir()
	liveHook = func(point, id string) {
		switch {
		case point == "sealing" && atSealing == nil:
			c, err := copyPersistence(cfg, sealingDir)
			atSealing = &kill{c, err}
		case point == "sealed" && atSealed == nil:
			c, err := copyPersistence(cfg, sealedDir)
			atSealed = &kill{c, err}
		}
	}
	defer func() { liveHook = nil }()
	run("write a.txt 4; write c.txt 4")
	sealed(t, s)
	liveHook = nil
	wantInterrupted := map[string]string{"up.txt": "uploaded", "a.txt": "3", "b.txt": "2"}

	// The next execution waits for the seal of the last one: a point
	// never holds files of two.
	release, sealing, waiting := make(chan struct{}), make(chan struct{}, 1), make(chan struct{}, 1)
	var atMixed *kill
	mixedDir := t.TempDir()
	liveHook = func(point, id string) {
		switch point {
		case "sealing":
			select {
			case sealing <- struct{}{}:
			default:
			}
			<-release
		case "waiting":
			waiting <- struct{}{}
		case "sealed":
			if atMixed == nil {
				c, err := copyPersistence(cfg, mixedDir)
				atMixed = &kill{c, err}
			}
		}
	}
	run("write a.txt 5; write d.txt 5")
	<-sealing
	go func() {
		_, err := s.Execute(context.Background(), apitype.ExecuteRequest{Code: "write a.txt 6; mark"}, nil)
		done <- err
	}()
	select {
	case <-waiting:
	case <-f.marks:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sealed(t, s)
	liveHook = nil

	for _, k := range []*kill{atSealing, atSealed, atMixed} {
		if k == nil {
			t.Fatal("a seal never got there")
		}
		if k.err != nil {
			t.Fatal(k.err)
		}
	}
	for _, k := range []struct {
		name  string
		cfg   *config.Config
		files map[string]string
		execs int
	}{
		{"between executions", between, want, 2},
		{"during an execution", during, want, 2},
		{"as a seal began", atSealing.cfg, wantInterrupted, 3},
		{"as a seal ended", atSealed.cfg, map[string]string{"up.txt": "uploaded", "a.txt": "4", "b.txt": "2", "c.txt": "4"}, 4},
		{"as the seal the next execution waited for ended", atMixed.cfg, map[string]string{"up.txt": "uploaded", "a.txt": "5", "b.txt": "2", "c.txt": "4", "d.txt": "5"}, 5},
	} {
		t.Run(k.name, func(t *testing.T) {
			m := restarted(t, k.cfg)
			if l := m.List(); k.cfg == between && (len(l) != 1 || l[0].Paused == nil || !l[0].Paused.PausedAt.Equal(*pointAt)) {
				t.Errorf("recovered as of %+v, the live session said its recovery point was at %v", l, pointAt)
			}
			recoveredFiles(t, m, s.ID(), k.files, k.execs)
		})
	}
}

// TestRecoveryPointGoesWithItsSession: a session that ends (deleted, or
// paused: its image supersedes the point) leaves no recovery point, and
// a server that ended without persistence makes none.
func TestRecoveryPointGoesWithItsSession(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	a, b := create(t, m, "python"), create(t, m, "python")
	writeFiles(t, a, someFiles)
	writeFiles(t, b, someFiles)
	sealed(t, a)
	sealed(t, b)
	if ids, _ := pauseimage.ListLive(cfg.Persistence.Dir); len(ids) != 2 {
		t.Fatalf("recovery points of two live sessions: %v", ids)
	}
	if err := m.Delete(a.ID()); err != nil {
		t.Fatal(err)
	}
	<-a.gone
	if _, err := b.Pause(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	<-b.gone
	if ids, _ := pauseimage.ListLive(cfg.Persistence.Dir); len(ids) != 0 {
		t.Errorf("recovery points left: %v", ids)
	}
	m2 := restarted(t, killedAt(t, cfg))
	if l := m2.List(); len(l) != 1 || l[0].ID != b.ID() || l[0].Paused.Recovered != "" {
		t.Errorf("after the restart: %+v", l)
	}

	off, _, _ := newTestManager(t, nil)
	s := create(t, off, "python")
	if s.live != nil {
		t.Error("a recovery point without persistence")
	}
	if _, err := s.Pause(context.Background(), ""); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("pause without persistence: %v", err)
	}
}

// persisted is what dir (persistence.dir) holds besides the recovery
// points of live sessions.
func persisted(dir string) ([]os.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	out := ents[:0]
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".live-") {
			out = append(out, e)
		}
	}
	return out, err
}

// TestResumedPointFromImage: a resumed session's first recovery point
// is made of its image, so that its first execution waits for no copy
// of the files it brought back; a server killed right after the resume
// (no operation since) recovers them, and one killed after an execution
// recovers that. Checked against a mutant: the first point copied from
// the workspace (the first execution waits).
func TestResumedPointFromImage(t *testing.T) {
	cfg := persistConfig(t)
	m, _, _ := newTestManager(t, cfg)
	ctx := identity.With(context.Background(), identity.Identity{Tenant: "acme"})
	s := pausedWithFiles(t, m, ctx)
	// Its first seal is held until the first execution is over, or
	// waits for it.
	waited, release := make(chan struct{}, 8), make(chan struct{})
	liveHook = func(point, id string) {
		switch point {
		case "waiting":
			waited <- struct{}{}
		case "sealing":
			<-release
		}
	}
	defer func() { liveHook = nil }()
	r, err := m.ResumeFor(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Execute(context.Background(), apitype.ExecuteRequest{Code: "out x"}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		close(release)
	case <-waited:
		close(release)
		t.Error("the first execution after a resume waited for a copy of the workspace")
		<-done
	}
	liveHook = nil
	sealed(t, r)
	// (The first seal, held until then, counts the execution.)
	recoveredFiles(t, restarted(t, killedAt(t, cfg)), s.ID(), someFiles, 1)
	if _, err := execute(t, r, "write new.txt n", nil); err != nil {
		t.Fatal(err)
	}
	sealed(t, r)
	more := maps.Clone(someFiles)
	more["new.txt"] = "n"
	recoveredFiles(t, restarted(t, killedAt(t, cfg)), s.ID(), more, 2)
}
