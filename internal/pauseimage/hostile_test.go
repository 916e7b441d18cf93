package pauseimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// editPoint rewrites the point.json of the point in dir with edit
// applied to its body, checksummed again: a point.json edited by
// someone who knows the format.
func editPoint(t *testing.T, dir string, edit func(b *pointBody)) {
	t.Helper()
	p := filepath.Join(dir, livePoint)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodePoint(raw)
	if err != nil {
		t.Fatal(err)
	}
	edit(&b)
	raw, err = encodePoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// editPointRaw rewrites the body of the point.json in dir as text
// (edit's), checksummed again: what JSON the encoder never writes.
func editPointRaw(t *testing.T, dir string, edit func(body string) string) {
	t.Helper()
	p := filepath.Join(dir, livePoint)
	raw, _ := os.ReadFile(p)
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	body := []byte(edit(string(env.Body)))
	h := sha256.Sum256(body)
	b, _ := json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: body})
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recoverWithin runs Recover of id under root and fails the test if it
// does not return in a while (a FIFO opened for reading waits for a
// writer for ever).
func recoverWithin(t *testing.T, root, id string, max int64) (Point, error) {
	t.Helper()
	type result struct {
		p   Point
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, _, err := Recover(context.Background(), root, id, max, func(p Point) ([]byte, error) { return []byte(`{}`), nil })
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		return r.p, r.err
	case <-time.After(time.Minute):
		t.Fatal("Recover hangs")
		return Point{}, nil
	}
}

