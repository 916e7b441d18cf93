package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/privdir"
)

// The keeper's copies: sandboxes bind a copy of the keeper binary, named
// by a digest of its content, which nothing rewrites under them. A
// checkpoint records which copy its sandbox ran, and a restore binds that
// copy again, never another: a restored keeper's code is read from the
// file bound at its path, and with another build's it crashes at once
// (measured: runsc restores without comparing the file, and the keeper
// dies of SIGSEGV), or worse, runs a mix of two builds. So a copy stays as
// long as a checkpoint may need it (SweepKeepers), in a directory that
// outlives the server as the paused sessions do (Options.KeeperDir).

// keeperPrefix names a copy: keeperPrefix + the hex SHA-256 of its content.
const keeperPrefix = "keeper-"

// keeperGrace: a copy used (made, or found whole) this recently is never
// swept, whatever the references say: a doctor or server of its version
// may be starting sandboxes with it.
const keeperGrace = time.Hour

// copyKeeper copies the keeper binary src into dir, once per version of
// it (a digest of its content names the copy: a size and modification
// time would name two builds alike where a build system fixes the times),
// and returns the copy's path and digest. A copy already there is read
// again and replaced if its content is not its name's; a sound one is
// touched (see keeperGrace).
func copyKeeper(dir, src string) (path, digest string, err error) {
	in, err := os.Open(src)
	if err != nil {
		return "", "", err
	}
	defer in.Close()
	h := sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return "", "", err
	}
	digest = hex.EncodeToString(h.Sum(nil))
	if err := privdir.Ensure(dir, 0o700); err != nil {
		return "", "", err
	}
	dst := filepath.Join(dir, keeperPrefix+digest)
	// A copy another user could write is made again (rename replaces
	// it: the directory is the server's).
	if _, err := privdir.File(dst); err == nil && sumFile(context.Background(), dst) == digest {
		now := time.Now()
		return dst, digest, os.Chtimes(dst, now, now)
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	// Summed again as copied: the copy is of the content its name says.
	h.Reset()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		tmp.Close()
		return "", "", err
	}
	if hex.EncodeToString(h.Sum(nil)) != digest {
		tmp.Close()
		return "", "", fmt.Errorf("%s changed while it was copied", src)
	}
	if err := tmp.Chmod(0o500); err != nil {
		tmp.Close()
		return "", "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", "", err
	}
	if err := tmp.Close(); err != nil {
		return "", "", err
	}
	return dst, digest, os.Rename(tmp.Name(), dst)
}

