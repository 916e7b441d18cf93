// Package audit owns the audit log's writing: a session.Observer that
// turns what sessions do into records (one per session created or ended,
// execution, command, one-shot, program run and file transfer, plus
// package installs and egress decisions that other layers report), a
// bounded queue, one writer goroutine that commits records to the store
// in batches, retention by age and size (fair between tenants: see
// store.RetainAudit), and the query the API serves.
//
// It must never slow or block a request: the observer's methods only
// copy a record into the queue (hashing and encoding happen in the
// writer), and a full queue drops the record and counts it. Nor may it
// fail open: records it cannot write (the data directory full or
// read-only) are held and retried, counted, and Check tells the API to
// refuse work until they are written (audit.on_failure "refuse").
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/session"
	"airlock/internal/store"
)

// Log is the audit log.
type Log struct {
	db  *store.DB
	cfg config.Audit
	log *slog.Logger
	// RetainEvery is how often retention runs (tests shorten it).
	retainEvery time.Duration

	q       chan item
	dropped atomic.Uint64
	written atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once

	// appendAudit commits a batch (the store's; tests fail it).
	appendAudit func(context.Context, []apitype.AuditRecord) error
	// held are records a commit failed on, retried every retryEvery
	// and before any newer one (the writer's alone); failing is set
	// while there are any, failures counts the commits that failed.
	held       []apitype.AuditRecord
	heldN      atomic.Int64
	failing    atomic.Bool
	failures   atomic.Uint64
	retryEvery time.Duration

	// refused aggregates refused requests until the writer's next
	// refusalEvery tick (or a Flush) turns them into records.
	refused      refusals
	refusalEvery time.Duration
}

// item is a record on its way, with its code still whole: what the
// configuration keeps of it is decided off the request's path.
type item struct {
	rec  apitype.AuditRecord
	code string
	// flush, when set, is closed once everything before it is committed.
	flush chan struct{}
}

// New starts the audit log's writer on db.
func New(db *store.DB, cfg config.Audit, log *slog.Logger) *Log {
	if log == nil {
		log = slog.Default()
	}
	l := &Log{db: db, cfg: cfg, log: log, retainEvery: 5 * time.Minute, retryEvery: time.Second, refusalEvery: cfg.RefusalInterval.D(),
		q: make(chan item, cfg.Queue), stop: make(chan struct{}), done: make(chan struct{}),
		appendAudit: db.AppendAudit}
	if l.refusalEvery <= 0 {
		l.refusalEvery = time.Minute
	}
	go l.writer()
	return l
}

// retryAfter is what a refused client is told to wait.
const retryAfter = 5 * time.Second

// Check says whether work may start: an error (errdefs'
// ErrAuditUnavailable, with a Retry-After) while records cannot be
// written and audit.on_failure is "refuse", else nil. Every route that
// does work asks (see package api); it costs an atomic load.
func (l *Log) Check() error {
	if l == nil || !l.failing.Load() || l.cfg.OnFailure == config.AuditContinue {
		return nil
	}
	return &errdefs.RetryError{After: retryAfter, Err: fmt.Errorf("%w: the server cannot write its audit log now (its data directory is full or read-only) and refuses work until it can (audit.on_failure \"refuse\"); try again later", errdefs.ErrAuditUnavailable)}
}

// Health is the log's state for /healthz and the metrics.
func (l *Log) Health() apitype.AuditHealth {
	h := apitype.AuditHealth{Status: "ok", OnFailure: l.cfg.OnFailure, Written: l.written.Load(), Dropped: l.dropped.Load(),
		FailedWrites: l.failures.Load(), Held: l.heldN.Load()}
	if l.failing.Load() {
		h.Status = "failing"
	}
	return h
}

// Close writes what is queued and stops the writer.
func (l *Log) Close() {
	l.once.Do(func() {
		close(l.stop)
		<-l.done
	})
}

// Dropped is the number of records lost to a full queue.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Written is the number of records committed.
func (l *Log) Written() uint64 { return l.written.Load() }

