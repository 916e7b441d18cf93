package pauseimage

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A paused session's image whose description (meta.json) is damaged
// cannot be listed as a paused session (whose it is, when it expires,
// are in it), but is never left where nothing counts or removes it: it
// is kept for the operator to inspect as a refused memory image is, in
// a directory of its own under root (keptImagePrefix, the id, the
// time) holding kept.json (Kept: whose it is when that could be read,
// when it expires, why) and the image, moved whole under "image". Its
// tenant's quota (or UnknownTenant's) counts it, and it goes when
// Kept.Expires passes (ListKept, RemoveKept).
const (
	keptImagePrefix = ".kept-image-"
	keptImageDir    = "image"
)

// KeepImage moves the image of id, which cannot be read as a paused
// session, into a kept directory of its own (see keptImagePrefix) with
// k as its kept.json, durably: kept.json first, synced, then the
// image's rename, then root synced. An error before the rename leaves
// the image where it was (and no kept directory).
func KeepImage(root, id string, now time.Time, k Kept) (Kept, error) {
	if err := checkID(id); err != nil {
		return Kept{}, err
	}
	return keepWhole(root, filepath.Join(root, id), keptImagePrefix+id, keptImageDir, id, now, k)
}

// A live session's recovery point that cannot be recovered (damaged,
// or over persistence.max_image_bytes) is kept the same way, whole,
// under keptPointPrefix (its directory moved under "point"): its files
// are never read into an image, and it is counted and expires as a
// kept image does.
const (
	keptPointPrefix = ".kept-point-"
	keptPointDir    = "point"
)

// KeepPoint moves the recovery point of id (LiveDir), which Recover
// refused, into a kept directory of its own (see keptPointPrefix) with
// k as its kept.json, as KeepImage does an image. Whatever the point
// holds (a symlink in place of its tree, a FIFO) is moved, never
// followed or opened.
func KeepPoint(root, id string, now time.Time, k Kept) (Kept, error) {
	if err := checkID(id); err != nil {
		return Kept{}, err
	}
	return keepWhole(root, LiveDir(root, id), keptPointPrefix+id, keptPointDir, id, now, k)
}

// keepWhole moves src into <root>/<name>-<now>/<sub> with k as its
// kept.json (see KeepImage).
func keepWhole(root, src, name, sub, id string, now time.Time, k Kept) (Kept, error) {
	kept := filepath.Join(root, name+"-"+now.UTC().Format("20060102T150405.000Z"))
	if err := os.Mkdir(kept, 0o700); err != nil {
		return Kept{}, diskErr(err)
	}
	k.ID, k.Dir = id, kept
	b, err := json.Marshal(k)
	if err == nil {
		err = writeSynced(filepath.Join(kept, keptMeta), bytes.NewReader(b))
	}
	if err == nil {
		err = syncDir(kept)
	}
	if err == nil {
		err = os.Rename(src, filepath.Join(kept, sub))
	}
	if err != nil {
		os.RemoveAll(kept)
		return Kept{}, diskErr(err)
	}
	k.Bytes = keptWholeBytes(kept, sub)
	if err := syncDir(root); err != nil {
		return k, diskErr(err)
	}
	return k, nil
}

// keptWholeBytes is what the regular files under sub of a kept
// directory take (never through a symlink).
func keptWholeBytes(dir, sub string) int64 {
	var n int64
	filepath.WalkDir(filepath.Join(dir, sub), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// keptKind says whether name is a kept directory's (a memory image's or
// a whole image's), and its prefix.
func keptKind(name string) (prefix string, ok bool) {
	for _, p := range []string{keptPrefix, keptImagePrefix, keptPointPrefix} {
		if strings.HasPrefix(name, p) {
			return p, true
		}
	}
	return "", false
}

// Contents is what a directory of images holds, counted without
// changing anything (Census).
type Contents struct {
	// Images: paused sessions (an image, or a resumed marker of a
	// session with none: each once); Points: live sessions' recovery
	// points; Kept: what is kept for inspection.
	Images, Points, Kept int
}

// Any says whether it holds anything.
func (c Contents) Any() bool { return c.Images+c.Points+c.Kept > 0 }

// Census counts what root holds, reading its names only (no root:
// nothing): what a server with persistence off leaves alone, and says
// so.
func Census(root string) (Contents, error) {
	var c Contents
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	for _, e := range ents {
		name := e.Name()
		_, kept := keptKind(name)
		point, isPoint := strings.CutPrefix(name, livePrefix)
		resumed, isResumed := strings.CutPrefix(name, resumedPrefix)
		switch {
		case kept:
			c.Kept++
		case isPoint && ValidID(point):
			c.Points++
		case ValidID(name) && !strings.HasPrefix(name, forkPrefix):
			c.Images++
		case isResumed && ValidID(resumed) && !names[resumed]:
			// A resumed session's image set aside: its session, once
			// (one beside an image of it is stale: ResolveResumed).
			c.Images++
		}
	}
	return c, nil
}
