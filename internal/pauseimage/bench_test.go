package pauseimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// BenchmarkSealBesideDirtyData: a seal of one small changed file while
// another writer (another tenant's session, a pause) leaves 128 MiB of
// dirty data on the same filesystem each time. A seal fsyncs what it
// wrote only: it does not pay for (nor flush) the other's data, as a
// syncfs did. The neighbour's write is outside the timer.
func BenchmarkSealBesideDirtyData(b *testing.B) {
	src := b.TempDir()
	ws, err := workspace.OpenOut(src)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	os.WriteFile(filepath.Join(src, "small.txt"), []byte("x"), 0o644)
	root, other := b.TempDir(), b.TempDir()
	l, err := NewLive(root, "s-1")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Remove()
	dirty := bytes.Repeat([]byte("d"), 128<<20)
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		if err := os.WriteFile(filepath.Join(other, "neighbour"), dirty, 0o644); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, "small.txt"), []byte(fmt.Sprint(i)), 0o644)
		b.StartTimer()
		if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
