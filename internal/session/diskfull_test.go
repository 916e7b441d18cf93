package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// TestPauseDiskFull: a pause onto a full disk fails with 503 and leaves
// the session running as it was, its files whole, nothing written; a
// pause once there is room again succeeds. Both ways a disk is full: no
// room for the image when it is sized (a disk of 1 MiB), and full in
// the middle of the write, after the image was admitted (a tmpfs with
// room in bytes and no inode left for the image's description).
// checked against mutants: the session ended when the write fails, the
// temporary image not removed.
func TestPauseDiskFull(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs as persistence.dir")
	for _, c := range []struct {
		name, opts string
		want       string
	}{
		{"no room when sized", "size=1m", "no room"},
		// The root and the image's temporary directory and files.tar
		// take the three inodes: its meta.json gets ENOSPC.
		{"full while written", "size=128m,nr_inodes=3", "is full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := persistConfig(t)
			dir := cfg.Persistence.Dir
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, c.opts+",mode=0700"); err != nil {
				t.Fatal(err)
			}
			defer unix.Unmount(dir, unix.MNT_DETACH)
			m, _, _ := newTestManager(t, cfg)
			s := create(t, m, "python")
			writeFiles(t, s, someFiles)
			_, err := s.Pause(context.Background(), "")
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "keeps running") {
				t.Fatalf("a pause onto a full disk: %v, want unavailable, %q", err, c.want)
			}
			if !s.End().Zero() {
				t.Fatalf("the session ended: %v", s.End())
			}
			if ents, _ := persisted(dir); len(ents) != 0 {
				t.Errorf("the failed pause left %v", ents)
			}
			if _, err := execute(t, s, "out x", nil); err != nil {
				t.Errorf("the session does not run after the failed pause: %v", err)
			}
			checkFiles(t, s, someFiles)
			if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=128m,nr_inodes=1000,mode=0700"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Pause(context.Background(), ""); err != nil {
				t.Fatalf("the pause once there is room: %v", err)
			}
			r, err := m.ResumeFor(context.Background(), s.ID())
			if err != nil {
				t.Fatal(err)
			}
			checkFiles(t, r, someFiles)
		})
	}
}