// Flush waits until every record queued before it is committed (tests,
// and a clean shutdown).
func (l *Log) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	select {
	case l.q <- item{flush: ch}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Record queues r (its Code whole: the configuration decides what is
// kept). It never blocks.
func (l *Log) Record(r apitype.AuditRecord) {
	code := r.Code
	r.Code = ""
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	select {
	case l.q <- item{rec: r, code: code}:
	default:
		if n := l.dropped.Add(1); n&(n-1) == 0 { // 1, 2, 4, 8...: not a log line per drop
			l.log.Warn("audit queue full: records dropped", "dropped", n)
		}
	}
}

const maxBatch = 512

func (l *Log) writer() {
	defer close(l.done)
	retain := time.NewTicker(l.retainEvery)
	defer retain.Stop()
	l.retain()
	batch := make([]apitype.AuditRecord, 0, maxBatch)
	var flushes []chan struct{}
	retry := time.NewTicker(l.retryEvery)
	defer retry.Stop()
	refusals := time.NewTicker(l.refusalEvery)
	defer refusals.Stop()
	take := func(it item) {
		if it.flush != nil {
			// A Flush commits the refusals counted so far too.
			batch = append(batch, l.refused.drain(time.Now())...)
			flushes = append(flushes, it.flush)
			return
		}
		batch = append(batch, l.finish(it))
	}
	for {
		select {
		case it := <-l.q:
			take(it)
		case <-retain.C:
			l.retain()
			continue
		case <-retry.C:
			if len(l.held) > 0 {
				l.write(nil) // is there room again?
			}
			continue
		case <-refusals.C:
			l.write(l.refused.drain(time.Now()))
			continue
		case <-l.stop:
			for {
				select {
				case it := <-l.q:
					take(it)
					continue
				default:
				}
				break
			}
			l.last(batch, flushes)
			return
		}
		// What arrives within the flush interval joins this batch: one
		// commit (the writer's real cost, on a core the requests share)
		// for many records; a Flush or a full batch commits at once.
		deadline := time.NewTimer(l.cfg.FlushInterval.D())
	more:
		for len(batch) < maxBatch && len(flushes) == 0 {
			select {
			case it := <-l.q:
				take(it)
			case <-deadline.C:
				break more
			case <-l.stop:
				// Close: take what is queued, commit, then stop below.
				for len(l.q) > 0 {
					take(<-l.q)
				}
				l.last(batch, flushes)
				return
			}
		}
		deadline.Stop()
		l.write(batch)
		batch = batch[:0]
		for _, f := range flushes {
			close(f)
		}
		flushes = flushes[:0]
	}
}

// last is the writer's last commit (Close): what is still held after it
// is lost, and counted.
func (l *Log) last(batch []apitype.AuditRecord, flushes []chan struct{}) {
	l.write(append(batch, l.refused.drain(time.Now())...))
	if n := len(l.held); n > 0 {
		l.dropped.Add(uint64(n))
		l.heldN.Store(0)
		l.log.Error("audit: records lost at shutdown: they could not be written", "records", n)
	}
	for _, f := range flushes {
		close(f)
	}
}

// finish applies the configuration to a record's code.
func (l *Log) finish(it item) apitype.AuditRecord {
	r := it.rec
	if it.code != "" {
		switch l.cfg.Code {
		case "full":
			r.Code = it.code
			r.CodeSize = len(it.code)
		case "sha256":
			h := sha256.Sum256([]byte(it.code))
			r.CodeSHA256 = hex.EncodeToString(h[:])
			r.CodeSize = len(it.code)
		}
	}
	return r
}

// write commits what is held, then batch. A failed commit keeps the
// records (up to audit.queue of them: beyond, the oldest are dropped and
// counted) for the next try, and marks the log failing until one
// succeeds.
func (l *Log) write(batch []apitype.AuditRecord) {
	if len(l.held) > 0 {
		batch = append(l.held, batch...)
		l.held = nil
	}
	if len(batch) == 0 {
		return
	}
	err := l.appendAudit(context.Background(), batch)
	if err == nil {
		l.written.Add(uint64(len(batch)))
		l.heldN.Store(0)
		if l.failing.Swap(false) {
			l.log.Info("audit: records are written again; work is accepted", "records", len(batch))
		}
		return
	}
	l.failures.Add(1)
	if over := len(batch) - l.cfg.Queue; over > 0 {
		l.dropped.Add(uint64(over))
		l.log.Error("audit: records dropped: more are waiting than audit.queue holds", "dropped", over)
		batch = batch[over:]
	}
	l.held = append(make([]apitype.AuditRecord, 0, len(batch)), batch...)
	l.heldN.Store(int64(len(l.held)))
	if !l.failing.Swap(true) {
		action := "work is refused until they can (audit.on_failure refuse)"
		if l.cfg.OnFailure == config.AuditContinue {
			action = "work goes on unrecorded until they can (audit.on_failure continue)"
		}
		l.log.Error("audit: cannot write records; they are held and retried every second; "+action, "held", len(l.held), "err", err)
	}
}

func (l *Log) retain() {
	n, err := l.db.RetainAudit(context.Background(), l.cfg.MaxAge.D(), int64(l.cfg.MaxSize))
	if err != nil {
		l.log.Warn("audit retention", "err", err)
	} else if n > 0 {
		l.log.Info("audit retention removed old records", "records", n)
	}
}

// Query returns a page of records.
func (l *Log) Query(ctx context.Context, q store.AuditQuery) ([]apitype.AuditRecord, string, error) {
	return l.db.Audit(ctx, q)
}

// The session.Observer: what sessions do becomes records.

var _ session.Observer = (*Log)(nil)

func who(c session.Caller) apitype.AuditRecord {
	return apitype.AuditRecord{Tenant: c.Tenant, KeyID: c.KeyID, RequestID: c.RequestID, Admin: c.Admin, ActorTenant: c.ActorTenant}
}

func (l *Log) SessionCreated(e session.SessionEvent) {
	r := who(e.Caller)
	r.Kind, r.Session, r.Language, r.Outcome = apitype.AuditSessionCreate, e.Session, e.Language, "ok"
	r.DurationMs = ms(e.Duration)
	r.Network = e.Network
	l.Record(r)
}

func (l *Log) SessionEnded(e session.SessionEvent) {
	r := who(e.Caller)
	r.Kind, r.Session, r.Language, r.Outcome = apitype.AuditSessionEnd, e.Session, e.Language, "ok"
	r.EndReason, r.DurationMs = e.End.Reason, ms(e.Duration)
	r.Egress, r.EgressSummarized = e.Egress, e.EgressSummarized // decisions no execution carried
	l.Record(r)
}

func (l *Log) ExecutionStarted(session.ExecutionEvent) {}

var execKinds = map[string]string{
	session.ExecSession: apitype.AuditExecution,
	session.ExecCommand: apitype.AuditCommand,
	session.ExecOneShot: apitype.AuditOneShot,
	session.ExecProgram: apitype.AuditProgram,
}

func (l *Log) ExecutionFinished(e session.ExecutionEvent) {
	r := who(e.Caller)
	r.Kind = execKinds[e.Kind]
	if r.Kind == "" {
		r.Kind = e.Kind
	}
	if e.Kind != session.ExecOneShot && e.Kind != session.ExecProgram {
		r.Session = e.Session // a one-shot's sandbox was never a client's session
	}
	if e.Package != "" {
		// A step of a package install: the download (in a sandbox of its
		// own, id e1) or the install (in the session).
		r.Kind, r.Package, r.Session = apitype.AuditPackage, e.Package, e.Session
	}
	r.ID, r.Language, r.Code = e.ID, e.Language, e.Code
	if e.Package != "" {
		// A package step's code is airlock's own, not the client's: it
		// carries the operator's index URL, which may hold credentials
		// (https://user:token@mirror/simple) that the tenant reading
		// its own records must never see. The requirements say it all.
		r.Code = ""
	}
	exit := e.ExitCode
	r.ExitCode = &exit
	r.Error, r.KillReason = e.Error, e.KillReason
	if !e.End.Zero() {
		r.EndReason = e.End.Reason
	}
	switch {
	case e.Killed:
		r.Outcome = "killed"
	case e.Error != "" || e.ExitCode != 0:
		r.Outcome = "error"
	default:
		r.Outcome = "ok"
	}
	r.DurationMs, r.CPUMs, r.PeakMemory = ms(e.Duration), ms(e.CPU), e.PeakMemory
	r.FilesChanged, r.BytesIn, r.BytesOut = e.FilesChanged, e.InputBytes, e.OutputBytes
	r.Redactions, r.CodeFlags, r.Egress, r.EgressSummarized = e.Redactions, e.CodeFlags, e.Egress, e.EgressSummarized
	r.Network = e.Network
	l.Record(r)
}

var fileKinds = map[string]string{
	session.FileUpload:   apitype.AuditFileUpload,
	session.FileDownload: apitype.AuditFileDownload,
	session.FileRemove:   apitype.AuditFileDelete,
	session.FileMove:     apitype.AuditFileUpload,
}

func (l *Log) FileTransferred(e session.FileEvent) {
	kind, ok := fileKinds[e.Op]
	if !ok {
		return // listings are reads of names, not of data
	}
	r := who(e.Caller)
	r.Kind, r.Session, r.Path, r.Outcome = kind, e.Session, e.Path, "ok"
	r.DurationMs = ms(e.Duration)
	if e.Op == session.FileUpload {
		r.BytesIn = e.Bytes
	} else {
		r.BytesOut = e.Bytes
	}
	if e.Err != nil {
		r.Outcome, r.Error = "failed", errdefs.Code(e.Err)
	}
	l.Record(r)
}

// NetworkChanged records a change of a session's egress policy: who, the
// policy asked for and the one it replaced, or why it was refused.
func (l *Log) NetworkChanged(e session.NetworkEvent) {
	r := who(e.Caller)
	r.Kind, r.Session, r.Outcome = apitype.AuditSessionNetwork, e.Session, "ok"
	r.Network = &apitype.AuditNetwork{Allow: e.Allow, Previous: e.Previous}
	if e.Err != nil {
		r.Outcome, r.Error = "failed", errdefs.Code(e.Err)
	}
	l.Record(r)
}

// PortUsed records a session's port opened, made public or private, or
// closed (with what it carried); single connections are not records.
func (l *Log) PortUsed(e session.PortEvent) {
	r := who(e.Caller)
	r.Session, r.Port, r.Public, r.Outcome = e.Session, e.Port, e.Public, "ok"
	switch e.Op {
	case session.PortOpen, session.PortChange:
		r.Kind = apitype.AuditPortOpen
	case session.PortClose:
		r.Kind = apitype.AuditPortClose
		r.DurationMs, r.BytesIn, r.BytesOut = ms(e.Duration), e.BytesIn, e.BytesOut
	default:
		return
	}
	l.Record(r)
}

// ToolCalled records a brokered tool call: the tool, its arguments after
// redaction, the decision, its duration and bytes.
func (l *Log) ToolCalled(e session.ToolCallEvent) {
	r := who(e.Caller)
	c := e.Call
	r.Kind, r.Session, r.ID, r.ToolCall = apitype.AuditToolCall, e.Session, e.Execution, &c
	r.Outcome, r.DurationMs, r.BytesIn, r.BytesOut = "ok", c.DurationMs, c.BytesIn, c.BytesOut
	switch c.Decision {
	case apitype.ToolRefused:
		r.Outcome, r.Error = "denied", c.Code
	case apitype.ToolFailed:
		r.Outcome, r.Error = "failed", c.Code
	}
	l.Record(r)
}

// Package records a package installation (the egress/packages layer
// calls it when it installs one for a session).
func (l *Log) Package(c session.Caller, sessionID, name string, err error) {
	r := who(c)
	r.Kind, r.Session, r.Package, r.Outcome = apitype.AuditPackage, sessionID, name, "ok"
	if err != nil {
		r.Outcome, r.Error = "failed", errdefs.Code(err)
	}
	l.Record(r)
}

// Egress records egress decisions of a session's sandbox (the egress
// layer calls it as it allows or denies destinations).
func (l *Log) Egress(c session.Caller, sessionID string, decisions []apitype.EgressDecision) {
	r := who(c)
	r.Kind, r.Session, r.Egress, r.Outcome = apitype.AuditEgress, sessionID, decisions, "ok"
	for _, d := range decisions {
		if !d.Allowed {
			r.Outcome = "denied"
		}
	}
	l.Record(r)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
