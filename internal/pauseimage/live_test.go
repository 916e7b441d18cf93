package pauseimage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// files is a workspace's regular files by path (directories: "/").
type files map[string]string

// setTree makes dir hold exactly want.
func setTree(t *testing.T, dir string, want files) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	for p, c := range want {
		full := filepath.Join(dir, p)
		if c == "/" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree is what ws holds: its regular files and directories.
func readTree(t *testing.T, ws *workspace.Dir) files {
	t.Helper()
	ents, _, err := ws.List("", true)
	if err != nil {
		t.Fatal(err)
	}
	out := files{}
	for _, e := range ents {
		switch e.Type {
		case "dir":
			out[e.Path] = "/"
		case "file":
			f, _, err := ws.Open(e.Path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(f)
			f.Close()
			out[e.Path] = string(b)
		default:
			out[e.Path] = "?" + e.Type
		}
	}
	return out
}

func sameFiles(a, b files) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// recovered recovers the point of id under root and restores its image:
// what a resume after the crash would find.
func recovered(t *testing.T, root, id string) (Point, files, error) {
	t.Helper()
	pt, _, err := Recover(context.Background(), root, id, 1<<30, func(p Point) ([]byte, error) {
		return json.Marshal(map[string]any{"seq": p.Seq, "session": p.Session})
	})
	if err != nil {
		return pt, nil, err
	}
	if _, err := os.Stat(LiveDir(root, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the point is still there after Recover: %v", err)
	}
	im, dst := restoredImage(t, root, id, 1<<30)
	defer im.Close()
	return pt, readTree(t, dst), nil
}

// crashCopy copies root as a kill -9 at this moment leaves it.
func crashCopy(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	if out, err := exec.Command("cp", "-a", root+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

var (
	stateA = files{"a.txt": "one", "sub": "/", "sub/b.txt": "bee", "gone.txt": "g", "t": "/", "t/x": "x",
		"big.bin": strings.Repeat("A", 1<<20)}
	stateB = files{"a.txt": "two!", "sub": "/", "sub/b.txt": "bee", "new.txt": "n", "t": "a file now", "e": "/",
		"big.bin": strings.Repeat("B", 1<<20)}
)

// TestLiveCrashAtEveryStep: a server killed at any step of a seal
// leaves a point that recovers to the workspace of the last sealed
// operation, whole: the one before until point.json is in place, the
// new one from then on, never a mix; a session that never sealed
// leaves nothing to recover. Checked against a mutant: Recover not
// moving the staged files in (a crash after "sealed" is refused).
func TestLiveCrashAtEveryStep(t *testing.T) {
	src := t.TempDir()
	ws := outOf(t, src)
	root := t.TempDir()
	l, err := NewLive(root, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Remove()
	if _, _, err := Recover(context.Background(), crashCopy(t, root), "s-1", 1<<30, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a point never sealed: %v", err)
	}
	setTree(t, src, stateA)
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`"A"`), ws, 1<<30, nil, nil); err != nil {
		t.Fatal(err)
	}
	setTree(t, src, stateB)
	type crash struct {
		step string
		root string
	}
	var crashes []crash
	sealHook = func(step string) { crashes = append(crashes, crash{step, crashCopy(t, root)}) }
	defer func() { sealHook = nil }()
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`"B"`), ws, 1<<30, nil, nil); err != nil {
		t.Fatal(err)
	}
	sealHook = nil
	crashes = append(crashes, crash{"after", crashCopy(t, root)})
	sealed := false
	steps := map[string]int{}
	for _, c := range crashes {
		steps[c.step]++
		if c.step == "sealed" || c.step == "fsync dir" {
			sealed = true // point.json renamed in
		}
		want, seq := stateA, 1
		if sealed {
			want, seq = stateB, 2
		}
		pt, got, err := recovered(t, c.root, "s-1")
		if err != nil {
			t.Errorf("killed at %q: %v", c.step, err)
			continue
		}
		if pt.Seq != seq || !sameFiles(got, want) {
			t.Errorf("killed at %q: point %d holds %v, want point %d: %v", c.step, pt.Seq, short(got), seq, short(want))
		}
	}
	for _, s := range []string{"listed", "staged", "synced", "sealed", "removed", "moved", "applied"} {
		if steps[s] == 0 {
			t.Errorf("no crash at %q: %v", s, steps)
		}
	}
	// The running point is the new one too.
	if pt, got, err := recovered(t, crashCopy(t, root), "s-1"); err != nil || pt.Seq != 2 || !sameFiles(got, stateB) {
		t.Errorf("the live point: %d %v %v", pt.Seq, short(got), err)
	}
}

func short(f files) files {
	out := files{}
	for k, v := range f {
		if len(v) > 16 {
			v = v[:16] + "..."
		}
		out[k] = v
	}
	return out
}

// TestLiveCopiesOnlyChanges: a seal copies the files that changed since
// the last point, and none when nothing did.
func TestLiveCopiesOnlyChanges(t *testing.T) {
	src := t.TempDir()
	ws := outOf(t, src)
	root := t.TempDir()
	l, err := NewLive(root, "s-2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Remove()
	setTree(t, src, stateA)
	staged := 0
	sealHook = func(step string) {
		if step == "staged" {
			staged++
		}
	}
	defer func() { sealHook = nil }()
	seal := func() {
		t.Helper()
		if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	seal()
	if staged != 5 {
		t.Errorf("first seal copied %d files, want 5", staged)
	}
	staged = 0
	seal()
	if staged != 0 {
		t.Errorf("a seal of no change copied %d files", staged)
	}
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("changed"), 0o644)
	seal()
	if staged != 1 {
		t.Errorf("a seal of one change copied %d files", staged)
	}
}

// liveWith is a workspace holding stateA and a point sealed of it.
func liveWith(t *testing.T, id string) (src string, ws *workspace.Dir, root string, l *Live) {
	t.Helper()
	src = t.TempDir()
	ws, _ = workspace.OpenOut(src)
	t.Cleanup(func() { ws.Close() })
	root = t.TempDir()
	l, err := NewLive(root, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Remove() })
	setTree(t, src, stateA)
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
		t.Fatal(err)
	}
	return src, ws, root, l
}

// noneOf fails if anything under dir holds secret, or is not a regular
// file or directory.
func noneOf(t *testing.T, dir, secret string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.Type().IsRegular() && !d.IsDir() {
			t.Errorf("%s: a %v in the point", p, d.Type())
		}
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			if secret != "" && bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
}

// TestLiveNeverFollows: a point holds the workspace's regular files and
// directories only: a symlink to /etc/shadow (or any file of the host),
// a FIFO, a socket are left out, never followed or opened; a file
// swapped for a symlink or a FIFO while the seal runs is refused, the
// point staying at the last one. Checked against mutants: the
// workspace's open without RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH and
// O_NOFOLLOW (the swapped symlink's target is copied), and without its
// regular-file check (the FIFO is sealed as an empty a.txt).
func TestLiveNeverFollows(t *testing.T) {
	secretDir := t.TempDir()
	secret := "root:$6$secret-hash:19000:0:99999:7:::"
	target := filepath.Join(secretDir, "shadow")
	os.WriteFile(target, []byte(secret), 0o600)
	targets := []string{target}
	if _, err := os.Stat("/etc/shadow"); err == nil {
		targets = append(targets, "/etc/shadow")
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	firstLine := strings.SplitN(string(shadow), "\n", 2)[0]

	t.Run("present", func(t *testing.T) {
		src, ws, root, l := liveWith(t, "s-3")
		for i, tg := range targets {
			os.Symlink(tg, filepath.Join(src, "escape"+string(rune('0'+i))))
		}
		unix.Mkfifo(filepath.Join(src, "fifo"), 0o644)
		if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
			t.Fatal(err)
		}
		noneOf(t, root, secret)
		if firstLine != "" {
			noneOf(t, root, firstLine)
		}
		_, got, err := recovered(t, crashCopy(t, root), "s-3")
		if err != nil || !sameFiles(got, stateA) {
			t.Errorf("recovered %v %v", short(got), err)
		}
	})
	for _, swap := range []struct {
		name string
		do   func(p string) error
	}{
		{"symlink", func(p string) error { os.Remove(p); return os.Symlink(target, p) }},
		{"fifo", func(p string) error { os.Remove(p); return unix.Mkfifo(p, 0o644) }},
	} {
		t.Run("swapped for a "+swap.name, func(t *testing.T) {
			src, ws, root, l := liveWith(t, "s-4")
			os.WriteFile(filepath.Join(src, "a.txt"), []byte("changed"), 0o644)
			sealHook = func(step string) {
				if step == "listed" {
					swap.do(filepath.Join(src, "a.txt"))
				}
			}
			defer func() { sealHook = nil }()
			_, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil)
			sealHook = nil
			if err == nil {
				t.Fatal("a seal that met a swapped file succeeded")
			}
			noneOf(t, root, secret)
			pt, got, rerr := recovered(t, crashCopy(t, root), "s-4")
			if rerr != nil || pt.Seq != 1 || !sameFiles(got, stateA) {
				t.Errorf("recovered point %d: %v %v", pt.Seq, short(got), rerr)
			}
			if pt.Behind == "" {
				t.Errorf("the point does not say it is behind")
			}
		})
	}
}