// TestLiveHostilePointRefused: a recovery point damaged or edited on the
// disk (point.json truncated, emptied, garbage, a FIFO or a symlink;
// entries with "..", absolute paths, huge or negative sizes, twice the
// same name, bytes that are not UTF-8, a staged name with a "/" or
// ".."; its tree/ or stage/ replaced by a symlink to a host directory;
// a file of tree/ replaced by a symlink to a host file, a FIFO; the
// point's own directory a symlink) is refused as corrupt (ErrImageCorrupt)
// and left in place, whole, for the caller to keep aside: no panic, no
// hang, no image made, nothing of the host read, moved or removed. A
// point over max is ErrTooLarge, left in place too. Checked against
// mutants: tree/ and stage/ opened following symlinks (workspace.OpenOut:
// the host directory's files removed, the host file moved into the
// image), the checks of the staged names and of twice the same name
// removed (the image is made), the refusal of what is neither a file nor
// a directory in tree/ removed (the FIFO is removed and the point
// recovered without its file: no, refused as missing; kept as evidence
// now).
func TestLiveHostilePointRefused(t *testing.T) {
	_, _, root, _ := liveWith(t, "s-h")
	secret := "root:$6$secret-hash:19000:0:99999:7:::"
	hostFile := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "shadow")
		os.WriteFile(p, []byte(secret), 0o600)
		return p
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string) (check func(t *testing.T))
		want   error
	}{
		{"point.json empty", func(t *testing.T, dir string) func(*testing.T) {
			os.WriteFile(filepath.Join(dir, livePoint), nil, 0o600)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"point.json truncated", func(t *testing.T, dir string) func(*testing.T) {
			p := filepath.Join(dir, livePoint)
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()/2)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"point.json garbage", func(t *testing.T, dir string) func(*testing.T) {
			os.WriteFile(filepath.Join(dir, livePoint), []byte("\x00\xff{{{not json"), 0o600)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"point.json of another version", func(t *testing.T, dir string) func(*testing.T) {
			os.WriteFile(filepath.Join(dir, livePoint), []byte(`{"version":2,"sha256":"","body":{}}`), 0o600)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"point.json a FIFO", func(t *testing.T, dir string) func(*testing.T) {
			os.Remove(filepath.Join(dir, livePoint))
			unix.Mkfifo(filepath.Join(dir, livePoint), 0o600)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"point.json a symlink to a whole point.json", func(t *testing.T, dir string) func(*testing.T) {
			p := filepath.Join(dir, livePoint)
			whole := filepath.Join(t.TempDir(), "point.json")
			os.Rename(p, whole)
			os.Symlink(whole, p)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a path with ..", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries[0].Path = "../../etc/shadow" })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a path with .. inside", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries[0].Path = "sub/../../x" })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"an absolute path", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries[0].Path = "/etc/shadow" })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a path with NUL", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries[0].Path = "a\x00b" })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a huge size", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) {
				for i := range b.Entries {
					if b.Entries[i].Path == "a.txt" {
						b.Entries[i].Size = 1 << 62
					}
				}
			})
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a negative size", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) {
				for i := range b.Entries {
					if b.Entries[i].Path == "a.txt" {
						b.Entries[i].Size = -1
					}
				}
			})
			return nil
		}, errdefs.ErrImageCorrupt},
		{"one name twice", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries = append(b.Entries, b.Entries[0]) })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"one name twice, a file and a directory", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) {
				for _, e := range b.Entries {
					if e.Path == "sub" {
						b.Entries = append(b.Entries, liveEntry{Path: "sub", Size: 3})
						return
					}
				}
			})
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a name not UTF-8 in path", func(t *testing.T, dir string) func(*testing.T) {
			editPointRaw(t, dir, func(body string) string { return strings.Replace(body, `"a.txt"`, "\"a\xff.txt\"", 1) })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"both path and path_b64", func(t *testing.T, dir string) func(*testing.T) {
			editPointRaw(t, dir, func(body string) string {
				return strings.Replace(body, `"path":"a.txt"`, `"path":"a.txt","path_b64":"YS50eHQ="`, 1)
			})
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a staged name with a slash", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) { b.Entries[len(b.Entries)-1].Stage = "../../x" })
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a staged name ..", func(t *testing.T, dir string) func(*testing.T) {
			editPoint(t, dir, func(b *pointBody) {
				for i := range b.Entries {
					if b.Entries[i].Path == "a.txt" {
						b.Entries[i].Stage = ".."
					}
				}
			})
			os.Remove(filepath.Join(dir, liveTree, "a.txt"))
			return nil
		}, errdefs.ErrImageCorrupt},
		{"tree a symlink to a host directory", func(t *testing.T, dir string) func(*testing.T) {
			host := t.TempDir()
			os.WriteFile(filepath.Join(host, "victim"), []byte("keep me"), 0o600)
			os.RemoveAll(filepath.Join(dir, liveTree))
			os.Symlink(host, filepath.Join(dir, liveTree))
			return func(t *testing.T) {
				if b, err := os.ReadFile(filepath.Join(host, "victim")); err != nil || string(b) != "keep me" {
					t.Errorf("a host file beyond the symlinked tree/ was touched: %q %v", b, err)
				}
			}
		}, errdefs.ErrImageCorrupt},
		{"stage a symlink to a host directory", func(t *testing.T, dir string) func(*testing.T) {
			// The point says a.txt is staged as 1-9, of the secret's
			// size; stage/ is a host directory where 1-9 is the secret.
			host := t.TempDir()
			os.WriteFile(filepath.Join(host, "1-9"), []byte(secret), 0o600)
			editPoint(t, dir, func(b *pointBody) {
				for i := range b.Entries {
					if b.Entries[i].Path == "a.txt" {
						b.Entries[i].Stage, b.Entries[i].Size = "1-9", int64(len(secret))
					}
				}
			})
			os.Remove(filepath.Join(dir, liveTree, "a.txt"))
			os.RemoveAll(filepath.Join(dir, liveStage))
			os.Symlink(host, filepath.Join(dir, liveStage))
			return func(t *testing.T) {
				if b, err := os.ReadFile(filepath.Join(host, "1-9")); err != nil || string(b) != secret {
					t.Errorf("the host file behind the symlinked stage/ was moved: %v", err)
				}
			}
		}, errdefs.ErrImageCorrupt},
		{"a file a symlink to a host file", func(t *testing.T, dir string) func(*testing.T) {
			// Of a.txt's size: only the type can tell.
			host := hostFile(t)
			os.WriteFile(host, []byte("one"), 0o600)
			p := filepath.Join(dir, liveTree, "a.txt")
			os.Remove(p)
			os.Symlink(host, p)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a file a symlink to /etc/shadow", func(t *testing.T, dir string) func(*testing.T) {
			p := filepath.Join(dir, liveTree, "sub", "b.txt")
			os.Remove(p)
			os.Symlink("/etc/shadow", p)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a file a FIFO", func(t *testing.T, dir string) func(*testing.T) {
			p := filepath.Join(dir, liveTree, "a.txt")
			os.Remove(p)
			unix.Mkfifo(p, 0o600)
			return func(t *testing.T) {
				if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
					t.Errorf("the FIFO was not left as evidence: %v %v", fi, err)
				}
			}
		}, errdefs.ErrImageCorrupt},
		{"a FIFO beyond the point", func(t *testing.T, dir string) func(*testing.T) {
			unix.Mkfifo(filepath.Join(dir, liveTree, "extra"), 0o600)
			return nil
		}, errdefs.ErrImageCorrupt},
		{"a symlink in stage", func(t *testing.T, dir string) func(*testing.T) {
			os.Symlink(hostFile(t), filepath.Join(dir, liveStage, "1-0"))
			return nil
		}, errdefs.ErrImageCorrupt},
		{"tree missing", func(t *testing.T, dir string) func(*testing.T) {
			os.RemoveAll(filepath.Join(dir, liveTree))
			return nil
		}, errdefs.ErrImageCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := crashCopy(t, root)
			dir := LiveDir(r, "s-h")
			check := c.damage(t, dir)
			_, err := recoverWithin(t, r, "s-h", 1<<30)
			if !errors.Is(err, c.want) {
				t.Fatalf("Recover: %v, want %v", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(r, "s-h")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("an image was made of it: %v", err)
			}
			if _, err := os.Lstat(dir); err != nil {
				t.Errorf("the point was not left in place: %v", err)
			}
			noneOf(t, filepath.Join(r, "s-h"), secret)
			if check != nil {
				check(t)
			}
		})
	}

	t.Run("the point's directory a symlink", func(t *testing.T) {
		// A whole point elsewhere, named by a symlink: never recovered,
		// and listed (so that its caller keeps it aside, not skipped
		// for ever).
		r := crashCopy(t, root)
		elsewhere := filepath.Join(t.TempDir(), "p")
		os.Rename(LiveDir(r, "s-h"), elsewhere)
		os.Symlink(elsewhere, LiveDir(r, "s-h"))
		if ids, err := ListLive(r); err != nil || len(ids) != 1 || ids[0] != "s-h" {
			t.Errorf("ListLive: %v %v", ids, err)
		}
		if _, err := recoverWithin(t, r, "s-h", 1<<30); !errors.Is(err, errdefs.ErrImageCorrupt) {
			t.Fatalf("Recover: %v", err)
		}
		if _, err := os.Stat(filepath.Join(r, "s-h")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("an image was made of it: %v", err)
		}
		if _, err := os.Stat(filepath.Join(elsewhere, livePoint)); err != nil {
			t.Errorf("the point the symlink names was touched: %v", err)
		}
	})
	t.Run("over max", func(t *testing.T) {
		r := crashCopy(t, root)
		if _, err := recoverWithin(t, r, "s-h", 10); !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("Recover: %v", err)
		}
		if _, err := os.Lstat(LiveDir(r, "s-h")); err != nil {
			t.Errorf("the point was not left in place: %v", err)
		}
	})
	t.Run("whole", func(t *testing.T) {
		// The same point, undamaged, recovers (the cases above fail
		// for their damage, not for the copy).
		if _, got, err := recovered(t, crashCopy(t, root), "s-h"); err != nil || !sameFiles(got, stateA) {
			t.Errorf("recovered %v %v", short(got), err)
		}
	})
}

