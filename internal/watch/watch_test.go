package watch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
	"airlock/internal/watch/watchtest"
)

type fakeSandbox struct {
	cpu    atomic.Int64
	events chan cgroup.Event
	polls  atomic.Int32  // PollPids' calls
	again  time.Duration // what PollPids answers
}

func (f *fakeSandbox) CPU() (time.Duration, error) { return time.Duration(f.cpu.Load()), nil }
func (f *fakeSandbox) Events() <-chan cgroup.Event { return f.events }
func (f *fakeSandbox) PollPids() time.Duration     { f.polls.Add(1); return f.again }

// fakeCode reports strings; "done" finishes it.
type fakeCode struct {
	reports    chan string
	handled    []string
	closedEnd  apitype.End
	closedFin  bool
	interrupts chan struct{}
	calls      atomic.Int32
}

func (f *fakeCode) Reports() <-chan string { return f.reports }
func (f *fakeCode) Handle(m string) bool {
	f.handled = append(f.handled, m)
	return m == "done"
}
func (f *fakeCode) Closed() (apitype.End, bool) { return f.closedEnd, f.closedFin }
func (f *fakeCode) Interrupt(apitype.KillReason) {
	f.calls.Add(1)
	f.interrupts <- struct{}{}
}

const (
	timeout = time.Hour
	grace   = 2 * time.Hour
	budget  = 3 * time.Hour
)

// harness drives one Watch.
type harness struct {
	t         *testing.T
	clock     *watchtest.Clock
	sb        *fakeSandbox
	code      *fakeCode
	cancel    context.CancelFunc
	interrupt chan apitype.KillReason
	ended     chan struct{}
	endedBy   apitype.End
}

func (h *harness) report(m string) { h.code.reports <- m }
func (h *harness) timeout()        { h.clock.Fire(timeout) }
func (h *harness) grace()          { h.clock.Fire(grace) }

// cpuLook fires the CPU budget's look, due when the budget could first be
// spent on one core.
func (h *harness) cpuLook()             { h.clock.Fire(budget + time.Millisecond) }
func (h *harness) event(e cgroup.Event) { h.sb.events <- e }
func (h *harness) closeReports(end apitype.End, finished bool) {
	h.code.closedEnd, h.code.closedFin = end, finished
	close(h.code.reports)
}
func (h *harness) interrupted() {
	h.t.Helper()
	select {
	case <-h.code.interrupts:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the code was not interrupted")
	}
}

func TestWatch(t *testing.T) {
	oom, deleted := apitype.Ended(apitype.EndOOM), apitype.Ended(apitype.EndDeleted)
	for _, c := range []struct {
		name       string
		policy     Policy
		cpu        time.Duration // used at once: over budget when >= budget, at its look
		steps      func(h *harness)
		want       Outcome
		kill       apitype.KillReason
		interrupts int
		handled    []string
		// unlimited: no timeout and no CPU budget (a background command).
		unlimited bool
	}{
		{name: "done", steps: func(h *harness) { h.report("display"); h.report("done") },
			want: Outcome{Finished: true}, handled: []string{"display", "done"}},
		{name: "timeout, interrupt, then done", steps: func(h *harness) { h.timeout(); h.interrupted(); h.report("done") },
			want: Outcome{Finished: true, Stopped: apitype.KillTimeout}, interrupts: 1, handled: []string{"done"}},
		{name: "timeout, interrupt, grace runs out", steps: func(h *harness) { h.timeout(); h.interrupted(); h.grace() },
			want: Outcome{Stopped: apitype.KillTimeout, End: apitype.Ended(apitype.EndUnresponsive)}, kill: apitype.KillTimeout, interrupts: 1},
		{name: "CPU over", cpu: budget, steps: func(h *harness) { h.cpuLook(); h.interrupted(); h.report("done") },
			want: Outcome{Finished: true, Stopped: apitype.KillCPUTime}, interrupts: 1, handled: []string{"done"}},
		{name: "CPU over, killed", policy: Kill, cpu: budget + time.Second, steps: func(h *harness) { h.cpuLook() },
			want: Outcome{Stopped: apitype.KillCPUTime, End: apitype.Ended(apitype.EndKilled)}, kill: apitype.KillCPUTime},
		{name: "OOM event", steps: func(h *harness) { h.event(cgroup.EventOOM) },
			want: Outcome{End: oom}, kill: apitype.KillMemory},
		{name: "OOM after a timeout", steps: func(h *harness) { h.timeout(); h.interrupted(); h.event(cgroup.EventOOM) },
			want: Outcome{Stopped: apitype.KillTimeout, End: oom}, kill: apitype.KillMemory, interrupts: 1},
		{name: "process limit", steps: func(h *harness) { h.event(cgroup.EventPidsMax) },
			want: Outcome{End: apitype.Ended(apitype.EndPids)}, kill: apitype.KillPids},
		{name: "runtime closes its connection", steps: func(h *harness) { h.closeReports(apitype.Ended(apitype.EndProtocol), false) },
			want: Outcome{End: apitype.Ended(apitype.EndProtocol)}},
		{name: "program exits", steps: func(h *harness) { h.closeReports(apitype.Ended(apitype.EndProgramExited), true) },
			want: Outcome{Finished: true, End: apitype.Ended(apitype.EndProgramExited)}},
		{name: "client gone", steps: func(h *harness) { h.cancel(); h.interrupted(); h.report("done") },
			want: Outcome{Finished: true, Stopped: ByClient}, interrupts: 1, handled: []string{"done"}},
		{name: "client interrupt, then timeout: one interrupt, the first reason", steps: func(h *harness) {
			h.interrupt <- ""
			h.interrupted()
			h.timeout()
			h.grace()
		}, want: Outcome{Stopped: ByClient, End: apitype.Ended(apitype.EndUnresponsive)}, interrupts: 1},
		{name: "ended by someone else", steps: func(h *harness) { h.endedBy = deleted; close(h.ended) },
			want: Outcome{End: deleted}},
		{name: "killed at the timeout", policy: Kill, steps: func(h *harness) { h.timeout() },
			want: Outcome{Stopped: apitype.KillTimeout, End: apitype.Ended(apitype.EndKilled)}, kill: apitype.KillTimeout},
		{name: "killed when the client goes", policy: Kill, steps: func(h *harness) { h.cancel() },
			want: Outcome{Stopped: ByClient, End: apitype.Ended(apitype.EndKilled)}},
		{name: "killed program, OOM", policy: Kill, steps: func(h *harness) { h.event(cgroup.EventOOM) },
			want: Outcome{End: oom}, kill: apitype.KillMemory},
		{name: "no timeout and no CPU budget: neither is watched", policy: Kill, unlimited: true, cpu: 1000 * budget,
			steps: func(h *harness) { h.report("done") }, want: Outcome{Finished: true}, handled: []string{"done"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := &harness{
				t: t, clock: watchtest.NewClock(), cancel: cancel,
				sb:        &fakeSandbox{events: make(chan cgroup.Event)},
				code:      &fakeCode{reports: make(chan string), interrupts: make(chan struct{}, 8)},
				interrupt: make(chan apitype.KillReason),
				ended:     make(chan struct{}),
			}
			spec := Spec{
				Policy: c.policy, Timeout: timeout, CPUTime: budget, CPUs: 1, Grace: grace,
				Interrupts: h.interrupt, Ended: h.ended,
				EndedBy: func() apitype.End { return h.endedBy }, Clock: h.clock,
			}
			if c.unlimited {
				spec.Timeout, spec.CPUTime = 0, 0
			}
			h.sb.cpu.Store(int64(c.cpu))
			done := make(chan Outcome, 1)
			go func() { done <- Watch(ctx, h.sb, Code[string](h.code), spec) }()
			c.steps(h)
			var got Outcome
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Watch did not return")
			}
			if got != c.want {
				t.Errorf("outcome %+v, want %+v", got, c.want)
			}
			if k := got.KillReason(); k != c.kill {
				t.Errorf("kill reason %q, want %q", k, c.kill)
			}
			if n := int(h.code.calls.Load()); n != c.interrupts {
				t.Errorf("%d interrupts, want %d", n, c.interrupts)
			}
			if len(h.code.handled) != len(c.handled) {
				t.Errorf("handled %q, want %q", h.code.handled, c.handled)
			}
			if n := h.clock.Unfired(); c.unlimited && n != 0 {
				t.Errorf("%d timers, want none", n)
			}
			if n := h.sb.polls.Load(); n != 1 {
				t.Errorf("the pids counter was read %d times, want once, as the watch started", n)
			}
		})
	}
}

