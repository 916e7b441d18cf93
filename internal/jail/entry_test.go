package jail

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/jailinit"
)

func testEntryParams() entryParams {
	return entryParams{capLast: 40, seccomp: make([]byte, 16), landlock: true, uid: SandboxUID, gid: SandboxGID,
		rlimits: rlimitsFor(testLimits()), baseFilters: 0}
}

// The plan: phases in order, every layer present, the expected end
// complete, and each layer's absence visible in the plan.
func TestPlanEntry(t *testing.T) {
	e := planEntry(testEntryParams())
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, s := range e.Steps {
		if s.Op != jailinit.OpRlimit {
			ops = append(ops, string(s.Phase)+":"+string(s.Op))
		}
	}
	want := "thread:cap_bounding_drop thread:cap_ambient_clear thread:cap_inheritable_clear thread:no_new_privs " +
		"thread:landlock_restrict_self thread:seccomp_filter child:setsid child:setgroups child:set_gid child:set_uid child:cap_clear child:chdir child:dumpable"
	if got := strings.Join(ops, " "); got != want {
		t.Errorf("steps:\n got %s\nwant %s", got, want)
	}
	if len(e.Steps[len(rlimitsFor(testLimits()))].Caps) != 41 {
		t.Errorf("the bounding set drop does not name every capability: %v", e.Steps[len(rlimitsFor(testLimits()))].Caps)
	}
	for k, v := range map[string]string{"CapBnd": "0000000000000000", "CapEff": "0000000000000000", "NoNewPrivs": "1",
		"Seccomp": "2", "Seccomp_filters": "1", "Uid": "1000\t1000\t1000\t1000", "Groups": ""} {
		if e.Expect.Status[k] != v {
			t.Errorf("expected %s %q, want %q", k, e.Expect.Status[k], v)
		}
	}
	if e.Expect.ProcOwner != SandboxUID {
		t.Errorf("proc owner %d", e.Expect.ProcOwner)
	}
	if len(e.Expect.Probes) != 1 || e.Expect.Probes[0].Layer != "landlock" || e.Expect.Probes[0].Errno != int(unix.EACCES) {
		t.Errorf("probes: %+v", e.Expect.Probes)
	}

	// Layers off: no step, no probe; a server already under a filter
	// expects one more, not one.
	p := testEntryParams()
	p.landlock, p.seccomp, p.baseFilters = false, nil, 2
	e = planEntry(p)
	for _, s := range e.Steps {
		if s.Op == jailinit.OpLandlock || s.Op == jailinit.OpSeccomp {
			t.Errorf("step %s with the layer off", s.Op)
		}
	}
	if len(e.Expect.Probes) != 0 || e.Expect.Status["Seccomp_filters"] != "2" || e.Expect.Status["Seccomp"] != "2" {
		t.Errorf("layers off: %+v", e.Expect)
	}
	p.baseFilters = -1
	if _, ok := planEntry(p).Expect.Status["Seccomp_filters"]; ok {
		t.Error("a filter count expected where the kernel reports none")
	}
}

// A status that differs in any expected field refuses the program.
func TestEntryCheck(t *testing.T) {
	e := planEntry(testEntryParams())
	good := "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t\n" +
		"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n" +
		"CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	if err := e.Check([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		strings.Replace(good, "CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff", 1),
		strings.Replace(good, "NoNewPrivs:\t1", "NoNewPrivs:\t0", 1),
		strings.Replace(good, "Seccomp_filters:\t1", "Seccomp_filters:\t0", 1),
		strings.Replace(good, "Groups:\t\n", "Groups:\t27\n", 1),
		strings.Replace(good, "Seccomp:\t2\n", "", 1),
	} {
		if err := e.Check([]byte(bad)); err == nil || !strings.Contains(err.Error(), "refusing to run") {
			t.Errorf("accepted %q: %v", bad, err)
		}
	}
}
