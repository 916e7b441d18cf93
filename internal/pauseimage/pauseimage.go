// Package pauseimage owns the on-disk form of a paused session: a
// directory <root>/<id> holding meta.json (the session's description and
// the checksum and size of its files, itself checksummed) and files.tar
// (the regular files and directories of its workspace). An image is
// written under a temporary name, synced, and renamed into place only
// when whole, so that a crash at any point leaves either the whole image
// or none (temporaries are swept by List). It also owns a live session's
// recovery point (live.go), which the next start makes such an image.
//
// It must never follow a symlink or read anything but regular files and
// directories of a workspace (it reads them through package workspace,
// which resolves every path beneath the root), never trust a size, path
// or type in an image it reads back (a disk may rot, an operator may
// edit it), let nothing restored from files that fail their checksum be
// used (a restore sums them as it writes them, once, and says so at
// their end: its caller discards the sandbox it wrote into), and never
// write outside its root.
package pauseimage

import (
	"archive/tar"
	"bufio"
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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/privdir"
	"airlock/internal/workspace"
)

const (
	metaName  = "meta.json"
	filesName = "files.tar"
	tmpPrefix = ".tmp-"
	// forkPrefix names the image a fork of a live session copies its
	// source to: removed once restored, swept by List after a crash.
	forkPrefix = "fork-"
	// keptPrefix names a memory image a resume refused, kept for the
	// operator (List neither sweeps nor lists it: ListKept does).
	keptPrefix = ".kept-memory-"
	version    = 1
	// maxMeta caps the meta.json read back.
	maxMeta = 4 << 20
	// maxRecorded caps every size a description read back records (1
	// PiB: more than any disk an image is written to): a larger one is
	// damage, never summed (a quota's sum of such sizes would overflow).
	maxRecorded = 1 << 50
)

// Stats is what a pause wrote.
type Stats struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Bytes int64 `json:"bytes"` // of the files' contents
	// DiskBytes is the image's size on disk.
	DiskBytes int64 `json:"disk_bytes"`
	// Skipped are what a workspace held that an image does not keep:
	// symlinks, FIFOs, sockets and devices (never followed or read).
	Skipped []Skipped `json:"skipped,omitempty"`
}

// Skipped is one entry a pause left out, and what it was.
type Skipped struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// body is meta.json's checksummed part.
type body struct {
	Session json.RawMessage `json:"session"`
	Files   filesSum        `json:"files"`
	Stats   Stats           `json:"stats"`
}

type filesSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// envelope is meta.json.
type envelope struct {
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"` // of Body's bytes
	Body    json.RawMessage `json:"body"`
}

// ValidID reports whether id can name an image: what a session id is
// made of, nothing a path could be built from.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func checkID(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%w: %q cannot name a paused session", errdefs.ErrInvalidArgument, id)
	}
	return nil
}

// Write writes session (the caller's description, JSON) and the files of
// ws as the image of id under root. Before anything is written, the
// files' sizes are summed as the image holds them and a restore expands
// them (a sparse file's holes and each name of a hard link in full): a
// total over max is refused (ErrTooLarge), and admit is called with the
// most bytes the image can take on disk, its error (a quota, a full
// disk) refusing the pause. No file is then read past that total. A
// workspace that cannot be kept whole (too many entries, a file changing
// while it is read, a full disk) is an error and leaves nothing behind.
func Write(ctx context.Context, root, id string, session []byte, ws *workspace.Dir, max int64, admit func(size int64) error) (Stats, error) {
	if err := checkID(id); err != nil {
		return Stats{}, err
	}
	entries, contents, size, err := plan(ws, len(session))
	if err != nil {
		return Stats{}, err
	}
	if contents > max {
		return Stats{}, fmt.Errorf("%w: the workspace's files come to %d bytes (a sparse file's holes and every name of a hard link count in full), more than a paused session may hold (%d: the session's disk limit, or persistence.max_image_bytes); remove files, or keep the session running",
			errdefs.ErrTooLarge, contents, max)
	}
	if admit != nil {
		if err := admit(size); err != nil {
			return Stats{}, err
		}
	}
	if err := EnsureRoot(root); err != nil {
		return Stats{}, err
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+id+"-")
	if err != nil {
		return Stats{}, diskErr(err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	st, sum, err := writeFiles(ctx, filepath.Join(tmp, filesName), ws, entries, contents)
	if err != nil {
		return Stats{}, err
	}
	meta, err := encodeMeta(body{Session: session, Files: sum, Stats: st})
	if err != nil {
		return Stats{}, err
	}
	if err := writeSynced(filepath.Join(tmp, metaName), bytes.NewReader(meta)); err != nil {
		return Stats{}, diskErr(err)
	}
	st.DiskBytes = sum.Size + int64(len(meta))
	if err := syncDir(tmp); err != nil {
		return Stats{}, diskErr(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, id)); err != nil {
		return Stats{}, fmt.Errorf("%w: an image of %s is in place already: %v", errdefs.ErrConflict, id, err)
	}
	ok = true
	if err := syncDir(root); err != nil {
		// In place, but perhaps not durable: the caller still has the
		// session, and says so.
		os.RemoveAll(filepath.Join(root, id))
		return Stats{}, diskErr(err)
	}
	return st, nil
}

// EnsureRoot makes root, the directory images are kept in, when it is
// missing, and checks that it is the server's own (package privdir):
// another user who could write there could forge a paused session.
func EnsureRoot(root string) error {
	if err := privdir.Ensure(root, 0o700); err != nil {
		if errors.Is(err, privdir.ErrNotPrivate) {
			return errdefs.Private(errdefs.ErrUnavailable, "the server's directory for paused sessions (persistence.dir) is not its own; the session keeps running", err)
		}
		return diskErr(err)
	}
	return nil
}

// diskErr is the error of the image's disk failing: the server's, never
// the sandbox's; the caller keeps the session running.
func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errdefs.Private(errdefs.ErrUnavailable, "the server's disk for paused sessions is full; the session keeps running", err)
	}
	return errdefs.Private(errdefs.ErrUnavailable, "the paused session could not be written; the session keeps running", err)
}

