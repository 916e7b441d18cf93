package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/instance"
	"airlock/internal/pauseimage"
	"airlock/internal/runtimes"
	"airlock/internal/session"
	"airlock/internal/workspace"
)

// oneRecord is Records holding the last record put (none once deleted).
type oneRecord struct {
	last    Record
	deleted int
}

func (o *oneRecord) PutSandbox(_ context.Context, r Record) error { o.last = r; return nil }
func (o *oneRecord) Sandbox(context.Context, string) (Record, bool, error) {
	return o.last, o.last.ID != "", nil
}
func (o *oneRecord) Sandboxes(context.Context, string) ([]Record, error) {
	if o.last.ID == "" {
		return nil, nil
	}
	return []Record{o.last}, nil
}
func (o *oneRecord) DeleteSandbox(context.Context, string) error {
	o.last = Record{}
	o.deleted++
	return nil
}
func (o *oneRecord) ServerPod() string { return "" }

// noSandboxes is a Source that makes no sandbox: each Get is refused
// (ErrUnavailable), after waiting for release when asked is set (a
// resume held under way).
type noSandboxes struct {
	asked   chan struct{}
	release chan struct{}
}

func (n noSandboxes) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (*instance.Instance, error) {
	if n.asked != nil {
		n.asked <- struct{}{}
		<-n.release
	}
	return nil, fmt.Errorf("%w: this test makes no sandbox", errdefs.ErrUnavailable)
}

const testTenant = "acme"

