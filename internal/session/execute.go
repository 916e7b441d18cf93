package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"airlock/internal/cgroup"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// Output is one rich output, a Jupyter MIME bundle.
type Output struct {
	// Type is "result" (the value of the final expression) or "display".
	Type     string                     `json:"type"`
	Data     map[string]json.RawMessage `json:"data"`
	Metadata json.RawMessage            `json:"metadata,omitempty"`
}

// ExecError is an uncaught exception.
type ExecError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// FileChange is a file an execution created, modified or deleted.
type FileChange = workspace.Change

// Result is the outcome of one execution.
type Result struct {
	Stdout          string       `json:"stdout"`
	Stderr          string       `json:"stderr"`
	StdoutTruncated bool         `json:"stdout_truncated"`
	StderrTruncated bool         `json:"stderr_truncated"`
	Results         []Output     `json:"results"`
	ResultsDropped  int          `json:"results_dropped,omitempty"`
	Error           *ExecError   `json:"error"`
	ExitCode        int          `json:"exit_code"`
	ExecutionCount  int          `json:"execution_count"`
	DurationMs      float64      `json:"duration_ms"`
	CPUMs           float64      `json:"cpu_ms"`
	PeakMemoryBytes int64        `json:"peak_memory_bytes"`
	Killed          bool         `json:"killed"`
	KillReason      string       `json:"kill_reason"`
	SessionEnded    bool         `json:"session_ended,omitempty"`
	EndReason       string       `json:"end_reason,omitempty"`
	FilesChanged    []FileChange `json:"files_changed"`
	// FilesTruncated: the workspace holds more than a listing may, and
	// files_changed may miss some.
	FilesTruncated bool `json:"files_truncated,omitempty"`
}

// Event is one streamed step of an execution, in the order it happened.
type Event struct {
	Type     string                     `json:"type"` // stdout, stderr, result, display, error, end
	Text     string                     `json:"text,omitempty"`
	Data     map[string]json.RawMessage `json:"data,omitempty"`
	Metadata json.RawMessage            `json:"metadata,omitempty"`
	Error    *ExecError                 `json:"error,omitempty"`
	Result   *Result                    `json:"result,omitempty"`
	Files    []OutputFile               `json:"files,omitempty"`  // one-shot end only
	Limits   *config.Limits             `json:"limits,omitempty"` // one-shot end only
	// DataBase64 replaces Text for a program's output that is not valid
	// UTF-8 (program runs only), so streamed bytes arrive unchanged.
	DataBase64 string `json:"data_base64,omitempty"`
}

// ExecuteRequest runs code in a session.
type ExecuteRequest struct {
	Code    string          `json:"code"`
	Timeout config.Duration `json:"timeout"`

	prog *program // a program run instead of Code (RunProgram)
}

// program is a program file the runtime runs in its place, as `airlock
// run` would: it gets exactly env, an empty stdin and /workspace as its
// directory, and its exit status is the execution's. The runtime ends with
// it, so only a one-shot session runs one.
type program struct {
	argv  []string
	env   map[string]string
	fresh bool // start a new interpreter (the client set PYTHON* variables)
}

// MaxCode caps the code of one execution.
const MaxCode = 4 << 20

// execution collects what one execution produced.
type execution struct {
	mu       sync.Mutex
	stdout   stream
	stderr   stream
	outputs  []Output
	dropped  int
	outBytes int
	maxRich  int
	err      *ExecError
	emit     func(Event)
	overflow chan struct{}
	overOnce sync.Once
}

// newExecution collects an execution's output; lossless streams bytes that
// are not UTF-8 as data_base64 instead of replacing them.
func newExecution(maxOutput int, emit func(Event), lossless bool) *execution {
	ex := &execution{emit: emit, overflow: make(chan struct{}), maxRich: max(maxOutput*16, 32<<20)}
	over := func() { ex.overOnce.Do(func() { close(ex.overflow) }) }
	ex.stdout = stream{max: maxOutput, overflow: over}
	ex.stderr = stream{max: maxOutput, overflow: over}
	if emit != nil {
		live := func(kind string) func([]byte) {
			return func(b []byte) {
				if lossless && !utf8.Valid(b) {
					emit(Event{Type: kind, DataBase64: base64.StdEncoding.EncodeToString(b)})
					return
				}
				emit(Event{Type: kind, Text: toValidUTF8(b)})
			}
		}
		ex.stdout.live = live("stdout")
		ex.stderr.live = live("stderr")
	}
	return ex
}