// plan lists ws's entries and sums what their image takes: contents,
// the files' apparent sizes (what the tar holds and a restore writes);
// size, the most the image can take on disk with its tar headers and a
// description of meta bytes.
func plan(ws *workspace.Dir, meta int) (entries []workspace.Entry, contents, size int64, err error) {
	entries, truncated, err := ws.List("", true)
	if err != nil {
		return nil, 0, 0, err
	}
	if truncated {
		return nil, 0, 0, fmt.Errorf("%w: the workspace has more than %d entries, or paths deeper than %d levels or longer than %d bytes: it cannot be paused whole",
			errdefs.ErrTooLarge, workspace.MaxListLength, workspace.MaxPathDepth, workspace.MaxPathLen)
	}
	// A header of up to 3 blocks an entry (a PAX record for a long
	// name), a file padded to a block, the tar's end; meta.json: the
	// description, stats, a skipped entry's path.
	const block = 512
	size = 2*block + int64(meta) + 1024
	for _, e := range entries {
		size += 3*block + int64(len(e.Path)) + 64
		if e.Type == "file" && e.Size > 0 {
			contents += e.Size
			size += (e.Size + block - 1) / block * block
		}
	}
	return entries, contents, size, nil
}

// writeFiles writes the tar of ws's entries to p, of at most max bytes
// of contents.
func writeFiles(ctx context.Context, p string, ws *workspace.Dir, entries []workspace.Entry, max int64) (Stats, filesSum, error) {
	var st Stats
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return st, filesSum{}, diskErr(err)
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return st, filesSum{}, fmt.Errorf("%w: the pause ran out of time; the session keeps running", errdefs.ErrTimeout)
		}
		switch e.Type {
		case "dir":
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: e.Path + "/", Mode: modeOf(e.Mode)}); err != nil {
				return st, filesSum{}, writeErr(err)
			}
			st.Dirs++
		case "file":
			n, err := writeFile(tw, ws, e.Path, max-st.Bytes)
			if err != nil {
				return st, filesSum{}, err
			}
			st.Files++
			st.Bytes += n
		default:
			st.Skipped = append(st.Skipped, Skipped{Path: e.Path, Type: e.Type})
		}
	}
	if err := tw.Close(); err != nil {
		return st, filesSum{}, writeErr(err)
	}
	if err := f.Sync(); err != nil {
		return st, filesSum{}, diskErr(err)
	}
	if err := f.Close(); err != nil {
		return st, filesSum{}, diskErr(err)
	}
	return st, filesSum{Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeErr is an error writing the tar: the disk's, or the caller's
// source's (ours are wrapped already).
func writeErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) {
		return diskErr(err)
	}
	return err
}

// errChanged: a file's size changed while it was read.
var errChanged = errors.New("changed")

// writeFile adds the regular file rel of ws, of at most left bytes.
func writeFile(tw *tar.Writer, ws *workspace.Dir, rel string, left int64) (int64, error) {
	f, e, err := ws.Open(rel)
	if errors.Is(err, errdefs.ErrNotFound) {
		return 0, fmt.Errorf("%w: /workspace/%s was removed while the session was being paused; try again", errdefs.ErrConflict, rel)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if e.Size > left {
		return 0, fmt.Errorf("%w: /workspace/%s grew while the session was being paused (a background process?); try again", errdefs.ErrConflict, rel)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: e.Size, Mode: modeOf(e.Mode)}); err != nil {
		return 0, writeErr(err)
	}
	// The size is the open file's (fstat): a file the sandbox grows or
	// shrinks meanwhile is not half kept, the pause is refused.
	n, err := io.Copy(tw, &strictReader{r: f, left: e.Size})
	if errors.Is(err, errChanged) || (err == nil && n != e.Size) {
		return 0, fmt.Errorf("%w: /workspace/%s changed while the session was being paused (a background process?); try again", errdefs.ErrConflict, rel)
	}
	if err != nil {
		return 0, writeErr(err)
	}
	return n, nil
}

// strictReader reads exactly left bytes of r, and fails if r has more or
// fewer.
type strictReader struct {
	r    io.Reader
	left int64
	// changed: it returned errChanged.
	changed bool
}

func (s *strictReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		var one [1]byte
		if n, _ := s.r.Read(one[:]); n > 0 {
			s.changed = true
			return 0, errChanged
		}
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if err == io.EOF && s.left > 0 {
		s.changed = true
		return n, errChanged
	}
	return n, err
}

