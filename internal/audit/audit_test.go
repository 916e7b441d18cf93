package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/session"
	"airlock/internal/store"
)

func open(t *testing.T, code string) (*Log, *store.DB) {
	t.Helper()
	db, err := store.OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := config.Default().Audit
	cfg.Code = code
	l := New(db, cfg, slog.New(slog.DiscardHandler))
	t.Cleanup(l.Close)
	return l, db
}

func all(t *testing.T, l *Log, q store.AuditQuery) []apitype.AuditRecord {
	t.Helper()
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, _, err := l.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

var caller = session.Caller{Tenant: "t1", KeyID: "key_1", RequestID: "req-1"}

// Every kind of operation becomes one record with its fields.
func TestRecordsPerKind(t *testing.T) {
	l, _ := open(t, "full")
	l.SessionCreated(session.SessionEvent{Caller: caller, Session: "s1", Language: "python", Duration: 3 * time.Millisecond})
	l.ExecutionStarted(session.ExecutionEvent{Caller: caller, Kind: session.ExecSession, Session: "s1"})
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecSession, Session: "s1", Language: "python", ID: "e1", Code: "print(1)",
		Duration: time.Second, CPU: 500 * time.Millisecond, PeakMemory: 1 << 20, ExitCode: 0, OutputBytes: 2, FilesChanged: 1, Redactions: 2, CodeFlags: []string{"net"}})
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecCommand, Session: "s1", Language: "bash", ID: "c1", Code: "ls", ExitCode: 2})
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecOneShot, Session: "tmp", Language: "python", Code: "1/0", Error: "ZeroDivisionError", ExitCode: 1, InputBytes: 10})
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecProgram, Session: "tmp", Language: "python", Code: "while 1: pass", Killed: true, KillReason: apitype.KillTimeout, ExitCode: 137})
	l.FileTransferred(session.FileEvent{Caller: caller, Session: "s1", Op: session.FileUpload, Path: "a.csv", Bytes: 100})
	l.FileTransferred(session.FileEvent{Caller: caller, Session: "s1", Op: session.FileDownload, Path: "a.png", Bytes: 200})
	l.FileTransferred(session.FileEvent{Caller: caller, Session: "s1", Op: session.FileRemove, Path: "x", Err: errors.New("x: " + errdefs.ErrNotFound.Error())})
	l.FileTransferred(session.FileEvent{Caller: caller, Session: "s1", Op: session.FileList})
	l.Package(caller, "s1", "requests", nil)
	l.Egress(caller, "s1", []apitype.EgressDecision{{Host: "pypi.org", Port: 443, Allowed: true}, {Host: "evil.example", Allowed: false}})
	l.SessionEnded(session.SessionEvent{Caller: caller, Session: "s1", Language: "python", End: apitype.Ended(apitype.EndIdle)})

	recs := all(t, l, store.AuditQuery{})
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
		if r.Tenant != "t1" || r.KeyID != "key_1" || r.RequestID != "req-1" || r.Time.IsZero() || r.Seq == 0 {
			t.Errorf("%s: caller or time missing: %+v", r.Kind, r)
		}
	}
	want := "session.create execution command oneshot program file.upload file.download file.delete package.install egress session.end"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("kinds %q, want %q", strings.Join(kinds, " "), want)
	}
	ex := recs[1]
	if ex.Session != "s1" || ex.ID != "e1" || ex.Code != "print(1)" || ex.Outcome != "ok" || ex.ExitCode == nil || *ex.ExitCode != 0 ||
		ex.DurationMs != 1000 || ex.CPUMs != 500 || ex.PeakMemory != 1<<20 || ex.FilesChanged != 1 || ex.BytesOut != 2 || ex.Redactions != 2 || len(ex.CodeFlags) != 1 {
		t.Errorf("execution record: %+v", ex)
	}
	if r := recs[2]; r.Outcome != "error" || *r.ExitCode != 2 || r.Code != "ls" {
		t.Errorf("command record: %+v", r)
	}
	if r := recs[3]; r.Session != "" || r.Error != "ZeroDivisionError" || r.Outcome != "error" || r.BytesIn != 10 {
		t.Errorf("one-shot record (no client session): %+v", r)
	}
	if r := recs[4]; r.Outcome != "killed" || r.KillReason != apitype.KillTimeout {
		t.Errorf("program record: %+v", r)
	}
	if r := recs[5]; r.Path != "a.csv" || r.BytesIn != 100 {
		t.Errorf("upload: %+v", r)
	}
	if r := recs[6]; r.BytesOut != 200 {
		t.Errorf("download: %+v", r)
	}
	if r := recs[7]; r.Outcome != "failed" {
		t.Errorf("a failed delete: %+v", r)
	}
	if r := recs[9]; r.Outcome != "denied" || len(r.Egress) != 2 {
		t.Errorf("egress: %+v", r)
	}
	if r := recs[10]; r.EndReason == "" {
		t.Errorf("session end without its reason: %+v", r)
	}
	// Filters.
	if n := len(all(t, l, store.AuditQuery{Kind: "file"})); n != 3 {
		t.Errorf("kind=file: %d records, want 3", n)
	}
	if n := len(all(t, l, store.AuditQuery{Kind: "execution"})); n != 1 {
		t.Errorf("kind=execution: %d", n)
	}
	if n := len(all(t, l, store.AuditQuery{Tenant: "t2"})); n != 0 {
		t.Errorf("tenant=t2: %d", n)
	}
	page, next, _ := l.Query(context.Background(), store.AuditQuery{Limit: 4})
	rest, last, _ := l.Query(context.Background(), store.AuditQuery{Limit: 100, After: page[3].Seq})
	if len(page) != 4 || next == "" || len(rest) != len(recs)-4 || last != "" {
		t.Errorf("pages: %d %q, %d %q", len(page), next, len(rest), last)
	}
}