func (ex *execution) output(p []byte, isErr bool) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if isErr {
		ex.stderr.write(p)
	} else {
		ex.stdout.write(p)
	}
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
		ex.dropped++
		return
	}
	ex.outBytes += size
	o := Output{Type: m.Type, Data: m.Data, Metadata: m.Metadata}
	ex.outputs = append(ex.outputs, o)
	if ex.emit != nil {
		ex.emit(Event{Type: m.Type, Data: m.Data, Metadata: m.Metadata})
	}
}

// Execute runs code in the session. Only one execution runs at a time; a
// second concurrent call gets errdefs.ErrConflict. emit, if not nil,
// receives events as they happen, the last one of type "end".
func (s *Session) Execute(ctx context.Context, req ExecuteRequest, emit func(Event)) (*Result, error) {
	return s.execute(ctx, req, emit, false)
}

// execute is Execute; slotHeld says the caller already holds an execution
// slot (one-shot runs take it before building their jail).
func (s *Session) execute(ctx context.Context, req ExecuteRequest, emit func(Event), slotHeld bool) (*Result, error) {
	if len(req.Code) > MaxCode {
		return nil, fmt.Errorf("%w: code is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	timeout := req.Timeout.D()
	if timeout == 0 {
		timeout = s.limits.Timeout.D()
	}
	if timeout < 0 || timeout > s.m.cfg.Max.Timeout.D() {
		return nil, fmt.Errorf("%w: timeout %s exceeds the server maximum %s", errdefs.ErrInvalidArgument, timeout, s.m.cfg.Max.Timeout)
	}
	if s.lang == "bash" && strings.ContainsRune(req.Code, 0) {
		return nil, fmt.Errorf("%w: bash code must not contain NUL bytes", errdefs.ErrInvalidArgument)
	}
	if !s.execMu.TryLock() {
		return nil, fmt.Errorf("%w: the session is already executing code; wait for it or interrupt it", errdefs.ErrConflict)
	}
	defer s.execMu.Unlock()
	s.mu.Lock()
	if s.endReason != "" {
		reason := s.endReason
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, reason)
	}
	s.mu.Unlock()
	if !slotHeld {
		release, err := s.m.acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}

	prog := req.prog
	ex := newExecution(int(s.limits.MaxOutput), emit, prog != nil)
	s.mu.Lock()
	ended := s.endReason
	s.mu.Unlock()
	if ended != "" { // ended while we waited for a slot
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, ended)
	}
	before := workspace.TakeSnapshot(s.ws)
	sb := s.inst.Sandbox
	cpu0, _ := sb.CPU()
	s.mu.Lock()
	if s.endReason != "" {
		reason := s.endReason
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, reason)
	}
	s.busy = true
	s.cur = ex
	s.execCount++
	id := "e" + strconv.Itoa(s.execCount)
	s.lastUsed = time.Now()
	s.mu.Unlock()
	select {
	case <-s.interrupt: // a stale request from before this execution
	default:
	}
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.cur = nil
		s.lastUsed = time.Now()
		if s.idleTimer != nil && s.endReason == "" {
			s.idleTimer.Reset(s.idle)
		}
		ended := s.endReason != ""
		s.mu.Unlock()
		if ended {
			s.teardownOnce.Do(s.teardown)
		}
	}()

	start := time.Now()
	res := &Result{Results: []Output{}, FilesChanged: []FileChange{}}
	var err error
	// A runtime whose code stopped it reading its socket (SIGSTOP, a
	// thread holding the GIL) must not hold the execution past its
	// timeout: the request, half sent, ends the session.
	s.inst.conn.sendBy(start.Add(timeout))
	if prog != nil {
		err = s.inst.conn.run(id, *prog)
	} else {
		err = s.inst.conn.execute(id, req.Code)
	}
	s.inst.conn.sendBy(time.Time{})
	if err != nil {
		why := EndProtocol
		if errors.Is(err, os.ErrDeadlineExceeded) {
			why = EndNotReading
		}
		s.end(why)
		return nil, fmt.Errorf("%w: %s", errdefs.ErrGone, why)
	}

	stop := make(chan struct{})
	defer close(stop)
	cpuOver := make(chan struct{})
	go jail.WatchCPU(sb, cpu0, s.limits.CPUTime.D(), s.limits.CPUs, stop, func() { close(cpuOver) })
	go sb.Cgroup().PollPids(stop)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var grace <-chan time.Time
	interrupted, endReason := "", ""
	interruptFor := func(reason string) {
		if interrupted != "" {
			return
		}
		interrupted = reason
		s.signalRuntime(syscall.SIGINT)
		grace = time.After(s.m.cfg.Server.InterruptGrace.D())
	}
	// stopFor stops the execution for reason: code is interrupted and
	// keeps its session; a program is killed with its sandbox at once
	// (true: the loop ends).
	stopFor := func(reason string) bool {
		if prog != nil {
			interrupted, endReason = reason, EndKilled
			return true
		}
		interruptFor(reason)
		return false
	}
	events := s.inst.conn.events()
	// Each of these stays ready once it fires: after the first time it is
	// set to nil, or the loop would spin until the runtime answers.
	cpuOverC, overflowC, clientGone := (<-chan struct{})(cpuOver), (<-chan struct{})(ex.overflow), ctx.Done()
	var done *runtimes.Message
	var progExit *jail.Exit // a program that ended the runtime itself