// modeOf is a permission string's bits, without set-id or sticky bits.
func modeOf(s string) int64 {
	var m int64
	fmt.Sscanf(s, "%o", &m)
	return m & 0o777
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeSynced(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Image is a paused session read back: its description checked, its
// files not yet (Restore checks them as it reads them).
type Image struct {
	dir   string
	sum   filesSum
	files io.ReadSeekCloser // files.tar, once opened
	// bad: why its files failed their check (a restore again fails at
	// once, reading nothing).
	bad   error
	Stats Stats
	// Session is the description Write was given.
	Session []byte
}

// corrupt is the error of an image that fails a check.
func corrupt(id, why string) error {
	return fmt.Errorf("%w: the paused session %s cannot be restored: %s; its image is kept for the operator to inspect, and deleting the session discards it",
		errdefs.ErrImageCorrupt, id, why)
}

// Open reads back the image of id under root and checks its description.
// A missing image is ErrNotFound; one that fails a check ErrImageCorrupt.
func Open(root, id string) (*Image, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	dir := filepath.Join(root, id)
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no paused session %s", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return nil, errdefs.Private(errdefs.ErrUnavailable, "the paused session cannot be read", err)
	}
	if !fi.IsDir() {
		return nil, corrupt(id, "it is not a directory")
	}
	b, size, err := readMeta(dir, id)
	if err != nil {
		return nil, err
	}
	// What it takes on disk, as Write said (meta.json holds the stats
	// of before it was written).
	st := b.Stats
	st.DiskBytes = b.Files.Size + size
	return &Image{dir: dir, sum: b.Files, Stats: st, Session: b.Session}, nil
}

// readMeta reads and checks the meta.json of the image id in dir, and
// says its size.
func readMeta(dir, id string) (b body, size int64, err error) {
	raw, err := readRegular(filepath.Join(dir, metaName), maxMeta)
	if err != nil {
		return body{}, 0, corrupt(id, "meta.json: "+err.Error())
	}
	if b, err = decodeMeta(raw); err != nil {
		return body{}, 0, corrupt(id, err.Error())
	}
	return b, int64(len(raw)), nil
}

// decodeMeta reads meta.json (raw) back and checks it: its version,
// its checksum, a body of the right form.
func decodeMeta(raw []byte) (body, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return body{}, errors.New("meta.json is not valid JSON (truncated?)")
	}
	if env.Version != version {
		return body{}, fmt.Errorf("meta.json is of version %d, this server reads %d", env.Version, version)
	}
	h := sha256.Sum256(env.Body)
	if hex.EncodeToString(h[:]) != env.SHA256 {
		return body{}, errors.New("meta.json fails its checksum")
	}
	var b body
	if err := json.Unmarshal(env.Body, &b); err != nil || !recorded(b.Files.Size) || !recorded(b.Stats.Bytes) || b.Stats.Files < 0 || b.Stats.Dirs < 0 {
		return body{}, errors.New("meta.json's body is malformed")
	}
	return b, nil
}

// recorded: n is a size a description may record (see maxRecorded).
func recorded(n int64) bool { return n >= 0 && n <= maxRecorded }

// encodeMeta is meta.json of b.
func encodeMeta(b body) ([]byte, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(raw)
	return json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: raw})
}

// Redescribe replaces the description (Write's session) of the image
// of id under root, in one step: a new meta.json is written beside the
// old, synced and renamed over it, so that a crash leaves one or the
// other, never a mix. The image's files are untouched; a description
// that fails its checks is not replaced (ErrImageCorrupt). The caller
// keeps the image from being resumed, removed or replaced meanwhile.
func Redescribe(root, id string, session []byte) error {
	if err := checkID(id); err != nil {
		return err
	}
	dir := filepath.Join(root, id)
	if fi, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: no paused session %s", errdefs.ErrNotFound, id)
	} else if err != nil || !fi.IsDir() {
		return corrupt(id, "it is not a directory")
	}
	b, _, err := readMeta(dir, id)
	if err != nil {
		return err
	}
	b.Session = session
	meta, err := encodeMeta(b)
	if err != nil {
		return err
	}
	if len(meta) > maxMeta {
		return fmt.Errorf("%w: the paused session's description would take %d bytes, more than %d", errdefs.ErrTooLarge, len(meta), maxMeta)
	}
	tmp := filepath.Join(dir, tmpPrefix+metaName)
	os.Remove(tmp) // an interrupted Redescribe's
	err = writeSynced(tmp, bytes.NewReader(meta))
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, metaName))
	}
	if err != nil {
		os.Remove(tmp)
		return errdefs.Private(errdefs.ErrUnavailable, "the paused session's description could not be rewritten (it is as it was)", err)
	}
	if err := syncDir(dir); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the paused session's description was rewritten but perhaps not durably", err)
	}
	return nil
}

// readRegular reads the regular file p (never through a symlink) of at
// most max bytes.
func readRegular(p string, max int64) ([]byte, error) {
	f, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("is a symlink")
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("missing")
		}
		return nil, errors.New("cannot be opened")
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("is not a regular file")
	}
	return f, nil
}