// What a record keeps of code follows audit.code.
func TestCodeModes(t *testing.T) {
	code := "password = 'hunter2'\nprint(password)"
	sum := sha256.Sum256([]byte(code))
	for _, c := range []struct {
		mode, code, sha string
		size            int
	}{
		{"full", code, "", len(code)},
		{"sha256", "", hex.EncodeToString(sum[:]), len(code)},
		{"none", "", "", 0},
	} {
		l, db := open(t, c.mode)
		l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecSession, Session: "s", Code: code})
		r := all(t, l, store.AuditQuery{})[0]
		if r.Code != c.code || r.CodeSHA256 != c.sha || r.CodeSize != c.size {
			t.Errorf("%s: code %q sha %q size %d", c.mode, r.Code, r.CodeSHA256, r.CodeSize)
		}
		if c.mode != "full" {
			// Not in the database at all, in any column.
			l.Close()
			raw, _ := readAll(db)
			if strings.Contains(raw, "hunter2") {
				t.Errorf("%s: the code is in the database", c.mode)
			}
		}
	}
}

func readAll(db *store.DB) (string, error) {
	recs, _, err := db.Audit(context.Background(), store.AuditQuery{})
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(r.Code + r.CodeSHA256 + r.Error)
	}
	return b.String(), err
}

// Retention removes records past the age, then the oldest past the size.
func TestRetention(t *testing.T) {
	db, err := store.OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	var recs []apitype.AuditRecord
	for i := 0; i < 10; i++ {
		recs = append(recs, apitype.AuditRecord{Time: old, Kind: "execution", Session: "old"})
	}
	for i := 0; i < 100; i++ {
		recs = append(recs, apitype.AuditRecord{Time: time.Now(), Kind: "execution", Session: "new", Code: strings.Repeat("x", 1000)})
	}
	if err := db.AppendAudit(ctx, recs); err != nil {
		t.Fatal(err)
	}
	n, err := db.RetainAudit(ctx, 24*time.Hour, 0)
	if err != nil || n != 10 {
		t.Fatalf("by age: removed %d, %v; want 10", n, err)
	}
	if _, err := db.RetainAudit(ctx, 0, 50_000); err != nil {
		t.Fatal(err)
	}
	left, _, _ := db.Audit(ctx, store.AuditQuery{})
	if len(left) == 0 || len(left) > 50 {
		t.Fatalf("by size: %d records left, want at most 50 of ~1 KB under 50 KB", len(left))
	}
	if left[len(left)-1].Seq != recs[len(recs)-1].Seq {
		t.Errorf("the newest record was removed")
	}
}

