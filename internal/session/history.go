package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/redact"
)

// history is what a client's session remembers of its executions and
// shell commands (nil: the server keeps none, history.enabled). What an
// execution or command adds is taken when it starts and when it ends, and
// costs a lock and a pointer: the result kept is the one the client got
// (already redacted), shared, never copied; the code is redacted only
// when read, and the output of what runs is read only when asked.
//
// Its mu is taken alone: never under an execution's or a command's mu,
// nor the session's, and none of theirs is taken under it.
type history struct {
	limits apitype.HistoryLimits

	mu        sync.Mutex
	entries   []*histEntry // oldest first
	bytes     int64        // what the ended entries count
	forgotten int64
	seq       int64
	// gen changes with every entry begun or ended, and the session's end.
	gen uint64
}

// histEntry is one entry: e's fields, and while it runs the execution or
// command its output so far is read from.
type histEntry struct {
	e    apitype.HistoryEntry
	code string           // as sent; redacted when read
	red  *redact.Redactor // the tenant's (nil: none)
	ex   *execution       // running execution (nil once ended)
	cmd  *command         // running command (nil once ended)
}

// historyLimits resolves the bounds a session's creator asked for (nil:
// the server's), capped by the server's maxima; nil when the server
// keeps no history.
func (m *Manager) historyLimits(asked *apitype.HistoryLimits) (*apitype.HistoryLimits, error) {
	c := m.cfg.History
	if !c.Enabled {
		if asked != nil {
			return nil, fmt.Errorf("%w: this server keeps no session history (history.enabled)", errdefs.ErrUnsupported)
		}
		return nil, nil
	}
	l := apitype.HistoryLimits{Executions: c.Executions, Bytes: c.Bytes}
	if asked != nil {
		if asked.Executions < 0 || asked.Executions > c.MaxExecutions {
			return nil, fmt.Errorf("%w: history.executions %d must be between 1 and the server maximum %d", errdefs.ErrInvalidArgument, asked.Executions, c.MaxExecutions)
		}
		if asked.Bytes < 0 || asked.Bytes > c.MaxBytes || (asked.Bytes > 0 && asked.Bytes < 64<<10) {
			return nil, fmt.Errorf("%w: history.bytes %s must be between 64K and the server maximum %s", errdefs.ErrInvalidArgument, asked.Bytes, c.MaxBytes)
		}
		if asked.Executions > 0 {
			l.Executions = asked.Executions
		}
		if asked.Bytes > 0 {
			l.Bytes = asked.Bytes
		}
	}
	return &l, nil
}

func newHistory(l *apitype.HistoryLimits) *history {
	if l == nil {
		return nil
	}
	return &history{limits: *l}
}

// begin adds a running entry (nil-safe: nil without a history).
func (h *history) begin(kind, id, code string, started time.Time, red *redact.Redactor, ex *execution, cmd *command) *histEntry {
	if h == nil {
		return nil
	}
	e := &histEntry{e: apitype.HistoryEntry{Kind: kind, ID: id, StartedAt: started.UTC(), Running: true}, code: code, red: red, ex: ex, cmd: cmd}
	h.mu.Lock()
	h.seq++
	e.e.Seq = h.seq
	h.entries = append(h.entries, e)
	h.gen++
	h.forgetLocked(nil)
	h.mu.Unlock()
	return e
}

// finish ends e with how it ended: an execution's result or a command's.
// Past the bounds the oldest ended entries are forgotten; an entry
// larger than the bytes alone keeps its code's head and how it ended.
func (h *history) finish(e *histEntry, res *apitype.Result, cres *apitype.CommandResult) {
	if h == nil || e == nil {
		return
	}
	n := entryBytes(e.code, res, cres)
	h.mu.Lock()
	defer h.mu.Unlock()
	e.ex, e.cmd = nil, nil
	e.e.Running = false
	e.e.Result, e.e.Command = res, cres
	if max := int64(h.limits.Bytes); n > max {
		e.e.Trimmed = true
		e.e.Result, e.e.Command = trimResult(res), trimCommand(cres)
		if len(e.code) > int(max/2) {
			e.code = cutUTF8(e.code, int(max/2))
		}
		n = entryBytes(e.code, e.e.Result, e.e.Command)
	}
	e.e.Bytes = n
	h.bytes += n
	h.gen++
	h.forgetLocked(e)
}

// forgetLocked drops the oldest ended entries past the bounds (keeping
// newest, the one just ended, when it is alone within them).
func (h *history) forgetLocked(newest *histEntry) {
	for len(h.entries) > h.limits.Executions || h.bytes > int64(h.limits.Bytes) {
		i := slices.IndexFunc(h.entries, func(e *histEntry) bool { return !e.e.Running && e != newest })
		if i < 0 {
			return
		}
		h.bytes -= h.entries[i].e.Bytes
		h.entries = slices.Delete(h.entries, i, i+1)
		h.forgotten++
	}
}

