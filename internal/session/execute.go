package session

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/redact"
	"airlock/internal/runtimes"
	"airlock/internal/watch"
	"airlock/internal/workspace"
)

// MaxCode caps the code of one execution.
const MaxCode = 4 << 20

// sendFloor is the least time a runtime gets to read a request before it
// counts as no longer reading (which ends its session): a short timeout
// bounds the code, not the write of the request.
const sendFloor = time.Second

// request is one execution: code, or a program run in place of the
// runtime (program runs only).
type request struct {
	code string
	// env is set for this execution alone (nil: nothing).
	env     map[string]string
	timeout time.Duration // 0: the session's
	prog    *instance.Program
	kind    string // ExecSession, ExecOneShot or ExecProgram
	// For observers: who asked, a program's source, the input files' size.
	who     Caller
	source  string
	inBytes int64
	// flags: the code rules that flagged the code; screened: they were
	// checked already (one-shot runs check before they build a jail).
	flags    []string
	screened bool
	// pkg: the requirements of a package install this execution is a
	// step of, for the client session pkgSession.
	pkg, pkgSession string
	// changes, when set, receives the files the execution changed with
	// their paths unredacted (a one-shot run reads them; the result's
	// are redacted).
	changes *[]apitype.FileChange
	// cc is the context it runs in (nil: the session's default).
	cc *codeContext
}

// tenant is whose output policy and code rules apply: the session's
// owner's, or for a one-shot or program run, the caller's.
func (s *Session) policyTenant(req request) string {
	if s.owner.Tenant != "" {
		return s.owner.Tenant
	}
	return req.who.Tenant
}

// event describes the execution to observers.
func (r *running) event() ExecutionEvent {
	code := r.req.code
	if r.req.prog != nil {
		code = r.req.source
	}
	e := ExecutionEvent{Caller: r.req.who, Kind: r.req.kind, Session: r.s.id, Language: r.c.lang.Lang, ID: r.id, Code: code, InputBytes: r.req.inBytes, CodeFlags: r.req.flags}
	if r.req.pkg != "" {
		e.Package, e.Session = r.req.pkg, r.req.pkgSession
	}
	if r.req.kind == ExecOneShot || r.req.kind == ExecProgram {
		// A sandbox of its own: no session record says its policy.
		if g := r.s.egressGate(); g != nil {
			e.Network = &apitype.AuditNetwork{Allow: g.Policy().Entries()}
		}
	}
	return e
}

// execution collects what one execution produced.
type execution struct {
	// id, code and started describe it (Session.Info): set under the
	// session's mu before it is the session's cur, never changed.
	id      string
	code    string
	started time.Time

	mu          sync.Mutex
	stdout      stream
	stderr      stream
	outputs     []apitype.Output
	richDropped int
	outBytes    int
	maxRich     int
	err         *apitype.ExecError
	emit        func(apitype.Event)
	// interrupt carries a request to interrupt this execution: a
	// client's (""), or a pause's (its kill reason).
	interrupt chan apitype.KillReason
	// red redacts what goes back (nil: nothing is); redacted counts the
	// matches replaced in rich outputs and the error so far.
	red      *redact.Redactor
	redacted int
	// toolCalls: the session's tool calls while it ran (at most
	// maxToolCalls, the rest counted); toolsDone: the result has them.
	toolCalls        []apitype.ToolCall
	toolCallsDropped int
	toolsDone        bool
}

// codeHead is the head of the execution's code as a description shows
// it: its first lines, at most apitype.CodeHeadBytes, redacted.
func (ex *execution) codeHead() (string, bool) {
	head := cutUTF8(ex.code, apitype.CodeHeadBytes)
	if i := strings.IndexByte(head, '\n'); i >= 0 {
		if j := strings.IndexByte(head[i+1:], '\n'); j >= 0 {
			if k := strings.IndexByte(head[i+1+j+1:], '\n'); k >= 0 {
				head = head[:i+1+j+1+k] // three lines
			}
		}
	}
	if ex.red != nil {
		head, _ = ex.red.String(head)
	}
	return head, len(head) < len(ex.code)
}

// redactWith redacts the execution's output with r, the live output too.
func (ex *execution) redactWith(r *redact.Redactor) {
	ex.red = r
	ex.stdout.redactLive(r)
	ex.stderr.redactLive(r)
}

