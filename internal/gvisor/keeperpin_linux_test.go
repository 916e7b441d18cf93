package gvisor

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/internal/egress"
	"airlock/internal/errdefs"
)

// anotherBuild writes a copy of the binary src whose code differs from
// it as another build's does, and returns its path: every byte of its
// .text is an int3, so that a keeper running code read from it traps at
// once (its data, which a host reads, is src's).
func anotherBuild(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	f.Close()
	if text == nil || text.Offset+text.Size > uint64(len(b)) {
		t.Fatalf("%s has no .text", src)
	}
	for i := text.Offset; i < text.Offset+text.Size; i++ {
		b[i] = 0xcc
	}
	p := filepath.Join(t.TempDir(), "airlock-next")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A server upgraded between a checkpoint and its restore: the new
// server's keeper is another build, in the same keeper directory (the
// paused sessions'). The restore binds the keeper the checkpoint was
// taken with, recorded in it, and its programs run on; without that
// copy, whole, the restore is refused (ErrKeeperGone), never made with
// the new build's, and leaves nothing. What happens otherwise was
// measured: runsc restores the sandbox without comparing the file, and
// the restored keeper, its code now read from the other build, dies of
// SIGSEGV at once (the restore fails, "did not boot"). checked against a
// mutant: with the restore binding the host's own keeper, the restore
// failed.
func TestRestoreBindsItsKeeper(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	keepers := t.TempDir()
	old, _ := testHostOpts(t, "systrap", func(o *Options) { o.Keeper, o.KeeperDir = self, keepers })
	next, _ := testHostOpts(t, "systrap", func(o *Options) { o.Keeper, o.KeeperDir = anotherBuild(t, self), keepers })
	if old.keeperDigest == next.keeperDigest {
		t.Fatal("the two builds have one digest")
	}
	sb, err := old.Start(context.Background(), Spec{Name: "g-pin1", Limits: limits(), Keeper: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	pid, _, err := sb.Exec(Process{Argv: []string{"/bin/sh", "-c", `v=before; while read line; do echo "$v $line"; v=$line; done`},
		Env: []string{"PATH=/usr/bin:/bin"}, Files: []*os.File{inR, outW, outW}})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	inW.WriteString("a\n")
	if l, _ := bufio.NewReader(outR).ReadString('\n'); l != "before a\n" {
		t.Fatalf("before the checkpoint: %q", l)
	}
	dir := filepath.Join(t.TempDir(), "memory")
	c, err := sb.Checkpoint(context.Background(), dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	inW.Close()
	outR.Close()
	if c.Keeper != old.keeperDigest {
		t.Fatalf("the checkpoint records the keeper %q, its sandbox ran %q", c.Keeper, old.keeperDigest)
	}

	// The upgraded host restores it with the old keeper.
	sb2, err := next.Restore(context.Background(), Spec{Name: "g-pin2", Limits: limits()}, dir, c, nil)
	if err != nil {
		t.Fatalf("the restore after the upgrade: %v", err)
	}
	defer sb2.Close()
	inR, inW, _ = os.Pipe()
	outR, outW, _ = os.Pipe()
	exit, err := sb2.Attach(pid, []*os.File{inR, outW, outW})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("attaching after the upgrade: %v", err)
	}
	outR.SetReadDeadline(time.Now().Add(30 * time.Second))
	inW.WriteString("b\n")
	if l, _ := bufio.NewReader(outR).ReadString('\n'); l != "a b\n" {
		t.Fatalf("after the upgrade: %q", l)
	}
	if e, out, _ := runIn(t, sb2, []string{"/bin/echo", "new"}); out != "new\n" {
		t.Errorf("a new program after the upgrade: %v %q", e.Status, out)
	}
	// A checkpoint of the restored sandbox is still the old keeper's.
	dir2 := filepath.Join(t.TempDir(), "memory")
	c2, err := sb2.Snapshot(context.Background(), dir2, 1<<30)
	if err != nil || c2.Keeper != old.keeperDigest {
		t.Errorf("a snapshot of the restored sandbox: keeper %q, %v", c2.Keeper, err)
	}
	inW.Close()
	select {
	case <-exit:
	case <-time.After(30 * time.Second):
		t.Error("the restored shell did not end")
	}

	// Without the old keeper, whole, no restore.
	oldCopy := filepath.Join(keepers, keeperPrefix+old.keeperDigest)
	b, err := os.ReadFile(oldCopy)
	if err != nil {
		t.Fatal(err)
	}
	damaged := append([]byte{}, b...)
	damaged[len(damaged)/2] ^= 1
	noKeeper := c
	noKeeper.Keeper = ""
	// A copy that is there but refused (damaged, another user's) is
	// named, and is a corrupt image's error (kept for inspection); a
	// missing one is not (nothing to inspect).
	for i, tc := range []struct {
		name    string
		content []byte // nil: removed
		uid     int
		ck      Checkpoint
		kept    bool
	}{
		{"damaged", damaged, 0, c, true},
		{"another user's", b, 54321, c, true},
		{"removed", nil, 0, c, false},
		{"not recorded", b, 0, noKeeper, false},
	} {
		os.Remove(oldCopy)
		if tc.content != nil {
			if err := os.WriteFile(oldCopy, tc.content, 0o500); err != nil {
				t.Fatal(err)
			}
			os.Chown(oldCopy, tc.uid, 0)
		}
		name := "g-pin3-" + string(rune('a'+i))
		got, err := next.Restore(context.Background(), Spec{Name: name, Limits: limits()}, dir, tc.ck, nil)
		if got != nil {
			got.Close()
		}
		if !errors.Is(err, ErrKeeperGone) || !strings.Contains(err.Error(), "keeper") {
			t.Errorf("%s: %v", tc.name, err)
		}
		var ke *KeeperError
		if !errors.As(err, &ke) || errors.Is(err, errdefs.ErrImageCorrupt) != tc.kept || (ke.Copy == oldCopy) != tc.kept {
			t.Errorf("%s: %#v (corrupt %v), want the copy named and corrupt: %v", tc.name, ke, errors.Is(err, errdefs.ErrImageCorrupt), tc.kept)
		}
		if _, err := os.Stat(filepath.Join(next.dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s: the refused restore left its directory: %v", tc.name, err)
		}
	}
}

// A sandbox runs the keeper only when it asks and may be checkpointed:
// not with a network, not on a host without one; and only one that runs
// it can be checkpointed. checked against mutants: a keeper always
// (Spec.Keeper ignored), and never.
func TestKeeperOnlyWhereAsked(t *testing.T) {
	h, _ := keeperHost(t)
	plain, _ := testHost(t)
	ns, err := egress.NewNamespace()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    *Host
		spec Spec
		want bool
	}{
		{"asked", h, Spec{Keeper: true}, true},
		{"not asked", h, Spec{}, false},
		{"a network", h, Spec{Keeper: true, NetNS: ns}, false},
		{"no keeper on the host", plain, Spec{Keeper: true}, false},
	} {
		tc.spec.Name, tc.spec.Limits = "g-only", limits()
		sb, err := tc.h.Start(context.Background(), tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, out, _ := runIn(t, sb, []string{"/bin/sh", "-c", "tr '\\0' ' ' </proc/1/cmdline"})
		if got := strings.Contains(out, keeperArg); got != tc.want || sb.Keeps() != tc.want {
			t.Errorf("%s: init %q, Keeps %v; want the keeper %v", tc.name, out, sb.Keeps(), tc.want)
		}
		if _, err := sb.Checkpoint(context.Background(), filepath.Join(t.TempDir(), "m"), 1<<30); (err == nil) != tc.want {
			t.Errorf("%s: checkpoint: %v", tc.name, err)
		}
		sb.Close()
	}
}