// ended marks the session's end (its state is part of what a reader
// sees).
func (h *history) ended() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.gen++
	h.mu.Unlock()
}

// after are the entries after seq, and the bookkeeping of a view.
func (h *history) after(seq int64) (entries []*histEntry, gen uint64, forgotten, bytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, _ := slices.BinarySearchFunc(h.entries, seq+1, func(e *histEntry, s int64) int { return int(e.e.Seq - s) })
	// The entries themselves are read under h.mu only (see view).
	return slices.Clone(h.entries[i:]), h.gen, h.forgotten, h.bytes
}

// view is e as a reader sees it: redacted code, and while it runs its
// output so far.
func (h *history) view(e *histEntry) apitype.HistoryEntry {
	h.mu.Lock()
	out, code, ex, cmd := e.e, e.code, e.ex, e.cmd
	h.mu.Unlock()
	out.Code = code
	if e.red != nil {
		out.Code, _ = e.red.String(code)
	}
	switch {
	case ex != nil:
		out.Result = ex.snapshot()
	case cmd != nil:
		res := cmd.result()
		out.Command = &res
	}
	return out
}

// progress is a running entry's output so far, in bytes and outputs, for
// the ETag of a view.
func (e *histEntry) progress(h *history) int64 {
	h.mu.Lock()
	ex, cmd := e.ex, e.cmd
	h.mu.Unlock()
	switch {
	case ex != nil:
		ex.mu.Lock()
		defer ex.mu.Unlock()
		n := int64(len(ex.stdout.buf)+len(ex.stderr.buf)+len(ex.outputs)) + ex.stdout.dropped + ex.stderr.dropped
		if ex.err != nil {
			n++
		}
		return n
	case cmd != nil:
		cmd.mu.Lock()
		defer cmd.mu.Unlock()
		return int64(len(cmd.stdout.buf)+len(cmd.stderr.buf)) + cmd.stdout.dropped + cmd.stderr.dropped
	}
	return 0
}

// snapshot is the execution's result so far (stdout, stderr, rich
// outputs and error), redacted as its result will be.
func (ex *execution) snapshot() *apitype.Result {
	ex.mu.Lock()
	res := &apitype.Result{
		Stdout: toValidUTF8(ex.stdout.buf), Stderr: toValidUTF8(ex.stderr.buf),
		StdoutTruncated: ex.stdout.truncated, StderrTruncated: ex.stderr.truncated,
		StdoutDroppedBytes: ex.stdout.dropped, StderrDroppedBytes: ex.stderr.dropped,
		Results: slices.Clone(ex.outputs), ResultsDropped: ex.richDropped, Error: ex.err,
		FilesChanged: []apitype.FileChange{},
	}
	red := ex.red
	ex.mu.Unlock()
	if res.Results == nil {
		res.Results = []apitype.Output{}
	}
	if red != nil {
		res.Stdout, _ = red.String(res.Stdout)
		res.Stderr, _ = red.String(res.Stderr)
	}
	return res
}

// entryBytes is what an entry counts against the bytes bound: its code
// and output, and a little for the rest.
func entryBytes(code string, res *apitype.Result, cres *apitype.CommandResult) int64 {
	n := int64(256 + len(code))
	if res != nil {
		n += int64(len(res.Stdout) + len(res.Stderr))
		for _, o := range res.Results {
			n += int64(len(o.Metadata))
			for k, v := range o.Data {
				n += int64(len(k) + len(v))
			}
		}
		if res.Error != nil {
			n += int64(len(res.Error.Name) + len(res.Error.Value))
			for _, l := range res.Error.Traceback {
				n += int64(len(l))
			}
		}
		n += int64(128*len(res.Egress) + 64*len(res.FilesChanged))
	}
	if cres != nil {
		n += int64(len(cres.Stdout) + len(cres.Stderr) + len(cres.Command))
	}
	return n
}

// trimResult is res without its output: how it ended, its error's name
// and value, and what it changed are kept.
func trimResult(res *apitype.Result) *apitype.Result {
	if res == nil {
		return nil
	}
	t := *res
	t.Stdout, t.Stderr, t.Results = "", "", []apitype.Output{}
	t.ResultsDropped = res.ResultsDropped + len(res.Results)
	t.StdoutTruncated, t.StderrTruncated = res.StdoutTruncated || res.Stdout != "", res.StderrTruncated || res.Stderr != ""
	if res.Error != nil {
		e := *res.Error
		e.Value = cutUTF8(e.Value, 4096)
		e.Traceback = []string{}
		t.Error = &e
	}
	if len(t.Egress) > 16 {
		t.Egress = t.Egress[:16]
	}
	if len(t.FilesChanged) > 64 {
		t.FilesChanged, t.FilesTruncated = t.FilesChanged[:64], true
	}
	return &t
}