// pausedSandbox is an E2B server whose sandbox id is a session paused by
// an earlier run (its image under persistence.dir, made with
// autoResume), adopted from rec by Load as a start does; its manager
// gets sandboxes from src.
func pausedSandbox(t *testing.T, src instance.Source, rec record) (*Server, *session.Manager, *oneRecord, config.Config) {
	t.Helper()
	cfg := config.Default()
	cfg.Persistence.Enabled = true
	cfg.Persistence.Dir = t.TempDir()
	ws, err := workspace.OpenOut(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	meta := fmt.Sprintf(`{"id":"s-1","tenant":%q,"paused_at":%q,"request":{"language":"python","on_timeout":"pause","auto_resume":true}}`, testTenant, time.Now().Format(time.RFC3339Nano))
	if _, err := pauseimage.Write(context.Background(), cfg.Persistence.Dir, "s-1", []byte(meta), ws, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	m := loadManager(t, cfg, src)
	rec.Owner = identity.Identity{Tenant: testTenant}
	info, _ := json.Marshal(rec)
	recs := &oneRecord{last: Record{ID: "s-1", Tenant: testTenant, Info: info}}
	s := &Server{m: m, cfg: cfg, key: make([]byte, 32), Records: recs, Log: slog.New(slog.DiscardHandler), boxes: map[string]*sandbox{}}
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.box("s-1") == nil {
		t.Fatal("the paused sandbox was not adopted")
	}
	return s, m, recs, cfg
}

// loadManager is a manager on cfg that has loaded its paused sessions.
func loadManager(t *testing.T, cfg config.Config, src instance.Source) *session.Manager {
	t.Helper()
	m := session.NewManager(cfg, src, slog.New(slog.DiscardHandler))
	t.Cleanup(m.Close)
	if err := m.LoadPaused(); err != nil {
		t.Fatal(err)
	}
	return m
}

// explicitOnly reports whether the paused session id of m is one only a
// resume brings back (its data plane does not).
func explicitOnly(t *testing.T, m *session.Manager, id string) bool {
	t.Helper()
	d, err := m.Describe(context.Background(), id)
	if err != nil || d.Paused == nil {
		t.Fatalf("the paused session: %+v %v", d, err)
	}
	var pe *session.PausedError
	_, err = m.Reach(context.Background(), id)
	return d.Paused.ExplicitResume && errors.As(err, &pe) && pe.Explicit
}

// TestFilesOnlyRecordMoved: the files-only mark an earlier server kept in
// an E2B sandbox's record (paused with keepMemory false) is moved into
// its paused session at start: its data plane does not resume it, now
// or after the next restart, and the record no longer holds it.
// Checked against a mutant: Load ignoring the old mark.
func TestFilesOnlyRecordMoved(t *testing.T) {
	s, m, recs, cfg := pausedSandbox(t, noSandboxes{}, record{Template: "base", Pause: true, AutoResume: true, FilesOnly: true})
	if !explicitOnly(t, m, "s-1") {
		t.Error("a sandbox paused with keepMemory false by an earlier server is auto-resumed")
	}
	var r record
	if err := json.Unmarshal(recs.last.Info, &r); err != nil || r.FilesOnly || !r.AutoResume || !r.Pause || r.Owner.Tenant != testTenant {
		t.Errorf("the record after the move: %+v %v", r, err)
	}
	if b := s.box("s-1"); !b.autoResume {
		t.Error("the sandbox lost its autoResume")
	}
	if !explicitOnly(t, loadManager(t, cfg, noSandboxes{}), "s-1") {
		t.Error("after a second restart the sandbox is auto-resumed")
	}
}

// TestFilesOnlyNotMarkedUnasked: a record without the old mark leaves
// the paused session as it was (auto-resumed).
func TestFilesOnlyNotMarkedUnasked(t *testing.T) {
	_, m, _, _ := pausedSandbox(t, noSandboxes{}, record{Template: "base", Pause: true, AutoResume: true})
	if d, err := m.Describe(context.Background(), "s-1"); err != nil || d.Paused == nil || d.Paused.ExplicitResume {
		t.Errorf("a sandbox paused unmarked: %+v %v", d, err)
	}
}

// dataCall is a data-plane call of box (envd's files) as its SDK makes
// it.
func dataCall(s *Server, box *sandbox) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/files?path=/home/user/a", nil)
	r.Header.Set("E2b-Sandbox-Id", box.id)
	r.Header.Set("E2b-Sandbox-Port", envdPort)
	r.Header.Set("X-Access-Token", box.envdToken)
	w := httptest.NewRecorder()
	s.serveData(w, r, box.id)
	return w
}

// TestResumeRefusedKeepsTheSandbox: a paused autoResume sandbox whose
// resume fails (no sandbox to be had: a quota, a full host) answers the
// failure and stays, with its record, for the next call; so does one
// killed while a resume is under way (409: it is not gone), and one
// whose timeout's timer fires once it is paused. Checked against
// mutants: the data plane forgetting the sandbox on any failure, kill
// forgetting it before the delete, and the timer forgetting it.
func TestResumeRefusedKeepsTheSandbox(t *testing.T) {
	src := noSandboxes{asked: make(chan struct{}), release: make(chan struct{})}
	s, m, recs, _ := pausedSandbox(t, src, record{Template: "base", Pause: true, AutoResume: true})
	box := s.box("s-1")

	// Killed while a resume is under way.
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- dataCall(s, box) }()
	<-src.asked
	kr := httptest.NewRequest("DELETE", "/sandboxes/s-1", nil)
	kr.SetPathValue("id", "s-1")
	kr = kr.WithContext(identity.With(kr.Context(), identity.Identity{Tenant: testTenant}))
	kw := httptest.NewRecorder()
	s.kill(kw, kr)
	if kw.Code != http.StatusConflict {
		t.Errorf("kill during a resume: %d %s", kw.Code, kw.Body)
	}
	close(src.release)
	w := <-done
	if w.Code != http.StatusServiceUnavailable {
		body, _ := io.ReadAll(w.Body)
		t.Errorf("a call whose resume was refused: %d %s", w.Code, body)
	}
	if s.box("s-1") == nil || recs.deleted != 0 {
		t.Fatalf("a sandbox whose resume was refused was forgotten (%d records deleted)", recs.deleted)
	}
	if _, err := m.Get("s-1"); !errors.Is(err, errdefs.ErrPaused) {
		t.Errorf("the session after the refused resume: %v", err)
	}

	// Its timer fires once it is paused (a pause just before it).
	s.expire("s-1")
	if s.box("s-1") == nil || recs.deleted != 0 {
		t.Errorf("a paused sandbox's timer forgot it")
	}
	if _, err := m.Get("s-1"); !errors.Is(err, errdefs.ErrPaused) {
		t.Errorf("a paused sandbox's timer ended it: %v", err)
	}

	// Gone: forgotten.
	if err := m.DeleteFor(context.Background(), "s-1"); err != nil {
		t.Fatal(err)
	}
	if w := dataCall(s, box); w.Code != http.StatusNotFound || s.box("s-1") != nil || recs.deleted != 1 {
		t.Errorf("a call of a deleted sandbox: %d, box %v, %d records deleted", w.Code, s.box("s-1") != nil, recs.deleted)
	}
}
