// Package watch owns the one state machine that looks after code running
// in a sandbox until it finishes or is stopped: the wall-clock timeout, the
// CPU-time budget read from the cgroup, interrupts from a
// client or its going away, the OOM and process-limit events, the grace an
// interrupted interpreter gets, the runtime breaking off, and the sandbox
// ending for other reasons. Sessions (code and program runs) and `airlock
// run` building its own jail both use it; what differs between them is a
// Policy, not a second loop.
//
// It decides and reports; it must never kill, end or tear down anything
// itself (its caller does, from the Outcome), and never block past the
// code finishing or a stop it has decided.
package watch

import (
	"context"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
)

// Sandbox is what a watch reads of the sandbox the code runs in.
type Sandbox interface {
	// CPU is the sandbox's total CPU time.
	CPU() (time.Duration, error)
	// Events delivers the cgroup's OOM and process-limit events.
	Events() <-chan cgroup.Event
	// PollPids is called as the watch starts and again when it says
	// (cgroup v1 reads its pids counter meanwhile; v2 answers 0: never).
	PollPids() (again time.Duration)
}

// Code is the running code as a watch sees it. M is what it reports.
type Code[M any] interface {
	// Reports delivers what the code reports, in order; it is closed
	// when no more can come.
	Reports() <-chan M
	// Handle takes one report and says whether the code has finished.
	Handle(M) (finished bool)
	// Closed explains Reports closing: whether that is the code finishing
	// (a program that exited), and how the sandbox must end.
	Closed() (end apitype.End, finished bool)
	// Interrupt asks the code to stop and keep its state (SIGINT), for
	// reason (a limit, or ByClient).
	Interrupt(reason apitype.KillReason)
}

// Policy says what a limit does to the code.
type Policy int

const (
	// Interrupt: the code is interrupted and keeps its sandbox; if it has
	// not finished after Spec.Grace, the sandbox ends (unresponsive).
	Interrupt Policy = iota
	// Kill: the code is stopped at once with its sandbox (end killed).
	Kill
)

// ByClient is the Stopped reason of a client's interrupt or the client
// going away; it is never reported as a kill reason.
const ByClient apitype.KillReason = "interrupt"

// Spec says what to watch.
type Spec struct {
	Policy Policy
	// Timeout is the wall-clock limit (0: none).
	Timeout time.Duration
	// CPUTime is the budget of CPU time from CPUBase on (0: none); the
	// sandbox can use at most CPUs cores. CPUBase is read just before
	// Watch: the budget is first looked at when it could first be spent.
	CPUTime, CPUBase time.Duration
	CPUs             float64
	// Grace is how long interrupted code has to finish (Interrupt).
	Grace time.Duration
	// Interrupts delivers requests to interrupt: a client's (""), or
	// the server's, for a reason (a pause's: KillShutdown, KillLifetime).
	Interrupts <-chan apitype.KillReason
	// Ended is closed when the sandbox was ended by someone else;
	// EndedBy then says why.
	Ended   <-chan struct{}
	EndedBy func() apitype.End
	// Clock replaces time for tests; nil is the real one.
	Clock Clock
}

// Outcome is how a watch ended.
type Outcome struct {
	// Finished: the code said it finished (done, or its exit).
	Finished bool
	// Stopped is the first reason the code was stopped: a limit (a kill
	// reason), ByClient, or "" if nothing stopped it.
	Stopped apitype.KillReason
	// End is why the sandbox must end (or ended); zero if it lives on.
	End apitype.End
}

// KillReason is the kill reason to report: the limit that ended the
// sandbox (memory, pids), or the one that stopped code which then had to
// be killed; "" when a client stopped it or the sandbox ended otherwise.
func (o Outcome) KillReason() apitype.KillReason {
	switch o.End.Code {
	case apitype.EndOOM:
		return apitype.KillMemory
	case apitype.EndPids:
		return apitype.KillPids
	case apitype.EndKilled, apitype.EndUnresponsive:
		if o.Stopped != ByClient {
			return o.Stopped
		}
	}
	return ""
}

// Interrupted reports whether a limit (not a client) interrupted code that
// then finished.
func (o Outcome) Interrupted() bool { return o.Stopped != "" && o.Stopped != ByClient }