loop:
	for {
		select {
		case m, ok := <-events:
			if !ok {
				if prog != nil {
					if e, ok := s.runtimeExit(); ok {
						progExit = &e
						break loop
					}
				}
				endReason = s.connLost()
				break loop
			}
			if m.ID != id {
				continue // a late message of an earlier execution
			}
			if m.Type != "done" {
				// What the code printed before this output is in the pipes
				// (the runtime flushes before it sends): take it first, so
				// that streamed events keep their order.
				s.out.drain()
				s.errp.drain()
			}
			switch m.Type {
			case "display", "result":
				ex.rich(m)
			case "error":
				ex.mu.Lock()
				ex.stdout.flush()
				ex.stderr.flush()
				ex.err = &ExecError{Name: m.Name, Value: m.Value, Traceback: m.Traceback}
				if ex.err.Traceback == nil {
					ex.err.Traceback = []string{}
				}
				ex.mu.Unlock()
				if emit != nil {
					emit(Event{Type: "error", Error: ex.err})
				}
			case "done":
				done = &m
				break loop
			}
		case <-deadline.C:
			if stopFor(jail.KillTimeout) {
				break loop
			}
		case <-cpuOverC:
			cpuOverC = nil
			if stopFor(jail.KillCPUTime) {
				break loop
			}
		case <-overflowC:
			overflowC = nil
			if stopFor(jail.KillOutput) {
				break loop
			}
		case <-s.interrupt:
			if stopFor("interrupt") {
				break loop
			}
		case <-grace:
			endReason = EndUnresponsive
			break loop
		case ev := <-sb.Events():
			switch ev {
			case cgroup.EventOOM:
				endReason = EndOOM
			case cgroup.EventPidsMax:
				endReason = EndPids
			}
			if endReason != "" {
				break loop
			}
		case <-s.ended:
			endReason = s.EndReason()
			break loop
		case <-clientGone:
			// The client went away: stop the code, keep the session.
			clientGone = nil
			if stopFor("interrupt") {
				break loop
			}
		}
	}
	res.DurationMs = ms(time.Since(start))
	if endReason != "" {
		s.end(endReason)
		endReason = s.EndReason() // whoever ended it first said why
		<-sb.Dead()
	}
	// Everything the runtime wrote before done is in the pipes now.
	s.out.drain()
	s.errp.drain()
	if endReason != "" || progExit != nil {
		// The jail is dead, or the program ended the runtime: the pipes
		// reach end of file once whatever else holds them is gone.
		if progExit != nil {
			s.end("the program exited")
			<-sb.Dead()
		}
		<-s.out.done
		<-s.errp.done
	}
	s.mu.Lock()
	s.cur = nil
	execCount := s.execCount
	s.mu.Unlock()

	ex.mu.Lock()
	ex.stdout.flush()
	ex.stderr.flush()
	res.Stdout, res.StdoutTruncated = toValidUTF8(ex.stdout.buf), ex.stdout.truncated
	res.Stderr, res.StderrTruncated = toValidUTF8(ex.stderr.buf), ex.stderr.truncated
	res.Results = append(res.Results, ex.outputs...)
	res.ResultsDropped = ex.dropped
	res.Error = ex.err
	ex.mu.Unlock()
	res.ExecutionCount = execCount
	st, serr := sb.Stats()
	if serr == nil {
		res.CPUMs = ms(st.CPU - cpu0)
		res.PeakMemoryBytes = st.MemoryPeak
	}
	// One OOM kill ends a program's whole sandbox, as with `airlock run`,
	// even when the event lost the race with the program's exit.
	oom := prog != nil && serr == nil && st.OOMKills > 0
	switch {
	case prog != nil && (endReason != "" || progExit != nil || oom):
		// A program's result is what `airlock run` reports: its status,
		// or how airlock killed it; the session was only its vehicle.
		if progExit != nil {
			res.ExitCode = progExit.Code()
		} else if done != nil {
			res.ExitCode = done.ExitCode
		}
		if endReason != "" || oom {
			res.Killed, res.ExitCode = true, 137
			res.KillReason = killReasonFor(endReason, interrupted)
			if oom {
				res.KillReason = jail.KillMemory
			}
		}
	case endReason != "":
		res.SessionEnded, res.EndReason = true, endReason
		res.Killed, res.ExitCode = true, 137
		res.KillReason = killReasonFor(endReason, interrupted)
		if res.Error == nil {
			res.Error = &ExecError{Name: "SessionEnded", Value: "session ended: " + endReason, Traceback: []string{}}
		}
	case done != nil:
		res.ExitCode = done.ExitCode
		if done.ExecutionCount > 0 {
			res.ExecutionCount = done.ExecutionCount
		}
		if interrupted != "" && interrupted != "interrupt" {
			res.Killed, res.KillReason = true, interrupted
		}
		if s.lang == "bash" && interrupted != "" && res.Error == nil {
			res.Error = &ExecError{Name: "KeyboardInterrupt", Value: "interrupted", Traceback: []string{}}
		}
	}
	after := workspace.TakeSnapshot(s.ws)
	res.FilesChanged = before.Changes(after)
	res.FilesTruncated = before.Truncated || after.Truncated
	if emit != nil {
		emit(Event{Type: "end", Result: res})
	}
	return res, nil
}

// connLost explains a runtime that closed its control socket.
func (s *Session) connLost() string {
	if err := s.inst.conn.err(); err != nil {
		s.m.log.Warn("runtime protocol error", "session", s.id, "err", err)
		return EndProtocol
	}
	e, _ := s.runtimeExit() // unknown: the zero Exit
	return s.deathReason(e)
}

// runtimeExit is how the runtime ended, once its control socket closed;
// false if no one says so soon.
func (s *Session) runtimeExit() (jail.Exit, bool) {
	select {
	case e := <-s.inst.Sandbox.Exits():
		return e, true
	case <-s.inst.gone:
		return s.inst.runtimeExit()
	case <-time.After(200 * time.Millisecond):
	}
	return jail.Exit{}, false
}

// oomKilled reports whether the kernel's OOM killer struck in the sandbox.
func (s *Session) oomKilled() bool {
	st, err := s.inst.Sandbox.Stats()
	return err == nil && st.OOMKills > 0
}

func killReasonFor(endReason, interrupted string) string {
	switch endReason {
	case EndOOM:
		return jail.KillMemory
	case EndPids:
		return jail.KillPids
	case EndKilled, EndUnresponsive:
		if interrupted != "interrupt" {
			return interrupted
		}
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