// OpenFiles opens the image's files and checks their size (reading
// nothing: Restore checks their checksum as it reads them), so that a
// missing or truncated image is refused before anything is started for
// it; the files stay open for Restore, whatever becomes of the image
// meanwhile (a resume or delete of a paused source while it is forked).
func (im *Image) OpenFiles() error {
	if im.files != nil {
		return nil
	}
	id := filepath.Base(im.dir)
	f, err := openRegular(filepath.Join(im.dir, filesName))
	if err != nil {
		return corrupt(id, "files.tar "+err.Error())
	}
	fi, _ := f.Stat()
	if fi.Size() != im.sum.Size {
		f.Close()
		return corrupt(id, fmt.Sprintf("files.tar has %d bytes, %d were written (truncated?)", fi.Size(), im.sum.Size))
	}
	im.files = f
	return nil
}

// Close releases what OpenFiles opened.
func (im *Image) Close() error {
	if im.files == nil {
		return nil
	}
	err := im.files.Close()
	im.files = nil
	return err
}

// Restore writes the image's files into ws (a fresh sandbox's), each of
// at most maxFile bytes, reading them once: their checksum is summed as
// they are read and checked at their end. An image that fails it, or
// holds anything but files and directories at paths in a workspace, is
// ErrImageCorrupt, and may have written some of its files into ws: the
// caller discards ws's sandbox, never hands it over. The read ends
// promptly when ctx does (ctx's error, the image untouched).
func (im *Image) Restore(ctx context.Context, ws *workspace.Dir, maxFile int64) error {
	if im.bad != nil {
		return im.bad
	}
	if err := im.OpenFiles(); err != nil {
		return err
	}
	if _, err := im.files.Seek(0, io.SeekStart); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the paused session cannot be read", err)
	}
	sum := newSummer(io.LimitReader(im.files, im.sum.Size))
	defer sum.stop()
	src := &ctxReader{ctx: ctx, r: bufio.NewReaderSize(sum, summerChunk)}
	err := im.extract(ctx, tar.NewReader(src), ws, maxFile)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	// What the tar reader left (the tar's end; after a failure, the
	// rest) is summed too: a failure the image's damage caused is said
	// to be that, not what it looked like (a file too large, a quota).
	if _, rerr := io.Copy(io.Discard, src); rerr != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return errdefs.Private(errdefs.ErrUnavailable, "the paused session cannot be read", rerr)
	}
	if hex.EncodeToString(sum.sum()) != im.sum.SHA256 {
		im.bad = corrupt(filepath.Base(im.dir), "files.tar fails its checksum")
		return im.bad
	}
	return err
}

// extract writes the entries of tr into ws, refusing anything but files
// and directories at paths in a workspace (whatever the checksum says:
// an image may be written by someone who knows the format).
func (im *Image) extract(ctx context.Context, tr *tar.Reader, ws *workspace.Dir, maxFile int64) error {
	id := filepath.Base(im.dir)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return corrupt(id, "files.tar is malformed")
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !entryPath(name) {
			return corrupt(id, fmt.Sprintf("files.tar names %q, not a path in a workspace", clip(hdr.Name)))
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := ws.Mkdir(name); err != nil {
				return err
			}
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > maxFile {
				return corrupt(id, fmt.Sprintf("files.tar holds %q of %d bytes", clip(name), hdr.Size))
			}
			if _, err := ws.Write(name, tr, hdr.Size, os.FileMode(hdr.Mode&0o777)); err != nil {
				return err
			}
		default:
			return corrupt(id, fmt.Sprintf("files.tar holds %q of type %q, not a file or directory", clip(name), hdr.Typeflag))
		}
	}
}

// entryPath: p can name an entry of a workspace as a pause keeps it:
// relative, each component a name, within the listing's limits. Code in
// a sandbox may put any character in a name but "/" and NUL, control
// characters too, which no client may name (workspace.Clean): a pause
// keeps such files, and its resume writes them back (beneath the root,
// as any).
func entryPath(p string) bool {
	if p == "" || len(p) > workspace.MaxPathLen || strings.ContainsRune(p, 0) {
		return false
	}
	parts := strings.Split(p, "/")
	if len(parts) > workspace.MaxPathDepth {
		return false
	}
	for _, part := range parts {
		if part == "" || part == "." || part == ".." || len(part) > workspace.MaxNameLen {
			return false
		}
	}
	return true
}

// summer sums what is read through it in a goroutine of its own,
// beside the reader's work (the files written back): the image is read
// once, and its sum takes none of the restore's time where a second core
// is free. It copies at most summerChunk at a time: a restore holds
// about ten such copies.
type summer struct {
	r       io.Reader
	chunks  chan []byte
	free    chan []byte
	done    chan []byte
	stopped bool
}

func newSummer(r io.Reader) *summer {
	s := &summer{r: r, chunks: make(chan []byte, 4), free: make(chan []byte, 6), done: make(chan []byte, 1)}
	go func() {
		h := sha256.New()
		for b := range s.chunks {
			h.Write(b)
			select {
			case s.free <- b:
			default:
			}
		}
		s.done <- h.Sum(nil)
	}()
	return s
}

// summerChunk is the most a summer copies at a time.
const summerChunk = 128 << 10

func (s *summer) Read(p []byte) (int, error) {
	if len(p) > summerChunk {
		p = p[:summerChunk]
	}
	n, err := s.r.Read(p)
	if n > 0 {
		var b []byte
		select {
		case b = <-s.free:
		default:
		}
		s.chunks <- append(b[:0], p[:n]...)
	}
	return n, err
}

