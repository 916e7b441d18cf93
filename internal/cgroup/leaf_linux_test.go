package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/testenv"
)

// TestV2LeafInAPod plays a pod on cgroup v2: a cgroup T stands for the
// container's cgroup (the root of its cgroup namespace) and holds this
// process and another one, as airlock and a `kubectl exec` shell would.
// Enabling a controller for T's children is refused then (EBUSY: the
// no-internal-process rule); openV2At must move both processes into
// T/airlock-server first, then enable the controller down to the parent.
//
// This machine is cgroup v1 hybrid: the v2 hierarchy has no memory, pids
// or cpu controllers (they are v1's), but hugetlb is free there, and the
// rule is the same for any domain controller. The test mounts the v2
// hierarchy at a temporary directory if it is not mounted yet.
func TestV2LeafInAPod(t *testing.T) {
	testenv.RequireRoot(t, "creating cgroups")
	root := v2Mount(t)
	avail, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if !hasWord(string(avail), "hugetlb") {
		testenv.Skip(t, "cgroup v2 here offers no controller a test may enable (%q); the leaf move is then untestable", strings.TrimSpace(string(avail)))
	}
	const ctl = "hugetlb"
	// The real root of the hierarchy is exempt from the rule; enable the
	// controller there (as the host gives it to the pod) if needed.
	if rootCtl, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); !hasWord(string(rootCtl), ctl) {
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+ctl), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("-"+ctl), 0) })
	}
	pod := filepath.Join(root, fmt.Sprintf("airlock-leaf-test-%d", os.Getpid()))
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	orig := selfV2Dir(root)
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back where this process was; the other one ends; the test's
		// cgroups go, leaves first.
		os.WriteFile(filepath.Join(orig, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		other.Process.Kill()
		other.Wait()
		for _, d := range []string{filepath.Join(pod, "airlock", "x"), filepath.Join(pod, "airlock"), filepath.Join(pod, LeafName), pod} {
			unix.Rmdir(d)
		}
	})
	for _, pid := range []int{os.Getpid(), other.Process.Pid} {
		if err := os.WriteFile(filepath.Join(pod, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := selfV2Dir(root); got != pod {
		t.Fatalf("this process is in %q, want %q", got, pod)
	}
	// The rule, as a pod meets it.
	if err := enableControllers(pod, []string{ctl}); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("enabling %s for the children of a cgroup with processes: %v, want EBUSY", ctl, err)
	}

	h, err := openV2At(pod, pod, "airlock", []string{ctl})
	if err != nil {
		t.Fatalf("openV2At in a pod's cgroup: %v", err)
	}
	leaf := filepath.Join(pod, LeafName)
	procs := func(d string) string {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		return strings.TrimSpace(string(b))
	}
	if p := procs(pod); p != "" {
		t.Errorf("processes left in the pod's cgroup: %s", p)
	}
	if p := strings.Fields(procs(leaf)); len(p) != 2 {
		t.Errorf("the leaf holds %v, want this process and the other", p)
	}
	if selfV2Dir(root) != leaf {
		t.Errorf("this process is in %s", selfV2Dir(root))
	}
	for _, d := range []string{pod, filepath.Join(pod, "airlock")} {
		if sc, _ := os.ReadFile(filepath.Join(d, "cgroup.subtree_control")); !hasWord(string(sc), ctl) {
			t.Errorf("%s does not delegate %s: %q", d, ctl, sc)
		}
	}
	// A sandbox's cgroup under the parent gets the controller.
	if err := os.Mkdir(filepath.Join(pod, "airlock", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pod, "airlock", "x", "hugetlb.2MB.max")); err != nil {
		if _, err1 := os.Stat(filepath.Join(pod, "airlock", "x", "hugetlb.1GB.max")); err1 != nil {
			t.Errorf("a child of the parent has no hugetlb files: %v", err)
		}
	}
	if h.v2Dir != filepath.Join(pod, "airlock") {
		t.Errorf("parent %s", h.v2Dir)
	}

	// A second server start finds everything in place and moves nothing.
	if _, err := openV2At(pod, leaf, "airlock", []string{ctl}); err != nil {
		t.Errorf("opening again: %v", err)
	}
}

// v2Mount returns a mount of the cgroup v2 hierarchy: the one the host has
// (unified, or hybrid's /sys/fs/cgroup/unified), else a new one at a
// temporary directory.
func v2Mount(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
				return f[4]
			}
		}
	}
	dir := t.TempDir()
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		testenv.Skip(t, "no cgroup v2 hierarchy mounted and mounting one failed: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
