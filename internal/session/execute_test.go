package session

import (
	"reflect"
	"testing"

	"airlock/internal/apitype"
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
	for _, c := range []struct {
		name  string
		v     verdict
		error *apitype.ExecError // the runtime's, before settling
		want  apitype.Result
	}{
		{name: "done", v: verdict{outcome: watch.Outcome{Finished: true}, done: done, reportsInterrupt: true},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7}},
		{name: "timeout, then done: the runtime reports the interrupt",
			v:    verdict{outcome: watch.Outcome{Finished: true, Stopped: apitype.KillTimeout}, done: done, reportsInterrupt: true},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Killed: true, KillReason: apitype.KillTimeout}},
		{name: "a client's interrupt, bash: the server reports it",
			v:    verdict{outcome: watch.Outcome{Finished: true, Stopped: watch.ByClient}, done: done},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Error: interrupted}},
		{name: "CPU time, bash",
			v:    verdict{outcome: watch.Outcome{Finished: true, Stopped: apitype.KillCPUTime}, done: done},
			want: apitype.Result{ExitCode: 1, ExecutionCount: 7, Killed: true, KillReason: apitype.KillCPUTime, Error: interrupted}},
		{name: "out of memory ends the session", v: verdict{outcome: watch.Outcome{End: oom}, oom: true, reportsInterrupt: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory, SessionEnded: true,
				EndReason: "out of memory", EndCode: apitype.EndOOM, Error: sessionEnded(oom)}},
		{name: "the runtime's own error is kept", v: verdict{outcome: watch.Outcome{End: oom}}, error: prior,
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory, SessionEnded: true,
				EndReason: "out of memory", EndCode: apitype.EndOOM, Error: prior}},
		{name: "unresponsive after a timeout",
			v: verdict{outcome: watch.Outcome{Stopped: apitype.KillTimeout, End: unresponsive}},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillTimeout, SessionEnded: true,
				EndReason: unresponsive.Reason, EndCode: apitype.EndUnresponsive, Error: sessionEnded(unresponsive)}},
		{name: "deleted meanwhile", v: verdict{outcome: watch.Outcome{End: deleted}},
			want: apitype.Result{ExitCode: 137, Killed: true, SessionEnded: true, EndReason: "deleted",
				EndCode: apitype.EndDeleted, Error: sessionEnded(deleted)}},
		{name: "a program exits",
			v:    verdict{prog: true, outcome: watch.Outcome{Finished: true, End: apitype.Ended(apitype.EndProgramExited)}, progExit: &exit3},
			want: apitype.Result{ExitCode: 3}},
		{name: "a program is killed at its timeout",
			v:    verdict{prog: true, outcome: watch.Outcome{Stopped: apitype.KillTimeout, End: killed}},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillTimeout}},
		{name: "a program is killed when its client goes",
			v:    verdict{prog: true, outcome: watch.Outcome{Stopped: watch.ByClient, End: killed}},
			want: apitype.Result{ExitCode: 137, Killed: true}},
		{name: "a program exits, but an OOM kill was counted",
			v:    verdict{prog: true, outcome: watch.Outcome{Finished: true, End: apitype.Ended(apitype.EndProgramExited)}, progExit: &exit3, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory}},
		{name: "a program's runtime says done, but an OOM kill was counted",
			v:    verdict{prog: true, outcome: watch.Outcome{Finished: true}, done: done, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory}},
		{name: "a program's sandbox runs out of memory",
			v:    verdict{prog: true, outcome: watch.Outcome{End: oom}, oom: true},
			want: apitype.Result{ExitCode: 137, Killed: true, KillReason: apitype.KillMemory}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := apitype.Result{Error: c.error}
			c.v.settle(&res)
			if !reflect.DeepEqual(res, c.want) {
				t.Errorf("got  %+v\nwant %+v", res, c.want)
			}
		})
	}
}
