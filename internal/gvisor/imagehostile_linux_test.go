package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

// hostileImage is a change that makes a checkpoint's directory (dir,
// written whole) or a file in it other than a plain directory of regular
// files; it returns the FIFO it made, if any (opened for writing should
// a check hang on it).
type hostileImage struct {
	name   string
	change func(t *testing.T, dir string) (fifo string)
}

// copyImage copies the files of the image in dir into a new host
// directory, whose path it returns: the same bytes, that a check reading
// through a link would find to match.
func copyImage(t *testing.T, dir string) string {
	t.Helper()
	host := filepath.Join(t.TempDir(), "host")
	if err := os.Mkdir(host, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return host
}

// someFile is the name of one file of the image in dir.
func someFile(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("an empty image: %v", err)
	}
	return ents[0].Name()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var hostileImages = []hostileImage{
	{"the directory a symlink to a host directory holding the same files", func(t *testing.T, dir string) string {
		host := copyImage(t, dir)
		must(t, os.RemoveAll(dir))
		must(t, os.Symlink(host, dir))
		return ""
	}},
	{"the directory a FIFO", func(t *testing.T, dir string) string {
		must(t, os.RemoveAll(dir))
		must(t, unix.Mkfifo(dir, 0o600))
		return dir
	}},
	{"the directory a symlink to a FIFO", func(t *testing.T, dir string) string {
		fifo := filepath.Join(t.TempDir(), "fifo")
		must(t, unix.Mkfifo(fifo, 0o600))
		must(t, os.RemoveAll(dir))
		must(t, os.Symlink(fifo, dir))
		return fifo
	}},
	{"a file a symlink to a host file holding the same bytes", func(t *testing.T, dir string) string {
		host := copyImage(t, dir)
		name := someFile(t, dir)
		must(t, os.Remove(filepath.Join(dir, name)))
		must(t, os.Symlink(filepath.Join(host, name), filepath.Join(dir, name)))
		return ""
	}},
	{"a file a FIFO", func(t *testing.T, dir string) string {
		p := filepath.Join(dir, someFile(t, dir))
		must(t, os.Remove(p))
		must(t, unix.Mkfifo(p, 0o600))
		return p
	}},
	{"a FIFO beside the files", func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "zz.img")
		must(t, unix.Mkfifo(p, 0o600))
		return p
	}},
	{"a directory beside the files", func(t *testing.T, dir string) string {
		must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
		return ""
	}},
}

// refusedInTime runs check, which must refuse the image as corrupt
// without hanging on fifo (opened for writing, to end the test, if it
// does).
func refusedInTime(t *testing.T, what, fifo string, check func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- check() }()
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrImageCorrupt) {
			t.Errorf("%s: %v, want ErrImageCorrupt", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: hung on the FIFO", what)
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
		<-done
	}
}

// A memory image (a paused session's memory/, a pool image) whose
// directory, or a file in it, is not a plain directory of regular files
// is refused as corrupt by what a restore checks before runsc reads it
// (checkImage), by its digest's check, and by a sealed image's check
// (the pool's), without reading through a link or hanging on a FIFO:
// even one whose link leads to the very bytes it was written with.
// checked against mutants: the directory opened with os.Open (following
// links: the symlinked copy matched, the FIFO hung), checkImage's type
// check removed (symlinked and FIFO files passed it).
func TestImageNotPlainRefused(t *testing.T) {
	ctx := context.Background()
	settledClock(t)
	sealCheck(t, true)
	for _, c := range hostileImages {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "memory")
			must(t, os.Mkdir(dir, 0o700))
			for name, size := range map[string]int{"pages.img": 1 << 16, "checkpoint.img": 4096} {
				must(t, os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600))
			}
			want, err := sumCheckpoint(ctx, dir, 1<<20, false)
			must(t, err)
			h := &Host{}
			seal(t, h, dir, want, true)
			if !h.Settled(dir) {
				t.Fatal("the image as written was not settled")
			}
			fifo := c.change(t, dir)
			refusedInTime(t, "checkImage", fifo, func() error { return checkImage(dir) })
			refusedInTime(t, "checkDigest", fifo, func() error { return checkDigest(ctx, dir, want) })
			refusedInTime(t, "the sealed image's check", fifo, func() error {
				_, err := h.verifyCheckpoint(ctx, dir, want)
				return err
			})
		})
	}
}

// An image that cannot be opened is corrupt only when what is there is
// not what an image holds; one that cannot be opened for want of
// descriptors, memory or permission is sound, and its error says why
// (the image is not to be set aside as damaged).
// checked against a mutant: every failure but ENOENT corrupt (EMFILE,
// ENFILE, ENOMEM, EACCES and EAGAIN were).
func TestImageOpenErrorCorruptOnlyForShape(t *testing.T) {
	for _, c := range []struct {
		err     unix.Errno
		corrupt bool
	}{
		{unix.ELOOP, true}, {unix.ENOTDIR, true}, {unix.EXDEV, true}, {unix.ENXIO, true}, {unix.ENODEV, true},
		{unix.ENOENT, false}, {unix.EMFILE, false}, {unix.ENFILE, false}, {unix.ENOMEM, false},
		{unix.EACCES, false}, {unix.EPERM, false}, {unix.EAGAIN, false}, {unix.EINTR, false},
	} {
		err := imageOpenError("memory/pages.img", c.err, "pages.img is not a regular file")
		if got := errors.Is(err, errdefs.ErrImageCorrupt); got != c.corrupt {
			t.Errorf("%v: %v, corrupt = %v, want %v", c.err, err, got, c.corrupt)
		}
		if !c.corrupt && !errors.Is(err, c.err) {
			t.Errorf("%v: %v does not say it", c.err, err)
		}
	}
	if _, err := openImage(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, os.ErrNotExist) || errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("openImage of a missing directory: %v, want ErrNotExist", err)
	}
}
