package pauseimage

import (
	"bytes"
	"encoding/json"
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
	kept := filepath.Join(root, keptImagePrefix+id+"-"+now.UTC().Format("20060102T150405.000Z"))
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
		err = os.Rename(filepath.Join(root, id), filepath.Join(kept, keptImageDir))
	}
	if err != nil {
		os.RemoveAll(kept)
		return Kept{}, diskErr(err)
	}
	k.Bytes = keptImageBytes(kept)
	if err := syncDir(root); err != nil {
		return k, diskErr(err)
	}
	return k, nil
}

// keptImageBytes is what the image in a kept image's directory takes.
func keptImageBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(filepath.Join(dir, keptImageDir), func(p string, d os.DirEntry, err error) error {
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
	for _, p := range []string{keptPrefix, keptImagePrefix} {
		if strings.HasPrefix(name, p) {
			return p, true
		}
	}
	return "", false
}