// sum is the sum of all that was read.
func (s *summer) sum() []byte {
	s.stop()
	return <-s.done
}

// stop ends the summing goroutine.
func (s *summer) stop() {
	if !s.stopped {
		s.stopped = true
		close(s.chunks)
	}
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// ForkID is the id of the image a fork to the session id copies a live
// source to (List sweeps it: no fork outlives the server).
func ForkID(id string) string { return forkPrefix + id }

// List returns the ids of the images under root and removes what a pause
// or fork interrupted (a crash, a kill -9) left behind: such a pause
// never completed, and its session was not paused.
func List(root string) (ids []string, swept int, err error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, forkPrefix) {
			if os.RemoveAll(filepath.Join(root, name)) == nil {
				swept++
			}
			continue
		}
		if ValidID(name) {
			ids = append(ids, name)
		}
	}
	return ids, swept, nil
}

// Remove ends the image of id (none is not an error) durably: once it
// returns nil, no later List (no restart, not after a crash or power
// loss) lists it again. An error other than ErrLeftBehind means the
// image stands, whole, where it was: the caller must not report it
// ended. See end.
func Remove(root, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return end(root, filepath.Join(root, id))
}

// rmPrefix names what an end (Remove, RemoveLive, RemoveKept) marked
// removed: the marker is the rename, made durable before anything is
// deleted. List and SweepRemoved delete such remains; nothing lists
// them. (Older airlocks' ".tmp-rm<name>" and ".tmp-rmlive-<id>" share
// the prefix.)
const rmPrefix = tmpPrefix + "rm"

// ErrLeftBehind: an end is durable (what it ended is marked removed on
// disk, synced, and never listed again) but its remains could not all
// be deleted, or the marker's sync failed and could not be undone (a
// later sync makes it durable): SweepRemoved deletes them and syncs, as
// the next start's List does. Callers count the thing ended and sweep
// later.
var ErrLeftBehind = errors.New("ended; its remains are left for a later sweep")

// removeFault, when set (tests), is called before each step of an end
// ("mark", "sync", "delete") with the name of what ends; an error it
// returns is that step's.
var removeFault atomic.Pointer[func(step, name string) error]

// SetRemoveFault sets f as the fault a test injects into each step of
// an end (see removeFault) and returns what undoes it. For tests only
// (of this package and the session manager's).
func SetRemoveFault(f func(step, name string) error) (undo func()) {
	old := removeFault.Swap(&f)
	return func() { removeFault.Store(old) }
}

func fault(step, name string) error {
	if f := removeFault.Load(); f != nil && *f != nil {
		return (*f)(step, name)
	}
	return nil
}

// end removes dir, a directory of root, durably and never half: it is
// first marked removed (markEnded), then deleted (deleteEnded).
func end(root, dir string) error {
	gone, err := markEnded(root, dir)
	if err != nil || gone == "" {
		return err
	}
	return deleteEnded(filepath.Base(dir), gone)
}

// markEnded is the durable half of an end: dir is renamed to a marker
// name of its own (rmPrefix, unique: the remains of an earlier end of
// the same name are never in the way) and root synced, so that a crash
// afterwards, or a failed deletion, leaves remains no List loads. It
// returns the marker ("": dir was not there). When the rename or the
// sync fails, it is put back and the error returned: nothing ended
// (unless the error is ErrLeftBehind: the mark stands, not synced).
func markEnded(root, dir string) (gone string, err error) {
	name := filepath.Base(dir)
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	gone, err = os.MkdirTemp(root, rmPrefix+"-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("marking %s removed: %w", name, err)
	}
	// Onto the empty directory just made: rename(2) replaces it
	// (os.Rename refuses to).
	onto := func(old, new string) error {
		if err := unix.Rename(old, new); err != nil {
			return &os.LinkError{Op: "rename", Old: old, New: new, Err: err}
		}
		return nil
	}
	to := gone
	if fi != nil && !fi.IsDir() {
		// Not a directory (a symlink, a file where a directory
		// belongs: damage): moved as it is into the marker, never
		// followed (rename(2) moves the link itself).
		to = filepath.Join(gone, name)
	}
	moved, err := mark(root, name, "removed", "removal", dir, to, onto)
	if to != gone && (!moved || err != nil) {
		// Its marker is empty: nothing to leave behind.
		os.Remove(gone)
	}
	if !moved {
		os.Remove(gone)
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
	}
	if err != nil {
		return "", err
	}
	return gone, nil
}

// mark moves old, name's, to new by rename and syncs root: a mark (what:
// "removed", "resumed") that a crash afterwards finds. moved says
// whether the rename was made (a failed one, the error, wrapped, moved
// nothing). When the sync fails, the rename is undone and the error says
// so (doing: "removal", "resume"), or is ErrLeftBehind when the undo
// fails too: the mark stands, not synced.
func mark(root, name, what, doing, old, new string, rename func(old, new string) error) (moved bool, err error) {
	if err = fault("mark", name); err == nil {
		err = rename(old, new)
	}
	if err != nil {
		return false, fmt.Errorf("marking %s %s: %w", name, what, err)
	}
	if err = fault("sync", name); err == nil {
		err = syncDir(root)
	}
	if err != nil {
		if rerr := os.Rename(new, old); rerr != nil {
			return true, fmt.Errorf("%w: %s is marked %s but the mark is not synced (%v), nor could it be undone: %v", ErrLeftBehind, name, what, err, rerr)
		}
		return true, fmt.Errorf("syncing the %s of %s (undone): %w", doing, name, err)
	}
	return true, nil
}

