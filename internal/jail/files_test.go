package jail

// Files the host writes into a sandbox (uploads, a run's input files) are
// written by the sandbox's init: their pages are charged to the sandbox's
// memory cgroup, a file that would push the sandbox into its OOM killer
// is refused, and the sandbox lives on.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

func TestFilesChargedToSandbox(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, limits(func(l *config.Limits) { l.Memory = 64 << 20; l.Disk = 256 << 20 }))
	const size = 24 << 20
	n, err := sb.Workspace().Write("charged", bytes.NewReader(bytes.Repeat([]byte("c"), size)), 1<<30, 0o644)
	if err != nil || n != size {
		t.Fatalf("Write of 24M into 64M = %d, %v", n, err)
	}
	used, limit, err := sb.Cgroup().Memory()
	if err != nil || limit != 64<<20 || used < size {
		t.Errorf("the sandbox's memory: %d in use of %d (%v) with a %d-byte file written: not charged to it", used, limit, err, size)
	}

	// More than the memory (but within the disk): refused before the
	// OOM killer ends the sandbox, and nothing left behind.
	_, err = sb.Workspace().Write("huge", bytes.NewReader(make([]byte, 200<<20)), 1<<30, 0o644)
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("Write of 200M into 64M = %v, want ErrTooLarge naming the memory", err)
	}
	r := spawnPipes(t, sb, "/bin/sh", "-c", "stat -c '%s %U' charged; ls -A")
	if e, out := r.wait(t, sb); e.Status.ExitStatus() != 0 || out != fmt.Sprintf("%d user\ncharged\n", size) {
		t.Errorf("the sandbox after the refused file: exit %v, %q (stderr %q)", e.Status, out, r.stderr.String())
	}
	if s, err := sb.Stats(); err != nil || s.OOMKills != 0 {
		t.Errorf("stats %+v, %v: want no OOM kill", s, err)
	}
}

// The disk limit (the tmpfs size) refuses a file the memory would hold.
func TestFilesWorkspaceFull(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, limits(func(l *config.Limits) { l.Memory = 256 << 20; l.Disk = 8 << 20 }))
	_, err := sb.Workspace().Write("big", bytes.NewReader(make([]byte, 16<<20)), 1<<30, 0o644)
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "workspace is full") {
		t.Errorf("Write of 16M into 8M = %v, want ErrTooLarge: the workspace is full", err)
	}
	if entries, _, err := sb.Workspace().List("", true); err != nil || len(entries) != 0 {
		t.Errorf("left behind: %+v %v", entries, err)
	}
}

// Copies run at once, each answered by its own reply.
func TestFilesConcurrentWrites(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, testLimits())
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			data := bytes.Repeat([]byte{byte('a' + i)}, (i+1)*100<<10)
			n, err := sb.Workspace().Write(fmt.Sprintf("f%d", i), bytes.NewReader(data), 1<<30, 0o644)
			if err == nil && n != int64(len(data)) {
				err = fmt.Errorf("wrote %d bytes of %d", n, len(data))
			}
			if err != nil {
				err = fmt.Errorf("Write f%d: %w", i, err)
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range 16 {
		f, _, err := sb.Workspace().Open(fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + i)}, (i+1)*100<<10)) {
			t.Errorf("f%d holds %d bytes, not what was written", i, len(got))
		}
	}
}

// blockedReader yields a little, waits until released, then ends.
type blockedReader struct {
	reading chan struct{} // closed at the wait
	release chan struct{}
	reads   int
}

func (r *blockedReader) Read(p []byte) (int, error) {
	r.reads++
	switch r.reads {
	case 1:
		return copy(p, "ab"), nil
	case 2:
		close(r.reading)
		<-r.release
		return copy(p, "cd"), nil
	}
	return 0, io.EOF
}

// A sandbox that ends during a write answers ErrGone, not success.
func TestFilesSandboxEndsDuringWrite(t *testing.T) {
	h := testHost(t)
	sb := startSandbox(t, h, testLimits())
	r := &blockedReader{reading: make(chan struct{}), release: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Workspace().Write("up", r, 1<<20, 0o644)
		errc <- err
	}()
	<-r.reading
	sb.Kill()
	<-sb.Dead()
	close(r.release)
	if err := <-errc; !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("Write across the sandbox's end = %v, want ErrGone", err)
	}
}