// newExecution collects an execution's output: stdout and stderr up to
// maxOutput each (the rest is dropped and counted, and the code runs on),
// rich outputs up to maxRich in all. lossless streams bytes that are not
// UTF-8 as data_base64 instead of replacing them.
func newExecution(maxOutput, maxRich int, emit func(apitype.Event), lossless bool) *execution {
	ex := &execution{emit: emit, interrupt: make(chan apitype.KillReason, 1), maxRich: maxRich}
	ex.stdout = stream{max: maxOutput, name: apitype.EventStdout}
	ex.stderr = stream{max: maxOutput, name: apitype.EventStderr}
	if emit != nil {
		ex.stdout.full = emit
		ex.stderr.full = ex.stdout.full
		live := func(kind string) func([]byte) {
			return func(b []byte) {
				if lossless && !utf8.Valid(b) {
					emit(apitype.Event{Type: kind, DataBase64: base64.StdEncoding.EncodeToString(b)})
					return
				}
				emit(apitype.Event{Type: kind, Text: toValidUTF8(b)})
			}
		}
		ex.stdout.live = live(apitype.EventStdout)
		ex.stderr.live = live(apitype.EventStderr)
	}
	return ex
}

// streamOf is the execution's stderr or stdout; its mu must be held.
func (ex *execution) streamOf(isErr bool) *stream {
	if isErr {
		return &ex.stderr
	}
	return &ex.stdout
}

func (ex *execution) output(p []byte, isErr bool) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.streamOf(isErr).write(p)
}

// keeps reports whether the execution still takes output of a stream.
func (ex *execution) keeps(isErr bool) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return !ex.streamOf(isErr).truncated
}

// dropped counts output of a stream dropped unread past its cap.
func (ex *execution) dropped(n int, isErr bool) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.streamOf(isErr).drop(n)
}

func (ex *execution) rich(m runtimes.Message) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	// Streams first: what was printed before this output was flushed
	// before it was sent.
	ex.stdout.flush()
	ex.stderr.flush()
	size := len(m.Metadata)
	for _, v := range m.Data {
		size += len(v)
	}
	if ex.outBytes+size > ex.maxRich {
		ex.richDropped++
		return
	}
	ex.outBytes += size
	data, meta, n := redactData(ex.red, m.Data, m.Metadata)
	ex.redacted += n
	o := apitype.Output{Type: m.Type, Data: data, Metadata: meta}
	ex.outputs = append(ex.outputs, o)
	if ex.emit != nil {
		ex.emit(apitype.Event{Type: m.Type, Data: data, Metadata: meta})
	}
}

// error keeps the runtime's error, and streams it if live.
func (ex *execution) error(m runtimes.Message, live bool) {
	ex.mu.Lock()
	ex.stdout.flush()
	ex.stderr.flush()
	ex.err = &apitype.ExecError{Name: m.Name, Value: m.Value, Traceback: m.Traceback}
	if ex.err.Traceback == nil {
		ex.err.Traceback = []string{}
	}
	var n int
	ex.err, n = redactError(ex.red, ex.err)
	ex.redacted += n
	ex.mu.Unlock()
	if ex.emit != nil && live {
		ex.emit(apitype.Event{Type: apitype.EventError, Error: ex.err})
	}
}