// Watch looks after code until it finishes, is stopped for good, or its
// sandbox ends; ctx ending means its client went away.
func Watch[M any](ctx context.Context, sb Sandbox, code Code[M], s Spec) (o Outcome) {
	clock := s.Clock
	if clock == nil {
		clock = realClock{}
	}
	// The CPU budget is looked at on a timer of this loop, not by a
	// goroutine of its own: most executions end long before the first
	// look is due.
	var cpuCheck <-chan time.Time
	var stopCPU func()
	defer func() {
		if stopCPU != nil {
			stopCPU()
		}
	}()
	if s.CPUTime > 0 {
		// CPUBase was read just before: used - base is nothing yet.
		cpuCheck, stopCPU = clock.Timer(cpuWait(0, s.CPUTime, s.CPUs))
	}
	var pidsPoll <-chan time.Time
	var stopPids func()
	defer func() {
		if stopPids != nil {
			stopPids()
		}
	}()
	if again := sb.PollPids(); again > 0 {
		pidsPoll, stopPids = clock.Timer(again)
	}
	var deadline <-chan time.Time
	if s.Timeout > 0 {
		var stopDeadline func()
		deadline, stopDeadline = clock.Timer(s.Timeout)
		defer stopDeadline()
	}
	var grace <-chan time.Time
	var stopGrace func()
	defer func() {
		if stopGrace != nil {
			stopGrace()
		}
	}()
	// stopFor stops the code for reason and reports whether the watch is
	// over: killed code is; interrupted code gets its grace (once: the
	// first reason is the one reported).
	stopFor := func(reason apitype.KillReason) bool {
		if s.Policy == Kill {
			if o.Stopped == "" {
				o.Stopped = reason
			}
			o.End = apitype.Ended(apitype.EndKilled)
			return true
		}
		if o.Stopped != "" {
			return false
		}
		o.Stopped = reason
		code.Interrupt(reason)
		grace, stopGrace = clock.Timer(s.Grace)
		return false
	}
	reports := code.Reports()
	// Each of these stays ready once it fires: after the first time it is
	// set to nil, or the loop would spin until the code answers.
	clientGone := ctx.Done()
	for {
		select {
		case m, ok := <-reports:
			if !ok {
				o.End, o.Finished = code.Closed()
				return o
			}
			if code.Handle(m) {
				o.Finished = true
				return o
			}
		case <-deadline:
			deadline = nil
			if stopFor(apitype.KillTimeout) {
				return o
			}
		case <-cpuCheck:
			used, err := sb.CPU()
			if err == nil && used-s.CPUBase >= s.CPUTime {
				cpuCheck = nil
				if stopFor(apitype.KillCPUTime) {
					return o
				}
				continue
			}
			wait := 100 * time.Millisecond // never stop enforcing: look again shortly
			if err == nil {
				wait = cpuWait(used-s.CPUBase, s.CPUTime, s.CPUs)
			}
			stopCPU()
			cpuCheck, stopCPU = clock.Timer(wait)
		case <-pidsPoll:
			pidsPoll = nil
			if again := sb.PollPids(); again > 0 {
				stopPids()
				pidsPoll, stopPids = clock.Timer(again)
			}
		case reason := <-s.Interrupts:
			if reason == "" {
				reason = ByClient
			}
			if stopFor(reason) {
				return o
			}
		case <-clientGone:
			clientGone = nil
			if stopFor(ByClient) {
				return o
			}
		case <-grace:
			o.End = apitype.Ended(apitype.EndUnresponsive)
			return o
		case ev := <-sb.Events():
			if end := EndOf(ev); !end.Zero() {
				o.End = end
				return o
			}
		case <-s.Ended:
			o.End = s.EndedBy()
			return o
		}
	}
}

// EndOf is how a cgroup event ends the sandbox it came from: out of
// memory, or at the process limit (zero for any other event). Whoever
// reads a sandbox's events (a watch, a session's monitor) decides by it.
func EndOf(ev cgroup.Event) apitype.End {
	switch ev {
	case cgroup.EventOOM:
		return apitype.Ended(apitype.EndOOM)
	case cgroup.EventPidsMax:
		return apitype.Ended(apitype.EndPids)
	}
	return apitype.End{}
}

// cpuWait is how long a sandbox that has used used of its CPU budget
// cannot have spent it: the earliest moment it could, given that it
// cannot use more than cpus cores, so that a budget costs nothing while
// the code is far from it.
func cpuWait(used, budget time.Duration, cpus float64) time.Duration {
	if cpus <= 0 {
		cpus = 1
	}
	return time.Duration(float64(budget-used)/cpus) + time.Millisecond
}

// Clock makes timers.
type Clock interface {
	// Timer fires once after d; stop releases it.
	Timer(d time.Duration) (c <-chan time.Time, stop func())
}

type realClock struct{}

func (realClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
