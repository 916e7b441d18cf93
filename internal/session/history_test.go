package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
)

func readHistory(t *testing.T, m *Manager, ctx context.Context, id string, after int64) *apitype.History {
	t.Helper()
	r, err := m.History(ctx, id)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	return r.View(after)
}

// A session's history holds each execution and command in the order they
// started, with the result its client got.
func TestHistoryEntries(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	if _, err := execute(t, s, "out hello;display", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := runCommand(t, context.Background(), s, apitype.CommandRequest{Command: "out listed"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, s, "raise ValueError", nil); err != nil {
		t.Fatal(err)
	}
	h := readHistory(t, m, context.Background(), s.ID(), 0)
	if len(h.Entries) != 3 || h.Forgotten != 0 || h.State != apitype.StateIdle || h.Language != apitype.Python {
		t.Fatalf("history = %+v", h)
	}
	e1, c1, e2 := h.Entries[0], h.Entries[1], h.Entries[2]
	if e1.Seq != 1 || e1.Kind != apitype.HistoryExecution || e1.ID != "e1" || e1.Code != "out hello;display" || e1.Running ||
		e1.Result == nil || e1.Result.Stdout != "hello" || len(e1.Result.Results) != 1 {
		t.Errorf("first entry = %+v", e1)
	}
	if c1.Seq != 2 || c1.Kind != apitype.HistoryCommand || c1.ID != "c1" || c1.Command == nil || c1.Command.Stdout != "listed" || c1.Command.State != apitype.CommandExited {
		t.Errorf("command entry = %+v %+v", c1, c1.Command)
	}
	if e2.Seq != 3 || e2.Result.Error == nil || e2.Result.Error.Name != "ValueError" {
		t.Errorf("last entry = %+v", e2)
	}
	if h.Bytes != e1.Bytes+c1.Bytes+e2.Bytes || e1.Bytes <= 0 {
		t.Errorf("bytes %d, entries %d %d %d", h.Bytes, e1.Bytes, c1.Bytes, e2.Bytes)
	}
	// after: only what is newer.
	if h := readHistory(t, m, context.Background(), s.ID(), 2); len(h.Entries) != 1 || h.Entries[0].Seq != 3 {
		t.Errorf("after 2: %+v", h.Entries)
	}
	info := s.Info()
	if info.History == nil || info.History.Executions != m.cfg.History.Executions || info.Usage == nil || info.Usage.MemoryBytes != 1<<20 {
		t.Errorf("info: history %+v usage %+v", info.History, info.Usage)
	}
}

// What runs is in the history with its output so far, and the session's
// description names it; the ETag changes as it goes.
func TestHistoryRunning(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "")
	r, err := m.History(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	tag0 := r.ETag(0)
	if r.ETag(0) != tag0 {
		t.Fatal("the ETag changed while nothing did")
	}
	res, err := execute(t, s, "out partial;sleep", func() {
		busy(t, s)
		deadline := time.Now().Add(wait)
		for {
			h := r.View(0)
			if len(h.Entries) == 1 && h.Entries[0].Running && h.Entries[0].Result.Stdout == "partial" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the running entry never showed its output: %+v", h.Entries)
			}
			time.Sleep(time.Millisecond)
		}
		if r.ETag(0) == tag0 {
			t.Error("the ETag did not change with the execution's start and output")
		}
		cur := s.Info().Current
		if cur == nil || cur.ID != "e1" || cur.CodeHead != "out partial;sleep" || cur.CodeBytes != len("out partial;sleep") {
			t.Errorf("current = %+v", cur)
		}
		if _, err := s.Interrupt(); err != nil {
			t.Error(err)
		}
	})
	if err != nil || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("res %+v, err %v", res, err)
	}
	h := r.View(0)
	if len(h.Entries) != 1 || h.Entries[0].Running || h.Entries[0].Result != res {
		t.Errorf("after the end: %+v", h.Entries)
	}
	if s.Info().Current != nil {
		t.Error("a current execution after its end")
	}
}

// The history keeps the newest entries within its count and bytes; an
// entry larger than the bytes alone keeps its code and how it ended.
func TestHistoryBounds(t *testing.T) {
	cfg := testConfig()
	cfg.History.Executions = 3
	cfg.History.Bytes = 64 << 10
	cfg.Defaults.MaxOutput = 128 << 10
	m, _, _ := newTestManager(t, &cfg)
	s := create(t, m, "")
	for i := 0; i < 5; i++ {
		execute(t, s, "out x", nil)
	}
	h := readHistory(t, m, context.Background(), s.ID(), 0)
	if len(h.Entries) != 3 || h.Forgotten != 2 || h.Entries[0].Seq != 3 {
		t.Fatalf("count: %d entries, %d forgotten, first %d", len(h.Entries), h.Forgotten, h.Entries[0].Seq)
	}
	big := strings.Repeat("a", 20<<10) // with its code, 40K an entry
	execute(t, s, "out "+big, nil)
	execute(t, s, "out "+big, nil)
	h = readHistory(t, m, context.Background(), s.ID(), 0)
	if h.Bytes > 64<<10 || h.Entries[len(h.Entries)-1].Result.Stdout != big || h.Entries[0].Seq != 7 {
		t.Fatalf("bytes: %d held, entries from %d", h.Bytes, h.Entries[0].Seq)
	}
	execute(t, s, "out "+big+big+";raise Big", nil)
	h = readHistory(t, m, context.Background(), s.ID(), 0)
	last := h.Entries[len(h.Entries)-1]
	if len(h.Entries) != 1 || !last.Trimmed || last.Result.Stdout != "" || last.Result.Error == nil || last.Result.Error.Name != "Big" || h.Bytes > 64<<10 {
		t.Fatalf("trimmed: %d entries, %+v, %d bytes", len(h.Entries), last, h.Bytes)
	}
}

