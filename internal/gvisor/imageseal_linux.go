package gvisor

import (
	"context"
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
// stray process, a damaged file system. So a sealed image's identity is
// recorded by a check that sums it: the directory's and each file's
// device, inode, size, mode, modification and change times. A restore
// whose image still has that identity skips the sum; any other sums it
// in full, as every restore of an unsealed image does. Writing a file
// through write(2), truncating, renaming, linking or chmodding it sets
// its change time to the clock's time of that change, which the kernel
// alone sets. The identity is recorded only when the change times are
// more than sealSettled older than the check that summed the content
// (what the clock's coarse tick could hide, as git's "racily clean"
// entries): a change after the check can then not leave them as they
// were. A freshly written image is not settled, so Seal sums nothing
// (the checkpoint has just summed it: its digest is what Seal is given)
// and arranges one check for when its change times have settled; a
// restore before that sums the image, as one of an unsealed image does.
// Not caught, as a sum right before runsc reads the image would not
// catch them either: a root process that writes through a shared mapping
// it made before the check, or one in the middle of a write when it
// began.

// sealSettled: how much older than the check a sealed image's change
// times must be for its identity to be recorded.
const sealSettled = time.Second

// sealNow is the clock the settling is judged by (a test's is ahead).
var sealNow = time.Now

// sealAfter is the timer Seal's check waits on (a test's may never fire).
var sealAfter = time.After

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
	// stop ends the check Seal arranged (settle); done is closed when it
	// has ended.
	stop context.CancelFunc
	done chan struct{}
}

// identify reads dir's identity (never following a link, nor opening
// what is not a plain directory: openImage).
func identify(dir string) (imageID, error) {
	d, err := openImage(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	dfd := int(d.Fd())
	var id imageID
	add := func(name string, st *unix.Stat_t) {
		id = append(id, fileID{name: name, dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim, ctime: st.Ctim})
	}
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, err
	}
	add("", &st)
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for _, name := range names {
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
		add(name, &st)
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

// Seal marks the image in dir, whose digest is want (as the checkpoint
// that wrote it has just summed it), as one nothing but root on the host
// can change (see above). It sums nothing itself: one check sums the
// image once its change times have settled (until ctx ends, or Forget),
// recording its identity, and later restores of it skip the sum while
// that identity stays as it was then. Forget undoes it.
func (h *Host) Seal(ctx context.Context, dir string, want Checkpoint) error {
	id, err := identify(dir)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	s := &imageSeal{want: want, stop: stop, done: make(chan struct{})}
	h.sealMu.Lock()
	old := h.sealed[dir]
	if h.sealed == nil {
		h.sealed = map[string]*imageSeal{}
	}
	h.sealed[dir] = s
	h.sealMu.Unlock()
	old.end()
	go func() {
		defer close(s.done)
		defer stop()
		select {
		case <-sealAfter(id.settlesIn()):
			h.verifyCheckpoint(ctx, dir, want) // a mismatch is the next restore's to find
		case <-ctx.Done():
		}
	}()
	return nil
}

// settlesIn is how long until every change time of id is more than
// sealSettled old (a tick more, as the kernel's clock may lag sealNow's).
func (id imageID) settlesIn() time.Duration {
	var last time.Time
	for _, f := range id {
		if t := time.Unix(f.ctime.Unix()); t.After(last) {
			last = t
		}
	}
	return last.Add(sealSettled + 10*time.Millisecond).Sub(sealNow())
}

// end stops s's check and waits until it has ended (nil: nothing).
func (s *imageSeal) end() {
	if s != nil {
		s.stop()
		<-s.done
	}
}

// Forget unseals dir (its image is removed, or not to be trusted).
func (h *Host) Forget(dir string) {
	h.sealMu.Lock()
	s := h.sealed[dir]
	delete(h.sealed, dir)
	h.sealMu.Unlock()
	s.end()
}

// Sealed reports whether dir is sealed (Seal, and no Forget since).
func (h *Host) Sealed(dir string) bool {
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	return h.sealed[dir] != nil
}

// Settled reports whether dir is sealed and a check has recorded its
// identity: its restores skip the sum while that identity stays.
func (h *Host) Settled(dir string) bool {
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	s := h.sealed[dir]
	return s != nil && s.id != nil
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
// nothing), recording the identity of a sealed one that matches. summed
// says which.
func (h *Host) verifyCheckpoint(ctx context.Context, dir string, want Checkpoint) (summed bool, err error) {
	if h.unchanged(dir, want) {
		return false, nil
	}
	begun := sealNow()
	before, idErr := identify(dir)
	if err := checkDigest(ctx, dir, want); err != nil {
		return true, err
	}
	if idErr != nil || !before.settled(begun) {
		return true, nil
	}
	after, err := identify(dir)
	if err != nil || !slices.Equal(before, after) {
		return true, nil
	}
	h.sealMu.Lock()
	defer h.sealMu.Unlock()
	if s := h.sealed[dir]; s != nil && s.want == want {
		s.id = before
	}
	return true, nil
}
