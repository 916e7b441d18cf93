package apitype

// KillReason says which limit stopped an execution or a program
// (Result.KillReason); empty when none did.
type KillReason string

// Kill reasons.
const (
	KillTimeout KillReason = "timeout"
	KillCPUTime KillReason = "cpu_time"
	KillMemory  KillReason = "memory"
	KillPids    KillReason = "pids"
	// KillShutdown and KillLifetime: the session was paused, for the
	// server's shutdown or at the end of its lifetime (on_timeout
	// "pause"): its execution was interrupted, its shell commands were
	// killed (they would not outlive the sandbox).
	KillShutdown KillReason = "shutdown"
	KillLifetime KillReason = "lifetime"
)

// Output past max_output is not a kill reason: it is dropped and counted
// (Result.StdoutDroppedBytes), and the code runs on, as in Jupyter.

// KillReasons lists every kill reason.
func KillReasons() []KillReason {
	return []KillReason{KillTimeout, KillCPUTime, KillMemory, KillPids, KillShutdown, KillLifetime}
}

// EndCode says, machine-readably, why a session (or one of its code
// contexts) ended; EndReason is the sentence beside it.
type EndCode string

// End codes.
const (
	// EndDeleted: DELETE /v1/sessions/{id}.
	EndDeleted EndCode = "deleted"
	// EndIdle: unused for longer than its idle timeout.
	EndIdle EndCode = "idle_timeout"
	// EndOOM: the sandbox ran out of memory.
	EndOOM EndCode = "out_of_memory"
	// EndPids: the sandbox reached its process limit.
	EndPids EndCode = "pids_limit"
	// EndUnresponsive: the interpreter did not stop within the grace
	// period after an interrupt.
	EndUnresponsive EndCode = "unresponsive"
	// EndShutdown: the server shut down.
	EndShutdown EndCode = "shutdown"
	// EndProtocol: the in-sandbox runtime broke the protocol.
	EndProtocol EndCode = "protocol_error"
	// EndNotReading: the interpreter stopped reading its requests.
	EndNotReading EndCode = "not_reading"
	// EndInterpreterExited: the interpreter or its sandbox went away.
	EndInterpreterExited EndCode = "interpreter_exited"
	// EndProgramExited: a program run ended its runtime by exiting.
	EndProgramExited EndCode = "program_exited"
	// EndKilled: airlock stopped a program run at a limit.
	EndKilled EndCode = "killed"
	// EndFinished: a one-shot or program run is over.
	EndFinished EndCode = "finished"
	// EndPaused: the session was paused; its sandbox is gone, its files
	// and settings are kept (a resume makes it live again).
	EndPaused EndCode = "paused"
	// EndLifetime: its lifetime (timeout) ran out.
	EndLifetime EndCode = "timeout"
)

// EndCodes lists every end code.
func EndCodes() []EndCode {
	return []EndCode{EndDeleted, EndIdle, EndOOM, EndPids, EndUnresponsive, EndShutdown, EndProtocol,
		EndNotReading, EndInterpreterExited, EndProgramExited, EndKilled, EndFinished, EndPaused, EndLifetime}
}

// reasons are the sentences of the end codes whose sentence is fixed.
var reasons = map[EndCode]string{
	EndDeleted:           "deleted",
	EndIdle:              "idle timeout",
	EndOOM:               "out of memory",
	EndPids:              "process limit reached",
	EndUnresponsive:      "the interpreter did not stop after an interrupt",
	EndShutdown:          "server shut down",
	EndProtocol:          "the interpreter broke the protocol",
	EndNotReading:        "the interpreter stopped reading its requests",
	EndInterpreterExited: "the interpreter ended",
	EndProgramExited:     "the program exited",
	EndKilled:            "killed",
	EndFinished:          "finished",
	EndPaused:            "paused",
	EndLifetime:          "its lifetime (timeout) ran out",
}

// Reason is the code's usual sentence (an interpreter's exit has more
// precise ones, see End).
func (c EndCode) Reason() string { return reasons[c] }

// End is why a session ended: a code and a sentence.
type End struct {
	Code   EndCode
	Reason string
}

// Ended returns the End of code with its usual sentence.
func Ended(code EndCode) End { return End{Code: code, Reason: code.Reason()} }

// Zero reports whether e says nothing (the session lives).
func (e End) Zero() bool { return e.Code == "" }
