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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// A live session's recovery point: what a session that never paused
// leaves when its server ends without a pause (kill -9, a crash, power
// loss), its workspace as of its last completed operation. It is a
// directory <root>/.live-<id> holding tree/ (a copy of the workspace's
// regular files and directories), point.json (the point: what tree/
// holds, file by file, and the caller's description of the session;
// checksummed like meta.json) and stage/ (the files of the next point,
// copied before it is sealed).
//
// A seal copies the files that changed since the last point into
// stage/, fsyncs them and stage/, then writes point.json under a
// temporary name, fsyncs it, renames it into place and fsyncs the
// point's directory: that rename is the point. Only then are the staged
// files moved into tree/ and what went removed from it; the directories
// moved into (and stage/, moved out of) are fsynced before the seal
// returns, so the next point, which names those files in tree/, is
// never on the disk before them. Every step of that is redone by
// Recover, so a crash at any moment leaves the last sealed point whole:
// never a mix of two. Only what a seal wrote is flushed, never the
// whole filesystem (syncfs would flush every other tenant's data on it
// too, at each seal). Recover turns
// a point into an image Write writes (the one format of a paused
// session), and removes it.
const (
	livePrefix = ".live-"
	liveTree   = "tree"
	liveStage  = "stage"
	livePoint  = "point.json"
	// maxPoint caps the point.json read back: MaxListLength entries of
	// MaxPathLen bytes, and the description.
	maxPoint = 16 << 20
)

// Point is what a recovery point says besides its files.
type Point struct {
	// Seq numbers the points of one session (from 1).
	Seq int `json:"seq"`
	// At is when the operation whose end the point keeps completed.
	At time.Time `json:"at"`
	// Session is the caller's description.
	Session json.RawMessage `json:"session"`
	// Behind says why a later completed operation could not be sealed,
	// and BehindAt when (empty: the point is the last one).
	Behind   string    `json:"behind,omitempty"`
	BehindAt time.Time `json:"behind_at,omitzero"`
}

// liveEntry is one entry of a point: a directory, or a file whose
// contents are in tree/, or (Stage) staged under that name until the
// point is applied.
type liveEntry struct {
	Path  string `json:"path"`
	Dir   bool   `json:"dir,omitempty"`
	Mode  uint32 `json:"mode"`
	Size  int64  `json:"size"`
	Stage string `json:"stage,omitempty"`
}

