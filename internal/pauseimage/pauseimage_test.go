package pauseimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/testenv"
	"airlock/internal/workspace"
)

// tree makes a workspace (a host directory, as package workspace's own
// tests do) holding files, a directory, a symlink out and a FIFO.
func tree(t *testing.T) (string, *workspace.Dir) {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "empty"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "sub", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "big.bin"), bytes.Repeat([]byte{7}, 1<<20+3), 0o600))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "escape")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	ws, err := workspace.OpenOut(dir)
	must(err)
	t.Cleanup(func() { ws.Close() })
	return dir, ws
}

// outDir is an empty workspace to restore to.
func outDir(t *testing.T) *workspace.Dir {
	t.Helper()
	return outOf(t, t.TempDir())
}

// outOf is the workspace of the host directory dir, closed when the test
// ends.
func outOf(t *testing.T, dir string) *workspace.Dir {
	t.Helper()
	ws, err := workspace.OpenOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// written writes ws as the image of id under root (files of maxFile bytes
// at most, an empty description, nothing to admit), failing the test if
// it cannot.
func written(t *testing.T, root, id string, ws *workspace.Dir, maxFile int64) {
	t.Helper()
	if _, err := Write(context.Background(), root, id, []byte(`{}`), ws, maxFile, nil); err != nil {
		t.Fatal(err)
	}
}

// opened opens the image of id under root; the caller closes it.
func opened(t *testing.T, root, id string) *Image {
	t.Helper()
	im, err := Open(root, id)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// restoredImage opens the image of id under root and restores it to a
// fresh workspace (files of maxFile bytes at most): the image, which the
// caller closes, and the workspace.
func restoredImage(t *testing.T, root, id string, maxFile int64) (*Image, *workspace.Dir) {
	t.Helper()
	im := opened(t, root, id)
	dst := outDir(t)
	if err := im.Restore(context.Background(), dst, maxFile); err != nil {
		im.Close()
		t.Fatal(err)
	}
	return im, dst
}

func TestRoundTrip(t *testing.T) {
	src, ws := tree(t)
	root := t.TempDir()
	var committed int64
	st, err := Write(context.Background(), root, "s-1", []byte(`{"language":"python"}`), ws, 8<<20, func(n int64) error { committed = n; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Dirs != 2 || st.Bytes != 5+18+1<<20+3 || committed < st.DiskBytes || st.DiskBytes <= st.Bytes {
		t.Errorf("stats %+v, committed %d", st, committed)
	}
	if len(st.Skipped) != 2 || st.Skipped[0] != (Skipped{"escape", "symlink"}) || st.Skipped[1] != (Skipped{"fifo", "other"}) {
		t.Errorf("skipped %+v", st.Skipped)
	}
	ids, swept, err := List(root)
	if err != nil || len(ids) != 1 || ids[0] != "s-1" || swept != 0 {
		t.Fatalf("List: %v %d %v", ids, swept, err)
	}
	im := opened(t, root, "s-1")
	defer im.Close()
	if string(im.Session) != `{"language":"python"}` || im.Stats.Files != 3 {
		t.Errorf("read back %s %+v", im.Session, im.Stats)
	}
	if im.Stats.DiskBytes != st.DiskBytes {
		t.Errorf("read back: %d bytes on disk, Write said %d", im.Stats.DiskBytes, st.DiskBytes)
	}
	dst := outDir(t)
	if err := im.Restore(context.Background(), dst, 4<<20); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", "sub/run.sh", "big.bin"} {
		want, _ := os.ReadFile(filepath.Join(src, p))
		f, e, err := dst.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes restored, want %d", p, len(got), len(want))
		}
		fi, _ := os.Stat(filepath.Join(src, p))
		if want := fmt.Sprintf("%04o", fi.Mode().Perm()); e.Mode != want {
			t.Errorf("%s: mode %s, want %s", p, e.Mode, want)
		}
	}
	if e, err := dst.Stat("sub/empty"); err != nil || e.Type != "dir" {
		t.Errorf("empty directory: %+v %v", e, err)
	}
	for _, p := range []string{"escape", "fifo"} {
		if _, err := dst.Stat(p); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s restored: %v", p, err)
		}
	}
	if err := Remove(root, "s-1"); err != nil {
		t.Fatal(err)
	}
	if ids, _, _ := List(root); len(ids) != 0 {
		t.Errorf("after Remove: %v", ids)
	}
	if _, err := Open(root, "s-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open after Remove: %v", err)
	}
}

