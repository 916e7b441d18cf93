package pauseimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"airlock/internal/workspace"
)

// BenchmarkRestore: restoring an image of 20 MiB (a 10 MiB CSV and ten
// 1 MiB files, as the bench's paused pandas session), read once.
func BenchmarkRestore(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "data.csv"), bytes.Repeat([]byte("1,2.5,hello\n"), 10<<20/12), 0o644)
	for i := range 10 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 1<<20), 0o644)
	}
	ws, err := workspace.OpenOut(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	root := b.TempDir()
	st, err := Write(context.Background(), root, "s-1", []byte(`{}`), ws, 64<<20, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.DiskBytes)
	for b.Loop() {
		b.StopTimer()
		out := b.TempDir()
		dst, err := workspace.OpenOut(out)
		if err != nil {
			b.Fatal(err)
		}
		im, err := Open(root, "s-1")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := im.Restore(context.Background(), dst, 16<<20); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		im.Close()
		dst.Close()
		os.RemoveAll(out)
		b.StartTimer()
	}
}