// TestLiveBounded: a workspace whose files come to more than max (a
// sparse file counts in full) is not sealed; the last point stays and
// says why. Checked against a mutant: no size check (the 64 MiB sparse
// file is copied in full).
func TestLiveBounded(t *testing.T) {
	src, ws, root, l := liveWith(t, "s-5")
	f, _ := os.Create(filepath.Join(src, "sparse"))
	f.Truncate(64 << 20)
	f.Close()
	_, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 4<<20, nil, nil)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
	pt, got, err := recovered(t, crashCopy(t, root), "s-5")
	if err != nil || pt.Seq != 1 || !sameFiles(got, stateA) || !strings.Contains(pt.Behind, "more than") {
		t.Errorf("recovered point %d (behind %q): %v %v", pt.Seq, pt.Behind, short(got), err)
	}
}

// TestLiveBoundedWhileCopied: files that grow after the listing (code
// still running in the sandbox: here, each grown sparse to 3 MiB, each
// under the cap, together over it) are not copied past the cap: the
// seal is refused, nothing it staged stays, and the last point stands
// saying why. Checked against a mutant: each file bounded by the cap
// alone (9 MiB copied, the point sealed over its 4 MiB).
func TestLiveBoundedWhileCopied(t *testing.T) {
	src, ws, root, l := liveWith(t, "s-8")
	grown := []string{"a.txt", "sub/b.txt", "gone.txt"}
	for _, p := range grown {
		if err := os.WriteFile(filepath.Join(src, p), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sealHook = func(step string) {
		if step != "listed" {
			return
		}
		for _, p := range grown {
			os.Truncate(filepath.Join(src, p), 3<<20)
		}
	}
	defer func() { sealHook = nil }()
	_, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 4<<20, nil, nil)
	sealHook = nil
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "grew") {
		t.Fatalf("files grown past the cap while copied: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(LiveDir(root, "s-8"), liveStage)); err != nil || len(ents) != 0 {
		t.Errorf("staged files left: %v %v", ents, err)
	}
	pt, got, err := recovered(t, crashCopy(t, root), "s-8")
	if err != nil || pt.Seq != 1 || !sameFiles(got, stateA) || !strings.Contains(pt.Behind, "grew") {
		t.Errorf("recovered point %d (behind %q): %v %v", pt.Seq, pt.Behind, short(got), err)
	}
}

// TestLiveDamaged: a point whose files the disk lost (a file of tree/
// truncated) or whose point.json is damaged is refused and left for
// the operator; one superseded by a pause image is removed.
func TestLiveDamaged(t *testing.T) {
	_, _, root, _ := liveWith(t, "s-6")
	c := crashCopy(t, root)
	os.Truncate(filepath.Join(LiveDir(c, "s-6"), liveTree, "a.txt"), 1)
	if _, _, err := recovered(t, c, "s-6"); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("a truncated file: %v", err)
	}
	if _, err := os.Stat(LiveDir(c, "s-6")); err != nil {
		t.Errorf("a damaged point was not left: %v", err)
	}
	c = crashCopy(t, root)
	p := filepath.Join(LiveDir(c, "s-6"), livePoint)
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte("a.txt"), []byte("A.txt"), 1), 0o600)
	if _, _, err := recovered(t, c, "s-6"); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("an edited point.json: %v", err)
	}
	c = crashCopy(t, root)
	os.Mkdir(filepath.Join(c, "s-6"), 0o700)
	if _, _, err := Recover(context.Background(), c, "s-6", 1<<30, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a point beside its pause image: %v", err)
	}
	if _, err := os.Stat(LiveDir(c, "s-6")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a point beside its pause image stays: %v", err)
	}
	if ids, _ := ListLive(root); len(ids) != 1 || ids[0] != "s-6" {
		t.Errorf("ListLive: %v", ids)
	}
}