// A full queue drops records (counted) instead of blocking the caller.
func TestFullQueueDrops(t *testing.T) {
	db, err := store.OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := config.Default().Audit
	cfg.Queue = 1
	// A log whose writer is not running: nothing drains the queue.
	l := &Log{db: db, cfg: cfg, log: slog.New(slog.DiscardHandler), q: make(chan item, 1)}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		l.Record(apitype.AuditRecord{Kind: "execution"})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("recording into a full queue took %s", d)
	}
	if l.Dropped() != 999 {
		t.Errorf("dropped %d, want 999", l.Dropped())
	}
}

// The steps of a package install are package.install records of the
// client's session, naming the requirements.
func TestPackageInstallRecords(t *testing.T) {
	l, _ := open(t, "sha256")
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecOneShot, Session: "s1", ID: "e1", Package: "requests==2.31.0", Code: "download..."})
	l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecSession, Session: "s1", ID: "e4", Package: "requests==2.31.0", Code: "install...", ExitCode: 1, Error: "PipError"})
	recs := all(t, l, store.AuditQuery{Kind: apitype.AuditPackage})
	if len(recs) != 2 || recs[0].Session != "s1" || recs[0].Package != "requests==2.31.0" || recs[0].Outcome != "ok" || recs[1].Outcome != "error" {
		t.Errorf("package records: %+v", recs)
	}
}

// A package step's code (airlock's own, with the operator's index URL and
// whatever credentials it holds) never reaches the audit log, whatever
// audit.code says: the tenant reads its records.
func TestPackageInstallCodeNotRecorded(t *testing.T) {
	for _, mode := range []string{"full", "sha256"} {
		l, _ := open(t, mode)
		l.ExecutionFinished(session.ExecutionEvent{Caller: caller, Kind: session.ExecOneShot, Session: "s1", ID: "e1", Package: "requests",
			Code: `pip download --index-url https://user:s3cret@mirror.example/simple requests`})
		recs := all(t, l, store.AuditQuery{Kind: apitype.AuditPackage})
		if len(recs) != 1 || recs[0].Code != "" || recs[0].CodeSHA256 != "" || strings.Contains(fmt.Sprint(recs[0]), "s3cret") {
			t.Errorf("audit.code %s: package record %+v", mode, recs)
		}
	}
}

// The egress decisions no execution carried (a background thread's, a
// shell command's) are in the session's end record.
func TestSessionEndCarriesUntaggedEgress(t *testing.T) {
	l, _ := open(t, "sha256")
	eg := []apitype.EgressDecision{{Kind: "connect", Host: "example.com", Port: 443, Allowed: true, Reason: "allowed: closed", BytesUp: 10, BytesDown: 20}}
	l.SessionEnded(session.SessionEvent{Caller: caller, Session: "s1", Language: "python", End: apitype.Ended(apitype.EndIdle), Egress: eg})
	recs := all(t, l, store.AuditQuery{Kind: apitype.AuditSessionEnd})
	if len(recs) != 1 || len(recs[0].Egress) != 1 || recs[0].Egress[0].Host != "example.com" || recs[0].Egress[0].BytesDown != 20 {
		t.Errorf("session end record: %+v", recs)
	}
}