// liveEntryJSON is liveEntry in point.json. A path that is not UTF-8
// (a Linux file name is any bytes) is kept in PathB64, whole: JSON
// strings would replace its bytes with U+FFFD, and the recovery would
// then miss the file and keep nothing. Points without PathB64 read as
// before.
type liveEntryJSON struct {
	Path    string `json:"path,omitempty"`
	PathB64 []byte `json:"path_b64,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Mode    uint32 `json:"mode"`
	Size    int64  `json:"size"`
	Stage   string `json:"stage,omitempty"`
}

func (e liveEntry) MarshalJSON() ([]byte, error) {
	j := liveEntryJSON{Path: e.Path, Dir: e.Dir, Mode: e.Mode, Size: e.Size, Stage: e.Stage}
	if !utf8.ValidString(e.Path) {
		j.Path, j.PathB64 = "", []byte(e.Path)
	}
	return json.Marshal(j)
}

func (e *liveEntry) UnmarshalJSON(raw []byte) error {
	var j liveEntryJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return err
	}
	*e = liveEntry{Path: j.Path, Dir: j.Dir, Mode: j.Mode, Size: j.Size, Stage: j.Stage}
	if j.PathB64 != nil {
		if j.Path != "" {
			return errors.New("an entry has both path and path_b64")
		}
		e.Path = string(j.PathB64)
	}
	return nil
}

// entryCost is about what an entry takes in point.json: its path as
// encoded there (escaped: up to 6 bytes a byte; or base64) and the rest.
func entryCost(p string) int64 {
	if !utf8.ValidString(p) {
		return int64(len(p)+2)/3*4 + 120
	}
	n := int64(104)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		case c == '"' || c == '\\':
			n += 2
		default:
			n++
		}
	}
	// U+2028 and U+2029 are escaped too (3 bytes become 6).
	n += 3 * int64(strings.Count(p, "\u2028")+strings.Count(p, "\u2029"))
	return n
}

// pointBody is point.json's checksummed part.
type pointBody struct {
	Point
	Entries []liveEntry `json:"entries"`
}

// held is what a point holds of a workspace file: its state in the
// workspace when it was copied (not recorded: a point outlives no
// server that could compare it with its sandbox).
type held struct {
	dir         bool
	mode        uint32
	size, mtime int64
	ino         uint64
}

// sealHook, if set (tests), is called at each step of a seal where a
// crash may stop it: "listed", "staged" (each file copied), "synced",
// "sealed" (point.json in place), "removed" (each entry gone from
// tree/), "moved" (each file moved into tree/),
// "applied"; and, as each fsync is asked for, "fsync stage/NAME" or
// "fsync tree/PATH" (the directory itself: "fsync stage/",
// "fsync tree/"), "fsync point" (point.json), "fsync dir" (the point's
// directory) and "fsync root" (the directory of the points).
var sealHook func(step string)

func hook(step string) {
	if sealHook != nil {
		sealHook(step)
	}
}

// Live is a live session's recovery point, sealed by one goroutine at a
// time; End may be called from any goroutine, at any moment.
type Live struct {
	root, id, dir string
	tree, stage   *workspace.Dir
	body          pointBody
	held          map[string]held
	// unapplied: the sealed point's apply was cut short (a disk failing
	// midway); tree/ and stage/ are put right (settle) before anything
	// else, and this is then what tree/ holds (nil: nothing pending).
	unapplied map[string]held
	// files and pointSize: what the sealed point's files and its
	// point.json take.
	files, pointSize int64

	// mu orders End with a seal's commit (writePoint): once ended (the
	// point marked removed, durably, at gone: "" when nothing was
	// there), no point.json is written, so no seal racing with its
	// session's end brings the point back.
	mu    sync.Mutex
	ended bool
	gone  string
}

// LiveDir is the directory of the recovery point of id under root.
func LiveDir(root, id string) string { return filepath.Join(root, livePrefix+id) }

// NewLive makes the recovery point of the live session id under root,
// empty (nothing is recovered of it until its first Seal). One left by
// an earlier session of that id is removed first.
func NewLive(root, id string) (*Live, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := EnsureRoot(root); err != nil {
		return nil, err
	}
	if err := RemoveLive(root, id); err != nil && !errors.Is(err, ErrLeftBehind) {
		return nil, diskErr(err)
	}
	dir := LiveDir(root, id)
	for _, d := range []string{dir, filepath.Join(dir, liveTree), filepath.Join(dir, liveStage)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, diskErr(err)
		}
	}
	// The point's directory is in root for good (tree/ and stage/ in
	// it are, with its first point.json: writePoint).
	hook("fsync root")
	if err := syncDir(root); err != nil {
		os.RemoveAll(dir)
		return nil, diskErr(err)
	}
	l := &Live{root: root, id: id, dir: dir, held: map[string]held{}}
	var err error
	if l.tree, err = workspace.OpenOutBeneath(dir, liveTree); err == nil {
		l.stage, err = workspace.OpenOutBeneath(dir, liveStage)
	}
	if err != nil {
		l.Remove()
		return nil, diskErr(err)
	}
	return l, nil
}

// Seal makes ws's files as they are now, and session (the caller's
// description), the recovery point of the operation that completed at
// at; it returns the snapshot of ws it kept. Only the files that
// changed since the last point are copied; captured, if set, is called
// with that snapshot once they are (the rest of the seal reads nothing
// of ws: the workspace may change from then on). A workspace that cannot be
// kept whole (more than a listing holds, files over max bytes in all,
// a file changing while it is copied), or whose cost admit refuses
// (asked before anything is written: no room on the disk, a quota, a
// budget), is an error, and the last point stays, saying why it is
// behind (Point.Behind) when it can: once, at the first operation it
// could not keep (a point that stays behind is not rewritten at every
// operation after it).
func (l *Live) Seal(ctx context.Context, at time.Time, session []byte, ws *workspace.Dir, max int64, admit func(Cost) error, captured func(workspace.Snapshot)) (workspace.Snapshot, error) {
	snap, err := l.seal(ctx, at, session, ws, max, admit, captured)
	if err != nil && l.body.Seq > 0 && l.body.Behind == "" && !errors.Is(err, errdefs.ErrGone) && !errors.As(err, new(errUnapplied)) && ctx.Err() == nil {
		b := l.body
		b.Behind, b.BehindAt = errdefs.Message(err), at
		if werr := l.writePoint(b); werr == nil {
			l.body = b
		}
	}
	return snap, err
}

// Cost is what a seal is about to write, asked of its caller before
// anything is (admit): Copy bytes of files copied into the point, about
// Point bytes of point.json, and Held bytes of files in the point once
// it is sealed (what it then takes on the disk, beside point.json).
type Cost struct {
	Copy, Point, Held int64
}

// pointCost is about what point.json takes for entries (path: an
// entry's path) and session.
func pointCost[E any](entries []E, path func(E) string, session []byte) int64 {
	n := int64(len(session)) + 256
	for _, e := range entries {
		n += entryCost(path(e))
	}
	return n
}

// Bytes is what the sealed point takes on the disk: its files and
// point.json (0: none sealed).
func (l *Live) Bytes() int64 {
	if l.body.Seq == 0 {
		return 0
	}
	return l.files + l.pointSize
}

func (l *Live) seal(ctx context.Context, at time.Time, session []byte, ws *workspace.Dir, max int64, admit func(Cost) error, captured func(workspace.Snapshot)) (workspace.Snapshot, error) {
	// The directory may have become another user's to write since
	// (package privdir): nothing more is sealed there.
	if err := EnsureRoot(l.root); err != nil {
		return workspace.Snapshot{}, err
	}
	// The last point's apply, cut short: put right first, so that its
	// staged files never linger beside this one's.
	if l.unapplied != nil {
		if err := l.settle(); err != nil {
			return workspace.Snapshot{}, liveDiskErr(err)
		}
	}
	entries, truncated, err := ws.List("", true)
	if err != nil {
		return workspace.Snapshot{}, err
	}
	snap := workspace.SnapshotOf(entries, truncated)
	hook("listed")
	if truncated {
		return snap, fmt.Errorf("%w: the workspace has more than %d entries, or paths deeper than %d levels or longer than %d bytes: it cannot be kept whole",
			errdefs.ErrTooLarge, workspace.MaxListLength, workspace.MaxPathDepth, workspace.MaxPathLen)
	}
	next := pointBody{Point: Point{Seq: l.body.Seq + 1, At: at, Session: session}, Entries: make([]liveEntry, 0, len(entries))}
	nextHeld := make(map[string]held, len(entries))
	var contents, toCopy int64
	var copies []int
	for _, e := range entries {
		mode := uint32(modeOf(e.Mode))
		switch e.Type {
		case "dir":
			next.Entries = append(next.Entries, liveEntry{Path: e.Path, Dir: true, Mode: mode})
			nextHeld[e.Path] = held{dir: true, mode: mode}
		case "file":
			contents += e.Size
			h := held{mode: mode, size: e.Size, mtime: e.ModTime.UnixNano(), ino: e.Ino}
			if l.held[e.Path] != h {
				copies = append(copies, len(next.Entries))
				toCopy += e.Size
			}
			next.Entries = append(next.Entries, liveEntry{Path: e.Path, Mode: mode, Size: e.Size})
			nextHeld[e.Path] = h
		}
	}
	if contents > max {
		return snap, fmt.Errorf("%w: the workspace's files come to %d bytes (a sparse file's holes count in full), more than a paused session may hold (%d)", errdefs.ErrTooLarge, contents, max)
	}
	if admit != nil {
		if err := admit(Cost{Copy: toCopy, Point: pointCost(next.Entries, func(e liveEntry) string { return e.Path }, session), Held: contents}); err != nil {
			return snap, err
		}
	}
	var staged []string
	ok := false
	defer func() {
		if !ok {
			for _, name := range staged {
				l.stage.Remove(name, false)
			}
		}
	}()
	// What the copies may take in all: a file may have grown since it
	// was listed (code still running in the sandbox), and the point
	// holds no more than max whatever it does.
	left := max - (contents - toCopy)
	for i, idx := range copies {
		if err := ctx.Err(); err != nil {
			return snap, err
		}
		e := &next.Entries[idx]
		name := strconv.Itoa(next.Seq) + "-" + strconv.Itoa(i)
		st, err := l.copyIn(ctx, ws, e.Path, name, left, max)
		if err != nil {
			return snap, err
		}
		left -= st.size
		staged = append(staged, name)
		e.Stage, e.Size, e.Mode = name, st.size, st.mode
		nextHeld[e.Path] = st
		hook("staged")
	}
	if captured != nil {
		captured(snap)
	}
	// The staged files and their names are on the disk before the point
	// that names them (the last point's moves into tree/ are: apply).
	if err := l.fsync(l.stage, liveStage, append(staged, "")...); err != nil {
		return snap, liveDiskErr(err)
	}
	hook("synced")
	if err := l.writePoint(next); err != nil {
		return snap, err
	}
	ok = true
	hook("sealed")
	l.body, l.files = next, contents
	if err := l.apply(nextHeld); err != nil {
		// Sealed, not applied (Recover applies it after a crash): put
		// right at once, else by the next seal, before it copies
		// anything (the staged files are moved in, what else stage/
		// holds goes: nothing is kept twice).
		l.unapplied = nextHeld
		if serr := l.settle(); serr != nil {
			return snap, errUnapplied{liveDiskErr(errors.Join(err, serr))}
		}
		hook("applied")
		return snap, nil
	}
	l.held = nextHeld
	hook("applied")
	return snap, nil
}

// copyIn copies the regular file rel of ws into stage/name: only what
// ws.Open opens (beneath its root, never through a symlink, only a
// regular file), exactly its size, at most left bytes (what the point
// has left of max: a file may have grown since it was listed), and only
// if it did not change while it was read (its size and time stamp, from
// its descriptor, before and after), tried twice.
func (l *Live) copyIn(ctx context.Context, ws *workspace.Dir, rel, name string, left, max int64) (held, error) {
	for try := 0; try < 2; try++ {
		h, err := l.copyOnce(ctx, ws, rel, name, left, max)
		if !errors.Is(err, errChanged) {
			return h, err
		}
	}
	return held{}, fmt.Errorf("%w: /workspace/%s kept changing while it was copied (a background process?)", errdefs.ErrConflict, rel)
}

func (l *Live) copyOnce(ctx context.Context, ws *workspace.Dir, rel, name string, left, max int64) (held, error) {
	f, e, err := ws.Open(rel)
	if errors.Is(err, errdefs.ErrNotFound) {
		return held{}, fmt.Errorf("%w: /workspace/%s was removed while it was copied", errdefs.ErrConflict, rel)
	}
	if err != nil {
		return held{}, err
	}
	defer f.Close()
	if e.Size > left {
		return held{}, fmt.Errorf("%w: /workspace/%s grew to %d bytes while the workspace was copied: its files would come to more than a paused session may hold (%d)",
			errdefs.ErrTooLarge, rel, e.Size, max)
	}
	sr := &strictReader{r: f, left: e.Size}
	mode := uint32(modeOf(e.Mode))
	n, werr := l.stage.Write(name, &ctxReader{ctx: ctx, r: sr}, e.Size, os.FileMode(mode))
	if err := ctx.Err(); err != nil {
		return held{}, err
	}
	after, serr := f.Stat()
	if sr.changed || werr == nil && (serr != nil || n != e.Size || after.Size() != e.Size || !after.ModTime().Equal(e.ModTime)) {
		if werr == nil {
			l.stage.Remove(name, false)
		}
		return held{}, errChanged
	}
	if werr != nil {
		return held{}, liveDiskErr(werr)
	}
	return held{mode: mode, size: e.Size, mtime: e.ModTime.UnixNano(), ino: e.Ino}, nil
}

// liveDiskErr is the error of a recovery point's disk failing (full,
// or failing): the server's; the session runs on, its point behind.
func liveDiskErr(err error) error {
	return errdefs.Private(errdefs.ErrUnavailable, "the server's disk for recovery points (persistence.dir) is full or failing", err)
}

// apply makes tree/ what the sealed point l.body says, knowing it held
// what l.held says: what went is removed, directories made, staged
// files moved in; the directories moved into, made in, and stage/ are
// fsynced (the next point names the moved files in tree/; a removal
// lost to a crash is redone by Recover).
func (l *Live) apply(next map[string]held) error {
	for p, h := range l.held {
		if n, ok := next[p]; !ok || n.dir != h.dir {
			if err := l.tree.Remove(p, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
			hook("removed")
		}
	}
	if err := l.applyStaged(); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, e := range l.body.Entries {
		if e.Stage != "" || e.Dir && !l.held[e.Path].dir {
			dirs[parent(e.Path)] = true
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	rels := make([]string, 0, len(dirs))
	for d := range dirs {
		rels = append(rels, d)
	}
	slices.Sort(rels)
	if err := l.fsync(l.tree, liveTree, rels...); err != nil {
		return err
	}
	return l.fsync(l.stage, liveStage, "")
}

// parent is the directory of the workspace path p ("": the root).
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// fsync fsyncs rels beneath d, the point's directory name.
func (l *Live) fsync(d *workspace.Dir, name string, rels ...string) error {
	for _, rel := range rels {
		hook("fsync " + name + "/" + rel)
	}
	return d.Fsync(rels...)
}

// errUnapplied is the error of a seal whose point is sealed but whose
// tree/ could not be put right (settle): it is not behind.
type errUnapplied struct{ error }

func (e errUnapplied) Unwrap() error { return e.error }

func (e errUnapplied) Is(target error) bool { return target == ErrUnapplied }

// ErrUnapplied is matched (errors.Is) by the error of a seal whose point
// is sealed, whole (a crash recovers it; Bytes counts it), but whose
// files could not be put in place (the next seal does, first): the
// point is not behind.
var ErrUnapplied = errors.New("the point is sealed; its files are put in place by the next seal")

// settle puts tree/ and stage/ right after an apply cut short: what
// tree/ holds beyond the sealed point goes, the rest of the apply is
// done, then whatever stage/ still holds (staged for no point now) is
// removed; tree/ then holds l.unapplied. Bounded: one listing of each
// (at most workspace.MaxListLength entries), removals within the
// workspace's own budget.
func (l *Live) settle() error {
	want := make(map[string]bool, len(l.body.Entries))
	for _, e := range l.body.Entries {
		want[e.Path] = e.Dir
	}
	have, truncated, err := l.tree.List("", true)
	if err != nil {
		return err
	}
	if truncated {
		return fmt.Errorf("%w: the recovery point's tree cannot be listed whole", errdefs.ErrUnavailable)
	}
	for _, e := range have {
		dir, ok := want[e.Path]
		if !ok || dir != (e.Type == "dir") || e.Type != "dir" && e.Type != "file" {
			if err := l.tree.Remove(e.Path, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
		}
	}
	if err := l.apply(l.unapplied); err != nil {
		return err
	}
	left, _, err := l.stage.List("", false)
	if err != nil {
		return err
	}
	for _, e := range left {
		if err := l.stage.Remove(e.Path, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	l.held, l.unapplied = l.unapplied, nil
	return nil
}

// moveFault, if set (tests), is called before each staged file is moved
// into tree/; an error it returns is that move's.
var moveFault func() error

// applyStaged makes the point's directories in tree/ and moves its
// staged files there (a file already moved is left).
func (l *Live) applyStaged() error {
	for _, e := range l.body.Entries {
		if e.Dir {
			if err := l.tree.Mkdir(e.Path); err != nil {
				return err
			}
		}
	}
	for _, e := range l.body.Entries {
		if e.Dir || e.Stage == "" {
			continue
		}
		if moveFault != nil {
			if err := moveFault(); err != nil {
				return err
			}
		}
		if err := l.tree.MoveFrom(l.stage, e.Stage, e.Path); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		hook("moved")
	}
	return nil
}

// writePoint writes b as point.json: a temporary, synced, renamed into
// place, the directory synced; never once the point is ended (ErrGone).
func (l *Live) writePoint(b pointBody) error {
	raw, err := encodePoint(b)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return fmt.Errorf("%w: the session %s ended; its recovery point is not written", errdefs.ErrGone, l.id)
	}
	tmp := filepath.Join(l.dir, tmpPrefix+livePoint)
	os.Remove(tmp)
	hook("fsync point")
	if err := writeSynced(tmp, bytes.NewReader(raw)); err != nil {
		os.Remove(tmp)
		return liveDiskErr(err)
	}
	if err := os.Rename(tmp, filepath.Join(l.dir, livePoint)); err != nil {
		os.Remove(tmp)
		return liveDiskErr(err)
	}
	l.pointSize = int64(len(raw))
	hook("fsync dir")
	if err := syncDir(l.dir); err != nil {
		return liveDiskErr(err)
	}
	return nil
}

func encodePoint(b pointBody) ([]byte, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(raw)
	return json.Marshal(envelope{Version: version, SHA256: hex.EncodeToString(h[:]), Body: raw})
}

// Sealed is the last point sealed (Seq 0: none yet).
func (l *Live) Sealed() Point { return l.body.Point }

// Close releases the point's descriptors; its files stay.
func (l *Live) Close() {
	if l.tree != nil {
		l.tree.Close()
	}
	if l.stage != nil {
		l.stage.Close()
	}
}

// End ends the point durably (see end: renamed to a removal marker,
// root synced) without deleting its files, which Remove does once no
// seal of it runs: from then on no start recovers it and no seal
// commits (a seal under way fails with ErrGone). Any goroutine may call
// it, during a seal too. An error other than ErrLeftBehind: the point
// stands, whole, and seals go on.
func (l *Live) End() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return nil
	}
	gone, err := markEnded(l.root, l.dir)
	if err != nil && !errors.Is(err, ErrLeftBehind) {
		return err
	}
	l.ended, l.gone = true, gone
	return err
}

// Remove closes the point, ends it (End) and deletes its files: the
// session ended, or paused (its image supersedes it). No seal may run.
func (l *Live) Remove() error {
	l.Close()
	if err := l.End(); err != nil {
		return err
	}
	l.mu.Lock()
	gone := l.gone
	l.gone = ""
	l.mu.Unlock()
	if gone == "" {
		return nil
	}
	return deleteEnded(filepath.Base(l.dir), gone)
}

// RemoveLive removes the recovery point of id under root (none is not
// an error) durably (see end): once it returns nil or ErrLeftBehind, no
// later start recovers it; any other error leaves it whole.
func RemoveLive(root, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return end(root, LiveDir(root, id))
}

// ListLive returns the ids of the recovery points under root: the live
// sessions of a server that ended without pausing them.
func ListLive(root string) ([]string, error) { return listMarked(root, livePrefix) }

// listMarked returns the ids of the entries under root named prefix
// followed by a valid id (none, and no root: nil): directories, and
// whatever else has such a name (a symlink, a file), which its reader
// refuses as damage rather than leave it where nothing counts it.
func listMarked(root, prefix string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), prefix); ok && ValidID(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Recover makes the recovery point of id under root the image of a
// paused session (Write's), described by what describe makes of the
// point, and removes the point. A point never sealed (its session ended
// before its first seal completed) is removed, and ErrNotFound. One
// that fails a check (point.json damaged, a file of tree/ missing or of
// another size: the disk lost what was synced; anything in it that a
// seal never writes: a symlink, a FIFO, a device, a path out of the
// workspace) is ErrImageCorrupt, and one over max ErrTooLarge: both are
// left in place, never read beyond the check, for the caller to keep
// aside (KeepPoint); the Point returned then is what point.json says
// when it passed its checksum (Seq 0: not even that). An image of id
// in place already (the server ended between a pause's image and its
// point's removal) supersedes the point, which is removed
// (ErrConflict). Nothing is followed: a directory of the point
// replaced by a symlink is damage, never a way out of root.
func Recover(ctx context.Context, root, id string, max int64, describe func(Point) ([]byte, error)) (Point, Stats, error) {
	if err := checkID(id); err != nil {
		return Point{}, Stats{}, err
	}
	dir := LiveDir(root, id)
	bad := func(why string) error {
		return fmt.Errorf("%w: the recovery point of session %s (%s) cannot be used: %s", errdefs.ErrImageCorrupt, id, dir, why)
	}
	// Damage first, an image beside it or not: kept aside (KeepPoint),
	// counted, never left in place uncounted.
	if fi, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return Point{}, Stats{}, fmt.Errorf("%w: no recovery point of %s", errdefs.ErrNotFound, id)
	} else if err != nil {
		return Point{}, Stats{}, diskErr(err)
	} else if !fi.IsDir() {
		return Point{}, Stats{}, bad("it is not a directory (a symlink?)")
	}
	if _, err := os.Lstat(filepath.Join(root, id)); err == nil {
		return Point{}, Stats{}, errors.Join(fmt.Errorf("%w: the session %s was paused; its recovery point is not needed", errdefs.ErrConflict, id), RemoveLive(root, id))
	}
	raw, err := readRegular(filepath.Join(dir, livePoint), maxPoint)
	if err != nil && err.Error() == "missing" {
		return Point{}, Stats{}, errors.Join(fmt.Errorf("%w: the session %s ended before its first recovery point", errdefs.ErrNotFound, id), RemoveLive(root, id))
	}
	if err != nil {
		return Point{}, Stats{}, bad("point.json: " + err.Error())
	}
	b, err := decodePoint(raw)
	if err != nil {
		return b.Point, Stats{}, bad(err.Error())
	}
	want := make(map[string]liveEntry, len(b.Entries))
	for _, e := range b.Entries {
		want[e.Path] = e
	}
	l := &Live{root: root, id: id, dir: dir, body: b}
	if l.tree, err = workspace.OpenOutBeneath(dir, liveTree); err == nil {
		l.stage, err = workspace.OpenOutBeneath(dir, liveStage)
	}
	defer l.Close()
	if err != nil {
		return b.Point, Stats{}, bad(err.Error())
	}
	// What tree/ holds beyond the point (the removals of its apply, cut
	// short) goes; what is missing is moved in from stage/. Anything
	// but a file or a directory (which no seal writes) is damage, left
	// as it is.
	have, truncated, err := l.tree.List("", true)
	if err != nil || truncated {
		return b.Point, Stats{}, bad("tree/ cannot be listed whole")
	}
	for _, e := range have {
		if e.Type != "dir" && e.Type != "file" {
			return b.Point, Stats{}, bad(fmt.Sprintf("tree/ holds %q, which is not a file or directory (%s)", clip(e.Path), e.Type))
		}
	}
	staged, _, err := l.stage.List("", false)
	if err != nil {
		return b.Point, Stats{}, bad("stage/ cannot be listed")
	}
	for _, e := range staged {
		if e.Type != "file" {
			return b.Point, Stats{}, bad(fmt.Sprintf("stage/ holds %q, which is not a file (%s)", clip(e.Path), e.Type))
		}
	}
	for _, e := range have {
		if w, ok := want[e.Path]; !ok || w.Dir != (e.Type == "dir") {
			if err := l.tree.Remove(e.Path, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return b.Point, Stats{}, diskErr(err)
			}
		}
	}
	if err := l.applyStaged(); err != nil {
		return b.Point, Stats{}, bad("applying its staged files: " + err.Error())
	}
	have, _, err = l.tree.List("", true)
	if err != nil {
		return b.Point, Stats{}, bad("tree/ cannot be listed")
	}
	got := make(map[string]workspace.Entry, len(have))
	for _, e := range have {
		got[e.Path] = e
	}
	for _, w := range b.Entries {
		e, ok := got[w.Path]
		switch {
		case !ok:
			return b.Point, Stats{}, bad(fmt.Sprintf("%q is missing", clip(w.Path)))
		case w.Dir != (e.Type == "dir"), !w.Dir && e.Type != "file":
			return b.Point, Stats{}, bad(fmt.Sprintf("%q is a %s", clip(w.Path), e.Type))
		case !w.Dir && e.Size != w.Size:
			return b.Point, Stats{}, bad(fmt.Sprintf("%q has %d bytes, not %d", clip(w.Path), e.Size, w.Size))
		}
	}
	session, err := describe(b.Point)
	if err != nil {
		return b.Point, Stats{}, err
	}
	st, err := Write(ctx, root, id, session, l.tree, max, nil)
	if err != nil {
		return b.Point, Stats{}, err
	}
	l.Close()
	if err := RemoveLive(root, id); err != nil && !errors.Is(err, ErrLeftBehind) {
		return b.Point, st, fmt.Errorf("the recovery point of %s is an image now, but could not be removed: %w", id, err)
	}
	return b.Point, st, nil
}

// decodePoint reads point.json (raw) back, trusting nothing in it: its
// checksum, then every entry (a path in a workspace, named once, a size
// that is not negative, a staged name a seal makes). A point.json whose
// checksum passes but whose entries fail is returned with the error
// (its Point: whose session it was).
func decodePoint(raw []byte) (pointBody, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil || env.Version != version {
		return pointBody{}, errors.New("point.json is malformed (truncated?)")
	}
	h := sha256.Sum256(env.Body)
	if hex.EncodeToString(h[:]) != env.SHA256 {
		return pointBody{}, errors.New("point.json fails its checksum")
	}
	var b pointBody
	if err := json.Unmarshal(env.Body, &b); err != nil || b.Seq < 1 {
		return pointBody{}, errors.New("point.json's body is malformed")
	}
	if len(b.Entries) > workspace.MaxListLength {
		return b, fmt.Errorf("it names %d entries, more than a seal keeps (%d)", len(b.Entries), workspace.MaxListLength)
	}
	seen := make(map[string]bool, len(b.Entries))
	for _, e := range b.Entries {
		switch {
		case !entryPath(e.Path):
			return b, fmt.Errorf("it names %q, not a path in a workspace", clip(e.Path))
		case seen[e.Path]:
			return b, fmt.Errorf("it names %q twice", clip(e.Path))
		case !recorded(e.Size) || e.Dir && (e.Size != 0 || e.Stage != ""):
			return b, fmt.Errorf("its entry %q is malformed", clip(e.Path))
		case e.Stage != "" && !stageName(e.Stage):
			return b, fmt.Errorf("it names the staged file %q", clip(e.Stage))
		}
		seen[e.Path] = true
	}
	return b, nil
}

// stageName: s is a name a seal stages a file under (<seq>-<n>).
func stageName(s string) bool {
	a, b, ok := strings.Cut(s, "-")
	digits := func(p string) bool {
		if p == "" || len(p) > 20 {
			return false
		}
		for _, c := range []byte(p) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	return ok && digits(a) && digits(b)
}

// Archive opens the image's files once more, for a reader beside
// Restore's (Live.SealFromImage): the same file, whatever becomes of
// the image once it is open.
func (im *Image) Archive() (*os.File, error) {
	f, err := openRegular(filepath.Join(im.dir, filesName))
	if err != nil {
		return nil, corrupt(filepath.Base(im.dir), "files.tar: "+err.Error())
	}
	return f, nil
}

// SealFromImage makes the first point of l the workspace a paused
// session's image was just restored into, without reading the
// workspace (whose session may already change it): the files come from
// the image's archive (files, see Archive), what the point holds from
// entries (the workspace listed right after the restore, truncated
// saying whether all of it was). A file of another size than its entry
// (code that ran already) is an error: the caller then seals from the
// workspace. admit is asked for the cost (every file copied) first, as
// by Seal.
func (l *Live) SealFromImage(ctx context.Context, at time.Time, session []byte, entries []workspace.Entry, truncated bool, files io.Reader, max int64, admit func(Cost) error) (workspace.Snapshot, error) {
	snap := workspace.SnapshotOf(entries, truncated)
	if l.body.Seq != 0 {
		return snap, fmt.Errorf("%w: the recovery point of %s is sealed already", errdefs.ErrConflict, l.id)
	}
	if truncated {
		return snap, fmt.Errorf("%w: the workspace has more entries than a listing holds: it cannot be kept whole", errdefs.ErrTooLarge)
	}
	if err := EnsureRoot(l.root); err != nil {
		return snap, err
	}
	if admit != nil {
		var contents int64
		for _, e := range entries {
			if e.Type == "file" {
				contents += e.Size
			}
		}
		n := pointCost(entries, func(e workspace.Entry) string { return e.Path }, session)
		if err := admit(Cost{Copy: contents, Point: n, Held: contents}); err != nil {
			return snap, err
		}
	}
	im := &Image{dir: filepath.Join(l.root, l.id)}
	if err := im.extract(ctx, tar.NewReader(bufio.NewReader(files)), l.tree, max); err != nil {
		return snap, err
	}
	have, _, err := l.tree.List("", true)
	if err != nil {
		return snap, liveDiskErr(err)
	}
	got := make(map[string]workspace.Entry, len(have))
	for _, e := range have {
		got[e.Path] = e
	}
	next := pointBody{Point: Point{Seq: 1, At: at, Session: session}, Entries: make([]liveEntry, 0, len(entries))}
	hs := make(map[string]held, len(entries))
	for _, e := range entries {
		mode := uint32(modeOf(e.Mode))
		g, ok := got[e.Path]
		switch e.Type {
		case "dir":
			if !ok || g.Type != "dir" {
				return snap, fmt.Errorf("%w: /workspace/%s is not in the image", errdefs.ErrConflict, e.Path)
			}
			next.Entries = append(next.Entries, liveEntry{Path: e.Path, Dir: true, Mode: mode})
			hs[e.Path] = held{dir: true, mode: mode}
		case "file":
			if !ok || g.Type != "file" || g.Size != e.Size {
				return snap, fmt.Errorf("%w: /workspace/%s is not as the image holds it", errdefs.ErrConflict, e.Path)
			}
			next.Entries = append(next.Entries, liveEntry{Path: e.Path, Mode: mode, Size: e.Size})
			hs[e.Path] = held{mode: mode, size: e.Size, mtime: e.ModTime.UnixNano(), ino: e.Ino}
		}
	}
	// What the extraction wrote, file by file and directory by
	// directory, is on the disk before the point that names it.
	rels := make([]string, 0, len(have)+1)
	for _, e := range have {
		if e.Type == "file" || e.Type == "dir" {
			rels = append(rels, e.Path)
		}
	}
	if err := l.fsync(l.tree, liveTree, append(rels, "")...); err != nil {
		return snap, liveDiskErr(err)
	}
	if err := l.writePoint(next); err != nil {
		return snap, err
	}
	var contents int64
	for _, e := range next.Entries {
		contents += e.Size
	}
	l.body, l.held, l.files = next, hs, contents
	return snap, nil
}
