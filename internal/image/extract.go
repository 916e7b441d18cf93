package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"airlock/internal/errdefs"
)

// Limits bound what one import may write. Every image is checked against
// them while it is read, never by trusting what it declares.
type Limits struct {
	// Bytes caps the uncompressed size of all layers together (file
	// contents and tar headers) and, apart, the size of the files they
	// write: a decompression bomb, or a sparse file's holes, stop here.
	Bytes int64
	// Files caps the number of entries of all layers together.
	Files int64
	// Layer caps the size a manifest may declare for one layer.
	Layer int64
	// Layers caps the number of layers.
	Layers int
}

// DefaultLimits are the limits of an import unless the caller says
// otherwise: enough for a data-science image (about 1.5 GB, 80,000 files).
func DefaultLimits() Limits {
	return Limits{Bytes: 8 << 30, Files: 1_000_000, Layer: 4 << 30, Layers: 128}
}

// Stripped counts what an import left out on purpose.
type Stripped struct {
	Devices  int `json:"devices,omitempty"`  // character and block devices
	Fifos    int `json:"fifos,omitempty"`    // named pipes
	SetID    int `json:"setid,omitempty"`    // files whose setuid/setgid bit was cleared
	Unknown  int `json:"unknown,omitempty"`  // entries of a kind tar has but a root must not
	Whiteout int `json:"whiteout,omitempty"` // paths removed by a later layer's whiteout
}

// applier writes tar layers into one directory, never outside it: every
// path is checked lexically (relative, no "..") and every parent is made
// or checked to be a real directory, so that no symlink of the image is
// ever followed by the host.
type applier struct {
	root    *os.Root
	limits  Limits
	bytes   int64 // read so far from every layer's uncompressed stream
	written int64 // regular files' sizes so far (a sparse one's in full)
	files   int64
	dirs    map[string]bool // directories known to be real ones
	layer   map[string]bool // paths the current layer wrote
	strip   Stripped
	onBytes func(int64) // progress: called with bytes read so far
}

func newApplier(dir string, l Limits) (*applier, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &applier{root: r, limits: l, dirs: map[string]bool{".": true}}, nil
}

func (a *applier) close() { a.root.Close() }

// ErrBadImage is wrapped by every error about an image's content; it is
// an invalid argument: the operator gave airlock something it refuses.
var ErrBadImage = fmt.Errorf("%w: bad image", errdefs.ErrInvalidArgument)

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadImage}, args...)...)
}

// countReader counts what is read through it against the import's byte
// cap: the one place a decompression bomb is stopped.
type countReader struct {
	r io.Reader
	a *applier
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.a.bytes += int64(n)
	if c.a.bytes > c.a.limits.Bytes {
		return n, bad("the image is larger than %d bytes uncompressed (the import's limit)", c.a.limits.Bytes)
	}
	if c.a.onBytes != nil && n > 0 {
		c.a.onBytes(c.a.bytes)
	}
	return n, err
}

// apply writes one layer (an uncompressed tar stream) over what the
// layers below it wrote, with OCI's whiteouts.
func (a *applier) apply(ctx context.Context, r io.Reader) error {
	a.layer = map[string]bool{}
	tr := tar.NewReader(&countReader{r: r, a: a})
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrBadImage) {
				return err
			}
			return bad("reading the layer: %v", err)
		}
		if a.files++; a.files > a.limits.Files {
			return bad("the image has more than %d files (the import's limit)", a.limits.Files)
		}
		if err := a.entry(h, tr); err != nil {
			return err
		}
	}
}

// cleanName checks an entry's name: relative, no "..", no NUL; "./" and a
// trailing "/" are allowed (tar writes them). "." is the root itself.
func cleanName(name string) (string, error) {
	if strings.ContainsRune(name, 0) || len(name) > 4096 {
		return "", bad("entry %q: bad name", trimName(name))
	}
	if strings.HasPrefix(name, "/") {
		return "", bad("entry %q: absolute path", trimName(name))
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", bad("entry %q: path leaves the root", trimName(name))
		}
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", bad("entry %q: path leaves the root", trimName(name))
	}
	return p, nil
}

func trimName(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\\0"), "?")
}

// symlinkOK checks a symlink's target: an absolute one is read inside
// the sandbox's root (as a container reads it); a relative one must not
// climb above the image's root from where it stands.
func symlinkOK(name, target string) error {
	if target == "" || strings.ContainsRune(target, 0) || len(target) > 4096 {
		return bad("symlink %q: bad target", trimName(name))
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
	depth := strings.Count(path.Dir(name), "/") + 1
	if path.Dir(name) == "." {
		depth = 0
	}
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return bad("symlink %q -> %q points outside the image", trimName(name), trimName(target))
			}
		default:
			depth++
		}
	}
	return nil
}

// parents makes sure every parent of p is a real directory (made when
// missing), never a symlink.
func (a *applier) parents(p string) error {
	dir := path.Dir(p)
	if a.dirs[dir] {
		return nil
	}
	if err := a.parents(dir); err != nil {
		return err
	}
	st, err := a.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := a.root.Mkdir(dir, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink != 0:
		return bad("entry %q is under the symlink %q (an image's layers must not write through links)", trimName(p), trimName(dir))
	case !st.IsDir():
		return bad("entry %q is under %q, which is not a directory", trimName(p), trimName(dir))
	}
	a.dirs[dir] = true
	return nil
}