func trimCommand(res *apitype.CommandResult) *apitype.CommandResult {
	if res == nil {
		return nil
	}
	t := *res
	t.Stdout, t.Stderr = "", ""
	t.StdoutTruncated, t.StderrTruncated = res.StdoutTruncated || res.Stdout != "", res.StderrTruncated || res.Stderr != ""
	t.Command = cutUTF8(t.Command, 4096)
	return &t
}

// cutUTF8 is s cut to at most n bytes, on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// HistoryReader reads one session's history, live or ended.
type HistoryReader struct {
	h      *history
	s      *Session // nil once ended
	id     string
	lang   string
	tenant string
	end    apitype.End
}

// endedHistory is an ended session's history, kept for a while
// (history.ended).
type endedHistory struct {
	h      *history
	lang   string
	tenant string
	end    apitype.End
}

// History returns the history of the session id for the caller ctx
// carries (see Find): a live session's, or an ended one's while the
// server keeps it (history.ended).
func (m *Manager) History(ctx context.Context, id string) (*HistoryReader, error) {
	s, err := m.Find(ctx, id)
	var ended *EndedError
	switch {
	case errors.As(err, &ended):
		m.mu.Lock()
		eh, ok := m.endedHist[id]
		m.mu.Unlock()
		if !ok {
			return nil, err
		}
		return &HistoryReader{h: eh.h, id: id, lang: eh.lang, tenant: eh.tenant, end: eh.end}, nil
	case err != nil:
		return nil, err
	case s.hist == nil:
		return nil, fmt.Errorf("%w: this server keeps no session history (history.enabled)", errdefs.ErrUnsupported)
	}
	return &HistoryReader{h: s.hist, s: s, id: s.id, lang: s.lang.Lang, tenant: s.owner.Tenant}, nil
}

// keepHistory keeps an ended session's history (m.mu held).
func (m *Manager) keepHistoryLocked(s *Session, end apitype.End) {
	if s.hist == nil || m.cfg.History.Ended == 0 {
		return
	}
	if m.endedHist == nil {
		m.endedHist = map[string]endedHistory{}
	}
	m.endedHist[s.id] = endedHistory{h: s.hist, lang: s.lang.Lang, tenant: s.owner.Tenant, end: end}
	m.endedHistOrder = append(m.endedHistOrder, s.id)
	for len(m.endedHistOrder) > m.cfg.History.Ended {
		delete(m.endedHist, m.endedHistOrder[0])
		m.endedHistOrder = m.endedHistOrder[1:]
	}
}

// state is the session's state and end as a reader sees it.
func (r *HistoryReader) state() (string, apitype.End) {
	if r.s == nil {
		return apitype.StateEnded, r.end
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	switch {
	case !r.s.end.Zero():
		return apitype.StateEnded, r.s.end
	case r.s.busy:
		return apitype.StateBusy, apitype.End{}
	}
	return apitype.StateIdle, apitype.End{}
}

// ETag names what View(after) would say now: it changes with every entry
// begun or ended, with the output of those running, and with the
// session's state.
func (r *HistoryReader) ETag(after int64) string {
	entries, gen, _, _ := r.h.after(after)
	var progress int64
	for _, e := range entries {
		progress += e.progress(r.h)
	}
	state, _ := r.state()
	return `"` + strconv.FormatUint(gen, 10) + "-" + strconv.FormatInt(progress, 10) + "-" + strconv.FormatInt(after, 10) + "-" + state + `"`
}

// View is the entries after seq after (0: all), oldest first.
func (r *HistoryReader) View(after int64) *apitype.History {
	entries, _, forgotten, bytes := r.h.after(after)
	state, end := r.state()
	out := &apitype.History{Session: r.id, Language: r.lang, State: state, EndReason: end.Reason, EndCode: end.Code, Tenant: r.tenant,
		Entries: make([]apitype.HistoryEntry, 0, len(entries)), Forgotten: forgotten, Bytes: bytes, Limits: r.h.limits}
	for _, e := range entries {
		out.Entries = append(out.Entries, r.h.view(e))
	}
	return out
}

// historyInfo is the history's bounds for the session's description.
func (h *history) info() *apitype.HistoryLimits {
	if h == nil {
		return nil
	}
	l := h.limits
	return &l
}