// TestLiveFromImage: a resumed session's first point is made of the
// image it was restored from, reading nothing of its workspace, and
// recovers to those files; a workspace that no longer matches the
// listing it is made of is refused (the caller copies instead).
func TestLiveFromImage(t *testing.T) {
	src := t.TempDir()
	setTree(t, src, stateA)
	ws := outOf(t, src)
	root := t.TempDir()
	written(t, root, "s-7", ws, 1<<30)
	im, dst := restoredImage(t, root, "s-7", 1<<30)
	defer im.Close()
	ents, truncated, _ := dst.List("", true)
	for _, bad := range []bool{true, false} {
		f, err := im.Archive()
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLive(t.TempDir(), "s-7")
		if err != nil {
			t.Fatal(err)
		}
		use := ents
		if bad {
			use = append([]workspace.Entry(nil), ents...)
			for i := range use {
				if use[i].Path == "a.txt" {
					use[i].Size++
				}
			}
		}
		_, err = l.SealFromImage(context.Background(), time.Now(), []byte(`{}`), use, truncated, f, 1<<30, nil)
		f.Close()
		if bad {
			if !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("a listing the image does not match: %v", err)
			}
			l.Remove()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		root2 := filepath.Dir(l.dir)
		if _, got, err := recovered(t, crashCopy(t, root2), "s-7"); err != nil || !sameFiles(got, stateA) {
			t.Errorf("recovered %v %v", short(got), err)
		}
		// The next seal copies only what changed since.
		staged := 0
		sealHook = func(s string) {
			if s == "staged" {
				staged++
			}
		}
		if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), dst, 1<<30, nil, nil); err != nil || staged != 0 {
			t.Errorf("the next seal of no change: %d copied, %v", staged, err)
		}
		sealHook = nil
		l.Remove()
	}
}

