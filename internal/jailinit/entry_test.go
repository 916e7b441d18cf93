package jailinit

import "testing"

// The init maps the child steps onto syscall.ForkExec, and refuses a plan
// it could not make in order rather than making something else.
func TestEntryForkAttr(t *testing.T) {
	child := func(ops ...Op) Entry {
		var e Entry
		for _, op := range ops {
			e.Steps = append(e.Steps, Step{Phase: PhaseChild, Op: op, ID: 1000})
		}
		return e
	}
	// The child steps as jail's planEntry makes them (TestPlanEntry).
	e := Entry{Steps: []Step{{Phase: PhaseChild, Op: OpSetsid}, {Phase: PhaseChild, Op: OpSetgroups},
		{Phase: PhaseChild, Op: OpSetGID, ID: 1000}, {Phase: PhaseChild, Op: OpSetUID, ID: 1000},
		{Phase: PhaseChild, Op: OpCapClear}, {Phase: PhaseChild, Op: OpChdir, Path: "/workspace"},
		{Phase: PhaseChild, Op: OpDumpable}}}
	a, err := e.forkAttr()
	if err != nil {
		t.Fatal(err)
	}
	if !a.setsid || a.dir != "/workspace" || a.cred == nil || a.cred.Uid != 1000 || a.cred.Gid != 1000 || len(a.cred.Groups) != 0 {
		t.Errorf("fork attributes: %+v %+v", a, a.cred)
	}
	for name, bad := range map[string]Entry{
		"chdir before setuid":    child(OpChdir, OpSetUID),
		"uid without groups/gid": child(OpSetUID),
		"a thread step in child": child(OpNoNewPrivs),
		"twice":                  child(OpSetsid, OpSetsid),
		"cap_clear staying root": {Steps: []Step{{Phase: PhaseChild, Op: OpSetgroups}, {Phase: PhaseChild, Op: OpSetGID}, {Phase: PhaseChild, Op: OpSetUID}, {Phase: PhaseChild, Op: OpCapClear}}},
		"phases out of order":    {Steps: []Step{{Phase: PhaseThread, Op: OpNoNewPrivs}, {Phase: PhaseProcess, Op: OpRlimit}}},
		"unknown phase":          {Steps: []Step{{Phase: "later", Op: OpNoNewPrivs}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