// The history's code and output are redacted as results are.
func TestHistoryRedacted(t *testing.T) {
	cfg := testConfig()
	cfg.Redaction.Rules = []config.RedactionRule{{Name: "token", Pattern: `tok-[0-9]{1,8}`}}
	m, _, _ := newTestManager(t, &cfg)
	s := create(t, m, "")
	execute(t, s, "out tok-123;raise tok-456", nil)
	runCommand(t, context.Background(), s, apitype.CommandRequest{Command: "out tok-789"}, nil)
	h := readHistory(t, m, context.Background(), s.ID(), 0)
	for _, e := range h.Entries {
		for _, text := range []string{e.Code, resultText(e)} {
			if strings.Contains(text, "tok-") {
				t.Errorf("entry %s holds a secret: %q", e.ID, text)
			}
		}
	}
}

func resultText(e apitype.HistoryEntry) string {
	if e.Command != nil {
		return e.Command.Stdout + e.Command.Stderr
	}
	if e.Result == nil {
		return ""
	}
	s := e.Result.Stdout + e.Result.Stderr
	if e.Result.Error != nil {
		s += e.Result.Error.Name + e.Result.Error.Value + strings.Join(e.Result.Error.Traceback, "")
	}
	return s
}

// A tenant reads its own sessions' histories only; an ended session's
// history is kept for a while (history.ended), then answers 410.
func TestHistoryTenantsAndEnd(t *testing.T) {
	cfg := testConfig()
	cfg.History.Ended = 1
	m, _, _ := newTestManager(t, &cfg)
	a := identity.With(context.Background(), identity.Identity{Tenant: "a", KeyID: "ka"})
	b := identity.With(context.Background(), identity.Identity{Tenant: "b", KeyID: "kb"})
	s1, err := m.Create(a, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, s1, "out one", nil)
	var other *OtherTenantError
	if _, err := m.History(b, s1.ID()); !errors.As(err, &other) {
		t.Fatalf("another tenant's history: %v", err)
	}
	if err := m.DeleteFor(a, s1.ID()); err != nil {
		t.Fatal(err)
	}
	h := readHistory(t, m, a, s1.ID(), 0)
	if h.State != apitype.StateEnded || h.EndCode != apitype.EndDeleted || len(h.Entries) != 1 || h.Entries[0].Result.Stdout != "one" {
		t.Fatalf("ended session's history: %+v", h)
	}
	if _, err := m.History(b, s1.ID()); !errors.As(err, &other) {
		t.Fatalf("another tenant's ended history: %v", err)
	}
	s2, err := m.Create(a, apitype.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.DeleteFor(a, s2.ID())
	if _, err := m.History(a, s1.ID()); !errors.Is(err, errdefs.ErrGone) {
		t.Fatalf("past history.ended: %v", err)
	}
	if _, err := m.History(a, s2.ID()); err != nil {
		t.Fatalf("the newest ended history: %v", err)
	}
}

// A creator's bounds are capped by the server's; without a history none
// may be asked for.
func TestHistoryLimits(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	c := m.cfg.History
	for _, bad := range []apitype.HistoryLimits{{Executions: c.MaxExecutions + 1}, {Bytes: c.MaxBytes + 1}, {Bytes: 1}, {Executions: -1}} {
		if _, err := m.Create(context.Background(), apitype.CreateSessionRequest{History: &bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	s, err := m.Create(context.Background(), apitype.CreateSessionRequest{History: &apitype.HistoryLimits{Executions: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if l := s.Info().History; l.Executions != 5 || l.Bytes != c.Bytes {
		t.Errorf("limits %+v", l)
	}
	cfg := testConfig()
	cfg.History.Enabled = false
	off, _, _ := newTestManager(t, &cfg)
	if _, err := off.Create(context.Background(), apitype.CreateSessionRequest{History: &apitype.HistoryLimits{Executions: 5}}); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("asked of a server without history: %v", err)
	}
	s = create(t, off, "")
	if _, err := off.History(context.Background(), s.ID()); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("history of a server without: %v", err)
	}
	if s.Info().History != nil {
		t.Error("history limits described without a history")
	}
}