// TestLiveEndDuringSeal (issue #21): a point ended (End: its session
// deleted) at any step of a seal under way is never written again: the
// seal fails with ErrGone, nothing is left to recover (as a kill at
// that moment would find it) and Remove deletes the remains. Checked
// against a mutant: writePoint not refusing an ended point (the seal
// failed on its disk instead, not ErrGone).
func TestLiveEndDuringSeal(t *testing.T) {
	for _, at := range []string{"listed", "staged", "synced"} {
		t.Run(at, func(t *testing.T) {
			src, ws, root, l := liveWith(t, "s-end")
			setTree(t, src, stateB)
			var endErr error
			var crashed string
			sealHook = func(step string) {
				if step == at && crashed == "" {
					endErr = l.End()
					crashed = crashCopy(t, root)
				}
			}
			defer func() { sealHook = nil }()
			_, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil)
			sealHook = nil
			if endErr != nil {
				t.Fatal(endErr)
			}
			if !errors.Is(err, errdefs.ErrGone) {
				t.Errorf("a seal of an ended point: %v, want gone", err)
			}
			for _, dir := range []string{root, crashed} {
				if ids, _ := ListLive(dir); len(ids) != 0 {
					t.Errorf("ended, the point is still listed: %v", ids)
				}
				if _, _, err := Recover(context.Background(), dir, "s-end", 1<<30, nil); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("ended, its recovery: %v", err)
				}
			}
			if err := l.Remove(); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Errorf("after Remove: %v", ents)
			}
		})
	}
}

