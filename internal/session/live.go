package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/pauseimage"
	"airlock/internal/workspace"
)

// Recovery points (persistence on): a client's session keeps, on
// persistence.dir, a copy of its workspace as of its last completed
// operation (an execution, a command, a file written, removed or moved
// through the API), sealed whole (pauseimage.Live). A server that ends
// without pausing it (kill -9, a crash, power loss) finds the point at
// its next start and lists the session as paused with those files
// (Manager.recoverLive). A seal runs after the operation, off its
// request's path; the session's next execution waits until the seal has
// copied what changed (not for its syncs), so that no point mixes the
// files of two executions. One whose files did not change since the
// last point (a warm "x = 1") seals nothing.

// livePoint is a session's recovery point and its sealing, one seal at
// a time.
type livePoint struct {
	s      *Session
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards the fields below. l is the point (nil until the first
	// seal makes it); last the snapshot of what its last seal copied;
	// pending: an operation completed at at since the running seal
	// listed the files; ready is closed once the workspace needs no copy
	// (nothing pending, the running seal's copy done; nil: it needs
	// none); idle is closed once no seal runs (nil: none does); closed:
	// the session ended, no seal starts or commits; ended: its point is
	// ended too (end; else a shutdown keeps it, see stop).
	mu      sync.Mutex
	l       *pauseimage.Live
	last    workspace.Snapshot
	pending bool
	at      time.Time
	ready   chan struct{}
	idle    chan struct{}
	closed  bool
	ended   bool
	// from: the first point is made of the image a resume restored
	// (nil: of the workspace).
	from *liveFrom
	// resumed: the image the session was resumed from stands, set
	// aside (pauseimage.MarkResumed), until a point is sealed or the
	// session ends; then it ends (Manager.endResumed).
	resumed bool
	// sealedAt: the operation's end the sealed point keeps (zero: none
	// sealed yet).
	sealedAt time.Time
	// What its seals cost and whether it is behind (sealbudget.go):
	// behind, why the operations since behindAt are not in it (""; it
	// is the last), behindLast the last of them, behindKind its outcome;
	// catchUp, the retry of a seal its budget deferred; execs, the
	// executions running (entered).
	behindAt, behindLast time.Time
	behind, behindKind   string
	catchUp              *time.Timer
	execs                int
	// bytes and marker: what the sealed point and the resumed marker
	// take on the disk (read under the manager's lock, without mu).
	bytes, marker atomic.Int64
}

// pointAt is the end of the operation the session's sealed point keeps
// (zero: none yet, or no persistence).
func (lp *livePoint) pointAt() time.Time {
	if lp == nil {
		return time.Time{}
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.sealedAt
}

// noteSealed records the point l now keeps (on the seal's goroutine:
// the one seal that runs).
func (lp *livePoint) noteSealed(l *pauseimage.Live) {
	var at time.Time
	if p := l.Sealed(); p.Seq > 0 {
		at = p.At
	}
	lp.mu.Lock()
	lp.sealedAt = at
	lp.mu.Unlock()
}

// resumedFrom says the session's resumed marker stands until its first
// point is sealed (a resume's commit, before the session is visible).
// bytes is what the marker (the image set aside) takes.
func (lp *livePoint) resumedFrom(bytes int64) {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	lp.resumed = true
	lp.marker.Store(bytes)
	lp.mu.Unlock()
}

// resumedPending: the session's resumed marker is still its only
// durable copy (no point sealed yet).
func (lp *livePoint) resumedPending() bool {
	if lp == nil {
		return false
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.resumed
}

// endResumed ends the session's resumed marker, if it still stands: a
// point is sealed (or the session ended, or was paused: its image is in
// place).
func (lp *livePoint) endResumed() {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	resumed := lp.resumed
	lp.resumed = false
	lp.mu.Unlock()
	if resumed && lp.s.m.endResumed(lp.s.id) {
		// (Not ended: it counts until the retry ends it.)
		lp.marker.Store(0)
	}
}

// liveFrom is what a resumed session's first point is made of: the
// workspace as listed right after its files were restored, and the
// image's archive they were restored from.
type liveFrom struct {
	entries   []workspace.Entry
	truncated bool
	files     *os.File
}

// fromImage makes lp's first point of im, which ws was just restored
// from (before the session is visible): a resume's first execution
// does not wait for a copy of the files it brought back. Without a
// listing or the archive, the first point is copied from ws.
func (lp *livePoint) fromImage(ws *workspace.Dir, im *pauseimage.Image) {
	if lp == nil {
		return
	}
	ents, truncated, err := ws.List("", true)
	if err != nil {
		return
	}
	f, err := im.Archive()
	if err != nil {
		return
	}
	lp.mu.Lock()
	lp.from = &liveFrom{entries: ents, truncated: truncated, files: f}
	lp.mu.Unlock()
}

// newLive is the recovery point of s, a client's session being made
// (nil with persistence off); its first seal is asked for once the
// session is registered.
func (m *Manager) newLive(s *Session) *livePoint {
	if !m.cfg.Persistence.Enabled {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &livePoint{s: s, ctx: ctx, cancel: cancel}
}

// changed asks for a seal when after (the workspace as an execution
// left it, completed at at) is not what the point keeps.
func (lp *livePoint) changed(after workspace.Snapshot, at time.Time) {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	same := lp.ready == nil && lp.last.Same(after)
	lp.mu.Unlock()
	if !same {
		lp.request(at)
	}
}

// request asks for a seal of the workspace as an operation that
// completed at at left it.
func (lp *livePoint) request(at time.Time) { lp.requestAt(at, true) }

// first asks for the session's first point, as it is registered: one
// made of the image a resume restored reads nothing of the workspace,
// and no execution waits for it.
func (lp *livePoint) first(at time.Time) {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	copies := lp.from == nil
	lp.mu.Unlock()
	lp.requestAt(at, copies)
}

// requestAt asks for a seal; copies: it reads the workspace, which the
// next execution waits for.
func (lp *livePoint) requestAt(at time.Time, copies bool) {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.requestLocked(at, copies)
}

// requestLocked is requestAt with mu held.
func (lp *livePoint) requestLocked(at time.Time, copies bool) {
	if lp.closed {
		return
	}
	lp.pending, lp.at = true, at
	if lp.ready == nil && copies {
		lp.ready = make(chan struct{})
	}
	if lp.idle != nil {
		return // the running seal seals again
	}
	lp.idle = make(chan struct{})
	m := lp.s.m
	m.seals.Add(1)
	go func() {
		defer m.seals.Done()
		lp.run()
	}()
}

// run seals until nothing is pending.
func (lp *livePoint) run() {
	for {
		lp.mu.Lock()
		if lp.closed || !lp.pending {
			lp.readyLocked()
			close(lp.idle)
			lp.idle = nil
			lp.mu.Unlock()
			return
		}
		lp.pending = false
		at := lp.at
		lp.mu.Unlock()
		lp.seal(at)
	}
}

// readyLocked says the workspace needs no copy, unless one is pending
// (mu is held).
func (lp *livePoint) readyLocked() {
	if lp.ready != nil && (!lp.pending || lp.closed) {
		close(lp.ready)
		lp.ready = nil
	}
}

// seal makes the workspace as it is now the point of the operation
// that completed at at.
func (lp *livePoint) seal(at time.Time) {
	s, m := lp.s, lp.s.m
	if liveHook != nil {
		liveHook("sealing", s.id)
	}
	lp.mu.Lock()
	l := lp.l
	lp.mu.Unlock()
	if l == nil {
		var err error
		if l, err = pauseimage.NewLive(m.persistDir(), s.id); err != nil {
			m.log.Warn("a session's recovery point could not be made; a kill -9 of the server would lose its files", "session", s.id, "err", err)
			return
		}
		lp.mu.Lock()
		closed := lp.closed
		if !closed {
			lp.l = l
		}
		lp.mu.Unlock()
		if closed {
			// The session ended meanwhile, and end saw no point: this
			// one, never sealed, goes (nothing recovers it meanwhile:
			// it has no point.json).
			if err := m.leftOK(l.Remove()); err != nil {
				m.log.Error("removing an ended session's unsealed recovery point failed; the next start removes it", "session", s.id, "err", err)
			}
			return
		}
	}
	meta := s.pausedMeta()
	meta.PausedAt = at
	raw, err := json.Marshal(meta)
	if err != nil {
		return
	}
	max := min(int64(m.cfg.Persistence.MaxImageBytes), int64(s.limits.Disk))
	lp.mu.Lock()
	from := lp.from
	lp.from = nil
	if from != nil {
		// Made of the image: nothing of the workspace is read, the next
		// execution may write at once.
		lp.last = workspace.SnapshotOf(from.entries, from.truncated)
		lp.readyLocked()
	}
	lp.mu.Unlock()
	// Every seal is admitted first (admitSeal); what it reserves is
	// given back once it is done, and its outcome recorded (sealed).
	var release func()
	var wrote int64
	admit := func(c pauseimage.Cost) error {
		r, err := m.admitSeal(lp, c)
		if err == nil {
			release, wrote = r, c.Copy+c.Point
		}
		return err
	}
	done := func(err error) (news bool) {
		if release != nil {
			release()
			release = nil
		}
		if !errors.Is(err, errdefs.ErrGone) && lp.ctx.Err() == nil {
			news = lp.sealed(l, at, err, wrote)
		}
		wrote = 0
		return news
	}
	if from != nil {
		_, err := l.SealFromImage(lp.ctx, at, raw, from.entries, from.truncated, from.files, max, admit)
		from.files.Close()
		lp.noteSealed(l)
		done(err)
		if err == nil {
			lp.endResumed()
			if liveHook != nil {
				liveHook("sealed", s.id)
			}
			return
		}
		if lp.ctx.Err() == nil {
			m.log.Info("a resumed session's first recovery point could not be made of its image; copying its workspace", "session", s.id, "err", err)
		}
		// Copied from the workspace instead, at once (waited for).
		lp.mu.Lock()
		lp.last = workspace.Snapshot{}
		if !lp.closed {
			lp.pending = true
			if lp.ready == nil {
				lp.ready = make(chan struct{})
			}
		}
		lp.mu.Unlock()
		return
	}
	_, err = l.Seal(lp.ctx, at, raw, s.workspace(), max, admit, func(snap workspace.Snapshot) {
		// Copied: the next execution may write.
		lp.mu.Lock()
		lp.last = snap
		lp.readyLocked()
		lp.mu.Unlock()
	})
	lp.noteSealed(l)
	news := done(err)
	if errors.Is(err, pauseimage.ErrUnapplied) {
		m.log.Warn("a session's recovery point is sealed, but its files could not be put in place; the next seal does", "session", s.id, "err", err)
	}
	if err != nil {
		lp.mu.Lock()
		lp.last = workspace.Snapshot{} // the next execution seals again
		lp.mu.Unlock()
		if news {
			// Once a kind of failure, not at every operation it keeps
			// refusing (a sandbox could fill the log so).
			m.log.Warn("a session's recovery point could not be sealed; it stays at the last one, stale, until a seal succeeds", "session", s.id, "point_at", l.Sealed().At, "outcome", sealOutcome(err), "err", err)
		}
		return
	}
	lp.endResumed()
	if liveHook != nil {
		liveHook("sealed", s.id)
	}
}

// wait waits until the workspace needs no copy for a point: the next
// execution's files are not those of the point being sealed.
func (lp *livePoint) wait(ctx context.Context) error {
	if lp == nil {
		return nil
	}
	lp.mu.Lock()
	ready := lp.ready
	lp.mu.Unlock()
	if ready == nil {
		return nil
	}
	if liveHook != nil {
		liveHook("waiting", lp.s.id)
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop stops the point's seals with its session, keeping the point
// (a shutdown that could not pause the session: the next start
// recovers it, as after a crash): no seal starts, one under way stops
// at its next read, and none commits after close.
func (lp *livePoint) stop() {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	lp.closed = true
	lp.cancel()
	lp.mu.Unlock()
}

// end ends the point with its session (terminate, before it reports
// the end), durably and before anything else can seal: no seal starts
// after it, none under way commits (pauseimage.Live.End), and no start
// recovers the session from it. The resumed marker ends first: a point
// ended before it would leave it to come back as the session's image at
// the next start. Its files are deleted by close, once no seal runs.
// Idempotent; after stop too (a delete that raced with a shutdown).
func (lp *livePoint) end() {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	lp.closed = true
	lp.cancel()
	done := lp.ended
	lp.ended = true
	l := lp.l
	lp.mu.Unlock()
	if done {
		return
	}
	lp.endResumed()
	m, id := lp.s.m, lp.s.id
	var err error
	if l != nil {
		err = l.End()
	} else {
		// None made yet (a seal making one removes it, seeing closed),
		// or one a shutdown kept (stop, then close).
		err = pauseimage.RemoveLive(m.persistDir(), id)
	}
	if err = m.leftOK(err); err != nil {
		lp.removeLater(err)
	}
}

// close releases the point once its session is torn down: a seal under
// way (stopped at its next read) is waited for, then an ended point's
// files are deleted (end made its end durable already), a kept one's
// descriptors closed.
func (lp *livePoint) close() {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	lp.closed = true
	lp.cancel()
	idle := lp.idle
	lp.mu.Unlock()
	if idle != nil {
		<-idle
	}
	lp.release()
}

// release is close once no seal runs or starts: l is the last word.
func (lp *livePoint) release() {
	lp.mu.Lock()
	l, from, ended := lp.l, lp.from, lp.ended
	lp.l, lp.from = nil, nil
	lp.mu.Unlock()
	if from != nil {
		from.files.Close()
	}
	if l == nil {
		return
	}
	if !ended {
		l.Close()
		return
	}
	lp.remove(l)
}

// remove deletes the recovery point of an ended or paused session; when
// its end is not durable, the sweep tries again, or the next start would
// list the session as paused.
func (lp *livePoint) remove(l *pauseimage.Live) {
	if err := lp.s.m.leftOK(l.Remove()); err != nil {
		lp.removeLater(err)
	}
}

// removeLater has the sweep end the point of the ended session, whose
// end failed (err).
func (lp *livePoint) removeLater(err error) {
	m, id := lp.s.m, lp.s.id
	m.log.Error("removing an ended session's recovery point failed; tried again in a while (until then the next start would list it as paused)", "session", id, "retry", removeRetry, "err", err)
	name := filepath.Base(pauseimage.LiveDir(m.persistDir(), id))
	m.removeLater(name, func() error {
		m.mu.Lock()
		_, live := m.sessions[id]
		m.mu.Unlock()
		if live {
			// Resumed meanwhile: the point is its own now.
			return nil
		}
		return m.leftOK(pauseimage.RemoveLive(m.persistDir(), id))
	})
}

// liveHook, if set (tests), is called as a seal begins ("sealing"),
// once it is sealed ("sealed"), and as an execution waits for one
// ("waiting").
var liveHook func(point, id string)

// liveRoom refuses a seal that would copy n bytes onto persistence.dir
// with less than imageHeadroom left beside them and the pauses under
// way.
func (m *Manager) liveRoom(n int64) error {
	free, err := m.diskFree("the server's disk for recovery points cannot be read")
	if err != nil {
		return err
	}
	m.mu.Lock()
	room := m.roomLocked(free, n)
	m.mu.Unlock()
	if !room {
		return fmt.Errorf("%w: the server's disk for paused sessions has no room for this session's changed files (%d bytes)", errdefs.ErrUnavailable, n)
	}
	return nil
}

// recoveredReason is what a session recovered from its point says
// (paused.recovered, then its resume's restored_reason).
func recoveredReason(p pauseimage.Point) string {
	r := "recovered after the server ended unexpectedly: workspace as of its last completed operation (an execution, a command or a file change) at " + p.At.UTC().Format(time.RFC3339Nano)
	if p.Behind != "" {
		r += fmt.Sprintf("; what completed after it (at %s) could not be kept: %s", p.BehindAt.UTC().Format(time.RFC3339Nano), p.Behind)
	}
	return r + "; its interpreters start afresh"
}

// recoverLive makes the recovery points a server that ended without
// pausing its sessions left under persistence.dir paused sessions'
// images, which LoadPaused then lists. A point that cannot be recovered
// (damaged, or over persistence.max_image_bytes) is kept aside for the
// operator (keepDamagedPoint), counted and expired as a damaged image
// is; one the disk could not recover (full) stays in place, logged,
// and is tried again at the next start: nothing is lost either way.
func (m *Manager) recoverLive() {
	ids, err := pauseimage.ListLive(m.persistDir())
	if err != nil {
		m.log.Error("the recovery points of live sessions cannot be listed", "dir", m.persistDir(), "err", err)
		return
	}
	for _, id := range ids {
		// An image beside the point supersedes it (a pause completed),
		// unless the image cannot be read: it is kept aside, and the
		// point, the session's files as the pause found them, recovered.
		if _, meta, err := m.openImage(id); errors.Is(err, errdefs.ErrImageCorrupt) {
			tenant := ""
			if meta.ID == id {
				tenant = meta.Tenant
			}
			m.keepDamaged(id, tenant, err)
		}
		p, st, err := pauseimage.Recover(context.Background(), m.persistDir(), id, int64(m.cfg.Persistence.MaxImageBytes), func(p pauseimage.Point) ([]byte, error) {
			var meta pausedMeta
			if err := json.Unmarshal(p.Session, &meta); err != nil || meta.ID != id {
				return nil, fmt.Errorf("%w: the recovery point of %s describes another session, or is malformed", errdefs.ErrImageCorrupt, id)
			}
			meta.PausedAt, meta.Recovered = p.At, recoveredReason(p)
			meta.MemoryPending, meta.MemoryError, meta.ExplicitResume = false, "", false
			return json.Marshal(meta)
		})
		switch {
		case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrConflict):
			m.log.Info("a recovery point was not needed", "session", id, "why", err)
		case errors.Is(err, errdefs.ErrImageCorrupt), errors.Is(err, errdefs.ErrTooLarge):
			m.keepDamagedPoint(id, p, err)
		case err != nil:
			m.pendingPoint(id, p, err)
		default:
			m.log.Warn("a live session lost to the server's end is recovered as paused, its workspace as of its last completed operation", "session", id, "point_at", p.At, "files", st.Files, "bytes", st.Bytes, "behind", p.Behind)
		}
	}
}

// keepDamagedPoint keeps the recovery point of id, which cannot be
// recovered (why), for the operator to inspect until persistence.keep
// from now, as keepDamaged keeps a damaged image: counted against its
// tenant's quota (what its point.json said, when that passed its
// checksum and names this session; else UnknownTenant's), and removed
// when it expires. One that cannot be moved stays where it was, logged,
// until the next start tries again.
func (m *Manager) keepDamagedPoint(id string, p pauseimage.Point, why error) {
	tenant := pointTenant(id, p)
	now := time.Now()
	k, err := pauseimage.KeepPoint(m.persistDir(), id, now, pauseimage.Kept{
		Tenant: tenant, Expires: now.Add(m.cfg.Persistence.Keep.D()), Reason: errdefs.Message(why),
	})
	if k.Dir == "" {
		m.log.Error("a live session's recovery point cannot be recovered, and could not be kept aside; it is left where it is for the operator until the next start", "session", id, "dir", pauseimage.LiveDir(m.persistDir(), id), "why", why, "err", err)
		return
	}
	// Counted from here on: LoadPaused lists the kept directories
	// (ListKept), this one with them.
	m.log.Error("a live session's recovery point cannot be recovered; it is kept for inspection, counted against its tenant's quota, until it expires", "session", id, "tenant", tenant, "dir", k.Dir, "bytes", k.Bytes, "expires", k.Expires, "why", why, "err", err)
}

// pointTenant is whose the point of id is: what its point.json says
// when that passed its checksum and names this session (a session of
// no tenant, server.auth "none", is counted as such: "", as its paused
// sessions are), else UnknownTenant.
func pointTenant(id string, p pauseimage.Point) string {
	var meta pausedMeta
	if p.Seq > 0 && json.Unmarshal(p.Session, &meta) == nil && meta.ID == id {
		return meta.Tenant
	}
	return UnknownTenant
}

// pendingPoint leaves the recovery point of id, which the disk could
// not recover now (why: full, failing), in place for the next start,
// whole; meanwhile it is counted against its tenant's quota (it takes
// the disk all the same), and removed by the sweep if it is still here
// when its session would have expired (persistence.keep after its
// point), as that paused session would have been.
func (m *Manager) pendingPoint(id string, p pauseimage.Point, why error) {
	now := time.Now()
	expires := now.Add(m.cfg.Persistence.Keep.D())
	if p.Seq > 0 {
		expires = p.At.Add(m.cfg.Persistence.Keep.D())
	}
	k := pauseimage.Kept{ID: id, Tenant: pointTenant(id, p), Expires: expires, Reason: errdefs.Message(why),
		Dir: pauseimage.LiveDir(m.persistDir(), id), Bytes: pauseimage.PointBytes(m.persistDir(), id), Pending: true}
	m.mu.Lock()
	m.keptLocked(k)
	m.mu.Unlock()
	m.log.Error("a live session's recovery point cannot be recovered now (the server's disk); it is left in place, counted against its tenant's quota, and tried again at the next start (removed if still here when its session would have expired)",
		"session", id, "tenant", k.Tenant, "dir", k.Dir, "bytes", k.Bytes, "expires", k.Expires, "err", why)
}