func writeTar(t *testing.T, w io.Writer, name, content string) {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(content)), Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, content)
	tw.Close()
}

// rewriteSum rewrites dir's meta.json for files.tar's new contents, as
// someone who knows the format would.
func rewriteSum(t *testing.T, dir string, tarBytes []byte) {
	p := filepath.Join(dir, metaName)
	raw, _ := os.ReadFile(p)
	var env envelope
	var b body
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(env.Body, &b)
	h := sha256.Sum256(tarBytes)
	b.Files = filesSum{Size: int64(len(tarBytes)), SHA256: hex.EncodeToString(h[:])}
	env.Body, _ = json.Marshal(b)
	bh := sha256.Sum256(env.Body)
	env.SHA256 = hex.EncodeToString(bh[:])
	raw, _ = json.Marshal(env)
	os.WriteFile(p, raw, 0o600)
}

// TestCorruptRefused: every kind of damage to an image is refused with
// ErrImageCorrupt and leaves the image in place; damage seen before its
// files are read (missing, truncated, its description) restores nothing.
// Damage inside the files is seen as they are read, once: some may have
// been written (the session discards that sandbox), and a second restore
// fails at once.
func TestCorruptRefused(t *testing.T) {
	inside := map[string]bool{"tar byte flipped": true, "tar content flipped": true}
	damage := map[string]func(dir string) error{
		"tar truncated": func(dir string) error {
			return os.Truncate(filepath.Join(dir, filesName), 1000)
		},
		"tar byte flipped": func(dir string) error { return flip(filepath.Join(dir, filesName), 700) },
		// In big.bin's contents: only the checksum sees it.
		"tar content flipped": func(dir string) error { return flip(filepath.Join(dir, filesName), 512*3+1000) },
		"tar missing":         func(dir string) error { return os.Remove(filepath.Join(dir, filesName)) },
		"tar a symlink": func(dir string) error {
			p := filepath.Join(dir, filesName)
			os.Rename(p, p+".real")
			return os.Symlink(p+".real", p)
		},
		"meta truncated": func(dir string) error {
			return os.Truncate(filepath.Join(dir, metaName), 40)
		},
		"meta body edited": func(dir string) error {
			p := filepath.Join(dir, metaName)
			b, _ := os.ReadFile(p)
			return os.WriteFile(p, bytes.Replace(b, []byte("python"), []byte("pythoN"), 1), 0o600)
		},
		"meta empty": func(dir string) error { return os.WriteFile(filepath.Join(dir, metaName), nil, 0o600) },
		"image a file": func(dir string) error {
			os.RemoveAll(dir)
			return os.WriteFile(dir, []byte("x"), 0o600)
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			_, ws := tree(t)
			root := t.TempDir()
			if _, err := Write(context.Background(), root, "s-2", []byte(`{"language":"python"}`), ws, 8<<20, nil); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "s-2")
			if err := hurt(dir); err != nil {
				t.Fatal(err)
			}
			dst := outDir(t)
			im, err := Open(root, "s-2")
			if err == nil {
				defer im.Close()
				err = im.Restore(context.Background(), dst, 4<<20)
			}
			if !errors.Is(err, errdefs.ErrImageCorrupt) {
				t.Fatalf("got %v, want a corrupt image", err)
			}
			if !strings.Contains(err.Error(), "kept for the operator") {
				t.Errorf("error does not say the image is kept: %v", err)
			}
			if list, _, _ := dst.List("", true); len(list) != 0 && !inside[name] {
				t.Errorf("a corrupt image restored %d entries", len(list))
			}
			if im != nil && inside[name] {
				at, _ := im.files.Seek(0, io.SeekCurrent)
				im.files.Seek(0, io.SeekEnd) // where a second read would stop
				if err := im.Restore(context.Background(), outDir(t), 4<<20); !errors.Is(err, errdefs.ErrImageCorrupt) {
					t.Errorf("a second restore: %v", err)
				}
				if again, _ := im.files.Seek(0, io.SeekCurrent); again != im.sum.Size || at != im.sum.Size {
					t.Errorf("read to %d, then a second restore to %d of %d bytes, want the first to the end and no second", at, again, im.sum.Size)
				}
			}
			if _, err := os.Lstat(dir); err != nil {
				t.Errorf("the corrupt image is gone: %v", err)
			}
		})
	}
}

