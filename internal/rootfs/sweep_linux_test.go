package rootfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSweepTemplates(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keep := mk("rootfs-current", old)
	mk("rootfs-oldversion", old)
	mk(".rootfs-half1234", old)
	mk("rootfs-justmade", time.Now())
	mk("root", old) // the staging directory
	busy := mk("rootfs-busy", old)
	if os.Geteuid() == 0 {
		// A template some sandbox has mounted stays.
		target := t.TempDir()
		if err := unix.Mount(busy, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(target, unix.MNT_DETACH)
	} else {
		os.RemoveAll(busy)
	}
	if err := SweepTemplates(dir, keep); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{"root", "rootfs-busy", "rootfs-current", "rootfs-justmade"}
	if os.Geteuid() != 0 {
		want = []string{"root", "rootfs-current", "rootfs-justmade"}
	}
	if len(left) != len(want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("left %v, want %v", left, want)
		}
	}
}