// The CPU budget is looked at once it could first have been spent at the
// sandbox's CPU quota (never at once: the base was read just before),
// again when the rest could be, and the code is stopped once it is.
func TestCPUWaitsForTheEarliestMoment(t *testing.T) {
	clock := watchtest.NewClock()
	sb := &fakeSandbox{events: make(chan cgroup.Event)}
	sb.cpu.Store(int64(10 * time.Second))
	code := &fakeCode{reports: make(chan string), interrupts: make(chan struct{}, 8)}
	done := make(chan Outcome, 1)
	go func() {
		done <- Watch(context.Background(), sb, Code[string](code), Spec{
			Policy: Kill, CPUTime: 4 * time.Second, CPUBase: 10 * time.Second, CPUs: 2, Clock: clock,
		})
	}()
	// 4s of budget at 2 cores: not before 2s (and a millisecond); 1s
	// used by then leaves 3s, not spent before 1.5s more.
	clock.Await(2*time.Second + time.Millisecond)
	sb.cpu.Store(int64(11 * time.Second))
	clock.Fire(2*time.Second + time.Millisecond)
	clock.Await(1500*time.Millisecond + time.Millisecond)
	select {
	case o := <-done:
		t.Fatalf("over before the budget was spent: %+v", o)
	default:
	}
	sb.cpu.Store(int64(14 * time.Second))
	clock.Fire(1500*time.Millisecond + time.Millisecond)
	select {
	case o := <-done:
		if o.Stopped != apitype.KillCPUTime {
			t.Errorf("outcome %+v, want stopped for the CPU time", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not over with the budget spent")
	}
}

// Where the kernel does not notify a pids limit hit (cgroup v1), the
// counter is read as the watch starts and again each time it says, until
// the code finishes; the event it emits ends the sandbox.
func TestPidsPolledWhileCodeRuns(t *testing.T) {
	clock := watchtest.NewClock()
	const every = 50 * time.Millisecond
	sb := &fakeSandbox{events: make(chan cgroup.Event, 1), again: every}
	code := &fakeCode{reports: make(chan string), interrupts: make(chan struct{}, 8)}
	done := make(chan Outcome, 1)
	go func() { done <- Watch(context.Background(), sb, Code[string](code), Spec{Clock: clock}) }()
	clock.Fire(every)
	clock.Fire(every)
	clock.Await(every)
	if n := sb.polls.Load(); n != 3 {
		t.Errorf("the pids counter was read %d times, want 3", n)
	}
	sb.events <- cgroup.EventPidsMax
	select {
	case o := <-done:
		if o.End != apitype.Ended(apitype.EndPids) {
			t.Errorf("outcome %+v, want the process limit's end", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return")
	}
}
