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

// A sealed image whose identity is unchanged is not summed again; any
// change to a file's or the directory's identity brings the sum back,
// which finds what changed; so does an image whose change times were
// too recent when it was sealed, or one never sealed.
func TestSealedImageSkipsTheSumUntilItChanges(t *testing.T) {
	settled := func(t *testing.T) {
		now := sealNow
		sealNow = func() time.Time { return time.Now().Add(2 * sealSettled) }
		t.Cleanup(func() { sealNow = now })
	}
	ctx := context.Background()
	pages := func(dir string) string { return filepath.Join(dir, "pages.img") }
	for _, c := range []struct {
		name    string
		settled bool // the image is older than sealSettled when sealed
		seal    bool
		change  func(t *testing.T, dir string)
		want    error // nil: the sum was skipped
	}{
		{name: "unchanged", settled: true, seal: true},
		{name: "never sealed", settled: true, want: errdefs.ErrImageCorrupt},
		{name: "sealed too soon after it was written", seal: true, want: errdefs.ErrImageCorrupt},
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
				settled(t)
			}
			h := &Host{}
			if c.seal {
				if err := h.Seal(ctx, dir, want); err != nil {
					t.Fatalf("sealing the image as written: %v", err)
				}
			}
			if err := h.verifyCheckpoint(ctx, dir, want); err != nil {
				t.Fatalf("the image as written: %v", err)
			}
			m[100] = 8 // unseen by the identity
			if c.change != nil {
				c.change(t, dir)
			}
			if err := h.verifyCheckpoint(ctx, dir, want); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("after the change: %v, want %v", err, c.want)
			}
		})
	}
}

// An image that does not match its digest is not sealed, a forgotten
// one is summed again, and a seal is for one digest.
func TestSealRefusesAndForgets(t *testing.T) {
	now := sealNow
	sealNow = func() time.Time { return time.Now().Add(2 * sealSettled) }
	defer func() { sealNow = now }()
	ctx := context.Background()
	dir, want, m := sealedImage(t)
	h := &Host{}
	wrong := want
	wrong.SHA256 = "00"
	if err := h.Seal(ctx, dir, wrong); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("sealing an image that does not match: %v", err)
	}
	if err := h.Seal(ctx, dir, want); err != nil {
		t.Fatal(err)
	}
	m[100] = 8
	if err := h.verifyCheckpoint(ctx, dir, wrong); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("another digest than the seal's: %v", err)
	}
	if err := h.verifyCheckpoint(ctx, dir, want); err != nil {
		t.Errorf("the sealed image: %v", err)
	}
	h.Forget(dir)
	if err := h.verifyCheckpoint(ctx, dir, want); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("a forgotten image: %v", err)
	}
}