// A commit that fails (the data directory full or read-only) keeps the
// records and retries them; meanwhile Check refuses work (on_failure
// "refuse") or lets it go on ("continue"), Health says failing with the
// counts, and once a commit succeeds every held record is there, in
// order, and work is accepted again. More held than audit.queue drops
// the oldest, counted; held at Close are counted as dropped.
func TestWriteFailureHoldsAndRefuses(t *testing.T) {
	for _, mode := range []string{config.AuditRefuse, config.AuditContinue} {
		db, err := store.OpenSQLite(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg := config.Default().Audit
		cfg.OnFailure, cfg.Queue = mode, 4
		l := New(db, cfg, slog.New(slog.DiscardHandler))
		var broken atomic.Bool
		l.appendAudit = func(ctx context.Context, recs []apitype.AuditRecord) error {
			if broken.Load() {
				return errors.New("database or disk is full")
			}
			return db.AppendAudit(ctx, recs)
		}
		ctx := context.Background()
		if err := l.Check(); err != nil || l.Health().Status != "ok" {
			t.Fatalf("%s: a healthy log: %v %+v", mode, err, l.Health())
		}
		broken.Store(true)
		for i := range 3 {
			l.Record(apitype.AuditRecord{Kind: apitype.AuditExecution, ID: fmt.Sprint("e", i)})
		}
		l.Flush(ctx)
		h := l.Health()
		if h.Status != "failing" || h.Held != 3 || h.FailedWrites == 0 || h.Written != 0 || h.OnFailure != mode {
			t.Errorf("%s: health %+v, want failing with 3 held", mode, h)
		}
		err = l.Check()
		if mode == config.AuditRefuse {
			if !errors.Is(err, errdefs.ErrAuditUnavailable) || errdefs.HTTPStatus(err) != 503 || errdefs.Code(err) != "audit_unavailable" {
				t.Errorf("refuse: Check = %v, want 503 audit_unavailable", err)
			}
			if after, ok := errdefs.RetryAfter(err); !ok || after <= 0 {
				t.Errorf("refuse: no Retry-After in %v", err)
			}
			if strings.Contains(errdefs.Message(err), "disk is full") || strings.Contains(errdefs.Message(err), "/") {
				t.Errorf("refuse: the message names host internals: %s", errdefs.Message(err))
			}
		} else if err != nil {
			t.Errorf("continue: Check = %v, want nil", err)
		}
		// Two more: five held, one more than audit.queue: the oldest goes.
		for i := 3; i < 5; i++ {
			l.Record(apitype.AuditRecord{Kind: apitype.AuditExecution, ID: fmt.Sprint("e", i)})
		}
		l.Flush(ctx)
		if h := l.Health(); h.Held != 4 || h.Dropped != 1 {
			t.Errorf("%s: health %+v, want 4 held and 1 dropped", mode, h)
		}
		broken.Store(false)
		// The retry (every second) writes them without a new record.
		deadline := time.Now().Add(30 * time.Second)
		for l.Health().Status != "ok" && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := l.Check(); err != nil || l.Health().Held != 0 || l.Health().Written != 4 {
			t.Errorf("%s: after recovery: %v %+v", mode, err, l.Health())
		}
		recs, _, _ := l.Query(ctx, store.AuditQuery{})
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != "e1,e2,e3,e4" {
			t.Errorf("%s: records %v, want e1..e4 in order", mode, ids)
		}
		// Held at shutdown: lost, and counted.
		broken.Store(true)
		l.Record(apitype.AuditRecord{Kind: apitype.AuditExecution, ID: "e5"})
		l.Close()
		if h := l.Health(); h.Dropped != 2 || h.Held != 0 {
			t.Errorf("%s: after Close: %+v, want 2 dropped", mode, h)
		}
		db.Close()
	}
}

// Refused requests become one record per kind, reason, source and key
// per interval, with their count, in the operator's records (no tenant:
// a prober reading its tenant's records learns nothing); an IPv6 client
// counts by its /64; past maxRefusalKeys distinct ones in an interval,
// the rest share a record of source "*" per reason: a flood of any
// shape makes a bounded number of records.
func TestRefusalsAggregated(t *testing.T) {
	l, _ := open(t, "sha256")
	for range 1000 {
		l.Refused(apitype.AuditAuthFailure, "unknown_key", "192.0.2.1", "", "", "req-1")
	}
	for i := range 300 { // rotating through a /64
		l.Refused(apitype.AuditAuthFailure, "unknown_key", fmt.Sprintf("2001:db8::%x", i), "", "", "")
	}
	l.Refused(apitype.AuditAccessDenied, "cross_tenant", "192.0.2.2", "team-b", "key_b", "req-2")
	recs := all(t, l, store.AuditQuery{})
	byKey := map[string]apitype.AuditRecord{}
	for _, r := range recs {
		if r.Tenant != "" || r.Outcome != "refused" || r.Until.Before(r.Time) {
			t.Errorf("record %+v: want the operator's, refused, Time..Until", r)
		}
		byKey[r.Kind+" "+r.Reason+" "+r.Source] = r
	}
	if r := byKey["auth.failure unknown_key 192.0.2.1"]; r.Count != 1000 || r.RequestID != "req-1" {
		t.Errorf("the flood: %+v, want one record counting 1000", r)
	}
	if r := byKey["auth.failure unknown_key 2001:db8::/64"]; r.Count != 300 {
		t.Errorf("the /64: %+v, want one record counting 300", r)
	}
	if r := byKey["access.denied cross_tenant 192.0.2.2"]; r.Count != 1 || r.ActorTenant != "team-b" || r.KeyID != "key_b" {
		t.Errorf("the probe: %+v", r)
	}
	// Many distinct sources: bounded.
	for i := range 2000 {
		l.Refused(apitype.AuditAuthFailure, "missing_key", fmt.Sprintf("10.0.%d.%d", i/256, i%256), "", "", "")
	}
	recs = all(t, l, store.AuditQuery{Kind: apitype.AuditAuthFailure})
	n, other := 0, 0
	for _, r := range recs {
		if r.Reason == "missing_key" {
			n++
			if r.Source == "*" {
				other = r.Count
			}
		}
	}
	if n != maxRefusalKeys+1 || other != 2000-maxRefusalKeys {
		t.Errorf("2000 sources: %d records, %d folded into \"*\"; want %d and %d", n, other, maxRefusalKeys+1, 2000-maxRefusalKeys)
	}
}

// A brokered tool call is a tool.call record: the call as the broker
// recorded it (arguments already redacted), the execution it was in,
// and an outcome of ok, denied (refused) or failed.
func TestToolCallRecords(t *testing.T) {
	l, _ := open(t, "full")
	st := 200
	for _, c := range []apitype.ToolCall{
		{Tool: "search", Arguments: json.RawMessage(`{"q":"a"}`), Decision: apitype.ToolOK, Status: &st, DurationMs: 1.5, BytesIn: 9, BytesOut: 40},
		{Tool: "search", Decision: apitype.ToolRefused, Code: "invalid_argument", Field: "q", Rule: "maxLength"},
		{Tool: "hang", Decision: apitype.ToolFailed, Code: "timeout", Rule: "timeout"},
	} {
		l.ToolCalled(session.ToolCallEvent{Caller: caller, Session: "s1", Execution: "e2", Call: c})
	}
	recs := all(t, l, store.AuditQuery{Kind: apitype.AuditToolCall})
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	var got []string
	for _, r := range recs {
		if r.Session != "s1" || r.ID != "e2" || r.ToolCall == nil || r.Tenant != "t1" {
			t.Errorf("record %+v", r)
		}
		got = append(got, r.ToolCall.Tool+" "+r.Outcome+" "+r.Error)
	}
	if want := "search ok |search denied invalid_argument|hang failed timeout"; strings.Join(got, "|") != want {
		t.Errorf("%q, want %q", strings.Join(got, "|"), want)
	}
	if r := recs[0]; string(r.ToolCall.Arguments) != `{"q":"a"}` || r.BytesIn != 9 || r.BytesOut != 40 || r.DurationMs != 1.5 {
		t.Errorf("the call's figures: %+v", r)
	}
}
