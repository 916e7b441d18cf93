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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	dst := filepath.Join(dir, keeperPrefix+digest)
	if sumFile(context.Background(), dst) == digest {
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

func keeperGone(digest, what string) error {
	short := digest
	if len(short) > 12 {
		short = short[:12]
	}
	msg := fmt.Sprintf("the airlock keeper binary it was paused with (%s) %s on this server", short, what)
	if digest == "" {
		msg = "it does not say which airlock keeper binary it was paused with (paused by an older airlock)"
	}
	return fmt.Errorf("%w: %w", errdefs.Private(errdefs.ErrUnavailable, "the memory image cannot be restored: "+msg, nil), ErrKeeperGone)
}

// keeperFor is the path of the copy of the keeper named by digest, which
// a restore binds: an error when there is none.
func (h *Host) keeperFor(digest string) (string, error) {
	if len(digest) != sha256.Size*2 || strings.Trim(digest, "0123456789abcdef") != "" {
		return "", keeperGone(digest, "is not named")
	}
	p := filepath.Join(h.keeperDir, keeperPrefix+digest)
	if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
		return "", keeperGone(digest, "is missing")
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
		return keeperGone(digest, "is damaged (its content is not its digest)")
	}
	return nil
}

// SweepKeepers removes the keeper copies in dir that no checkpoint needs:
// those keep does not name (by digest) and that were not used within
// keeperGrace. It returns the digests it removed.
func SweepKeepers(dir string, keep map[string]bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gone []string
	var errs []error
	for _, e := range ents {
		digest, ok := strings.CutPrefix(e.Name(), keeperPrefix)
		tmp := strings.HasPrefix(e.Name(), ".tmp-") // a crash's
		if !ok && !tmp || keep[digest] {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < keeperGrace {
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
	return gone, errors.Join(errs...)
}

// KeeperDir is where the host's keeper copies live.
func (h *Host) KeeperDir() string { return h.keeperDir }

// KeeperDigest is the digest of the host's keeper ("": none).
func (h *Host) KeeperDigest() string { return h.keeperDigest }
