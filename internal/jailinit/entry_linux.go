package jailinit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"airlock/internal/landlock"
)

// StatusFields are the fields of a /proc/<pid>/status, values trimmed.
func StatusFields(b []byte) map[string]string {
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	return got
}

var phaseOrder = map[Phase]int{PhaseProcess: 0, PhaseThread: 1, PhaseChild: 2}

// Validate refuses a plan whose phases are out of order or that names a
// step the init cannot make.
func (e *Entry) Validate() error {
	last := 0
	for i, s := range e.Steps {
		n, ok := phaseOrder[s.Phase]
		if !ok {
			return fmt.Errorf("entry step %d (%s): unknown phase %q", i, s.Op, s.Phase)
		}
		if n < last {
			return fmt.Errorf("entry step %d (%s): phase %s after a later phase", i, s.Op, s.Phase)
		}
		last = n
	}
	_, err := e.forkAttr()
	return err
}

// apply makes the steps of phase on the calling thread (process steps on
// the process). ruleset is the Landlock ruleset, or -1.
func (e *Entry) apply(phase Phase, ruleset int) error {
	for _, s := range e.Steps {
		if s.Phase != phase {
			continue
		}
		if err := applyStep(s, ruleset); err != nil {
			return fmt.Errorf("entry step %s: %w", s.Op, err)
		}
	}
	return nil
}

func applyStep(s Step, ruleset int) error {
	switch s.Op {
	case OpRlimit:
		return unix.Setrlimit(s.Resource, &unix.Rlimit{Cur: s.Cur, Max: s.Max})
	case OpCapBoundingDrop:
		for _, c := range s.Caps {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("capability %d: %w", c, err)
			}
		}
		return nil
	case OpCapAmbientClear:
		return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	case OpCapInheritableClear:
		// Effective and permitted stay: the child's identity change needs
		// CAP_SETUID and CAP_SETGID, and clears them.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Inheritable, data[1].Inheritable = 0, 0
		return unix.Capset(&hdr, &data[0])
	case OpNoNewPrivs:
		return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	case OpLandlock:
		if ruleset < 0 {
			return errors.New("no Landlock ruleset")
		}
		return landlock.RestrictThread(ruleset)
	case OpSeccomp:
		return installFilter(s.Filter)
	}
	return fmt.Errorf("not a %s step here", s.Phase)
}

// childSequence is the order in which syscall.ForkExec's child makes the
// steps the init maps onto it (forkAndExecInChild: setsid, then setgroups,
// setgid, setuid, then chdir). cap_clear has no call of its own there:
// the init is root of the sandbox's user namespace, so the kernel clears
// the permitted and effective sets when setuid leaves that uid (the
// template's child, host root outside the namespace's map, makes the
// capset itself); the status check shows it either way.
// dumpable is the exec itself: the kernel makes a process dumpable again
// when it executes a program with unchanged credentials.
var childSequence = []Op{OpSetsid, OpSetgroups, OpSetGID, OpSetUID, OpCapClear, OpChdir, OpDumpable}

// childAttr is what the init's fork makes of the child steps.
type childAttr struct {
	setsid bool
	cred   *syscall.Credential
	dir    string
}

// forkAttr maps the child steps onto syscall.ForkExec, refusing any it
// would not make in the plan's order.
func (e *Entry) forkAttr() (childAttr, error) {
	var a childAttr
	next := 0
	var uid, gid int
	var groups, setGID, setUID, capClear bool
	for _, s := range e.Steps {
		if s.Phase != PhaseChild {
			continue
		}
		i := next
		for i < len(childSequence) && childSequence[i] != s.Op {
			i++
		}
		if i == len(childSequence) {
			return a, fmt.Errorf("entry step %s: the init cannot make it in the child at this point", s.Op)
		}
		next = i + 1
		switch s.Op {
		case OpSetsid:
			a.setsid = true
		case OpSetgroups:
			groups = true
		case OpSetGID:
			gid, setGID = s.ID, true
		case OpSetUID:
			uid, setUID = s.ID, true
		case OpCapClear:
			capClear = true
		case OpChdir:
			a.dir = s.Path
		}
	}
	if groups || setGID || setUID {
		if !(groups && setGID && setUID) {
			return a, errors.New("entry: the init changes groups, gid and uid together or not at all")
		}
		a.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	if capClear && (!setUID || uid == 0) {
		return a, errors.New("entry: the init clears capabilities only by leaving root")
	}
	return a, nil
}

// probe runs the plan's probes on the calling thread.
func (e *Entry) probe() error {
	for _, p := range e.Expect.Probes {
		if p.Op != "mknodat" {
			return fmt.Errorf("entry: unknown probe %q", p.Op)
		}
		var r [8]byte
		if _, err := unix.Getrandom(r[:], 0); err != nil {
			return fmt.Errorf("entry: probe name: %w", err)
		}
		path := fmt.Sprintf("%s/%s%x", strings.TrimSuffix(p.Dir, "/"), p.Prefix, r[:])
		err := unix.Mknodat(unix.AT_FDCWD, path, p.Mode, int(p.Dev))
		if err == nil {
			unix.Unlink(path)
		}
		if errno, _ := err.(unix.Errno); int(errno) != p.Errno {
			return fmt.Errorf("refusing to run: %s is not enforced (mknodat %s: %v, want %v)", p.Layer, path, errnoText(err), unix.Errno(p.Errno))
		}
	}
	return nil
}

func errnoText(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// verify compares what /proc says about pid with the expectation.
func (e *Entry) verify(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if err := e.Check(b); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if int(st.Uid) != e.Expect.ProcOwner {
		return fmt.Errorf("refusing to run: the program's /proc entries belong to %d, want %d", st.Uid, e.Expect.ProcOwner)
	}
	return nil
}

// Check compares a /proc/<pid>/status with the expected one.
func (e *Entry) Check(status []byte) error {
	got := StatusFields(status)
	for _, k := range slices.Sorted(maps.Keys(e.Expect.Status)) {
		v := e.Expect.Status[k]
		if g, ok := got[k]; !ok || g != v {
			return fmt.Errorf("refusing to run: the program's %s is %q, want %q", k, g, v)
		}
	}
	return nil
}
