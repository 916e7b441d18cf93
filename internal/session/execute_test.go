package session

import (
	"reflect"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/runtimes"
	"airlock/internal/watch"
)

// How a watch's outcome and what the runtime said become a result: the
// exit code, kill and end fields, and the errors the server adds.
func TestSettle(t *testing.T) {
	done := &runtimes.Message{Type: "done", ExitCode: 1, ExecutionCount: 7}
	exit3 := 3
	oom, deleted := apitype.Ended(apitype.EndOOM), apitype.Ended(apitype.EndDeleted)
	unresponsive, killed := apitype.Ended(apitype.EndUnresponsive), apitype.Ended(apitype.EndKilled)
	prior := &apitype.ExecError{Name: "MemoryError", Traceback: []string{}}
	sessionEnded := func(end apitype.End) *apitype.ExecError {
		return &apitype.ExecError{Name: "SessionEnded", Value: "session ended: " + end.Reason, Traceback: []string{}}
	}
	interrupted := &apitype.ExecError{Name: "KeyboardInterrupt", Value: "interrupted", Traceback: []string{}}
	// A limit's error names the limit and its value, how long the code
	// ran, what was done to it and whether the state was kept.
	limits := config.Limits{CPUTime: config.Duration(3 * time.Second), Memory: 64 << 20, Pids: 16}
	limited := func(name, value string, tb ...string) *apitype.ExecError {
		return &apitype.ExecError{Name: name, Value: value, Traceback: append(tb, name+": "+value)}
	}
	const kept = "the session and its state (variables, files) were kept."
	const lost = "the session ended and its state (variables, files) is lost."
	const none = "a one-shot run keeps no state."
	pyInterrupt := &apitype.ExecError{Name: "KeyboardInterrupt", Traceback: []string{"Cell In[1], line 1", "KeyboardInterrupt: "}}
	for _, c := range []struct {
		name  string
		v     verdict
		error *apitype.ExecError // the runtime's, before settling
		want  apitype.Result
	}{
		{name: "done", v: verdict{outcome: watch.Outcome{Finished: true}, done: done, reportsInterrupt: true},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7}},
		{name: "timeout, then done: the runtime's interrupt becomes the limit's error, its traceback kept",
			v:     verdict{outcome: watch.Outcome{Finished: true, Stopped: apitype.KillTimeout}, done: done, reportsInterrupt: true},
			error: pyInterrupt,
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Killed: true, KillReason: apitype.KillTimeout,
				Error: limited("TimeoutError", "the code ran into its timeout of 2s (wall clock); it was interrupted after 2.5s; "+kept, pyInterrupt.Traceback...)}},
		{name: "timeout in a one-shot run",
			v: verdict{outcome: watch.Outcome{Finished: true, Stopped: apitype.KillTimeout}, done: done, reportsInterrupt: true, oneShot: true},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Killed: true, KillReason: apitype.KillTimeout,
				Error: limited("TimeoutError", "the code ran into its timeout of 2s (wall clock); it was interrupted after 2.5s; "+none)}},
		{name: "a client's interrupt, bash: the server reports it",
			v:    verdict{outcome: watch.Outcome{Finished: true, Stopped: watch.ByClient}, done: done},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Error: interrupted}},
		{name: "CPU time, bash",
			v: verdict{outcome: watch.Outcome{Finished: true, Stopped: apitype.KillCPUTime}, done: done},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Killed: true, KillReason: apitype.KillCPUTime,
				Error: limited("CPUTimeError", "the code used up its CPU time (cpu_time 3s); it was interrupted after 2.5s; "+kept)}},
		{name: "out of memory ends the session", v: verdict{outcome: watch.Outcome{End: oom}, oom: true, reportsInterrupt: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory, SessionEnded: true,
				EndReason: "out of memory", EndCode: apitype.EndOOM,
				Error: limited("MemoryError", "the sandbox ran out of memory (memory 64M); it was killed with its sandbox after 2.5s; "+lost)}},
		{name: "the runtime's own error stays in the traceback", v: verdict{outcome: watch.Outcome{End: apitype.Ended(apitype.EndPids)}}, error: prior,
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillPids, SessionEnded: true,
				EndReason: "process limit reached", EndCode: apitype.EndPids,
				Error: limited("ProcessLimitError", "the sandbox reached its process limit (pids 16); it was killed with its sandbox after 2.5s; "+lost)}},
		{name: "unresponsive after a timeout",
			v: verdict{outcome: watch.Outcome{Stopped: apitype.KillTimeout, End: unresponsive}},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillTimeout, SessionEnded: true,
				EndReason: unresponsive.Reason, EndCode: apitype.EndUnresponsive,
				Error: limited("TimeoutError", "the code ran into its timeout of 2s (wall clock); it was interrupted after 2.5s but did not stop within the interrupt grace (1s), so it was killed with its sandbox; "+lost)}},
		{name: "a client's interrupt not obeyed: no limit, the session's end",
			v: verdict{outcome: watch.Outcome{Stopped: watch.ByClient, End: unresponsive}},
			want: apitype.Result{ExitCode: 137, Killed: true, SessionEnded: true,
				EndReason: unresponsive.Reason, EndCode: apitype.EndUnresponsive, Error: sessionEnded(unresponsive)}},
		{name: "deleted meanwhile", v: verdict{outcome: watch.Outcome{End: deleted}},
			want: apitype.Result{ExitCode: 137, Killed: true, SessionEnded: true, EndReason: "deleted",
				EndCode: apitype.EndDeleted, Error: sessionEnded(deleted)}},
		{name: "a program exits",
			v:    verdict{prog: true, outcome: watch.Outcome{Finished: true, End: apitype.Ended(apitype.EndProgramExited)}, progExit: &exit3},
			want: apitype.Result{ExitCode: 3}},
		{name: "a program is killed at its timeout",
			v: verdict{prog: true, outcome: watch.Outcome{Stopped: apitype.KillTimeout, End: killed}},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillTimeout,
				Error: limited("TimeoutError", "the code ran into its timeout of 2s (wall clock); the program was killed after 2.5s (exit code 137); "+none)}},
		{name: "a program is killed when its client goes",
			v:    verdict{prog: true, outcome: watch.Outcome{Stopped: watch.ByClient, End: killed}},
			want: apitype.Result{ExitCode: 137, Killed: true}},
		{name: "a program exits, but an OOM kill was counted",
			v: verdict{prog: true, outcome: watch.Outcome{Finished: true, End: apitype.Ended(apitype.EndProgramExited)}, progExit: &exit3, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory,
				Error: limited("MemoryError", "the sandbox ran out of memory (memory 64M); the program was killed after 2.5s (exit code 137); "+none)}},
		{name: "a program's runtime says done, but an OOM kill was counted",
			v: verdict{prog: true, outcome: watch.Outcome{Finished: true}, done: done, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory,
				Error: limited("MemoryError", "the sandbox ran out of memory (memory 64M); the program was killed after 2.5s (exit code 137); "+none)}},
		{name: "a program's sandbox runs out of memory",
			v: verdict{prog: true, outcome: watch.Outcome{End: oom}, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory,
				Error: limited("MemoryError", "the sandbox ran out of memory (memory 64M); the program was killed after 2.5s (exit code 137); "+none)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := apitype.Result{Error: c.error}
			c.v.limits, c.v.timeout, c.v.grace, c.v.elapsed = limits, 2*time.Second, time.Second, 2500*time.Millisecond
			c.v.settle(&res)
			if !reflect.DeepEqual(res, c.want) {
				t.Errorf("got  %+v\nwant %+v", res, c.want)
			}
		})
	}
}