// TestRestoreReadsOnce: a restore reads the image's files once, summing
// them as it writes them (it read them twice: to check, then to write).
func TestRestoreReadsOnce(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	written(t, root, "s-1", ws, 8<<20)
	im := opened(t, root, "s-1")
	defer im.Close()
	if err := im.OpenFiles(); err != nil {
		t.Fatal(err)
	}
	counted := &countingFile{ReadSeekCloser: im.files}
	im.files = counted
	if err := im.Restore(context.Background(), outDir(t), 4<<20); err != nil {
		t.Fatal(err)
	}
	if counted.bytes != im.sum.Size {
		t.Errorf("read %d bytes of an image of %d", counted.bytes, im.sum.Size)
	}
}

// countingFile counts what is read of a file.
type countingFile struct {
	io.ReadSeekCloser
	bytes int64
}

func (c *countingFile) Read(p []byte) (int, error) {
	n, err := c.ReadSeekCloser.Read(p)
	c.bytes += int64(n)
	return n, err
}

// TestRestoreCancelled: a restore whose context ends (its client left,
// the server shuts down) stops reading a large image promptly, says why,
// and leaves the image whole: a restore after it succeeds.
func TestRestoreCancelled(t *testing.T) {
	dir := t.TempDir()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for i := range 32 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), chunk, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws := outOf(t, dir)
	root := t.TempDir()
	written(t, root, "s-1", ws, 64<<20)
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
	}{
		{"before", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}},
		// Ended after a few reads of the image: mid-file.
		{"during", func() context.Context { return &endsAfter{Context: context.Background(), left: 20} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := opened(t, root, "s-1")
			defer im.Close()
			err := im.Restore(tc.ctx(), outDir(t), 4<<20)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a cancelled restore: %v", err)
			}
			if at, _ := im.files.Seek(0, io.SeekCurrent); at > im.sum.Size/4 {
				t.Errorf("a cancelled restore read %d bytes of %d", at, im.sum.Size)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 1 {
				t.Errorf("left beside the image: %v", ents)
			}
			if err := im.Restore(context.Background(), outDir(t), 4<<20); err != nil {
				t.Errorf("a restore after the cancelled one: %v", err)
			}
		})
	}
}

// endsAfter is a context that ends after left calls of Err.
type endsAfter struct {
	context.Context
	left int
}

func (c *endsAfter) Err() error {
	if c.left--; c.left < 0 {
		return context.Canceled
	}
	return nil
}

// TestDamageNamedForWhatItIs: a restore that fails on the way (here a
// workspace that cannot take a directory) says so when the image is
// whole, and that the image is corrupt when it is not: the failure was
// the damage's.
func TestDamageNamedForWhatItIs(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprint("damaged=", damaged), func(t *testing.T) {
			_, ws := tree(t)
			root := t.TempDir()
			written(t, root, "s-1", ws, 8<<20)
			if damaged {
				// In big.bin's contents, before sub/.
				if err := flip(filepath.Join(root, "s-1", filesName), 512*3+1000); err != nil {
					t.Fatal(err)
				}
			}
			out := t.TempDir()
			if err := os.WriteFile(filepath.Join(out, "sub"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			dst, err := workspace.OpenOut(out)
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			im := opened(t, root, "s-1")
			defer im.Close()
			err = im.Restore(context.Background(), dst, 4<<20)
			if err == nil || errors.Is(err, errdefs.ErrImageCorrupt) != damaged {
				t.Errorf("got %v, want a corrupt image: %v", err, damaged)
			}
		})
	}
}

func flip(p string, at int64) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0x55
	_, err = f.WriteAt(b, at)
	return err
}