// Execute runs code in the session. Only one execution runs at a time; a
// second concurrent call gets errdefs.ErrConflict. emit, if not nil,
// receives events as they happen, the last one of type "end".
//
// It runs in the context req names, or in the default context of the
// language it names (started now if need be), or in the session's
// default context.
func (s *Session) Execute(ctx context.Context, req apitype.ExecuteRequest, emit func(apitype.Event)) (*apitype.Result, error) {
	release, err := s.m.admitExecution(ctx, &Ask{Timeout: req.Timeout})
	if err != nil {
		return nil, err
	}
	defer release()
	// Checked before a context starts for it (begin checks it again).
	if len(req.Code) > MaxCode {
		return nil, fmt.Errorf("%w: code is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	if err := ValidateEnv(req.Env, s.m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	c, err := s.contextFor(ctx, req.Context, req.Language)
	if err != nil {
		return nil, err
	}
	return s.execute(ctx, request{code: req.Code, env: req.Env, timeout: req.Timeout.D(), kind: ExecSession, cc: c}, endFirst(emit, release), false)
}

// execute is Execute: begin, watch, finish. slotHeld says the caller
// already holds an execution slot (one-shot runs take it before building
// their jail).
func (s *Session) execute(ctx context.Context, req request, emit func(apitype.Event), slotHeld bool) (*apitype.Result, error) {
	if req.who == (Caller{}) {
		req.who = s.callerOf(ctx)
	}
	r, err := s.begin(ctx, req, emit, slotHeld)
	if err != nil {
		return nil, err
	}
	defer r.release()
	r.ctx = ctx
	o := watch.Watch(ctx, s.inst, watch.Code[runtimes.Message](r), r.spec)
	r.stopInstall()
	return s.finishExecution(r, o), nil
}

// running is one execution under way: what begin set up, what the watch
// hands the runtime's messages to, and what finish reads.
type running struct {
	s       *Session
	c       *codeContext
	req     request
	id      string
	ex      *execution
	emit    func(apitype.Event)
	before  workspace.Snapshot
	cpu0    time.Duration
	start   time.Time
	spec    watch.Spec
	release func()
	// hist is its entry in the session's history (nil: none).
	hist *histEntry
	// How it ended, as the runtime said: its done, or a program's exit.
	done     *runtimes.Message
	progExit *instance.Exit
	// stoppedBy is why the watch interrupted the code, if it did (its
	// goroutine alone reads and writes it).
	stoppedBy apitype.KillReason
	// ctxEnd: the context's runtime went away, or must (it did not stop
	// after an interrupt), and with it the context alone (one started
	// beside the sandbox's first).
	ctxEnd apitype.End
	// A package install the code asked for (%pip install): one at a
	// time, answered only while the execution runs.
	ctx      context.Context
	instMu   sync.Mutex
	instBusy bool
	// instLocked: the session's pkgMu is held, until stopInstall.
	instLocked bool
	instOver   bool
	instStop   context.CancelFunc
	instWG     sync.WaitGroup
}

// begin checks the request, takes the session (and an execution slot),
// and sends the code or program to the runtime.
func (s *Session) begin(ctx context.Context, req request, emit func(apitype.Event), slotHeld bool) (_ *running, err error) {
	if len(req.code) > MaxCode {
		return nil, fmt.Errorf("%w: code is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	timeout := req.timeout
	if timeout == 0 {
		timeout = s.limits.Timeout.D()
	}
	if timeout < config.MinTimeout.D() || timeout > s.m.cfg.Max.Timeout.D() {
		return nil, fmt.Errorf("%w: timeout %s must be between %s and the server maximum %s", errdefs.ErrInvalidArgument, timeout, config.MinTimeout, s.m.cfg.Max.Timeout)
	}
	def := s.defContext()
	c := req.cc
	if c == nil {
		c = def
	}
	if !c.lang.NULInCode && strings.ContainsRune(req.code, 0) {
		return nil, fmt.Errorf("%w: %s code must not contain NUL bytes", errdefs.ErrInvalidArgument, c.lang.Lang)
	}
	if !req.screened && req.pkg == "" { // a package install's code is airlock's own
		code := req.code
		if req.prog != nil {
			code = req.source
		}
		flags, err := s.m.screen(s.policyTenant(req), ExecutionEvent{Caller: req.who, Kind: req.kind, Session: s.id, Language: c.lang.Lang, Code: code, InputBytes: req.inBytes})
		if err != nil {
			return nil, err
		}
		req.flags, req.screened = flags, true
	}
	if !c.execMu.TryLock() {
		if c == def {
			return nil, fmt.Errorf("%w: the session is already executing code; wait for it or interrupt it", errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("%w: context %s is already executing code; wait for it or interrupt it", errdefs.ErrConflict, c.id)
	}
	// What is held is given back in reverse order, by release or here.
	var held []func()
	r := &running{s: s, c: c, req: req, emit: emit}
	// Once: finish gives it back before the end event, execute's defer
	// on every other path.
	r.release = sync.OnceFunc(func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	})
	defer func() {
		if err != nil {
			r.release()
		}
	}()
	held = append(held, c.execMu.Unlock)
	if err := s.contextLive(c); err != nil {
		return nil, err
	}
	// The last operation's point is sealed before this one writes, and
	// no deferred seal starts while it runs.
	leave, err := s.live.enter(ctx)
	if err != nil {
		return nil, err
	}
	held = append(held, leave)
	if err := s.takeEnvPending(ctx, c); err != nil {
		return nil, err
	}
	if !slotHeld {
		release, err := s.m.acquire(ctx)
		if err != nil {
			return nil, err
		}
		held = append(held, release)
	}

	red, err := s.redactor(s.policyTenant(req))
	if err != nil {
		return nil, err
	}
	prog := req.prog
	r.ex = newExecution(int(s.limits.MaxOutput), int(s.m.cfg.Server.MaxRichOutput), emit, prog != nil)
	r.ex.redactWith(red)
	if end := s.End(); !end.Zero() { // ended while we waited for a slot
		return nil, gone(end)
	}
	r.before = workspace.TakeSnapshot(s.workspace())
	r.cpu0, _ = s.inst.CPU()
	s.mu.Lock()
	if !s.end.Zero() {
		end := s.end
		s.mu.Unlock()
		return nil, gone(end)
	}
	if !c.end.Zero() {
		end := c.end
		s.mu.Unlock()
		return nil, &ContextEndedError{ID: c.id, End: end}
	}
	if s.pausing {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the session is being paused", errdefs.ErrConflict)
	}
	s.running++
	s.busy = true
	s.execCount++
	c.execs++
	r.id = "e" + strconv.Itoa(s.execCount)
	r.ex.id, r.ex.code, r.ex.started = r.id, req.code, time.Now()
	if prog != nil {
		r.ex.code = req.source
	}
	c.cur = r.ex
	s.tagEgressLocked()
	s.lastUsed = time.Now()
	s.mu.Unlock()
	// Output read from now on is this execution's: none is still being
	// dropped for want of one.
	c.it.Barrier()
	held = append(held, func() {
		s.mu.Lock()
		s.running--
		s.busy = s.running > 0
		c.cur = nil
		s.tagEgressLocked()
		s.lastUsed = time.Now()
		if s.idleTimer != nil && s.end.Zero() {
			s.idleTimer.Reset(s.idle)
		}
		ended := !s.end.Zero() && !s.busy
		s.mu.Unlock()
		if ended {
			s.teardownOnce.Do(s.teardown)
		}
	})
	if s.m.obs != nil {
		s.m.obs.ExecutionStarted(r.event())
	}

	r.start = time.Now()
	// A runtime whose code stopped it reading its socket (SIGSTOP, a
	// thread holding the GIL) must not hold the execution long past its
	// timeout: the request, half sent, ends the session.
	sendBy := r.start.Add(max(timeout, sendFloor))
	if prog != nil {
		err = c.it.Run(r.id, *prog, sendBy)
	} else {
		err = c.it.Execute(r.id, req.code, req.env, sendBy)
	}
	if err != nil {
		end := instance.SendFailure(err)
		s.m.log.Warn("sending to the runtime failed", "session", s.id, "context", c.id, "err", err)
		if c.beside != nil {
			// The context alone: its runtime is ended for good.
			s.endContext(c, end)
			c.beside.Kill()
		} else {
			s.terminate(end)
		}
		var eg []apitype.EgressDecision
		var summarized int64
		if g := s.egressGate(); g != nil {
			eg, summarized = egressOf(g.Take(r.id))
		}
		if s.m.obs != nil {
			e := r.event()
			e.Duration, e.End, e.Error = time.Since(r.start), end, "SessionEnded"
			if c.beside != nil {
				e.End, e.Error = apitype.End{}, "ContextEnded"
			}
			e.Egress, e.EgressSummarized = eg, summarized
			s.m.obs.ExecutionFinished(e)
		}
		if c.beside != nil {
			return nil, &ContextEndedError{ID: c.id, End: end}
		}
		return nil, gone(s.End())
	}
	if req.kind == ExecSession && req.pkg == "" {
		r.hist = s.hist.begin(apitype.HistoryExecution, r.id, req.code, r.start, r.ex.red, r.ex, nil)
	}
	policy := watch.Interrupt
	if prog != nil {
		// A program is stopped like `airlock run` stops it: at once,
		// with its sandbox, which was only its vehicle.
		policy = watch.Kill
	}
	r.spec = watch.Spec{
		Policy:  policy,
		Timeout: timeout,
		CPUTime: s.limits.CPUTime.D(), CPUBase: r.cpu0, CPUs: s.limits.CPUs,
		Grace:      s.m.cfg.Server.InterruptGrace.D(),
		Interrupts: r.ex.interrupt,
		Ended:      s.ended,
		EndedBy:    s.End,
		Clock:      s.m.clock,
	}
	return r, nil
}

// Reports are the runtime's messages.
func (r *running) Reports() <-chan runtimes.Message { return r.c.it.Messages() }

// handlers take an execution's messages by type, as ipykernel's shell
// handlers do: the output the runtime reports, the requests it makes of
// the server, and its done, which finishes the execution. Every type of
// runtimes.ExecutionTypes has one.
var handlers = map[string]func(r *running, m runtimes.Message) (finished bool){
	runtimes.TypeDisplay: (*running).onRich,
	runtimes.TypeResult:  (*running).onRich,
	runtimes.TypeError:   (*running).onError,
	runtimes.TypeInstall: (*running).onInstall,
	runtimes.TypeDone:    (*running).onDone,
}

// Handle takes one of the runtime's messages; done finishes the execution.
func (r *running) Handle(m runtimes.Message) bool {
	if m.ID != r.id {
		return false // a late message of an earlier execution
	}
	h := handlers[m.Type]
	if h == nil {
		return false // the connection's (hello, configured): never here
	}
	if m.Type != runtimes.TypeDone {
		// What the code printed before this message is in the pipes
		// (the runtime flushes before it sends): take it first, so that
		// streamed events keep their order.
		r.c.it.Drain()
	}
	return h(r, m)
}

func (r *running) onRich(m runtimes.Message) bool {
	r.ex.rich(m)
	return false
}

func (r *running) onError(m runtimes.Message) bool {
	// The interrupt a limit caused is reported as that limit, once the
	// execution has ended (settle), not as KeyboardInterrupt.
	r.ex.error(m, r.stoppedBy == "" || r.stoppedBy == watch.ByClient)
	return false
}

func (r *running) onInstall(m runtimes.Message) bool {
	r.install(m)
	return false
}

func (r *running) onDone(m runtimes.Message) bool {
	r.done = &m
	return true
}

// Closed explains the runtime's connection closing: a program that
// exited, or the runtime gone.
func (r *running) Closed() (apitype.End, bool) {
	if r.req.prog != nil {
		if exit, ok := r.c.it.ProgramExit(); ok {
			r.progExit = &exit
			return apitype.Ended(apitype.EndProgramExited), true
		}
	}
	end, err := r.c.it.Lost()
	if err != nil {
		r.s.m.log.Warn("runtime protocol error", "session", r.s.id, "context", r.c.id, "err", err)
	}
	if r.c.beside != nil && end.Code != apitype.EndOOM && end.Code != apitype.EndPids {
		// A context's runtime went away alone: the sandbox lives on.
		// (Memory and the process limit are the sandbox's: every process
		// of it is killed, and the session ends.)
		r.ctxEnd = end
		return apitype.End{}, false
	}
	return end, false
}

// Interrupt interrupts the runtime (KeyboardInterrupt).
func (r *running) Interrupt(reason apitype.KillReason) {
	r.stoppedBy = reason
	r.c.it.Interrupt(r.id)
}

// finishExecution ends the session if the execution must, collects the
// output, and says how the execution ended.
func (s *Session) finishExecution(r *running, o watch.Outcome) *apitype.Result {
	res := &apitype.Result{Results: []apitype.Output{}, FilesChanged: []apitype.FileChange{}}
	res.DurationMs = ms(time.Since(r.start))
	c := r.c
	if c.beside != nil && o.End.Code == apitype.EndUnresponsive {
		// A context that did not stop after its interrupt is killed
		// alone; the sandbox and the other contexts live on.
		r.ctxEnd, o.End = o.End, apitype.End{}
	}
	ended := !o.End.Zero()
	if ended {
		s.terminate(o.End)
		if !o.Finished {
			o.End = s.End() // whoever ended it first said why
		}
		<-s.inst.Dead()
	}
	if !r.ctxEnd.Zero() {
		// The first word on its end is kept (a client's delete, say).
		r.ctxEnd = s.endContext(c, r.ctxEnd)
		c.beside.Kill()
	}
	// Everything the runtime wrote before done is in the pipes now.
	c.it.Drain()
	if ended {
		// The jail is dead: the pipes reach end of file once whatever
		// else holds them is gone.
		c.it.WaitOutput()
	}
	s.mu.Lock()
	c.cur = nil
	s.tagEgressLocked()
	res.ExecutionCount = s.execCount
	s.mu.Unlock()

	ex := r.ex
	ex.mu.Lock()
	ex.stdout.flush()
	ex.stderr.flush()
	res.Stdout, res.StdoutTruncated = toValidUTF8(ex.stdout.buf), ex.stdout.truncated
	res.Stderr, res.StderrTruncated = toValidUTF8(ex.stderr.buf), ex.stderr.truncated
	res.Results = append(res.Results, ex.outputs...)
	res.ResultsDropped = ex.richDropped
	res.StdoutDroppedBytes, res.StderrDroppedBytes = ex.stdout.dropped, ex.stderr.dropped
	res.Error = ex.err
	if ex.red != nil {
		var n1, n2 int
		res.Stdout, n1 = ex.red.String(res.Stdout)
		res.Stderr, n2 = ex.red.String(res.Stderr)
		res.Redacted = ex.redacted + n1 + n2
	}
	res.Flags = r.req.flags
	res.ToolCalls, res.ToolCallsDropped, ex.toolsDone = ex.toolCalls, ex.toolCallsDropped, true
	outBytes := len(ex.stdout.buf) + len(ex.stderr.buf)
	if ex.outBytes+outBytes >= bigOutput {
		s.m.returnMemory()
	}
	ex.mu.Unlock()
	if cpu, peak, err := s.inst.Usage(); err == nil {
		res.CPUMs = ms(cpu - r.cpu0)
		res.PeakMemoryBytes = peak
	}
	// Whether a program ran out of memory is the sandbox's one answer,
	// even when the OOM event lost the race with the program's exit.
	var oom bool
	var progExit *int
	if r.req.prog != nil {
		var end instance.ProcessEnd
		if r.progExit != nil {
			end.Status, end.Known = r.progExit.Status, true
			progExit = &r.progExit.Code
		}
		oom, _ = s.inst.OutOfMemory(end)
	}
	verdict{
		prog: r.req.prog != nil, outcome: o, ctxEnd: r.ctxEnd, oom: oom, progExit: progExit, done: r.done,
		reportsInterrupt: c.lang.ReportsInterrupt,
		oneShot:          r.req.kind != ExecSession, limits: s.limits, timeout: r.spec.Timeout,
		grace: r.spec.Grace, elapsed: time.Since(r.start),
	}.settle(res)
	if r.emit != nil && res.Error != nil && res.Error != ex.err {
		// An error the server set (a limit's, the session's end) streams
		// too, before the end event that repeats it.
		r.emit(apitype.Event{Type: apitype.EventError, Error: res.Error})
	}
	after := workspace.TakeSnapshot(s.workspace())
	s.live.changed(after, time.Now())
	for _, c := range r.before.Changes(after) {
		res.FilesChanged = append(res.FilesChanged, apitype.FileChange{Path: c.Path, Size: c.Size, Change: c.Change})
	}
	res.FilesTruncated = r.before.Truncated || after.Truncated
	if r.req.changes != nil {
		*r.req.changes = slices.Clone(res.FilesChanged)
	}
	res.Redacted += redactChanges(ex.red, res.FilesChanged)
	if g := s.egressGate(); g != nil {
		res.Egress, res.EgressSummarized = egressOf(g.Take(r.id))
	}
	// In the history before the client can learn the execution ended.
	s.hist.finish(r.hist, res, nil)
	// The context and the session are free again before the end event:
	// a client that sends its next cell as soon as it learns this one
	// ended is not refused as "already executing".
	r.release()
	if r.emit != nil {
		r.emit(apitype.Event{Type: apitype.EventEnd, Result: res})
	}
	if s.m.obs != nil {
		var end apitype.End
		if ended {
			end = o.End
		}
		e := r.event()
		e.Duration, e.CPU, e.PeakMemory = time.Since(r.start), time.Duration(res.CPUMs*float64(time.Millisecond)), res.PeakMemoryBytes
		e.Killed, e.KillReason, e.End, e.ExitCode, e.OutputBytes = res.Killed, res.KillReason, end, res.ExitCode, int64(outBytes)
		e.FilesChanged = len(res.FilesChanged)
		e.Redactions = res.Redacted
		e.Egress, e.EgressSummarized = res.Egress, res.EgressSummarized
		if res.Error != nil {
			e.Error = res.Error.Name
		}
		s.m.obs.ExecutionFinished(e)
	}
	return res
}

// verdict is what decides how an execution ended.
type verdict struct {
	prog    bool // a program run
	outcome watch.Outcome
	// ctxEnd: the execution's context ended alone (its runtime went away,
	// or did not stop after an interrupt and was killed); the session
	// lives on.
	ctxEnd apitype.End
	// oom: a program ran out of memory.
	oom bool
	// How the runtime said it ended: a program's exit status, or its
	// done.
	progExit *int
	done     *runtimes.Message
	// reportsInterrupt: the runtime reports an interrupted execution
	// itself (runtimes.Language.ReportsInterrupt).
	reportsInterrupt bool
	// What a limit's error says: whether a session keeps the state
	// (one-shot and program runs keep none), the limits, the execution's
	// timeout, the interrupt grace, how long it ran.
	oneShot        bool
	limits         config.Limits
	timeout, grace time.Duration
	elapsed        time.Duration
}

// settle fills in how the execution ended: its exit code, whether and why
// it was killed, whether it ended its session and why, and the error a
// client sees for an interrupt, a limit or the session's end.
func (v verdict) settle(res *apitype.Result) {
	v.settleEnd(res)
	if res.Killed && res.KillReason != "" {
		res.Error = v.limitError(res)
	}
}

// limitErrors name the error of each limit that stops code.
var limitErrors = map[apitype.KillReason]string{
	apitype.KillTimeout: "TimeoutError",
	apitype.KillCPUTime: "CPUTimeError",
	apitype.KillMemory:  "MemoryError",
	apitype.KillPids:    "ProcessLimitError",
	// Not limits: the session was paused under the code.
	apitype.KillShutdown: "SessionPaused",
	apitype.KillLifetime: "SessionPaused",
}

// limitError says what a limit did, in words an agent acts on: which limit
// and its value, how long the code had run, what was done to it, and
// whether the session's state was kept. What the runtime reported (the
// interrupt's traceback: where the code was) stays in the traceback.
func (v verdict) limitError(res *apitype.Result) *apitype.ExecError {
	var what string
	switch res.KillReason {
	case apitype.KillTimeout:
		what = fmt.Sprintf("the code ran into its timeout of %s (wall clock)", v.timeout)
	case apitype.KillCPUTime:
		what = fmt.Sprintf("the code used up its CPU time (cpu_time %s)", v.limits.CPUTime)
	case apitype.KillMemory:
		what = fmt.Sprintf("the sandbox ran out of memory (memory %s)", v.limits.Memory)
	case apitype.KillPids:
		what = fmt.Sprintf("the sandbox reached its process limit (pids %d)", v.limits.Pids)
	case apitype.KillShutdown:
		what = "the session was paused for the server's shutdown (its code would not outlive the sandbox)"
	case apitype.KillLifetime:
		what = "the session's lifetime (timeout) ran out and it was paused (on_timeout pause; its code would not outlive the sandbox)"
	default:
		return res.Error
	}
	elapsed := v.elapsed.Round(time.Millisecond)
	var done string
	switch {
	case v.prog:
		done = fmt.Sprintf("the program was killed after %s (exit code 137)", elapsed)
	case res.SessionEnded && (res.KillReason == apitype.KillTimeout || res.KillReason == apitype.KillCPUTime):
		done = fmt.Sprintf("it was interrupted after %s but did not stop within the interrupt grace (%s), so it was killed with its sandbox", elapsed, v.grace)
	case res.ContextEnded:
		done = fmt.Sprintf("it was interrupted after %s but did not stop within the interrupt grace (%s), so its context's interpreter was killed", elapsed, v.grace)
	case res.SessionEnded:
		done = fmt.Sprintf("it was killed with its sandbox after %s", elapsed)
	default:
		done = fmt.Sprintf("it was interrupted after %s", elapsed)
	}
	var state string
	switch {
	case v.prog || v.oneShot:
		state = "a one-shot run keeps no state"
	case res.KillReason == apitype.KillShutdown || res.KillReason == apitype.KillLifetime:
		state = "what the pause keeps (the files, and the variables where it keeps the memory) comes back on resume"
	case res.SessionEnded:
		state = "the session ended and its state (variables, files) is lost"
	case res.ContextEnded:
		state = "the context ended and its variables are lost; the session, its files and its other contexts were kept"
	default:
		state = "the session and its state (variables, files) were kept"
	}
	e := &apitype.ExecError{Name: limitErrors[res.KillReason], Value: what + "; " + done + "; " + state + ".", Traceback: []string{}}
	if res.Error != nil && res.Error.Name != "SessionEnded" {
		e.Traceback = append(e.Traceback, res.Error.Traceback...)
	}
	e.Traceback = append(e.Traceback, e.Name+": "+e.Value)
	return e
}

// settleEnd is settle but for a limit's error.
func (v verdict) settleEnd(res *apitype.Result) {
	o := v.outcome
	ended := !o.End.Zero()
	switch {
	case v.prog && (ended || v.oom):
		// A program's result is what `airlock run` reports: its status,
		// or how airlock killed it; the session was only its vehicle.
		if v.progExit != nil {
			res.ExitCode = *v.progExit
		} else if v.done != nil {
			res.ExitCode = v.done.ExitCode
		}
		if (ended && o.End.Code != apitype.EndProgramExited) || v.oom {
			res.Killed, res.ExitCode = true, 137
			res.KillReason = o.KillReason()
			if v.oom {
				res.KillReason = apitype.KillMemory
			}
		}
	case ended:
		res.SessionEnded, res.EndReason, res.EndCode = true, o.End.Reason, o.End.Code
		res.Killed, res.ExitCode = true, 137
		res.KillReason = o.KillReason()
		if res.Error == nil {
			res.Error = &apitype.ExecError{Name: "SessionEnded", Value: "session ended: " + o.End.Reason, Traceback: []string{}}
		}
	case !v.ctxEnd.Zero():
		res.ContextEnded, res.EndReason, res.EndCode = true, v.ctxEnd.Reason, v.ctxEnd.Code
		res.Killed, res.ExitCode = true, 137
		res.KillReason = watch.Outcome{Stopped: o.Stopped, End: v.ctxEnd}.KillReason()
		if res.Error == nil {
			res.Error = &apitype.ExecError{Name: "ContextEnded", Value: "context ended: " + v.ctxEnd.Reason, Traceback: []string{}}
		}
	case v.done != nil:
		res.ExitCode = v.done.ExitCode
		if v.done.ExecutionCount > 0 {
			res.ExecutionCount = v.done.ExecutionCount
		}
		if o.Interrupted() {
			res.Killed, res.KillReason = true, o.Stopped
		}
		if !v.reportsInterrupt && o.Stopped != "" && res.Error == nil {
			res.Error = &apitype.ExecError{Name: "KeyboardInterrupt", Value: "interrupted", Traceback: []string{}}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bigOutput is the output of one execution after which the server gives
// memory back to the system once the result is sent.
const bigOutput = 8 << 20

// returnMemory gives the heap's free memory back to the system soon, at
// most once every few seconds: the buffers of a large result are garbage
// once it is sent, and the Go runtime alone would return them only
// minutes later.
func (m *Manager) returnMemory() {
	now := time.Now().UnixNano()
	last := m.lastFree.Load()
	if now-last < int64(5*time.Second) || !m.lastFree.CompareAndSwap(last, now) {
		return
	}
	time.AfterFunc(time.Second, debug.FreeOSMemory)
}
