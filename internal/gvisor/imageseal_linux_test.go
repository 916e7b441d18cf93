package gvisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

// sealedImage writes an image of two files in a directory of its own and
// returns it, its digest, and a shared writable mapping of its pages:
// writing through the mapping changes the content and neither time stamp
// (the one change the identity cannot see), so that a check which skips
// the sum tells itself apart from one which sums.
func sealedImage(t *testing.T) (string, Checkpoint, []byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"pages.img": 1 << 20, "checkpoint.img": 4096} {
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte{7}, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := sumCheckpoint(context.Background(), dir, 2<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "pages.img"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	m[0] = 7 // the page is mapped writable now: later writes touch no time
	waitTick(t, dir)
	return dir, want, m
}

// waitTick waits until the kernel's coarse clock, which time stamps
// changes, has passed every change time in dir: a change the test makes
// then gets a later one, as one made a tick later would.
func waitTick(t *testing.T, dir string) {
	t.Helper()
	id, err := identify(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range id {
		for {
			var now unix.Timespec
			if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now); err != nil {
				t.Fatal(err)
			}
			if now.Nano() > f.ctime.Nano() {
				break
			}
		}
	}
}

// sealCheck makes the check Seal arranges run at once (fire) or never,
// whatever the clock says, for the rest of the test.
func sealCheck(t *testing.T, fire bool) {
	after := sealAfter
	sealAfter = func(time.Duration) <-chan time.Time {
		if !fire {
			return nil
		}
		c := make(chan time.Time, 1)
		c <- time.Now()
		return c
	}
	t.Cleanup(func() { sealAfter = after })
}

// settledClock puts sealNow 2*sealSettled ahead for the rest of the test:
// every image is settled.
func settledClock(t *testing.T) {
	now := sealNow
	sealNow = func() time.Time { return time.Now().Add(2 * sealSettled) }
	t.Cleanup(func() { sealNow = now })
}

// seal seals dir on h for want, to be forgotten as the test ends, and
// waits until the check Seal arranged has ended when it fires.
func seal(t *testing.T, h *Host, dir string, want Checkpoint, fire bool) {
	t.Helper()
	if err := h.Seal(context.Background(), dir, want); err != nil {
		t.Fatalf("sealing the image: %v", err)
	}
	t.Cleanup(func() { h.Forget(dir) })
	if fire {
		h.sealMu.Lock()
		s := h.sealed[dir]
		h.sealMu.Unlock()
		<-s.done
	}
}

// A sealed image whose identity is unchanged is not summed again once a
// check has recorded it (the one Seal arranges, or a restore's); any
// change to a file's or the directory's identity brings the sum back,
// which finds what changed; so does an image whose change times were
// too recent when it was checked, or one never sealed.
func TestSealedImageSkipsTheSumUntilItChanges(t *testing.T) {
	ctx := context.Background()
	pages := func(dir string) string { return filepath.Join(dir, "pages.img") }
	for _, c := range []struct {
		name    string
		settled bool // the image is older than sealSettled when checked
		seal    bool
		restore bool // a restore checks it before the change (Seal's check is not due)
		change  func(t *testing.T, dir string)
		want    error // nil: the sum was skipped
	}{
		{name: "unchanged", settled: true, seal: true},
		{name: "unchanged, recorded by a restore", settled: true, seal: true, restore: true},
		{name: "never sealed", settled: true, restore: true, want: errdefs.ErrImageCorrupt},
		{name: "checked too soon after it was written", seal: true, want: errdefs.ErrImageCorrupt},
		{name: "checked by a restore too soon after it was written", seal: true, restore: true, want: errdefs.ErrImageCorrupt},
		{name: "written in place, same size, its time set back", settled: true, seal: true, want: errdefs.ErrImageCorrupt, change: func(t *testing.T, dir string) {
			st, _ := os.Stat(pages(dir))
			f, err := os.OpenFile(pages(dir), os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteAt([]byte{9}, 4096)
				f.Close()
			}
			if err == nil {
				err = os.Chtimes(pages(dir), st.ModTime(), st.ModTime())
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
		{name: "chmod and back", settled: true, seal: true, want: errdefs.ErrImageCorrupt, change: func(t *testing.T, dir string) {
			if err := os.Chmod(pages(dir), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(pages(dir), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "replaced by a copy", settled: true, seal: true, want: errdefs.ErrImageCorrupt, change: func(t *testing.T, dir string) {
			b, err := os.ReadFile(pages(dir))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, ".new"), b, 0o600)
			}
			if err == nil {
				err = os.Rename(filepath.Join(dir, ".new"), pages(dir))
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a file added and removed", settled: true, seal: true, want: errdefs.ErrImageCorrupt, change: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "x")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, want, m := sealedImage(t)
			if c.settled {
				settledClock(t)
			}
			sealCheck(t, !c.restore)
			h := &Host{}
			if c.seal {
				seal(t, h, dir, want, !c.restore)
			}
			if c.restore {
				summed, err := h.verifyCheckpoint(ctx, dir, want)
				if err != nil || !summed {
					t.Fatalf("the image as written: summed %v, %v", summed, err)
				}
			}
			if got, recorded := h.Settled(dir), c.seal && c.settled; got != recorded {
				t.Errorf("Settled() = %v before the change, want %v", got, recorded)
			}
			m[100] = 8 // unseen by the identity
			if c.change != nil {
				c.change(t, dir)
			}
			summed, err := h.verifyCheckpoint(ctx, dir, want)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || summed != (c.want != nil) {
				t.Errorf("after the change: summed %v, %v; want %v", summed, err, c.want)
			}
		})
	}
}

// Seal sums nothing: it trusts the digest the checkpoint has just summed
// (a change before it is the restores' to find, which sum the image
// until it is settled). The check it arranges sums it: one that does
// not match is not recorded, and its restores go on summing.
func TestSealLeavesTheSumToItsCheck(t *testing.T) {
	ctx := context.Background()
	settledClock(t)
	for _, fire := range []bool{false, true} {
		dir, want, m := sealedImage(t)
		m[100] = 8 // unseen by the identity: only a sum finds it
		sealCheck(t, fire)
		h := &Host{}
		seal(t, h, dir, want, fire)
		if !h.Sealed(dir) || h.Settled(dir) {
			t.Errorf("check fired %v: Sealed() %v, Settled() %v; want true, false", fire, h.Sealed(dir), h.Settled(dir))
		}
		if summed, err := h.verifyCheckpoint(ctx, dir, want); !errors.Is(err, errdefs.ErrImageCorrupt) || !summed {
			t.Errorf("check fired %v: a restore of an image changed before its check: summed %v, %v", fire, summed, err)
		}
	}
}

// Seal's check is due once the image's change times are sealSettled old.
func TestSealCheckDueWhenSettled(t *testing.T) {
	dir, _, _ := sealedImage(t)
	id, err := identify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := id.settlesIn(); d <= 0 || d > sealSettled+10*time.Millisecond {
		t.Errorf("an image just written settles in %v, want (0, %v]", d, sealSettled+10*time.Millisecond)
	}
	settledClock(t)
	if d := id.settlesIn(); d > 0 {
		t.Errorf("an image %v old settles in %v", 2*sealSettled, d)
	}
}

// A seal is for one digest, a forgotten image is summed again, and
// Forget ends the check Seal arranged.
func TestSealRefusesAndForgets(t *testing.T) {
	settledClock(t)
	ctx := context.Background()
	dir, want, m := sealedImage(t)
	h := &Host{}
	wrong := want
	wrong.SHA256 = "00"
	sealCheck(t, false)
	seal(t, h, dir, wrong, false)
	h.Forget(dir) // its check, never due, ends
	sealCheck(t, true)
	seal(t, h, dir, wrong, true)
	if h.Settled(dir) {
		t.Error("an image that does not match its seal's digest was settled")
	}
	seal(t, h, dir, want, true)
	m[100] = 8
	if _, err := h.verifyCheckpoint(ctx, dir, wrong); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("another digest than the seal's: %v", err)
	}
	if summed, err := h.verifyCheckpoint(ctx, dir, want); err != nil || summed {
		t.Errorf("the sealed image: summed %v, %v", summed, err)
	}
	h.Forget(dir)
	if _, err := h.verifyCheckpoint(ctx, dir, want); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("a forgotten image: %v", err)
	}
}