// TestHostileTarRefused: an image whose checksums were rewritten to
// match a tar with a path out of the workspace restores nothing there.
func TestHostileTarRefused(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	written(t, root, "s-3", ws, 8<<20)
	// Rewrite the image with a tar naming ../escape, checksums to match.
	dir := filepath.Join(root, "s-3")
	var tb bytes.Buffer
	writeTar(t, &tb, "../escape", "pwned")
	if err := os.WriteFile(filepath.Join(dir, filesName), tb.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rewriteSum(t, dir, tb.Bytes())
	im := opened(t, root, "s-3")
	defer im.Close()
	dst := outDir(t)
	if err := im.Restore(context.Background(), dst, 4<<20); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escape")); err == nil {
		t.Fatal("a file was written outside the workspace")
	}
}

// TestTooLargeAndChanged: a workspace over the cap is refused and leaves
// nothing behind; so is a commit refused (a quota).
func TestRefusedLeavesNothing(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	if _, err := Write(context.Background(), root, "s-4", []byte(`{}`), ws, 1<<20, nil); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
	quota := errors.New("quota")
	if _, err := Write(context.Background(), root, "s-4", []byte(`{}`), ws, 8<<20, func(int64) error { return quota }); !errors.Is(err, quota) {
		t.Errorf("commit refused: %v", err)
	}
	if _, err := Write(context.Background(), root, "../x", []byte(`{}`), ws, 8<<20, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad id: %v", err)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestDiskFull: a pause onto a full disk is ErrUnavailable (the session
// keeps running) and leaves nothing behind.
func TestDiskFull(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs")
	_, ws := tree(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=256k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(root, unix.MNT_DETACH)
	_, err := Write(context.Background(), root, "s-5", []byte(`{}`), ws, 8<<20, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "disk") {
		t.Fatalf("got %v", err)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestCrashLeavesAllOrNothing: a pause stopped at any point (the
// temporaries a kill -9 leaves) is swept by List and never read as an
// image.
func TestCrashLeavesAllOrNothing(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	written(t, root, "s-6", ws, 8<<20)
	// What a crash leaves: a temporary directory at each step.
	for i, files := range [][]string{nil, {filesName}, {filesName, metaName}} {
		d := filepath.Join(root, tmpPrefix+"s-7-"+string(rune('a'+i)))
		os.Mkdir(d, 0o700)
		for _, f := range files {
			os.WriteFile(filepath.Join(d, f), []byte("partial"), 0o600)
		}
	}
	os.Mkdir(filepath.Join(root, tmpPrefix+"rm-s-8"), 0o700)
	// A fork's copy of its live source, whole: the fork never completed.
	written(t, root, ForkID("s-9"), ws, 8<<20)
	ids, swept, err := List(root)
	if err != nil || len(ids) != 1 || ids[0] != "s-6" || swept != 5 {
		t.Fatalf("List: %v, %d swept, %v", ids, swept, err)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 {
		t.Errorf("after the sweep: %v", ents)
	}
}

// TestAdmittedBeforeWriting: what a restore would expand counts in full
// before anything is written (a sparse file's holes, each name of a hard
// link): over max it is refused, and admit hears at least that much.
func TestAdmittedBeforeWriting(t *testing.T) {
	src, ws := tree(t)
	root := t.TempDir()
	if err := os.Truncate(filepath.Join(src, "a.txt"), 6<<20); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"l1", "l2", "l3"} {
		if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	admitted := int64(0)
	admit := func(n int64) error {
		if ents, _ := os.ReadDir(root); len(ents) != 0 {
			t.Errorf("admit called after writing began: %v", ents)
		}
		admitted = n
		return nil
	}
	if _, err := Write(context.Background(), root, "s-7", []byte(`{}`), ws, 16<<20, admit); !errors.Is(err, errdefs.ErrTooLarge) || admitted != 0 {
		t.Errorf("4 names of a sparse 6 MiB file under 16 MiB: %v (admitted %d)", err, admitted)
	}
	st, err := Write(context.Background(), root, "s-7", []byte(`{}`), ws, 64<<20, admit)
	if err != nil {
		t.Fatal(err)
	}
	if admitted < 4*6<<20 || admitted < st.DiskBytes {
		t.Errorf("admitted %d for an image of %d bytes", admitted, st.DiskBytes)
	}
}

// A memory image a resume refused is moved out of its image, whole, for
// the operator, with what it is (kept.json) and a link to the refused
// keeper copy: the image has no memory left, List neither lists nor
// sweeps what was kept, ListKept lists it (with its owner, expiry and
// size, a copy it links not counted) and RemoveKept removes it. One kept
// by an older airlock (no kept.json) expires keep after it was kept,
// says the session id its name holds, and that whose it is was not
// recorded (Unrecorded). kept.json is written before any memory is moved
// into the kept directory (a crash in between never leaves memory that
// says nobody's), and RemoveKept called again after it failed half-way
// (renamed, not removed) finishes.
// checked against mutants: the copy not linked, ListKept skipping a
// directory without kept.json (kept forever), the id not read from the
// name (listed without one), kept.json written after the memory is
// moved, Unrecorded not set, RemoveKept returning at a directory
// already renamed away (the leftover stayed).
func TestKeepMemory(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	if _, err := Write(context.Background(), root, "s-1", []byte(`{}`), ws, 8<<20, func(int64) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if k, err := KeepMemory(root, "s-1", time.Now(), Kept{}); k.Dir != "" || err != nil {
		t.Fatalf("an image without memory: %+v %v", k, err)
	}
	tmp, done, err := MemoryTemp(root, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(tmp, 0o700)
	os.WriteFile(filepath.Join(tmp, "checkpoint.img"), []byte("pages"), 0o600)
	if _, err := AddMemory(root, "s-1", tmp, Memory{Bytes: 5, SHA256: "x", Session: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	done()
	keepers := t.TempDir()
	copyPath := filepath.Join(keepers, "keeper-abc")
	os.WriteFile(copyPath, []byte("a damaged keeper"), 0o500)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	moves := 0
	beforeKeep = func(dir string) {
		moves++
		got, err := ListKept(root, time.Hour)
		if err != nil || len(got) != 1 || got[0].Unrecorded || got[0].Tenant != "t1" {
			t.Errorf("before a part of the memory is moved into %s: %+v %v, want its kept.json there", dir, got, err)
		}
	}
	defer func() { beforeKeep = nil }()
	k, err := KeepMemory(root, "s-1", time.Now(), Kept{Tenant: "t1", Expires: expires, Reason: "damaged"}, copyPath)
	beforeKeep = nil
	if moves != 2 {
		t.Errorf("%d parts moved, want memory.json and the checkpoint", moves)
	}
	if err != nil || k.Dir == "" {
		t.Fatalf("keep: %+v %v", k, err)
	}
	kept := k.Dir
	if b, err := os.ReadFile(filepath.Join(kept, memoryDir, "checkpoint.img")); string(b) != "pages" {
		t.Errorf("the kept checkpoint: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(kept, memoryMeta)); err != nil {
		t.Errorf("the kept memory.json: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "keeper-abc")); string(b) != "a damaged keeper" {
		t.Errorf("the kept keeper copy: %q %v", b, err)
	}
	os.Remove(copyPath) // a sweep of the keepers: the kept link stays
	if _, err := os.Stat(filepath.Join(kept, "keeper-abc")); err != nil {
		t.Errorf("the kept copy went with the keepers' one: %v", err)
	}
	im := opened(t, root, "s-1")
	defer im.Close()
	if m, err := im.Memory(); m != nil || err != nil {
		t.Errorf("the image's memory after it was kept aside: %+v %v", m, err)
	}
	ids, swept, err := List(root)
	if err != nil || len(ids) != 1 || ids[0] != "s-1" || swept != 0 {
		t.Errorf("List: %v %d %v", ids, swept, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("List took the kept memory: %v", err)
	}

	// One an older airlock kept: no kept.json.
	legacy := filepath.Join(root, keptPrefix+"s-0-20260101T000000.000Z")
	os.MkdirAll(filepath.Join(legacy, memoryDir), 0o700)
	os.WriteFile(filepath.Join(legacy, memoryDir, "p"), []byte("123"), 0o600)
	then := time.Now().Add(-time.Minute).Truncate(time.Second)
	os.Chtimes(legacy, then, then)
	all, err := ListKept(root, 2*time.Hour)
	if err != nil || len(all) != 2 {
		t.Fatalf("ListKept: %+v %v", all, err)
	}
	for _, got := range all {
		want := Kept{ID: "s-1", Tenant: "t1", Expires: expires, Reason: "damaged", Dir: kept, Bytes: k.Bytes}
		if got.Dir == legacy {
			want = Kept{ID: "s-0", Expires: then.Add(2 * time.Hour), Dir: legacy, Bytes: 3, Unrecorded: true}
		}
		if !got.Expires.Equal(want.Expires) || got.ID != want.ID || got.Tenant != want.Tenant || got.Dir != want.Dir || got.Bytes != want.Bytes || got.Reason != want.Reason || got.Unrecorded != want.Unrecorded {
			t.Errorf("listed %+v, want %+v", got, want)
		}
	}
	if k.Bytes <= 5 || k.Bytes > 5+maxMemoryMeta {
		t.Errorf("kept bytes %d: the checkpoint and memory.json, not the keeper", k.Bytes)
	}
	if err := RemoveKept(root, filepath.Join(root, "s-1")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("RemoveKept of a paused session's image: %v", err)
	}
	// A removal that failed half-way (renamed out of the way, not
	// removed): SweepRemoved finishes it.
	half := filepath.Join(root, tmpPrefix+"rm"+filepath.Base(legacy))
	if err := os.Rename(legacy, half); err != nil {
		t.Fatal(err)
	}
	for _, got := range all {
		if err := RemoveKept(root, got.Dir); err != nil {
			t.Error(err)
		}
	}
	if left, _ := ListKept(root, time.Hour); len(left) != 0 {
		t.Errorf("left: %+v", left)
	}
	if n, err := SweepRemoved(root); n != 1 || err != nil {
		t.Errorf("SweepRemoved: %d, %v", n, err)
	}
	if _, err := os.Lstat(half); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the half-removed one stayed: %v", err)
	}
}

// Keepers names the keeper of every image's memory, a resumed one's
// set aside until its first recovery point too, and refuses when an
// image's memory description cannot be read (it may name any: a sweep
// must then remove none). checked against mutants: an unreadable
// memory.json skipped, the sweep went on without its keeper; the
// resumed marker not counted (issue #21: bb was missing while s-1 was
// set aside).
func TestKeepers(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	if got, err := Keepers(filepath.Join(root, "none")); err != nil || len(got) != 0 {
		t.Fatalf("no root: %v %v", got, err)
	}
	for i, keeper := range []string{"aa", "bb", "", "-"} {
		id := fmt.Sprintf("s-%d", i)
		if _, err := Write(context.Background(), root, id, []byte(`{}`), ws, 8<<20, func(int64) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if keeper == "-" {
			continue // files only
		}
		tmp, done, err := MemoryTemp(root, id)
		if err != nil {
			t.Fatal(err)
		}
		os.Mkdir(tmp, 0o700)
		if _, err := AddMemory(root, id, tmp, Memory{Bytes: 0, SHA256: "x", Keeper: keeper, Session: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		done()
	}
	got, err := Keepers(root)
	if err != nil || len(got) != 2 || !got["aa"] || !got["bb"] {
		t.Errorf("keepers %v %v, want aa and bb", got, err)
	}
	// Set aside by a resume (issue #21): a start after a crash makes it
	// the paused session's image again, memory and all, so its keeper
	// stays; once the marker ends, it may go.
	if err := MarkResumed(root, "s-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := Keepers(root); err != nil || len(got) != 2 || !got["bb"] {
		t.Errorf("keepers with s-1 set aside %v %v, want aa and bb", got, err)
	}
	if err := EndResumed(root, "s-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := Keepers(root); err != nil || len(got) != 1 || !got["aa"] {
		t.Errorf("keepers with s-1's marker ended %v %v, want aa", got, err)
	}
	// A damaged image kept for the operator keeps its memory, and its
	// keeper (checked against a mutant: .kept-image-* skipped).
	if _, err := KeepImage(root, "s-0", time.Now(), Kept{Reason: "damaged"}); err != nil {
		t.Fatal(err)
	}
	if got, err := Keepers(root); err != nil || len(got) != 1 || !got["aa"] {
		t.Errorf("keepers with s-0 kept damaged %v %v, want aa", got, err)
	}
	keptDir := filepath.Join(root, "s-0")
	if ks, _ := filepath.Glob(filepath.Join(root, keptImagePrefix+"s-0-*")); len(ks) == 1 {
		keptDir = filepath.Join(ks[0], keptImageDir)
	} else {
		t.Fatalf("kept: %v", ks)
	}
	// An image (or a kept image's image) that is a symlink to a
	// directory elsewhere is never read through: its memory.json names
	// no keeper (checked against a mutant: Keepers without its type
	// checks, which reads zz through both).
	elsewhere := filepath.Join(t.TempDir(), "img")
	os.Mkdir(elsewhere, 0o700)
	if _, err := Write(context.Background(), elsewhere, "s-9", []byte(`{}`), ws, 8<<20, nil); err != nil {
		t.Fatal(err)
	}
	tmp, done, err := MemoryTemp(elsewhere, "s-9")
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(tmp, 0o700)
	if _, err := AddMemory(elsewhere, "s-9", tmp, Memory{SHA256: "x", Keeper: "zz", Session: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	done()
	os.Symlink(filepath.Join(elsewhere, "s-9"), filepath.Join(root, "s-9"))
	symKept := filepath.Join(root, keptImagePrefix+"s-8-20260101T000000.000Z")
	os.Mkdir(symKept, 0o700)
	os.Symlink(filepath.Join(elsewhere, "s-9"), filepath.Join(symKept, keptImageDir))
	if got, err := Keepers(root); err != nil || len(got) != 1 || !got["aa"] {
		t.Errorf("keepers with images that are symlinks %v %v, want aa", got, err)
	}
	os.Remove(filepath.Join(root, "s-9"))
	os.RemoveAll(symKept)
	if err := os.WriteFile(filepath.Join(keptDir, memoryMeta), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Keepers(root); err == nil {
		t.Errorf("an unreadable memory.json: %v, no error", got)
	}
}

// TestRedescribe: a description replaced reads back with the image's
// files and stats as they were, and restores; one that fails its checks
// is refused and left as it was, as is a missing image; what an
// interrupted replacement left beside it is ignored and replaced.
func TestRedescribe(t *testing.T) {
	_, ws := tree(t)
	root := t.TempDir()
	if _, err := Write(context.Background(), root, "s-1", []byte(`{"a":1}`), ws, 8<<20, nil); err != nil {
		t.Fatal(err)
	}
	before, err := Open(root, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	before.Close()
	dir := filepath.Join(root, "s-1")
	if err := os.WriteFile(filepath.Join(dir, tmpPrefix+metaName), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Redescribe(root, "s-1", []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	im := opened(t, root, "s-1")
	defer im.Close()
	if string(im.Session) != `{"a":2}` || im.sum != before.sum || im.Stats.Files != before.Stats.Files || im.Stats.Bytes != before.Stats.Bytes {
		t.Errorf("read back %s %+v %+v, want the files of before", im.Session, im.sum, im.Stats)
	}
	if err := im.Restore(context.Background(), outDir(t), 4<<20); err != nil {
		t.Errorf("restoring a redescribed image: %v", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 {
		t.Errorf("the image holds %d entries, want meta.json and files.tar", len(names))
	}
	if ids, swept, err := List(root); err != nil || len(ids) != 1 || swept != 0 {
		t.Errorf("List: %v %d %v", ids, swept, err)
	}
	// Damaged: refused, not replaced.
	raw, _ := os.ReadFile(filepath.Join(dir, metaName))
	damaged := bytes.Replace(raw, []byte(`"a":2`), []byte(`"a":3`), 1)
	if bytes.Equal(damaged, raw) {
		t.Fatalf("no description to damage in %s", raw)
	}
	os.WriteFile(filepath.Join(dir, metaName), damaged, 0o600)
	if err := Redescribe(root, "s-1", []byte(`{"a":4}`)); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("a damaged description replaced: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, metaName)); !bytes.Equal(got, damaged) {
		t.Error("a damaged description was rewritten")
	}
	if err := Redescribe(root, "s-2", []byte(`{}`)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a missing image: %v", err)
	}
	if err := Redescribe(root, "../s-1", []byte(`{}`)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a path for an id: %v", err)
	}
}

// TestControlNamesKept: a file whose name holds control characters
// (code may make one; no client may name it) is kept by a pause and
// written back by its resume: it made the whole image unrestorable
// before. Names that are not a workspace's paths are still refused.
// Checked against a mutant: extract's old check (workspace.Clean).
func TestControlNamesKept(t *testing.T) {
	dir := t.TempDir()
	names := []string{"a\nb", "esc\x1b[31m", "del\x7f", "lat\xe9.txt", "\xff\xfe"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws := outOf(t, dir)
	root := t.TempDir()
	written(t, root, "s-c", ws, 1<<20)
	im, dst := restoredImage(t, root, "s-c", 1<<20)
	defer im.Close()
	for _, n := range names {
		f, _, err := dst.Open(n)
		if err != nil {
			t.Errorf("%q: %v", n, err)
			continue
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != n {
			t.Errorf("%q: restored %q", n, got)
		}
	}
	for _, bad := range []string{"../x", "/abs", "a//b", "./a", "a/../b", "x/.", strings.Repeat("d/", 40) + "f"} {
		if entryPath(bad) {
			t.Errorf("entryPath(%q) accepted", bad)
		}
	}
}

// TestRemoveNeverHalf: an end that fails at any step either leaves the
// image whole and listed (an error: the caller reports the session
// paused still) or ends it durably (nil, or ErrLeftBehind: the marker
// is synced, List never lists it again, and SweepRemoved or the next
// List deletes its remains). An image of the same id written after the
// remains of an earlier end is not in the way of its own end.
func TestRemoveNeverHalf(t *testing.T) {
	_, ws := tree(t)
	boom := errors.New("EIO (injected)")
	for _, tc := range []struct {
		step  string
		ended bool
	}{{"mark", false}, {"sync", false}, {"delete", true}, {"", true}} {
		t.Run("fail-"+tc.step, func(t *testing.T) {
			root := t.TempDir()
			for i := 0; i < 2; i++ {
				written(t, root, "s-1", ws, 8<<20)
				var steps []string
				defer SetRemoveFault(func(step, name string) error {
					steps = append(steps, step)
					if step == tc.step {
						return boom
					}
					return nil
				})()
				err := Remove(root, "s-1")
				ids, _, lerr := List(root)
				if lerr != nil {
					t.Fatal(lerr)
				}
				switch {
				case !tc.ended:
					if err == nil || errors.Is(err, ErrLeftBehind) || !errors.Is(err, boom) {
						t.Fatalf("failed at %q: %v, want the failure, not ended", tc.step, err)
					}
					if len(ids) != 1 {
						t.Fatalf("failed at %q, yet the image is not listed whole: %v", tc.step, ids)
					}
					if _, err := Open(root, "s-1"); err != nil {
						t.Fatalf("failed at %q, the image is not whole: %v", tc.step, err)
					}
					SetRemoveFault(nil)
					if err := Remove(root, "s-1"); err != nil {
						t.Fatalf("again: %v", err)
					}
				case tc.step == "delete":
					if !errors.Is(err, ErrLeftBehind) {
						t.Fatalf("failed at delete: %v, want ErrLeftBehind", err)
					}
					if len(ids) != 0 {
						t.Fatalf("ended, yet listed: %v", ids)
					}
				default:
					if err != nil || len(ids) != 0 {
						t.Fatalf("Remove %v, listed %v", err, ids)
					}
				}
				if want := []string{"mark", "sync", "delete"}; len(steps) > 3 || strings.Join(steps, ",") != strings.Join(want[:len(steps)], ",") {
					t.Errorf("steps %v: the mark is synced before anything is deleted", steps)
				}
				SetRemoveFault(nil)
			}
			if _, err := SweepRemoved(root); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}