// sumFile is the hex SHA-256 of the regular file p ("" when it is none,
// or cannot be read to its end before ctx ends).
func sumFile(ctx context.Context, p string) string {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	h := sha256.New()
	if _, err := copyUntil(ctx, h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrKeeperGone: the keeper copy a checkpoint was taken with is missing
// or changed, or the checkpoint does not say which it was: it cannot be
// restored here (never with another copy).
var ErrKeeperGone = errors.New("gvisor: the keeper a checkpoint was taken with is gone")

// KeeperError refuses a restore for its keeper copy (ErrKeeperGone).
// A copy that is missing (or a digest that names none) leaves nothing
// to inspect (errdefs.ErrUnavailable); one that is there but refused,
// damaged or writable by another user, is named by Copy and is
// errdefs.ErrImageCorrupt: its memory image and the copy are kept for
// the operator, as a corrupt image is.
type KeeperError struct {
	// Digest names the copy the checkpoint was taken with.
	Digest string
	// Copy is the refused copy's path ("": missing).
	Copy string
	// what says what is wrong with it, for the client; detail, for
	// the log.
	what   string
	detail error
}

func (e *KeeperError) public() error {
	short := e.Digest
	if len(short) > 12 {
		short = short[:12]
	}
	msg := fmt.Sprintf("the airlock keeper binary it was paused with (%s) %s on this server", short, e.what)
	if e.Digest == "" {
		msg = "it does not say which airlock keeper binary it was paused with (paused by an older airlock)"
	}
	kind := errdefs.ErrUnavailable
	if e.Copy != "" {
		kind = errdefs.ErrImageCorrupt
	}
	return errdefs.Private(kind, "the memory image cannot be restored: "+msg, e.detail)
}

func (e *KeeperError) Error() string   { return e.public().Error() + ": " + ErrKeeperGone.Error() }
func (e *KeeperError) Unwrap() []error { return []error{e.public(), ErrKeeperGone} }

func keeperGone(digest, what string) error { return &KeeperError{Digest: digest, what: what} }

// keeperFor is the path of the copy of the keeper named by digest, which
// a restore binds: an error when there is none, or it cannot be trusted.
func (h *Host) keeperFor(digest string) (string, error) {
	if len(digest) != sha256.Size*2 || strings.Trim(digest, "0123456789abcdef") != "" {
		return "", keeperGone(digest, "is not named")
	}
	p := filepath.Join(h.keeperDir, keeperPrefix+digest)
	if _, err := os.Lstat(p); err != nil {
		return "", keeperGone(digest, "is missing")
	}
	// Bound as the init of a sandbox: only a copy nobody but the server
	// could have written (see package privdir), in a directory alike.
	_, err := privdir.Dir(h.keeperDir)
	if err == nil {
		_, err = privdir.File(p)
	}
	if err != nil {
		return "", &KeeperError{Digest: digest, Copy: p, what: "could have been written by another user than the server's", detail: err}
	}
	return p, nil
}

// verifyKeeper checks that the copy p holds what its digest says, until
// ctx ends.
func verifyKeeper(ctx context.Context, p, digest string) error {
	if got := sumFile(ctx, p); got != digest {
		if err := ctx.Err(); err != nil {
			return err
		}
		return &KeeperError{Digest: digest, Copy: p, what: "is damaged (its content is not its digest)"}
	}
	return nil
}

// bind counts a live sandbox bound to the keeper copy digest (n 1), or
// one closed (n -1).
func (h *Host) bind(digest string, n int) {
	h.boundMu.Lock()
	defer h.boundMu.Unlock()
	if h.bound == nil {
		h.bound = map[string]int{}
	}
	if h.bound[digest] += n; h.bound[digest] <= 0 {
		delete(h.bound, digest)
	}
}

// KeepersInUse are the digests of the keeper copies the host's live
// sandboxes are bound to, and its own: a sweep while the host runs
// keeps them, as a restored sandbox's next checkpoint names its copy
// again. Take it before reading what the paused sessions need: a
// sandbox is closed only after its checkpoint's memory.json is written.
func (h *Host) KeepersInUse() map[string]bool {
	h.boundMu.Lock()
	defer h.boundMu.Unlock()
	out := map[string]bool{}
	if h.keeperDigest != "" {
		out[h.keeperDigest] = true
	}
	for d := range h.bound {
		out[d] = true
	}
	return out
}

// SweepKeepers removes the keeper copies in dir that no checkpoint needs:
// those keep does not name (by digest) and that were not used within
// keeperGrace. It returns the digests it removed, and when the first
// copy it left for its grace alone may be removed (zero: none).
func SweepKeepers(dir string, keep map[string]bool) (gone []string, later time.Time, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	var errs []error
	for _, e := range ents {
		digest, ok := strings.CutPrefix(e.Name(), keeperPrefix)
		tmp := strings.HasPrefix(e.Name(), ".tmp-") // a crash's
		if !ok && !tmp || keep[digest] {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if due := info.ModTime().Add(keeperGrace); time.Now().Before(due) {
			if later.IsZero() || due.Before(later) {
				later = due
			}
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if !tmp {
			gone = append(gone, digest)
		}
	}
	return gone, later, errors.Join(errs...)
}

// CheckKeepers checks that the keeper copies in dir, and dir, are the
// server's own (package privdir), as a restore does before it binds
// one (doctor's check; none there is no error).
func CheckKeepers(dir string) error {
	if _, err := privdir.Dir(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), keeperPrefix) {
			if _, err := privdir.File(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// KeeperDir is where the host's keeper copies live.
func (h *Host) KeeperDir() string { return h.keeperDir }

// KeeperDigest is the digest of the host's keeper ("": none).
func (h *Host) KeeperDigest() string { return h.keeperDigest }