// TestLiveDeviceRefused: a device node in a point's tree/ (made by root
// on the host: a sandbox cannot make one) in place of a file is refused
// as corrupt, never opened, and left. Checked against a mutant: the
// refusal of what is neither a file nor a directory in tree/ removed.
func TestLiveDeviceRefused(t *testing.T) {
	testenv.RequireRoot(t, "making a device node")
	_, _, root, _ := liveWith(t, "s-d")
	r := crashCopy(t, root)
	p := filepath.Join(LiveDir(r, "s-d"), liveTree, "a.txt")
	os.Remove(p)
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))); err != nil { // /dev/zero
		t.Fatal(err)
	}
	if _, err := recoverWithin(t, r, "s-d", 1<<30); !errors.Is(err, errdefs.ErrImageCorrupt) || !strings.Contains(err.Error(), "a.txt") {
		t.Fatalf("Recover: %v", err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("the device was not left as evidence: %v %v", fi, err)
	}
}

// TestKeepPoint: a refused point is kept aside whole (whatever it holds:
// a symlink is moved, never followed), listed by ListKept with its
// tenant, reason and size, counted, and removed by RemoveKept; a start
// never lists it as a point again.
func TestKeepPoint(t *testing.T) {
	_, _, root, _ := liveWith(t, "s-k")
	r := crashCopy(t, root)
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "victim"), []byte("keep me"), 0o600)
	os.Symlink(host, filepath.Join(LiveDir(r, "s-k"), "odd"))
	now := time.Now()
	k, err := KeepPoint(r, "s-k", now, Kept{Tenant: "acme", Expires: now.Add(time.Hour), Reason: "damaged"})
	if err != nil || k.Dir == "" || k.Bytes == 0 {
		t.Fatalf("KeepPoint: %+v %v", k, err)
	}
	if ids, _ := ListLive(r); len(ids) != 0 {
		t.Errorf("still listed as a point: %v", ids)
	}
	all, err := ListKept(r, time.Hour)
	if err != nil || len(all) != 1 || all[0].ID != "s-k" || all[0].Tenant != "acme" || all[0].Reason != "damaged" || all[0].Bytes != k.Bytes || all[0].Dir != k.Dir {
		t.Fatalf("ListKept: %+v %v", all, err)
	}
	if _, err := os.Stat(filepath.Join(k.Dir, keptPointDir, livePoint)); err != nil {
		t.Errorf("the point is not kept whole: %v", err)
	}
	if c, _ := Census(r); c.Kept != 1 || c.Points != 0 {
		t.Errorf("Census: %+v", c)
	}
	if err := RemoveKept(r, k.Dir); err != nil {
		t.Fatal(err)
	}
	if all, _ := ListKept(r, time.Hour); len(all) != 0 {
		t.Errorf("after RemoveKept: %+v", all)
	}
	if b, err := os.ReadFile(filepath.Join(host, "victim")); err != nil || string(b) != "keep me" {
		t.Errorf("removing the kept point reached through its symlink: %v", err)
	}
}