// TestLiveApplyCutShort (issue #21): a seal whose apply fails midway (a
// disk failing as staged files are moved into tree/) leaves nothing
// staged behind: put right at once when it can be, else by the next
// seal before it copies anything, which then copies only what changed
// (nothing is kept twice: stage/ ends empty, tree/ the workspace); the
// point sealed meanwhile recovers whole. Checked against a mutant: the
// apply's failure left as before (the next seal copied every file
// again and the first one's staged files stayed in stage/).
func TestLiveApplyCutShort(t *testing.T) {
	for _, c := range []struct {
		name  string
		fails int // moves that fail
	}{{"put right at once", 1}, {"put right by the next seal", 2}} {
		t.Run(c.name, func(t *testing.T) {
			src, ws, root, l := liveWith(t, "s-apply")
			dir := LiveDir(root, "s-apply")
			setTree(t, src, stateB)
			failed := 0
			moveFault = func() error {
				if failed < c.fails {
					failed++
					return errors.New("injected: the disk fails")
				}
				return nil
			}
			defer func() { moveFault = nil }()
			_, err := l.Seal(context.Background(), time.Now(), []byte(`"B"`), ws, 1<<30, nil, nil)
			if c.fails == 1 && err != nil {
				t.Fatalf("a seal whose apply was put right at once: %v", err)
			}
			if c.fails > 1 && err == nil {
				t.Fatal("a seal whose apply could not be put right says nothing")
			}
			if _, got, err := recovered(t, crashCopy(t, root), "s-apply"); err != nil || !sameFiles(got, stateB) {
				t.Errorf("recovered after the cut-short apply: %v %v", short(got), err)
			}
			if c.fails == 1 {
				if left := leftIn(t, filepath.Join(dir, liveStage)); len(left) != 0 {
					t.Errorf("staged files left after the apply was put right: %v", left)
				}
			}
			moveFault = nil
			stateC := maps.Clone(stateB)
			stateC["a.txt"] = "three"
			if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("three"), 0o644); err != nil {
				t.Fatal(err)
			}
			staged := 0
			sealHook = func(step string) {
				if step == "staged" {
					staged++
				}
			}
			defer func() { sealHook = nil }()
			if _, err := l.Seal(context.Background(), time.Now(), []byte(`"C"`), ws, 1<<30, nil, nil); err != nil {
				t.Fatal(err)
			}
			sealHook = nil
			if staged != 1 {
				t.Errorf("the next seal copied %d files, want 1 (a.txt)", staged)
			}
			if left := leftIn(t, filepath.Join(dir, liveStage)); len(left) != 0 {
				t.Errorf("staged files left after the next seal: %v", left)
			}
			tree, _ := workspace.OpenOut(filepath.Join(dir, liveTree))
			defer tree.Close()
			if got := readTree(t, tree); !sameFiles(got, stateC) {
				t.Errorf("tree/ after the next seal: %v, want %v", short(got), short(stateC))
			}
		})
	}
}

