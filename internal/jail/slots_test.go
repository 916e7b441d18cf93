package jail

import (
	"errors"
	"strings"
	"testing"

	"airlock/internal/errdefs"
)

func TestLayout(t *testing.T) {
	if l := LayoutOf(0); l.Pod || l.ServerFirst != ServerSlotBase || l.ServerCount != maxServerSlots {
		t.Errorf("a host's layout: %+v", l)
	}
	// The chart's userns range: ids 10000 to 59999.
	l := LayoutOf(50000)
	if !l.Pod || l.CLI != 6250 || l.ServerFirst != 6250 || l.ServerFirst+l.ServerCount != 25000 {
		t.Errorf("pod layout: %+v", l)
	}
	h := &Host{opts: Options{IDBase: 10000, IDCount: 50000}}
	if root, user := h.IDs(l.ServerFirst + l.ServerCount - 1); root != 59998 || user != 59999 {
		t.Errorf("the last server slot's ids: %d %d, want the end of the range", root, user)
	}
}

// In pod mode each CLI run leases a slot of its own with a lock; when all
// are leased, one more run is refused instead of sharing ids.
func TestCLISlotLease(t *testing.T) {
	dir := t.TempDir()
	const count = 64 // 8 CLI slots
	var hosts []*Host
	seen := map[uint32]bool{}
	for i := 0; i < 8; i++ {
		h := &Host{opts: Options{StateDir: dir, IDBase: 1000, IDCount: count}}
		slot, err := h.CLISlot()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if again, _ := h.CLISlot(); again != slot {
			t.Errorf("a second call gives %d, then %d", slot, again)
		}
		if seen[slot] || slot >= LayoutOf(count).CLI {
			t.Fatalf("run %d got slot %d (taken: %v)", i, slot, seen)
		}
		seen[slot] = true
		hosts = append(hosts, h)
	}
	extra := &Host{opts: Options{StateDir: dir, IDBase: 1000, IDCount: count}}
	if _, err := extra.CLISlot(); !errors.Is(err, errdefs.ErrLimit) {
		t.Fatalf("a ninth run: %v, want ErrLimit", err)
	}
	// A run that ends frees its slot for the next.
	hosts[3].releaseCLISlot()
	next := &Host{opts: Options{StateDir: dir, IDBase: 1000, IDCount: count}}
	if _, err := next.CLISlot(); err != nil {
		t.Errorf("after a release: %v", err)
	}
	// On a host, the pid, as before.
	if s, err := (&Host{}).CLISlot(); err != nil || s != CLISlot() {
		t.Errorf("host layout: %d %v", s, err)
	}
}

// Two servers may not hold overlapping ranges of host ids, nor one cgroup
// parent: the second is refused, saying what to set; a range whose lock
// no one holds any more is free, and so is one apart.
func TestLockServer(t *testing.T) {
	dir := t.TempDir()
	host := func(base, count uint32, cgroup string) *Host {
		return &Host{opts: Options{IDBase: base, IDCount: count, CgroupParent: cgroup, LockDir: dir}}
	}
	first, err := host(1_000_000, 0, "a").LockServer()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		h    *Host
		want string
	}{
		"the same id_base":       {host(1_000_000, 0, "b"), "host ids 9388608 to 11485759"},
		"an overlapping range":   {host(1_000_000+1<<20, 0, "b"), "another airlock server uses host ids"},
		"pod mode inside it":     {host(9_400_000, 64, "b"), "another airlock server uses host ids"},
		"the same cgroup parent": {host(1_000_000+1<<22, 0, "a"), `cgroup_parent "a"`},
	} {
		if l, err := c.h.LockServer(); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "id_base") {
			t.Errorf("%s: %v, want ErrUnavailable naming %q and id_base", name, err, c.want)
			if l != nil {
				l.Close()
			}
		}
	}
	apart, err := host(1_000_000+1<<22, 0, "b").LockServer()
	if err != nil {
		t.Fatalf("a range apart: %v", err)
	}
	apart.Close()
	first.Close()
	again, err := host(1_000_000+1<<20, 0, "b").LockServer()
	if err != nil {
		t.Fatalf("once the first server is gone: %v", err)
	}
	again.Close()
}