// deleteEnded deletes gone, what markEnded marked of name; what cannot
// be is ErrLeftBehind (SweepRemoved deletes it).
func deleteEnded(name, gone string) error {
	err := fault("delete", name)
	if err == nil {
		err = os.RemoveAll(gone)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLeftBehind, name, err)
	}
	return nil
}

// SweepRemoved deletes the remains of ends (see end) under root, then
// syncs root; swept counts what it deleted.
func SweepRemoved(root string) (swept int, err error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), rmPrefix) {
			continue
		}
		if err := fault("delete", e.Name()); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			errs = append(errs, err)
		} else {
			swept++
		}
	}
	if err := syncDir(root); err != nil {
		errs = append(errs, err)
	}
	return swept, errors.Join(errs...)
}

// A paused session's memory (a gVisor checkpoint, written after its
// files): the checkpoint's files under memory/, and memory.json saying
// their size and digest (itself checksummed) and the caller's
// description of what runs in it. An image with memory.json restores
// its memory only if both check; its files stand either way.
const (
	memoryDir  = "memory"
	memoryMeta = "memory.json"
	// maxMemoryMeta caps the memory.json read back.
	maxMemoryMeta = 1 << 20
)

// Memory describes a paused session's memory image.
type Memory struct {
	// Bytes and SHA256 are the checkpoint's, as its writer summed them
	// (gvisor.Checkpoint): the reader checks the files against them.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Keeper is the digest of the gVisor keeper the checkpoint's sandbox
	// ran, which its restore binds again ("": written by an airlock that
	// did not record it). Keepers lists every image's.
	Keeper string `json:"keeper,omitempty"`
	// Session is the caller's (the processes to attach to).
	Session json.RawMessage `json:"session"`
}

// Keepers returns the keepers (Memory.Keeper) the memory images under
// root were taken with, which must be kept as long as the images are:
// the paused sessions', the fork copies', and those set aside by a
// resume (MarkResumed), which a start after a crash makes a paused
// session's image again (ResolveResumed), and the damaged images kept
// for the operator (KeepImage: their memory is kept with them). An
// image whose memory description cannot be read is an error: it may
// name any.
func Keepers(root string) (map[string]bool, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range ents {
		// Never through a symlink: what is not a directory is no image
		// (one that should be is kept aside as damaged, never read).
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		resumed, ok := strings.CutPrefix(e.Name(), resumedPrefix)
		if strings.HasPrefix(e.Name(), keptImagePrefix) {
			dir = filepath.Join(dir, keptImageDir)
			if fi, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) || err == nil && !fi.IsDir() {
				continue // (its kept.json only, as a crash in KeepImage leaves it; or no image)
			}
		} else if !ValidID(e.Name()) && !strings.HasPrefix(e.Name(), forkPrefix) && !(ok && ValidID(resumed)) {
			continue
		}
		mem, err := (&Image{dir: dir}).Memory()
		if err != nil {
			return nil, err
		}
		if mem != nil && mem.Keeper != "" {
			out[mem.Keeper] = true
		}
	}
	return out, nil
}

// MemoryTemp is where a checkpoint for the image id is written before
// AddMemory moves it in (a path that does not exist yet, on root's
// filesystem); done removes what is left of it. A crash leaves a
// temporary List sweeps.
func MemoryTemp(root, id string) (dir string, done func(), err error) {
	if err := checkID(id); err != nil {
		return "", nil, err
	}
	if err := EnsureRoot(root); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+"mem-"+id+"-")
	if err != nil {
		return "", nil, diskErr(err)
	}
	return filepath.Join(tmp, memoryDir), func() { os.RemoveAll(tmp) }, nil
}

// AddMemory moves the checkpoint in src (see MemoryTemp) into the image
// of id as its memory, described by mem, and returns what that takes on
// disk. The memory is added whole or not at all: memory.json is written
// last, and an image without it has no memory.
func AddMemory(root, id, src string, mem Memory) (int64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	dir := filepath.Join(root, id)
	if _, err := os.Lstat(filepath.Join(dir, metaName)); err != nil {
		return 0, fmt.Errorf("%w: no paused session %s", errdefs.ErrNotFound, id)
	}
	dst := filepath.Join(dir, memoryDir)
	ok := false
	defer func() {
		if !ok {
			os.Remove(filepath.Join(dir, memoryMeta))
			os.RemoveAll(dst)
		}
	}()
	if err := os.Rename(src, dst); err != nil {
		return 0, diskErr(err)
	}
	b, err := json.Marshal(mem)
	if err != nil {
		return 0, err
	}
	h := sha256.Sum256(b)
	meta, err := json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: b})
	if err != nil {
		return 0, err
	}
	tmp := filepath.Join(dir, tmpPrefix+memoryMeta)
	os.Remove(tmp)
	if err := writeSynced(tmp, bytes.NewReader(meta)); err != nil {
		os.Remove(tmp)
		return 0, diskErr(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, memoryMeta)); err != nil {
		os.Remove(tmp)
		return 0, diskErr(err)
	}
	if err := syncDir(dir); err != nil {
		return 0, diskErr(err)
	}
	ok = true
	return mem.Bytes + int64(len(meta)), nil
}