// TestMarkerNotADirectoryBesideImage: a recovery point or a resumed
// marker that is not a directory (a symlink to a host directory, a
// file) beside an image of its session is never left in place
// uncounted, nor followed: Recover refuses the point as damage (its
// caller keeps it aside, counted: KeepPoint), and the stale resumed
// marker ends (ResolveResumed), the host directory untouched. Checked
// against mutants: Recover checking for an image first ended the point
// through markEnded, which failed (EISDIR) and left it; markEnded
// renaming a non-directory onto its empty marker directory failed the
// same way for the resumed marker.
func TestMarkerNotADirectoryBesideImage(t *testing.T) {
	for _, kind := range []string{"symlink", "file"} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			_, ws := tree(t)
			written(t, root, "s-m", ws, 1<<30)
			host := t.TempDir()
			victim := filepath.Join(host, "victim")
			os.WriteFile(victim, []byte("keep me"), 0o600)
			put := func(p string) {
				t.Helper()
				var err error
				if kind == "symlink" {
					err = os.Symlink(host, p)
				} else {
					err = os.WriteFile(p, []byte("odd"), 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			put(LiveDir(root, "s-m"))
			put(ResumedDir(root, "s-m"))

			_, _, err := Recover(context.Background(), root, "s-m", 1<<30, func(Point) ([]byte, error) { return []byte(`{}`), nil })
			if !errors.Is(err, errdefs.ErrImageCorrupt) {
				t.Fatalf("Recover of a point that is a %s beside an image: %v, want it refused as damage (kept aside)", kind, err)
			}
			now := time.Now()
			if k, err := KeepPoint(root, "s-m", now, Kept{Expires: now.Add(time.Hour), Reason: "damaged"}); err != nil || k.Dir == "" {
				t.Fatalf("KeepPoint: %+v %v", k, err)
			}
			if ids, _ := ListLive(root); len(ids) != 0 {
				t.Errorf("the point is left in place: %v", ids)
			}

			restored, err := ResolveResumed(root, "s-m")
			if err != nil || restored {
				t.Fatalf("ResolveResumed of a marker that is a %s beside an image: restored %v, %v", kind, restored, err)
			}
			if ids, _ := ListResumed(root); len(ids) != 0 {
				t.Errorf("the resumed marker is left in place: %v", ids)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
				t.Errorf("the host directory behind the symlink was touched: %q %v", b, err)
			}
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), rmPrefix) {
					t.Errorf("an end's remains are left: %s", e.Name())
				}
			}
			im := opened(t, root, "s-m")
			im.Close()
		})
	}
}

// Census counts a paused session once: its image, or its resumed
// marker when it has no image (one beside an image is stale). Checked
// against a mutant: both counted (as before) said 3 paused sessions.
func TestCensusCountsASessionOnce(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"s-a", resumedPrefix + "s-a", resumedPrefix + "s-b", livePrefix + "s-c"} {
		if err := os.Mkdir(filepath.Join(root, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := Census(root); err != nil || c.Images != 2 || c.Points != 1 || c.Kept != 0 {
		t.Errorf("Census: %+v %v, want 2 paused sessions (s-a, s-b) and 1 point", c, err)
	}
}