// leftIn is what dir holds, by name.
func leftIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestLiveSyncsWhatItWrote: a seal fsyncs the files it staged and
// stage/ before its point is renamed in, point.json and its directory,
// and, once the staged files are moved, the directories of tree/ they
// went to (and made) before it returns: nothing else (never the whole
// filesystem, never a directory it did not write). Checked against
// mutants: the staged files not fsynced before the point; the
// directories moved into not fsynced after the apply.
func TestLiveSyncsWhatItWrote(t *testing.T) {
	src, ws, root, l := liveWith(t, "s-sync")
	stateC := files{"sub/c.txt": "c", "deep": "/", "deep/er": "/", "deep/er/f": "f"}
	for k, v := range stateB {
		stateC[k] = v
	}
	setTree(t, src, stateC)
	var steps []string
	sealHook = func(step string) { steps = append(steps, step) }
	defer func() { sealHook = nil }()
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
		t.Fatal(err)
	}
	sealHook = nil
	at := func(step string) int {
		t.Helper()
		i := slices.Index(steps, step)
		if i < 0 {
			t.Errorf("no %q in %v", step, steps)
		}
		return i
	}
	sealed, applied := at("sealed"), at("applied")
	want := map[string]bool{}
	for _, e := range l.body.Entries {
		if e.Stage != "" {
			want["fsync stage/"+e.Stage] = true
			if i := at("fsync stage/" + e.Stage); i > sealed {
				t.Errorf("%s (staged as %s) fsynced after the point was sealed", e.Path, e.Stage)
			}
		}
	}
	if len(want) != 7 {
		t.Errorf("%d files staged, want 7 (setTree rewrites every file)", len(want))
	}
	for _, s := range []string{"fsync stage/", "fsync point", "fsync dir"} {
		want[s] = true
		if at(s) > sealed {
			t.Errorf("%q after the point was sealed: %v", s, steps)
		}
	}
	for _, d := range []string{"", "sub", "deep", "deep/er"} {
		s := "fsync tree/" + d
		want[s] = true
		if i := slices.Index(steps[sealed:], s); i < 0 || sealed+i > applied {
			t.Errorf("%q not between the seal and the apply's end: %v", s, steps)
		}
	}
	for _, s := range steps {
		if strings.HasPrefix(s, "fsync ") && !want[s] && s != "fsync stage/" {
			t.Errorf("fsynced %q, which the seal did not write", s)
		}
	}
	if pt, got, err := recovered(t, crashCopy(t, root), "s-sync"); err != nil || !sameFiles(got, stateC) {
		t.Errorf("recovered %d %v %v", pt.Seq, short(got), err)
	}
}