// Memory reads the image's memory description: nil without one. The
// checkpoint's files are the caller's to check against it (MemoryDir);
// a description that fails its own checks is ErrImageCorrupt.
func (im *Image) Memory() (*Memory, error) {
	id := filepath.Base(im.dir)
	raw, err := readRegular(filepath.Join(im.dir, memoryMeta), maxMemoryMeta)
	if err != nil && err.Error() == "missing" {
		return nil, nil
	}
	if err != nil {
		return nil, corrupt(id, "memory.json: "+err.Error())
	}
	m, err := decodeMemory(raw)
	if err != nil {
		return nil, corrupt(id, err.Error())
	}
	return m, nil
}

// decodeMemory reads memory.json (raw) back and checks it.
func decodeMemory(raw []byte) (*Memory, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil || env.Version != version {
		return nil, errors.New("memory.json is malformed (truncated?)")
	}
	h := sha256.Sum256(env.Body)
	if hex.EncodeToString(h[:]) != env.SHA256 {
		return nil, errors.New("memory.json fails its checksum")
	}
	var m Memory
	if err := json.Unmarshal(env.Body, &m); err != nil || !recorded(m.Bytes) {
		return nil, errors.New("memory.json's body is malformed")
	}
	return &m, nil
}

// A memory image a resume refused (corrupt, or its keeper copy damaged
// or not the server's) is kept for the operator to inspect, in a
// directory of its own under root: its checkpoint and memory.json, the
// refused keeper copy linked beside them, and kept.json (Kept). It is
// bounded as the paused session was: its owner's quota counts it, and
// it goes when Kept.Expires passes (the caller removes it, RemoveKept).
const keptMeta = "kept.json"

// Kept describes a memory image kept for inspection.
type Kept struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	// Expires: when it is removed (the paused session's own expiry).
	Expires time.Time `json:"expires"`
	// Reason: why the resume refused it.
	Reason string `json:"reason,omitempty"`
	// Dir is its directory (not recorded); Bytes what its checkpoint
	// and memory.json take (not the linked keeper copy, which the
	// keepers' directory may share).
	Dir   string `json:"-"`
	Bytes int64  `json:"-"`
	// Unrecorded: its kept.json could not be read (kept by an airlock
	// that wrote it last, or none), so Tenant is not known (ListKept).
	Unrecorded bool `json:"-"`
	// Pending: not kept for inspection but a recovery point left in
	// place (its recovery failed for the disk, tried again at the next
	// start), counted meanwhile and removed when its session would have
	// expired (not recorded: the caller's, for one run).
	Pending bool `json:"-"`
}

// KeepMemory moves the memory of the image id (its checkpoint and
// memory.json) out of it into a directory of its own under root, named
// for id and now, with k (kept.json) and a hard link to each of copies
// (refused keeper copies, linked by their names): a resume that refused
// the memory goes on with the files, and what it refused is kept for
// the operator to inspect. An image without memory returns Kept{} (Dir
// ""). A copy that cannot be linked (another filesystem) is an error
// once the rest is kept.
func KeepMemory(root, id string, now time.Time, k Kept, copies ...string) (Kept, error) {
	if err := checkID(id); err != nil {
		return Kept{}, err
	}
	if err := EnsureRoot(root); err != nil {
		return Kept{}, err
	}
	dir := filepath.Join(root, id)
	kept := filepath.Join(root, keptPrefix+id+"-"+now.UTC().Format("20060102T150405.000Z"))
	var names []string
	for _, name := range []string{memoryMeta, memoryDir} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return Kept{}, nil
	}
	// kept.json first, synced: no memory is ever in a kept directory
	// that does not say whose it is (its tenant's quota counts it).
	if err := os.Mkdir(kept, 0o700); err != nil {
		return Kept{}, diskErr(err)
	}
	k.ID, k.Dir = id, kept
	b, err := json.Marshal(k)
	if err == nil {
		err = writeSynced(filepath.Join(kept, keptMeta), bytes.NewReader(b))
	}
	if err != nil {
		os.RemoveAll(kept)
		return Kept{}, diskErr(err)
	}
	syncDir(kept)
	for _, name := range names {
		if beforeKeep != nil {
			beforeKeep(kept)
		}
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(kept, name)); err != nil {
			// What was moved is kept, and counted.
			k.Bytes = keptBytes(kept)
			return k, diskErr(err)
		}
	}
	syncDir(dir)
	k.Bytes = keptBytes(kept)
	var errs []error
	for _, c := range copies {
		if err := os.Link(c, filepath.Join(kept, filepath.Base(c))); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, syncDir(kept), syncDir(root))
	return k, errors.Join(errs...)
}

// beforeKeep, if set (tests), runs before KeepMemory moves each part of
// a memory image into its kept directory.
var beforeKeep func(kept string)

