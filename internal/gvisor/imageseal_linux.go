package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Sealed images. A pool image (gvisor.pool_image) is restored over and
// over, and summing its 76 MB took 80–140 ms of the server's CPU per
// restore. Nothing the sandboxes run can write it: runsc checkpoint
// writes it, as root, from a sandbox that never ran a client's code and
// is gone once the checkpoint returns (the pool closes it before it seals
// the image); it lives owner-only in the host's private directory; and a
// restore's runsc opens it read-only, handing the Sentry only read-only
// descriptors. What could change it is root on the host: an operator, a
// stray process, a damaged file system. So a sealed image is summed once
// more, and its identity recorded then: the directory's and each file's
// device, inode, size, mode, modification and change times. A restore
// whose image still has that identity skips the sum; any other sums it
// in full, as every restore of an unsealed image does. Writing a file
// through write(2), truncating, renaming, linking or chmodding it sets
// its change time to the clock's time of that change, which the kernel
// alone sets. The identity is recorded only when the change times are
// more than sealSettled older than the check that summed the content
// (what the clock's coarse tick could hide, as git's "racily clean"
// entries): a change after the check can then not leave them as they
// were. Not caught, as a sum right before runsc reads the image would not
// catch them either: a root process that writes through a shared mapping
// it made before the check, or one in the middle of a write when it
// began.

// sealSettled: how much older than the check a sealed image's change
// times must be for its identity to be recorded.
const sealSettled = time.Second

// sealNow is the clock the settling is judged by (a test's is ahead).
var sealNow = time.Now

// imageID is an image directory's identity: the directory's own, then
// each entry's by name.
type imageID []fileID

type fileID struct {
	name         string
	dev, ino     uint64
	mode         uint32
	size         int64
	mtime, ctime unix.Timespec
}

// imageSeal is what Seal recorded of an image.
type imageSeal struct {
	want Checkpoint
	id   imageID // nil until a check has summed it (settled)
}

// identify reads dir's identity (never following a link).
func identify(dir string) (imageID, error) {
	var id imageID
	add := func(name, p string) error {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		id = append(id, fileID{name: name, dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim, ctime: st.Ctim})
		return nil
	}
	if err := add("", dir); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents { // sorted by name
		if err := add(e.Name(), filepath.Join(dir, e.Name())); err != nil {
			return nil, err
		}
	}
	return id, nil
}

// settled reports whether every change time of id is more than
// sealSettled before t.
func (id imageID) settled(t time.Time) bool {
	for _, f := range id {
		if !time.Unix(f.ctime.Unix()).Add(sealSettled).Before(t) {
			return false
		}
	}
	return true
}

// Seal marks the image in dir, whose digest is want, as one nothing but
// root on the host can change (see above): it sums it now (until ctx
// ends), and later restores of it skip the sum while its identity stays
// as it was then. An image that does not match want is not sealed
// (errdefs.ErrImageCorrupt). Forget undoes it.
func (h *Host) Seal(ctx context.Context, dir string, want Checkpoint) error {
	h.sealMu.Lock()
	if h.sealed == nil {
		h.sealed = map[string]*imageSeal{}
	}
	h.sealed[dir] = &imageSeal{want: want}
	h.sealMu.Unlock()
	err := h.verifyCheckpoint(ctx, dir, want)
	if err != nil {
		h.Forget(dir)
	}
	return err
}

// Forget unseals dir (its image is removed, or not to be trusted).
func (h *Host) Forget(dir string) {
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	delete(h.sealed, dir)
}

// Sealed reports whether dir is sealed (Seal, and no Forget since).
func (h *Host) Sealed(dir string) bool {
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	return h.sealed[dir] != nil
}

// unchanged reports whether dir is sealed for want and still has the
// identity its last check recorded.
func (h *Host) unchanged(dir string, want Checkpoint) bool {
	h.sealMu.Lock()
	s := h.sealed[dir]
	h.sealMu.Unlock()
	if s == nil || s.id == nil || s.want != want {
		return false
	}
	id, err := identify(dir)
	return err == nil && slices.Equal(id, s.id)
}

// verifyCheckpoint checks the image in dir against want: by its identity
// when it is sealed and unchanged since a check summed it, else by
// summing it (until ctx ends: a restore whose client left waits for
// nothing), recording the identity of a sealed one that matches.
func (h *Host) verifyCheckpoint(ctx context.Context, dir string, want Checkpoint) error {
	if h.unchanged(dir, want) {
		return nil
	}
	begun := sealNow()
	before, idErr := identify(dir)
	if err := checkDigest(ctx, dir, want); err != nil {
		return err
	}
	if idErr != nil || !before.settled(begun) {
		return nil
	}
	after, err := identify(dir)
	if err != nil || !slices.Equal(before, after) {
		return nil
	}
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	if s := h.sealed[dir]; s != nil && s.want == want {
		s.id = before
	}
	return nil
}