// realDir reports whether every component of dir is a real directory
// (false when one is missing; an error when one is a symlink or a file).
func (a *applier) realDir(dir string) (bool, error) {
	if a.dirs[dir] {
		return true, nil
	}
	if ok, err := a.realDir(path.Dir(dir)); !ok || err != nil {
		return false, err
	}
	st, err := a.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case st.Mode()&fs.ModeSymlink != 0:
		return false, bad("%q is a symlink where the layer needs a directory", trimName(dir))
	case !st.IsDir():
		return false, nil
	}
	a.dirs[dir] = true
	return true, nil
}

// remove deletes p (a whole tree if a directory) without following any
// symlink in it.
func (a *applier) remove(p string) error {
	if p == "." {
		return bad("an entry replaces the image's root")
	}
	for d := range a.dirs {
		if d == p || strings.HasPrefix(d, p+"/") {
			delete(a.dirs, d)
		}
	}
	if err := a.root.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mode keeps the permission bits of an entry, without setuid and setgid:
// nothing in a template gains privilege by being run.
func (a *applier) mode(h *tar.Header, dir bool) fs.FileMode {
	m := fs.FileMode(h.Mode) & 0o777
	if h.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		a.strip.SetID++
	}
	if dir && h.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (a *applier) entry(h *tar.Header, r io.Reader) error {
	p, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	base := path.Base(p)
	if strings.HasPrefix(base, ".wh.") {
		return a.whiteout(p, base)
	}
	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		a.strip.Devices++
		return nil
	case tar.TypeFifo:
		a.strip.Fifos++
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		a.strip.Unknown++
		return nil
	}
	if p == "." {
		if h.Typeflag != tar.TypeDir {
			return bad("an entry replaces the image's root")
		}
		return nil // the root's own mode is airlock's
	}
	if err := a.parents(p); err != nil {
		return err
	}
	st, err := a.root.Lstat(p)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	a.layer[p] = true
	switch h.Typeflag {
	case tar.TypeDir:
		m := a.mode(h, true)
		if exists && st.IsDir() {
			a.dirs[p] = true
			return a.chmod(p, m)
		}
		if exists {
			if err := a.remove(p); err != nil {
				return err
			}
		}
		if err := a.root.Mkdir(p, 0o700); err != nil {
			return err
		}
		a.dirs[p] = true
		return a.chmod(p, m)
	case tar.TypeSymlink:
		if err := symlinkOK(p, h.Linkname); err != nil {
			return err
		}
		if exists {
			if err := a.remove(p); err != nil {
				return err
			}
		}
		return a.root.Symlink(h.Linkname, p)
	case tar.TypeLink:
		target, err := cleanName(h.Linkname)
		if err != nil {
			return bad("hard link %q: %v", trimName(p), err)
		}
		if target == p {
			return nil
		}
		ok, err := a.realDir(path.Dir(target))
		if err != nil {
			return err
		}
		var tst fs.FileInfo
		if ok {
			tst, err = a.root.Lstat(target)
		}
		if !ok || err != nil || !tst.Mode().IsRegular() {
			return bad("hard link %q -> %q: the target is not a file the image wrote before", trimName(p), trimName(h.Linkname))
		}
		if exists {
			if err := a.remove(p); err != nil {
				return err
			}
		}
		return a.root.Link(target, p)
	}
	// A regular file. Its size counts against the cap as written, not
	// only as read: a sparse entry (PAX GNU.sparse) expands holes the
	// stream does not carry, a 3 KB layer into a file of terabytes.
	if a.written += h.Size; h.Size < 0 || a.written > a.limits.Bytes {
		return bad("entry %q: the image's files are larger than %d bytes (the import's limit)", trimName(p), a.limits.Bytes)
	}
	if exists {
		if err := a.remove(p); err != nil {
			return err
		}
	}
	f, err := a.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(a.mode(h, false))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, ErrBadImage) {
			return err
		}
		return fmt.Errorf("writing %q: %w", trimName(p), err)
	}
	return nil
}

// chmod sets the mode of the directory p, which the caller knows is one
// (never a symlink: Root.Chmod would follow it).
func (a *applier) chmod(p string, m fs.FileMode) error {
	f, err := a.root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Chmod(m)
	f.Close()
	return err
}

// whiteout applies an OCI whiteout: ".wh.NAME" removes NAME as the layers
// below left it; ".wh..wh..opq" empties its directory of what they left.
func (a *applier) whiteout(p, base string) error {
	dir := path.Dir(p)
	// The whiteout's directory must be a real one, never a link to
	// follow; a missing one has nothing to hide.
	ok, err := a.realDir(dir)
	if !ok || err != nil {
		return err
	}
	if base == ".wh..wh..opq" {
		f, err := a.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil // nothing below to hide
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, n := range names {
			child := path.Join(dir, n)
			if !a.layer[child] {
				a.strip.Whiteout++
				if err := a.remove(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || name == ".." {
		return bad("whiteout %q: bad name", trimName(p))
	}
	target := path.Join(dir, name)
	if a.layer[target] {
		return nil // the layer's own file stays
	}
	if _, err := a.root.Lstat(target); err == nil {
		a.strip.Whiteout++
		return a.remove(target)
	}
	return nil
}