// keptBytes is what the checkpoint and memory.json in dir take.
func keptBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type().IsRegular() && (rel == memoryMeta || strings.HasPrefix(rel, memoryDir+"/")) {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// ListKept lists the memory images (and the images, KeepImage) kept for
// inspection under root. One
// whose kept.json cannot be read (kept by an airlock that wrote none, or
// wrote it last and ended first) says only its id (Unrecorded: whose it
// is, the caller may know from the paused session's description), and
// expires keep after it was kept (its directory's time).
func ListKept(root string, keep time.Duration) ([]Kept, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Kept
	for _, e := range ents {
		prefix, ok := keptKind(e.Name())
		if !e.IsDir() || !ok {
			continue
		}
		dir := filepath.Join(root, e.Name())
		var k Kept
		raw, err := readRegular(filepath.Join(dir, keptMeta), maxMemoryMeta)
		if err == nil {
			err = json.Unmarshal(raw, &k)
		}
		if err != nil || k.Expires.IsZero() {
			info, ierr := e.Info()
			if ierr != nil {
				continue
			}
			k = Kept{ID: keptID(e.Name()), Expires: info.ModTime().Add(keep), Unrecorded: true}
		}
		k.Dir = dir
		switch prefix {
		case keptImagePrefix:
			k.Bytes = keptWholeBytes(dir, keptImageDir)
		case keptPointPrefix:
			k.Bytes = keptWholeBytes(dir, keptPointDir)
		default:
			k.Bytes = keptBytes(dir)
		}
		out = append(out, k)
	}
	return out, nil
}

// keptID is the session id in the name of a kept memory image's
// directory (KeepMemory's: the prefix, the id, "-" and a time without
// "-"); "" when the name holds no valid id.
func keptID(name string) string {
	prefix, _ := keptKind(name)
	rest, _ := strings.CutPrefix(name, prefix)
	if i := strings.LastIndexByte(rest, '-'); i > 0 && ValidID(rest[:i]) {
		return rest[:i]
	}
	return ""
}

// RemoveKept removes the kept memory image in dir (see ListKept), which
// must be one under root, durably (see end): ErrLeftBehind leaves
// remains for SweepRemoved.
// A recovery point left pending (Kept.Pending) is removed the same way.
func RemoveKept(root, dir string) error {
	name := filepath.Base(dir)
	_, ok := keptKind(name)
	if id, live := strings.CutPrefix(name, livePrefix); live && ValidID(id) {
		ok = true
	}
	if filepath.Dir(dir) != filepath.Clean(root) || !ok {
		return fmt.Errorf("%w: %q is not a kept memory image", errdefs.ErrInvalidArgument, dir)
	}
	return end(root, dir)
}

// PointBytes is what the recovery point of id under root takes on the
// disk: its regular files (never through a symlink).
func PointBytes(root, id string) int64 {
	if checkID(id) != nil {
		return 0
	}
	return keptWholeBytes(root, livePrefix+id)
}

// MemoryDir is the directory of the image's checkpoint.
func (im *Image) MemoryDir() string { return filepath.Join(im.dir, memoryDir) }

// resumedPrefix names the image of a session being resumed (MarkResumed)
// until its first recovery point is sealed: List never loads it as a
// paused session (a dot name), and SettleResumed decides at the next
// start what becomes of it.
const resumedPrefix = ".resumed-"

// ResumedDir is where MarkResumed moves the image of id under root.
func ResumedDir(root, id string) string { return filepath.Join(root, resumedPrefix+id) }

// MarkResumed moves the image of id to its resumed marker, durably (the
// rename and root synced), in place of ending it: a server killed before
// the resumed session's first recovery point is sealed finds the image
// there at its next start (ResolveResumed). A marker of id left by an
// earlier resume is stale (the image of id is newer) and ends first. An
// error: the image stands, whole, where it was (the rename is undone),
// unless it is ErrLeftBehind (the rename stands, not yet synced: the
// next start resolves either).
func MarkResumed(root, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	dir, marker := filepath.Join(root, id), ResumedDir(root, id)
	if err := end(root, marker); err != nil && !errors.Is(err, ErrLeftBehind) {
		return err
	}
	_, err := mark(root, id, "resumed", "resume", dir, marker, os.Rename)
	return err
}

// EndResumed ends the resumed marker of id under root (none is not an
// error) durably (see end): its session has a sealed recovery point, a
// newer image, or ended.
func EndResumed(root, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return end(root, ResumedDir(root, id))
}

// ResumedHasMemory says whether the resumed marker of id under root
// holds a memory image (whose keeper Keepers counts while it stands).
func ResumedHasMemory(root, id string) bool {
	if checkID(id) != nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(ResumedDir(root, id), memoryMeta))
	return err == nil
}

// ListResumed returns the ids of the resumed markers under root.
func ListResumed(root string) ([]string, error) { return listMarked(root, resumedPrefix) }

// ResolveResumed settles the resumed marker of id at a start, after the
// recovery points were recovered (Recover): when an image of id is in
// place (a later pause's, or the one Recover made of a point sealed
// after the resume), the marker is stale and ends; else its session's
// resume never sealed a point, and the marker is its image again,
// durably: the session comes back paused, whole. It says which.
func ResolveResumed(root, id string) (restored bool, err error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	dir := filepath.Join(root, id)
	if _, err := os.Lstat(dir); err == nil {
		return false, EndResumed(root, id)
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err := os.Rename(ResumedDir(root, id), dir); err != nil {
		return false, err
	}
	return true, syncDir(root)
}
