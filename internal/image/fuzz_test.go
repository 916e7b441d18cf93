package image

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// FuzzApply feeds arbitrary bytes to the layer applier as a layer: it
// must never panic, never write outside its root, and never leave a
// setuid or setgid file, a device node or a relative symlink out of the
// root behind, nor more bytes of files than its cap (a sparse file's
// holes included), whatever it accepts. The seeds in testdata/fuzz/FuzzApply
// are crafted layers (traversals, links out, whiteouts, devices).
func FuzzApply(f *testing.F) {
	f.Add(layerTar(f, file("a/b", "x"), symlink("bin", "usr/bin"), hardlink("c", "a/b"), file("a/.wh.b", "")))
	f.Add(sparseTar("zeros", 1<<30))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		os.Mkdir(root, 0o755)
		l := DefaultLimits()
		l.Bytes, l.Files = 4<<20, 1000
		a, err := newApplier(root, l)
		if err != nil {
			t.Fatal(err)
		}
		a.apply(context.Background(), bytes.NewReader(data))
		a.close()
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("written beside the root: %v", ents)
		}
		var size int64
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			m := info.Mode()
			if m.IsRegular() {
				if size += info.Size(); size > l.Bytes {
					t.Fatalf("%d bytes of files written, over the cap of %d", size, l.Bytes)
				}
			}
			if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0 {
				t.Fatalf("%s has mode %v", p, m)
			}
			if m&fs.ModeSymlink != 0 {
				rel, _ := filepath.Rel(root, p)
				target, _ := os.Readlink(p)
				if err := symlinkOK(filepath.ToSlash(rel), target); err != nil {
					t.Fatalf("link left behind: %v", err)
				}
			}
			return nil
		})
	})
}