// TestLiveAdmit: a seal asks admit for what it is about to write (the
// changed files' bytes, the point's files once sealed) before writing
// anything; a refusal leaves the point as it was and says it is behind
// once: the refused seals after it do not rewrite point.json (a point
// kept behind costs no write per operation). Bytes is what the point
// takes. Checked against a mutant: Behind written at every refused
// seal.
func TestLiveAdmit(t *testing.T) {
	src, ws, root, l := liveWith(t, "s-admit")
	var files int64
	for _, c := range stateA {
		if c != "/" {
			files += int64(len(c))
		}
	}
	if b := l.Bytes(); b <= files || b > files+4096 {
		t.Errorf("the point takes %d bytes, want its files' %d and point.json", b, files)
	}
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("changed!"), 0o644)
	var asked []Cost
	refuse := fmt.Errorf("%w: over budget", errdefs.ErrQuota)
	admit := func(c Cost) error { asked = append(asked, c); return refuse }
	writes := 0
	sealHook = func(step string) {
		if step == "fsync point" || step == "staged" {
			writes++
		}
	}
	defer func() { sealHook = nil }()
	for i := range 3 {
		_, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, admit, nil)
		if !errors.Is(err, refuse) {
			t.Fatalf("seal %d: %v", i, err)
		}
	}
	if writes != 1 {
		t.Errorf("3 refused seals wrote %d times, want once (Behind)", writes)
	}
	want := Cost{Copy: 8, Held: files - 3 + 8}
	for _, c := range asked {
		if c.Copy != want.Copy || c.Held != want.Held || c.Point < 256 {
			t.Errorf("asked %+v, want %+v", c, want)
		}
	}
	pt, got, err := recovered(t, crashCopy(t, root), "s-admit")
	if err != nil || pt.Seq != 1 || !sameFiles(got, stateA) || !strings.Contains(pt.Behind, "over budget") {
		t.Errorf("after refusals: point %d %q %v %v", pt.Seq, pt.Behind, short(got), err)
	}
	sealHook = nil
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, func(Cost) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if pt := l.Sealed(); pt.Seq != 2 || pt.Behind != "" {
		t.Errorf("admitted: %+v", pt)
	}
}

// TestLiveOddNames: a recovery point keeps files whose names are not
// UTF-8 or hold control characters, sealed from a workspace and from a
// pause image, and recovers them under their own names (a JSON string
// replaced the bytes with U+FFFD: every seal succeeded, and the
// recovery found the file missing and kept nothing). Checked against a
// mutant: liveEntry without its MarshalJSON (the recovery refused
// "lat\ufffd.txt" as missing).
func TestLiveOddNames(t *testing.T) {
	want := files{"lat\xe9.txt": "latin-1", "d\xff": "/", "d\xff/f\x1b": "esc", "ok.txt": "ok"}
	src := t.TempDir()
	setTree(t, src, want)
	ws := outOf(t, src)
	root := t.TempDir()
	l, err := NewLive(root, "s-odd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Seal(context.Background(), time.Now(), []byte(`{}`), ws, 1<<30, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, got, err := recovered(t, crashCopy(t, root), "s-odd"); err != nil || !sameFiles(got, want) {
		t.Errorf("sealed from the workspace, recovered %q %v", got, err)
	}
	l.Remove()

	written(t, root, "s-odd", ws, 1<<30)
	im, dst := restoredImage(t, root, "s-odd", 1<<30)
	defer im.Close()
	if got := readTree(t, dst); !sameFiles(got, want) {
		t.Errorf("restored from a pause image: %q", got)
	}
	ents, truncated, _ := dst.List("", true)
	f, err := im.Archive()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root2 := t.TempDir()
	l2, err := NewLive(root2, "s-odd")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Remove()
	if _, err := l2.SealFromImage(context.Background(), time.Now(), []byte(`{}`), ents, truncated, f, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if _, got, err := recovered(t, crashCopy(t, root2), "s-odd"); err != nil || !sameFiles(got, want) {
		t.Errorf("sealed from a pause image, recovered %q %v", got, err)
	}
}

// TestLiveEntryCost: what a seal asks admit for point.json covers each
// entry as encoded there, escapes and base64 included. Checked against
// a mutant: the path's length plus 64 (a name of control characters
// is escaped 6 bytes a byte).
func TestLiveEntryCost(t *testing.T) {
	for _, p := range []string{"a.txt", strings.Repeat("\x01", 200), strings.Repeat("<&>", 80),
		strings.Repeat("\"\\", 100), strings.Repeat("\u2028", 60), strings.Repeat("\xe9", 250), "d/\x1b[31m"} {
		e := liveEntry{Path: p, Mode: 0o100644, Size: 1 << 40, Stage: "2147483647-2147483647"}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := entryCost(p); got < int64(len(raw))+1 {
			t.Errorf("%q: costed %d, takes %d", clip(p), got, len(raw)+1)
		}
	}
}
