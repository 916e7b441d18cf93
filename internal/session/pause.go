package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/instance"
	"airlock/internal/pauseimage"
	"airlock/internal/privdir"

	"golang.org/x/sys/unix"
)

// Pausing and resuming (persistence): a pause writes a session's files
// and what made it (pausedMeta) as an image under persistence.dir, then
// ends its sandbox (end "paused"); a resume creates a session of the same
// id from the image in a fresh sandbox. The interpreter restarts: what a
// resume restores is RestoreFiles.

// pausedMeta is what an image keeps of its session besides its files.
type pausedMeta struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	KeyID  string `json:"key_id,omitempty"`
	// Request creates the session again: its language, isolation and
	// template, its limits and idle timeout as resolved, its environment,
	// its network policy as last set, its history bounds and lifecycle.
	Request    apitype.CreateSessionRequest `json:"request"`
	Created    time.Time                    `json:"created"`
	PausedAt   time.Time                    `json:"paused_at"`
	Executions int                          `json:"executions"`
	// Contexts are the session's live code contexts besides its default
	// one, oldest first, started again (fresh interpreters) on resume;
	// CtxNext numbers those clients create.
	Contexts []pausedContext `json:"contexts,omitempty"`
	CtxNext  int             `json:"ctx_next,omitempty"`
	// ExplicitResume: the pause asked to be undone only by a resume,
	// never by auto_resume (see PauseAsk).
	ExplicitResume bool `json:"explicit_resume,omitempty"`
	// ByShutdown: the server's shutdown paused it (PauseAsk.ByShutdown).
	ByShutdown bool `json:"by_shutdown,omitempty"`
	// MemoryPending: the pause went on to keep the memory after the
	// files. An image that says so and has no memory lost it to the
	// server's end (kill -9, a crash) while it was checkpointed: it
	// resumes with its files, and says why (memoryLostError).
	MemoryPending bool `json:"memory_pending,omitempty"`
	// MemoryError: why the pause kept no memory where it was to keep it
	// (paused.memory_error), said again after a restart.
	MemoryError string `json:"memory_error,omitempty"`
	// Recovered: the session was live when its server ended without
	// pausing it, and this image was made of its recovery point (see
	// live.go): what that kept (paused.recovered, then restored_reason).
	Recovered string `json:"recovered,omitempty"`
}

// memoryLostError is the memory_error of a paused session whose pause
// was to keep its memory and whose server ended before the checkpoint
// was in place.
func memoryLostError() error {
	return errdefs.Private(nil, "the server stopped (a crash, kill -9, power loss) while this session's memory was being kept; its files are kept as they were when the pause began, and its interpreters start afresh on resume", nil)
}

// pausedContext is a code context as a pause keeps it.
type pausedContext struct {
	ID       string            `json:"id"`
	Language string            `json:"language"`
	Cwd      string            `json:"cwd"`
	Env      map[string]string `json:"env,omitempty"`
}

// pausedSession is a paused session the manager knows of (under m.mu).
type pausedSession struct {
	meta  pausedMeta
	stats pauseimage.Stats
	// memBytes: what its memory image takes on disk (0: none, memErr
	// says why when one was to be kept).
	memBytes int64
	memErr   error
	// resuming: a resume is under way, closed when it is over (nil:
	// none); err: why it cannot be resumed (a corrupt image).
	resuming chan struct{}
	err      error
}

// PausedError is the error of a call to a paused session (ErrPaused);
// Explicit: its pause asked to be resumed only explicitly (PauseAsk).
type PausedError struct {
	ID       string
	Explicit bool
}

func (e *PausedError) Error() string {
	if e.Explicit {
		return fmt.Sprintf("session %s is paused, and its pause asked for an explicit resume (E2B's keepMemory false): resume it with POST /v1/sessions/%s/resume (E2B: Sandbox.connect)", e.ID, e.ID)
	}
	return fmt.Sprintf("session %s is paused: resume it with POST /v1/sessions/%s/resume (or create sessions with auto_resume)", e.ID, e.ID)
}
func (e *PausedError) Unwrap() error { return errdefs.ErrPaused }

func (p *pausedSession) info(keep time.Duration) apitype.Session {
	r := p.meta.Request
	info := apitype.Session{
		ID: p.meta.ID, Language: r.Language, State: apitype.StatePaused,
		CreatedAt: p.meta.Created.UTC(), LastUsedAt: p.meta.PausedAt.UTC(),
		IdleTimeout: r.IdleTimeout, Limits: r.Limits, Executions: p.meta.Executions,
		Isolation: r.Isolation, Template: r.Template, Tenant: p.meta.Tenant,
		OnTimeout: r.OnTimeout, OnTimeoutRestores: r.OnTimeoutRestores, AutoResume: r.AutoResume,
		Restores: apitype.RestoreFiles, Metadata: r.Metadata,
		Paused: &apitype.PausedInfo{
			PausedAt: p.meta.PausedAt.UTC(), Files: p.stats.Files, Dirs: p.stats.Dirs,
			Bytes: p.stats.Bytes, DiskBytes: p.stats.DiskBytes, ExpiresAt: p.meta.PausedAt.Add(keep).UTC(),
			ExplicitResume: p.meta.ExplicitResume, ByShutdown: p.meta.ByShutdown, Recovered: p.meta.Recovered,
		},
	}
	if p.memBytes > 0 {
		info.Restores, info.Paused.MemoryBytes = apitype.RestoreMemory, p.memBytes
	}
	if p.memErr != nil {
		info.Paused.MemoryError = errdefs.Message(p.memErr)
	}
	for _, sk := range p.stats.Skipped {
		info.Paused.Skipped = append(info.Paused.Skipped, apitype.PauseSkipped{Path: sk.Path, Type: sk.Type})
	}
	if p.err != nil {
		info.Paused.Error = errdefs.Message(p.err)
	}
	return info
}

// persistDir is where images are kept.
func (m *Manager) persistDir() string { return m.cfg.PersistenceDir() }

// resolveResumed settles the resumed markers (MarkResumed) a server left
// under persistence.dir, once the recovery points are images: a marker
// whose session has an image (a later pause's, or its point's) ends; one
// whose session has none is its image again, and the session paused.
func (m *Manager) resolveResumed() {
	ids, err := pauseimage.ListResumed(m.persistDir())
	if err != nil {
		m.log.Error("the images of resumed sessions cannot be listed", "dir", m.persistDir(), "err", err)
		return
	}
	for _, id := range ids {
		restored, err := pauseimage.ResolveResumed(m.persistDir(), id)
		switch err = m.leftOK(err); {
		case err != nil:
			m.log.Error("a resumed session's set-aside image cannot be settled; it is left for the next start", "session", id, "err", err)
		case restored:
			m.log.Warn("a session resumed before the server ended, with no recovery point sealed since, is paused again as it was", "session", id)
		default:
			m.log.Info("a resumed session's set-aside image was not needed (it has a later image)", "session", id)
		}
	}
}

// LeftWhileOff says what persistence.dir holds from an earlier run
// with persistence on, which a server with it off leaves as it is (not
// listed, resumed, counted or removed): "" when nothing (or when
// persistence is on). For the log and airlock doctor.
func LeftWhileOff(cfg config.Config) string {
	if cfg.Persistence.Enabled {
		return ""
	}
	c, err := pauseimage.Census(cfg.PersistenceDir())
	if err != nil || !c.Any() {
		return ""
	}
	return fmt.Sprintf("persistence is off, but %s holds %d paused sessions, %d recovery points of live sessions and %d images kept for inspection from an earlier run: they are neither listed, resumed nor removed until persistence.enabled is on again (or the directory is removed)",
		cfg.PersistenceDir(), c.Images, c.Points, c.Kept)
}

// LoadPaused lists the sessions paused under persistence.dir (by an
// earlier run of the server, which paused them when it shut down) as
// paused, sweeps what interrupted pauses left behind, and starts
// deleting those kept longer than persistence.keep. An image whose
// description fails its checks, and a recovery point that cannot be
// recovered, is kept aside for the operator (counted, and removed when
// it expires), and logged; with persistence off, what the directory
// holds is left as it is, and logged. Call it before the manager
// serves anything.
func (m *Manager) LoadPaused() error {
	if !m.cfg.Persistence.Enabled {
		// Never silently: what an earlier run with persistence on left
		// is neither listed nor removed (nor counted) while it is off.
		if left := LeftWhileOff(m.cfg); left != "" {
			m.log.Warn(left)
		}
		return nil
	}
	// Another user who could write there could forge paused sessions
	// (and their keepers): the server refuses to start.
	if err := privdir.Ensure(m.persistDir(), 0o700); err != nil {
		return fmt.Errorf("%w: persistence.dir: %v", errdefs.ErrUnavailable, err)
	}
	// Live sessions a server that ended without pausing them left
	// recovery points of are paused sessions from now on.
	m.recoverLive()
	// Then the images of resumes the server ended before their first
	// point was sealed.
	m.resolveResumed()
	ids, swept, err := pauseimage.List(m.persistDir())
	if err != nil {
		return fmt.Errorf("%w: persistence.dir: %v", errdefs.ErrUnavailable, err)
	}
	if swept > 0 {
		m.log.Warn("removed the remains of pauses that never completed (a crash or kill -9 in the middle)", "count", swept)
	}
	loaded := 0
	for _, id := range ids {
		im, meta, err := m.openImage(id)
		if errors.Is(err, errdefs.ErrImageCorrupt) {
			tenant := "" // whose it is, only from a description of its own
			if meta.ID == id {
				tenant = meta.Tenant
			}
			m.keepDamaged(id, tenant, err)
			continue
		}
		if err != nil {
			m.log.Error("a paused session cannot be read; its image is left for the next start", "session", id, "dir", m.persistDir(), "err", err)
			continue
		}
		m.mu.Lock()
		if m.paused == nil {
			m.paused = map[string]*pausedSession{}
		}
		p := &pausedSession{meta: meta, stats: im.Stats}
		if mem, err := im.Memory(); err != nil {
			p.memErr = err
			m.log.Error("a paused session's memory image cannot be read; it will resume with its files", "session", id, "err", err)
		} else if mem != nil {
			p.memBytes = mem.Bytes
			p.stats.DiskBytes += mem.Bytes
		} else if meta.MemoryError != "" {
			p.memErr = errdefs.Private(nil, meta.MemoryError, nil)
		} else if meta.MemoryPending {
			p.memErr = memoryLostError()
			m.log.Warn("a paused session lost its memory to the server's end while it was kept; it will resume with its files", "session", id)
		}
		m.paused[id] = p
		m.mu.Unlock()
		loaded++
	}
	if loaded > 0 {
		m.log.Info("paused sessions found", "count", loaded)
	}
	kept, err := pauseimage.ListKept(m.persistDir(), m.cfg.Persistence.Keep.D())
	if err != nil {
		m.log.Error("the memory images kept for inspection cannot be listed", "dir", m.persistDir(), "err", err)
	}
	m.mu.Lock()
	for _, k := range kept {
		if k.Unrecorded {
			// Whose: its paused session's, when that is still here;
			// else nobody's quota (bounded by its expiry).
			k.Tenant = UnknownTenant
			if p := m.paused[k.ID]; p != nil {
				k.Tenant = p.meta.Tenant
			}
		}
		m.keptLocked(k)
	}
	m.mu.Unlock()
	if len(kept) > 0 {
		m.log.Info("memory images kept for inspection found", "count", len(kept))
	}
	m.sweepPaused()
	return nil
}

// openImage opens the image of id and reads its description, which
// must name id.
func (m *Manager) openImage(id string) (*pauseimage.Image, pausedMeta, error) {
	im, err := pauseimage.Open(m.persistDir(), id)
	var meta pausedMeta
	if err == nil {
		if jerr := json.Unmarshal(im.Session, &meta); jerr != nil || meta.ID != id {
			err = fmt.Errorf("%w: its description names another session or is malformed", errdefs.ErrImageCorrupt)
		}
	}
	return im, meta, err
}

// keepDamaged keeps the image of id, whose description is damaged (it
// cannot be listed as a paused session), for the operator to inspect
// until persistence.keep from now: counted against tenant's quota
// (what its description said, when it could be read; else
// UnknownTenant's) and in the paused sessions' metrics, and removed by
// the sweep when it expires, as a refused memory image is (never left
// where nothing counts or removes it). One that cannot be moved stays
// where it was, logged, until the next start tries again.
func (m *Manager) keepDamaged(id, tenant string, why error) {
	if tenant == "" {
		tenant = UnknownTenant
	}
	now := time.Now()
	k, err := pauseimage.KeepImage(m.persistDir(), id, now, pauseimage.Kept{
		Tenant: tenant, Expires: now.Add(m.cfg.Persistence.Keep.D()), Reason: errdefs.Message(why),
	})
	if k.Dir == "" {
		m.log.Error("a paused session's description is damaged, and its image could not be kept aside; it is left where it is for the operator until the next start", "session", id, "dir", m.persistDir(), "why", why, "err", err)
		return
	}
	// Counted from here on: LoadPaused lists the kept directories next
	// (ListKept), this one with them.
	m.log.Error("a paused session's description is damaged; its image is kept for inspection, counted against its tenant's quota, until it expires", "session", id, "tenant", tenant, "dir", k.Dir, "bytes", k.Bytes, "expires", k.Expires, "why", why, "err", err)
}

// OnImagesRemoved sets f to be called, after the fact, whenever paused
// sessions' images are removed (a resume, a delete, an expiry): what
// they referred to (gVisor keeper copies) may be needed no more. Set it
// before the manager serves anything.
func (m *Manager) OnImagesRemoved(f func()) { m.imagesGone = f }

// imagesRemoved says that paused sessions' images were removed.
func (m *Manager) imagesRemoved() {
	if m.imagesGone != nil {
		m.imagesGone()
	}
}

// PausedKeepers returns the digests of the gVisor keepers the paused
// sessions' memory images were taken with (their resumes bind them
// again); an image whose memory description cannot be read is an
// error, as it may name any.
func (m *Manager) PausedKeepers() (map[string]bool, error) {
	return pauseimage.Keepers(m.persistDir())
}

// sweepPaused deletes the paused sessions kept longer than
// persistence.keep, then runs again when the next one is due. An expired
// session whose image cannot be removed stays listed (and counted) as
// paused, as it stays on disk, and is tried again removeRetry later, as
// are kept memory images, what ended elsewhere but could not be removed
// (endLater) and the remains of ends (leftBehind).
func (m *Manager) sweepPaused() {
	keep := m.cfg.Persistence.Keep.D()
	now := time.Now()
	type expiring struct {
		id   string
		p    *pausedSession
		done chan struct{}
	}
	var due []expiring
	next := time.Duration(0)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for id, p := range m.paused {
		left := p.meta.PausedAt.Add(keep).Sub(now)
		if left <= 0 && p.resuming == nil {
			// Busy while its image goes: a resume waits, a delete
			// conflicts, another sweep skips it.
			done := make(chan struct{})
			p.resuming = done
			due = append(due, expiring{id, p, done})
		} else if next == 0 || left < next {
			next = left
		}
	}
	var keptDue []pauseimage.Kept
	for dir, k := range m.kept {
		if left := k.Expires.Sub(now); left <= 0 {
			keptDue = append(keptDue, k)
			delete(m.kept, dir)
		} else if next == 0 || left < next {
			next = left
		}
	}
	later := m.endLater
	m.endLater = nil
	leftBehind := m.leftBehind
	m.leftBehind = false
	if next > 0 {
		if m.sweeper == nil {
			m.sweeper = time.AfterFunc(next, m.sweepPaused)
		} else {
			m.sweeper.Reset(next)
		}
	}
	m.mu.Unlock()
	retry := false
	removed := false
	for _, e := range due {
		err := m.endImage(e.id)
		m.mu.Lock()
		e.p.resuming = nil
		if err == nil {
			delete(m.paused, e.id)
			m.rememberEndLocked(e.id, apitype.Ended(apitype.EndLifetime), e.p.meta.Tenant)
		}
		m.mu.Unlock()
		close(e.done)
		if err != nil {
			m.log.Error("removing an expired paused session failed; it stays paused (and counted) until it can be removed, tried again in a while", "session", e.id, "retry", removeRetry, "err", err)
			retry = true
		} else {
			removed = true
			m.log.Info("paused session expired (persistence.keep)", "session", e.id)
		}
	}
	for name, remove := range later {
		if err := remove(); err != nil {
			m.log.Error("removing what ended failed again; tried again in a while", "name", name, "retry", removeRetry, "err", err)
			m.removeLater(name, remove)
			retry = true
		} else {
			removed = true
			m.log.Info("removed what ended earlier but could not be removed then", "name", name)
		}
	}
	if removed {
		m.imagesRemoved()
	}
	var failed []pauseimage.Kept
	for _, k := range keptDue {
		if err := m.leftOK(pauseimage.RemoveKept(m.persistDir(), k.Dir)); err != nil {
			m.log.Error("removing an expired image (or memory image) kept for inspection; tried again in a while", "dir", k.Dir, "retry", removeRetry, "err", err)
			failed = append(failed, k)
		} else {
			m.log.Info("an image (or memory image) kept for inspection expired (persistence.keep)", "session", k.ID, "dir", k.Dir)
			if m.hook != nil {
				m.hook("kept-removed", k.ID)
			}
		}
	}
	if leftBehind {
		if n, err := pauseimage.SweepRemoved(m.persistDir()); err != nil {
			m.log.Error("deleting the remains of ended sessions' images; tried again in a while", "dir", m.persistDir(), "retry", removeRetry, "err", err)
			m.mu.Lock()
			m.leftBehind = true
			m.mu.Unlock()
		} else if n > 0 {
			m.log.Info("deleted the remains of ended sessions' images", "count", n)
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for _, k := range failed {
		// Still on the disk: still counted, and removed by a later
		// sweep.
		k.Expires = now.Add(removeRetry)
		m.keptLocked(k)
	}
	if len(failed) > 0 || retry || m.leftBehind || len(m.endLater) > 0 {
		if next == 0 || removeRetry < next {
			next = removeRetry
		}
		if m.sweeper == nil {
			m.sweeper = time.AfterFunc(next, m.sweepPaused)
		} else {
			m.sweeper.Reset(next)
		}
	}
	m.mu.Unlock()
	if m.hook != nil {
		m.hook("swept", "")
	}
}

// endImage ends the image of the paused session (or the fork's copy) id
// durably (pauseimage.Remove). nil: it is ended, and no start lists it
// again (its remains, if any, are deleted by a later sweep). An error:
// it stands whole, and the caller must say the session is still paused.
func (m *Manager) endImage(id string) error {
	// A resumed marker of id left (its end failed, retried by the
	// sweep) ends first: else the next start would make it the
	// session's image again.
	err := m.leftOK(pauseimage.EndResumed(m.persistDir(), id))
	if err == nil {
		err = m.leftOK(pauseimage.Remove(m.persistDir(), id))
	}
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the server could not remove the paused session's image from its disk; it stays paused: try again", err)
	}
	return nil
}

// markResumed moves the image of id, a session being resumed, to its
// resumed marker durably (pauseimage.MarkResumed). nil: no start lists
// it paused while its live session's recovery point is sealed. An
// error: it stands whole, and the session stays paused.
//
// The marker's bytes count in its tenant's quota (the live session's
// lp.marker, see pausedUsedLocked) until the resumed session's first
// point, which is made of it (no copy of the workspace), is sealed.
func (m *Manager) markResumed(id string) error {
	if err := m.leftOK(pauseimage.MarkResumed(m.persistDir(), id)); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the server could not set the paused session's image aside on its disk; it stays paused: try again", err)
	}
	return nil
}

// endResumed ends the resumed marker of id, whose session has a sealed
// recovery point, a newer image, or ended; when it cannot, the sweep
// tries again (until then the next start resolves the marker as
// LoadPaused does), unless a later resume of id owns the marker by then.
// ended: it is ended now (else it still takes the disk, and counts in
// the quota until the sweep ends it).
func (m *Manager) endResumed(id string) (ended bool) {
	memory := pauseimage.ResumedHasMemory(m.persistDir(), id)
	err := m.leftOK(pauseimage.EndResumed(m.persistDir(), id))
	if err == nil {
		if memory {
			// Its keeper copy (pauseimage.Keepers) may be needed no
			// more.
			m.imagesRemoved()
		}
		return true
	}
	m.log.Error("removing a resumed session's set-aside image failed; tried again in a while", "session", id, "retry", removeRetry, "err", err)
	m.removeLater(filepath.Base(pauseimage.ResumedDir(m.persistDir(), id)), func() error {
		m.mu.Lock()
		s := m.sessions[id]
		m.mu.Unlock()
		if s != nil && s.live.resumedPending() {
			// Resumed again: the marker is the new resume's.
			return nil
		}
		err := m.leftOK(pauseimage.EndResumed(m.persistDir(), id))
		if err == nil && s != nil && s.live != nil {
			s.live.marker.Store(0) // it counted till now
		}
		return err
	})
	return false
}

// leftOK makes err, an end's, nil when the end is durable but its
// remains are left (pauseimage.ErrLeftBehind): a later sweep deletes
// them.
func (m *Manager) leftOK(err error) error {
	if !errors.Is(err, pauseimage.ErrLeftBehind) {
		return err
	}
	m.log.Warn("ended, but its remains could not all be deleted from the disk; tried again in a while", "retry", removeRetry, "err", err)
	m.mu.Lock()
	m.leftBehind = true
	m.mu.Unlock()
	m.sweepSoon()
	return nil
}

// removeLater has the sweep remove name (with remove), which ended but
// could not be removed where nobody could be told, every removeRetry
// until it is gone.
func (m *Manager) removeLater(name string, remove func() error) {
	m.mu.Lock()
	if m.endLater == nil {
		m.endLater = map[string]func() error{}
	}
	m.endLater[name] = remove
	m.mu.Unlock()
	m.sweepSoon()
}

// endImageLater ends the image id where a failure cannot be reported
// (its session ended otherwise, or is running on): when it cannot, the
// sweep tries again, unless the session id is live or paused again by
// then (its image is its own).
func (m *Manager) endImageLater(id string) {
	var remove func() error
	remove = func() error {
		m.mu.Lock()
		_, live := m.sessions[id]
		_, paused := m.paused[id]
		m.mu.Unlock()
		if live || paused {
			return fmt.Errorf("%w: the session %s is live or paused again; its stale image is removed once it is neither", errdefs.ErrConflict, id)
		}
		return m.leftOK(pauseimage.Remove(m.persistDir(), id))
	}
	if err := m.leftOK(pauseimage.Remove(m.persistDir(), id)); err != nil {
		m.log.Error("removing an image that is no longer needed failed; tried again in a while (until then a restart would list it as paused)", "image", id, "retry", removeRetry, "err", err)
		m.removeLater(id, remove)
	}
}

// sweepSoon has the sweep run removeRetry from now, or sooner when it
// is due sooner.
func (m *Manager) sweepSoon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if m.sweeper == nil {
		m.sweeper = time.AfterFunc(removeRetry, m.sweepPaused)
	} else {
		m.sweeper.Reset(removeRetry)
	}
}

// UnknownTenant is the tenant a memory image kept for inspection is
// counted for (PausedUsage, the metric airlock_paused_disk_bytes) when
// its description does not say whose it is, nor its paused session
// does: one an older airlock kept (it wrote none) whose paused session
// is gone. It is never a tenant's name (store.ValidTenant), so no
// tenant's quota counts it; persistence.keep bounds it.
const UnknownTenant = "(unknown)"

// removeRetry is how soon a sweep tries again to remove what it could
// not (an expired paused session, a kept memory image, see sweepPaused).
var removeRetry = time.Minute

// keptLocked counts the kept memory image k (m.mu is held); sweepPaused
// deletes it at its expiry.
func (m *Manager) keptLocked(k pauseimage.Kept) {
	if m.kept == nil {
		m.kept = map[string]pauseimage.Kept{}
	}
	m.kept[k.Dir] = k
}

// rememberEndLocked remembers that id ended (a 410 for later calls);
// m.mu is held.
func (m *Manager) rememberEndLocked(id string, end apitype.End, tenant string) {
	m.ended[id] = endedSession{end: end, tenant: tenant}
	m.endOrder = append(m.endOrder, id)
	if len(m.endOrder) > 10000 {
		delete(m.ended, m.endOrder[0])
		m.endOrder = m.endOrder[1:]
	}
}

// pausedLocked is the paused session id, for the caller who (nil: the
// server's own); m.mu is held.
func (m *Manager) pausedLocked(id string, who *identity.Identity) (*pausedSession, error) {
	p, ok := m.paused[id]
	if !ok {
		return nil, nil
	}
	if who != nil && !who.Sees(p.meta.Tenant) {
		return nil, &OtherTenantError{m.ids.Unknown(id)}
	}
	return p, nil
}

// Describe is GET /v1/sessions/{id}: a live session's Info, or a paused
// one's description (never resumed by it).
func (m *Manager) Describe(ctx context.Context, id string) (apitype.Session, error) {
	s, err := m.Find(ctx, id)
	var pe *PausedError
	if errors.As(err, &pe) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p := m.paused[id]; p != nil {
			return p.info(m.cfg.Persistence.Keep.D()), nil
		}
		return apitype.Session{}, m.ids.Unknown(id) // deleted just now
	}
	if err != nil {
		return apitype.Session{}, err
	}
	return s.Info(), nil
}

// Reach is Find for a call that works in a session: a paused session
// created with auto_resume is resumed first, unless its pause asked for
// an explicit resume (PauseAsk), which Find's error says.
func (m *Manager) Reach(ctx context.Context, id string) (*Session, error) {
	s, err := m.Find(ctx, id)
	var pe *PausedError
	if !errors.As(err, &pe) {
		return s, err
	}
	m.mu.Lock()
	p := m.paused[id]
	auto := p != nil && p.meta.Request.AutoResume && !p.meta.ExplicitResume
	m.mu.Unlock()
	if !auto {
		if p != nil {
			// Its pause of now (one may have come since Find).
			err = &PausedError{ID: id, Explicit: p.meta.ExplicitResume}
		}
		return nil, err
	}
	return m.resume(ctx, id, "")
}

// ResumeFor resumes the paused session id for the caller ctx carries; a
// live session is returned as it is (a client's retry).
func (m *Manager) ResumeFor(ctx context.Context, id string) (*Session, error) {
	return m.ResumeWith(ctx, id, "")
}

// ResumeWith is ResumeFor restoring what keep asks: RestoreFiles the
// files only, its interpreters started afresh, even where the pause kept
// the memory (E2B's connect onResume "reboot": a memory image that
// would wedge them is left unused, and goes with the resume as any
// image does); "" what the pause kept.
func (m *Manager) ResumeWith(ctx context.Context, id, keep string) (*Session, error) {
	if keep != "" && keep != apitype.RestoreFiles {
		return nil, fmt.Errorf("%w: restores %q: a resume restores the memory wherever its pause kept it; ask for \"files\" (the files only), or leave restores unset", errdefs.ErrInvalidArgument, keep)
	}
	s, err := m.Find(ctx, id)
	var pe *PausedError
	if !errors.As(err, &pe) {
		return s, err
	}
	return m.resume(ctx, id, keep)
}

// PauseFor pauses the session id for the caller ctx carries, keeping
// what keep asks (see Pause); a paused one is described as it is (a
// client's retry).
func (m *Manager) PauseFor(ctx context.Context, id, keep string) (apitype.Session, error) {
	return m.PauseWith(ctx, id, PauseAsk{Keep: keep})
}

// PauseAsk is what a client's pause asks.
type PauseAsk struct {
	// Keep is what it keeps (see Session.Pause).
	Keep string
	// ExplicitResume: the paused session is made live again only by a
	// resume (ResumeWith), never by a call naming it (Reach), whatever
	// its auto_resume says: E2B's pause with keepMemory false, whose
	// traffic would meet a restarted interpreter. It is written with the
	// pause's image and listed with it in one step, so that no call ever
	// finds the session paused without it; it holds until that pause is
	// resumed (the session's next pause asks again).
	ExplicitResume bool
	// ByShutdown: the server's shutdown pauses it (listed so:
	// PausedInfo.ByShutdown).
	ByShutdown bool
	// Why is the kill reason what a pause interrupts or kills reports
	// (pauseWhenIdle: a shutdown's, a lifetime's).
	Why apitype.KillReason
}

// PauseWith is PauseFor asking what ask says.
func (m *Manager) PauseWith(ctx context.Context, id string, ask PauseAsk) (apitype.Session, error) {
	if err := checkRestores("restores", ask.Keep); err != nil {
		return apitype.Session{}, err
	}
	s, err := m.Find(ctx, id)
	var pe *PausedError
	if errors.As(err, &pe) {
		return m.Describe(ctx, id)
	}
	if err != nil {
		return apitype.Session{}, err
	}
	info, err := s.pauseAsked(ctx, ask)
	if err == nil {
		m.settle(ctx, id)
	}
	return info, err
}

// RequireExplicitResume makes the paused session id one that only a
// resume makes live again (as a pause with PauseAsk.ExplicitResume),
// in its image's description and here: for a mark an older server kept
// elsewhere (E2B's records). Not while it is being resumed
// (ErrConflict).
//
// Start only: it holds m.mu across the description's rewrite (a write,
// two fsyncs and a rename), which would stall every call of every
// session meanwhile; at start (LoadPaused done, nothing served yet)
// nothing waits for m.mu. It refuses (ErrConflict) once the manager has
// a live session, a creation or a one-shot run: a server serving
// already.
func (m *Manager) RequireExplicitResume(id string) error {
	// Under m.mu: no resume, delete or expiry takes the image while its
	// description is replaced (each takes it out of m.paused first).
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.paused[id]
	switch {
	case len(m.sessions) > 0 || m.creating > 0 || len(m.oneShots) > 0:
		return fmt.Errorf("%w: a paused session's mark is moved at start only, before the server serves (it has sessions)", errdefs.ErrConflict)
	case p == nil:
		return m.ids.Unknown(id)
	case p.resuming != nil:
		return fmt.Errorf("%w: the session is being resumed", errdefs.ErrConflict)
	case p.meta.ExplicitResume:
		return nil
	}
	meta := p.meta
	meta.ExplicitResume = true
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := pauseimage.Redescribe(m.persistDir(), id, raw); err != nil {
		return err
	}
	p.meta = meta
	return nil
}

// errPersistenceOff is the error of a pause on a server that cannot.
func errPersistenceOff() error {
	return fmt.Errorf("%w: this server cannot pause sessions (its operator has not set persistence.enabled)", errdefs.ErrUnsupported)
}

// freeze stops anything new from beginning in the session, for a pause
// or fork (what): it refuses (ErrConflict) while code executes, a shell
// command or package install runs, or a file transfer is under way. thaw
// lets work begin again.
func (s *Session) freeze(what string) (thaw func(), err error) {
	s.mu.Lock()
	switch {
	case !s.end.Zero():
		end := s.end
		s.mu.Unlock()
		return nil, gone(end)
	case s.pausing:
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the session is being paused or forked already", errdefs.ErrConflict)
	case s.busy:
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the session is executing code; wait for it to finish or interrupt it, then "+what, errdefs.ErrConflict)
	case s.inUse > 0:
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: a file transfer or command is in progress in the session; wait for it, then "+what, errdefs.ErrConflict)
	}
	s.pausing = true
	s.mu.Unlock()
	unfreeze := func() {
		s.mu.Lock()
		s.pausing = false
		s.mu.Unlock()
		s.Touch()
	}
	ok := false
	defer func() {
		if !ok {
			unfreeze()
		}
	}()
	// After pausing is set: a command starting now sees it (see
	// notPausing), or is counted here.
	s.cmds.mu.Lock()
	cmds := s.cmds.running
	s.cmds.mu.Unlock()
	if cmds > 0 {
		return nil, fmt.Errorf("%w: %d shell commands are running in the session; wait for them or signal them, then "+what, errdefs.ErrConflict, cmds)
	}
	if !s.pkgMu.TryLock() {
		return nil, fmt.Errorf("%w: a package install is running in the session; wait for it, then "+what, errdefs.ErrConflict)
	}
	// A context starting now would be missing from the image.
	if !s.ctxStart.TryLock() {
		s.pkgMu.Unlock()
		return nil, fmt.Errorf("%w: a code context is being started in the session; wait for it, then "+what, errdefs.ErrConflict)
	}
	ok = true
	return func() { s.ctxStart.Unlock(); s.pkgMu.Unlock(); unfreeze() }, nil
}

// Pause writes the session's files and settings under persistence.dir
// and ends its sandbox. keep is what it keeps: RestoreFiles the files
// only, even where the memory could be kept; RestoreMemory the memory
// too, refused (a *NoMemoryError) where the session's pause cannot keep
// it, and a checkpoint that fails is then the pause's failure (asked
// for, the memory is never silently dropped); "" what its restores says.
// A session executing code, running a shell command or transferring a
// file is not paused (ErrConflict: wait, or interrupt it); a pause that
// fails (a full disk, a quota, a workspace that cannot be kept whole)
// leaves the session running as it was.
func (s *Session) Pause(ctx context.Context, keep string) (apitype.Session, error) {
	return s.pauseAsked(ctx, PauseAsk{Keep: keep})
}

// pauseAsked is Pause asking what ask says.
func (s *Session) pauseAsked(ctx context.Context, ask PauseAsk) (apitype.Session, error) {
	if err := s.pausable(); err != nil {
		return apitype.Session{}, err
	}
	keep := ask.Keep
	if keep == apitype.RestoreMemory {
		if err := s.MemoryRefusal(); err != nil {
			return apitype.Session{}, fmt.Errorf("restores %q: %w; ask for \"files\", or leave restores unset", keep, err)
		}
	}
	return s.pauseObserved(ctx, ask, keep == apitype.RestoreMemory)
}

// pausable refuses a pause of a session that cannot be paused at all.
func (s *Session) pausable() error {
	if !s.m.cfg.Persistence.Enabled {
		return errPersistenceOff()
	}
	if !s.client {
		return fmt.Errorf("%w: only a client's session can be paused", errdefs.ErrInvalidArgument)
	}
	return nil
}

// pause is Pause, unobserved and unchecked: asked for the memory
// (RestoreMemory) where it cannot be kept, it keeps the files and says
// why (a timeout's pause: nothing is lost for it), unless must, where a
// checkpoint that fails fails the pause (a client's explicit ask).
func (s *Session) pause(ctx context.Context, ask PauseAsk, must bool) (apitype.Session, error) {
	m := s.m
	keep := ask.Keep
	thaw, err := s.freeze("pause")
	if err != nil {
		return apitype.Session{}, err
	}
	// Once paused, the session has ended (end is claimed before pausing
	// is let go): nothing begins in it either way.
	defer thaw()
	meta := s.pausedMeta()
	meta.ExplicitResume = ask.ExplicitResume
	meta.ByShutdown = ask.ByShutdown
	memory := keep != apitype.RestoreFiles && s.keepsMemory()
	meta.MemoryPending = memory
	var memErr error
	if keep == apitype.RestoreMemory {
		memErr = s.MemoryRefusal()
		if memErr != nil {
			meta.MemoryError = errdefs.Message(memErr)
		}
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return apitype.Session{}, err
	}
	begun := time.Now()
	st, err := s.writeImage(ctx, s.id, raw)
	if err != nil {
		m.log.Warn("pausing a session failed; it keeps running", "session", s.id, "err", err)
		return apitype.Session{}, err
	}
	if m.hook != nil {
		m.hook("written", s.id)
	}
	p := &pausedSession{meta: meta, stats: st, memErr: memErr}
	if memory {
		// After the files: a checkpoint that fails leaves them standing.
		n, err := s.writeMemory(ctx, s.id, st.DiskBytes, false)
		if err != nil && must {
			m.endImageLater(s.id)
			m.log.Warn("a session's memory could not be kept, as its pause asked; it keeps running", "session", s.id, "err", err)
			return apitype.Session{}, fmt.Errorf("restores %q: its memory could not be kept (the session keeps running: pause again, or ask for \"files\"): %w", keep, err)
		}
		if err != nil {
			p.memErr = err
			m.log.Warn("a session's memory could not be kept; it is paused with its files", "session", s.id, "err", err)
			// Its description said the memory would follow: it says why
			// not instead, for the next start.
			p.meta.MemoryPending, p.meta.MemoryError = false, errdefs.Message(err)
			if raw, err := json.Marshal(p.meta); err != nil {
				m.log.Error("describing why a paused session kept no memory", "session", s.id, "err", err)
			} else if err := pauseimage.Redescribe(m.persistDir(), s.id, raw); err != nil {
				m.log.Error("describing why a paused session kept no memory; after a restart it says the server stopped instead", "session", s.id, "err", err)
			}
		} else {
			p.memBytes = n
			p.stats.DiskBytes += n
		}
	}
	// The image supersedes the recovery point, which ends (durably)
	// before the session is listed paused: a resume of it then makes a
	// point of its own, which no end of this one touches.
	s.live.end()
	// The end is claimed and the session listed as paused in one step: a
	// delete (or any end) while the image was written wins, and its
	// image goes; one after it finds the session paused (DeleteFor).
	m.mu.Lock()
	s.mu.Lock()
	end := s.end
	if end.Zero() {
		s.end = apitype.Ended(apitype.EndPaused)
	}
	s.mu.Unlock()
	if !end.Zero() {
		m.mu.Unlock()
		m.endImageLater(s.id)
		m.imagesRemoved()
		return apitype.Session{}, gone(end)
	}
	if m.paused == nil {
		m.paused = map[string]*pausedSession{}
	}
	m.paused[s.id] = p
	info := p.info(m.cfg.Persistence.Keep.D())
	m.mu.Unlock()
	if m.hook != nil {
		m.hook("listed", s.id)
	}
	s.terminate(apitype.Ended(apitype.EndPaused))
	if m.hook != nil {
		m.hook("paused", s.id)
	}
	m.sweepPaused()
	m.log.Info("session paused", "session", s.id, "files", st.Files, "bytes", st.Bytes, "disk_bytes", st.DiskBytes, "ms", time.Since(begun).Milliseconds())
	return info, nil
}

// pausedKind is what a pause that answered info kept.
func pausedKind(info apitype.Session) string {
	if info.Restores == apitype.RestoreMemory {
		return apitype.RestoreMemory
	}
	return apitype.RestoreFiles
}

// pausedMeta describes the session for its image.
func (s *Session) pausedMeta() pausedMeta {
	req := s.made
	req.Language = s.lang.Lang
	req.Limits = s.limits
	req.Isolation = s.inst.Isolation()
	req.Template = s.template
	req.IdleTimeout = config.Duration(s.idle)
	if st := s.Network(); st != nil {
		req.Network = &apitype.NetworkPolicy{Allow: st.Allow}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Timeout = config.Duration(s.lifetime)
	meta := pausedMeta{ID: s.id, Tenant: s.owner.Tenant, KeyID: s.owner.KeyID, Request: req, Created: s.create,
		PausedAt: time.Now(), Executions: s.execCount, CtxNext: s.ctxNext}
	for _, id := range s.ctxOrder {
		if c := s.ctxs[id]; c != nil && c != s.def && c.end.Zero() {
			meta.Contexts = append(meta.Contexts, pausedContext{ID: c.id, Language: c.lang.Lang, Cwd: c.cwd, Env: c.userEnv})
		}
	}
	return meta
}

// restorePackages puts the pip packages the restored files hold on the
// path of the session's default interpreter, configured before they were
// there.
func (s *Session) restorePackages(ctx context.Context) error {
	c := s.defContext()
	env := maps.Clone(c.env)
	if !s.packagesEnv(c.lang, env) {
		return nil
	}
	if err := c.it.Configure(ctx, env, c.cwd); err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "the session's runtime did not take its packages' path", err)
	}
	s.mu.Lock()
	c.env = env
	s.mu.Unlock()
	return nil
}

// restoreContexts starts the code contexts a paused session had, under
// their ids, in its fresh sandbox (before the session is visible).
func (s *Session) restoreContexts(ctx context.Context, meta pausedMeta) error {
	s.mu.Lock()
	s.ctxNext = meta.CtxNext
	s.mu.Unlock()
	for _, pc := range meta.Contexts {
		rt, err := s.m.lookup(pc.Language)
		if err != nil {
			return err
		}
		if _, err := s.startContext(ctx, pc.ID, rt, pc.Cwd, pc.Env); err != nil {
			return fmt.Errorf("restoring code context %s: %w", pc.ID, err)
		}
	}
	return nil
}

// writeImage writes the session's files and description raw as the
// image id, within its disk limit (a pause image never holds more than
// the sandbox could, nor more than a restore into a sandbox of the same
// limits can expand) and persistence.max_image_bytes, and within what
// reserveImage grants before anything is written.
func (s *Session) writeImage(ctx context.Context, id string, raw []byte) (pauseimage.Stats, error) {
	m := s.m
	if m.imageFault != nil {
		if err := m.imageFault(id); err != nil {
			return pauseimage.Stats{}, err
		}
	}
	max := min(int64(m.cfg.Persistence.MaxImageBytes), int64(s.limits.Disk))
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	return pauseimage.Write(ctx, m.persistDir(), id, raw, s.workspace(), max, func(size int64) (err error) {
		release, err = m.reserveImage(s.owner.Tenant, id, size, size)
		return err
	})
}

// imageHeadroom is what reserveImage leaves free on persistence.dir's
// disk (for the audit log, the server's own writes).
const imageHeadroom = 64 << 20

// reserveImage reserves size bytes of tenant's quotas.max_paused_bytes
// and disk bytes (at least size) of persistence.dir for the image id,
// counted until release: refused over the quota (its paused sessions,
// the pauses and forks under way, its live sessions' recovery points and
// resumed markers but id's own, which its image supersedes) or when the
// disk has not disk bytes free beside those under way and imageHeadroom.
// disk is the most the write can put on the disk before its size is
// checked; size, the most it can keep.
func (m *Manager) reserveImage(tenant, id string, size, disk int64) (release func(), err error) {
	disk = max(disk, size)
	if err := pauseimage.EnsureRoot(m.persistDir()); err != nil {
		return nil, err
	}
	free, err := m.diskFree("the server's disk for paused sessions cannot be read; the session keeps running")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if used, limit, over := m.overQuotaLocked(tenant, id, size); over {
		return nil, fmt.Errorf("%w: the tenant's paused sessions would take up to %d bytes, more than its quota of %d (quotas.max_paused_bytes); delete paused sessions, or keep this one running",
			errdefs.ErrQuota, used, limit)
	}
	if !m.roomLocked(free, disk) {
		return nil, fmt.Errorf("%w: the server's disk for paused sessions has no room for this session's files (up to %d bytes); the session keeps running", errdefs.ErrUnavailable, disk)
	}
	return m.reserveLocked(tenant, id, size, disk, false), nil
}

// diskFree is what persistence.dir's disk has free; unreadable, it is
// ErrUnavailable, saying so (msg).
func (m *Manager) diskFree(msg string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(m.persistDir(), &fs); err != nil {
		return 0, errdefs.Private(errdefs.ErrUnavailable, msg, err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// roomLocked says whether persistence.dir's disk, with free bytes free,
// takes n bytes more beside the writes under way and imageHeadroom
// (m.mu is held).
func (m *Manager) roomLocked(free, n int64) bool {
	return n+m.reservedDiskLocked()+imageHeadroom <= free
}

// overQuotaLocked is what tenant's quotas.max_paused_bytes would count
// with n bytes more written for the session id (see pausedUsedLocked),
// and that quota (0: none); over says whether that is more than it
// (m.mu is held).
func (m *Manager) overQuotaLocked(tenant, id string, n int64) (used, limit int64, over bool) {
	used, limit = m.pausedUsedLocked(tenant, id)+n, m.pausedLimit(tenant)
	return used, limit, limit > 0 && used > limit
}

// reserveLocked counts a write under way for tenant until release: quota
// bytes in its paused bytes, disk bytes (at least quota) on
// persistence.dir's disk, and, for a seal, quota bytes in the session
// id's seal under way (m.mu is held).
func (m *Manager) reserveLocked(tenant, id string, quota, disk int64, seal bool) (release func()) {
	if m.reserved == nil {
		m.reserved = map[string]int64{}
	}
	m.reserved[tenant] += quota
	m.reservedDisk += disk - quota
	if seal {
		if m.sealing == nil {
			m.sealing = map[string]int64{}
		}
		m.sealing[id] += quota
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.reserved[tenant] -= quota; m.reserved[tenant] <= 0 {
			delete(m.reserved, tenant)
		}
		m.reservedDisk -= disk - quota
		if !seal {
			return
		}
		if m.sealing[id] -= quota; m.sealing[id] <= 0 {
			delete(m.sealing, id)
		}
	}
}

// reservedDiskLocked is what the writes under way may put on
// persistence.dir (m.mu is held).
func (m *Manager) reservedDiskLocked() int64 {
	all := m.reservedDisk
	for _, n := range m.reserved {
		all += n
	}
	return all
}

// pausedLimit is tenant's quotas.max_paused_bytes (0: none).
func (m *Manager) pausedLimit(tenant string) int64 {
	limit := int64(m.cfg.Quotas.MaxPausedBytes)
	if t, ok := m.admit.(*Tenants); ok && t.quotas != nil {
		limit = int64(t.quotas.Of(identity.Identity{Tenant: tenant}).MaxPausedBytes)
	}
	return limit
}

// pausedRoom is what is left of tenant's quotas.max_paused_bytes for
// a pause of the session id (whose own recovery point its image
// replaces; math.MaxInt64: no quota); usage, if set, is the quotas'
// use read once for a listing (nil: read now).
func (m *Manager) pausedRoom(tenant, id string, usage func() *pausedUsage) int64 {
	limit := m.pausedLimit(tenant)
	if limit <= 0 {
		return math.MaxInt64
	}
	if usage != nil {
		return limit - usage().used(tenant, id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return limit - m.pausedUsedLocked(tenant, id)
}

// restoring is what create needs to make a paused session live again.
type restoring struct {
	meta  pausedMeta
	image *pauseimage.Image
	// memory: its memory image (nil: none).
	memory *memoryRestore
	// lost: why the memory its pause was keeping is not there (nil:
	// none was lost), for restored_reason.
	lost error
	// fork: the session is a new one (a fork), not the paused one
	// resumed.
	fork bool
	// commit, if set, is the last step of the session's making before
	// it is visible (see resume); its error (notCommitted) fails
	// the making, with no other try.
	commit func(*Session) error
}

// notCommitted is the error of a restore's commit (restoring.commit),
// which says nothing more than it.
type notCommitted struct{ error }

func (e notCommitted) Unwrap() error { return e.error }

// owner is ctx acting for the session's owner: a session resumed or
// forked is its owner's tenant's, whoever asks (an admin, the operator),
// so its place is taken among that tenant's quotas, under its ceilings,
// as its end gives the place back there (SessionEnded names the owner).
func (pm pausedMeta) owner(ctx context.Context) context.Context {
	return identity.With(ctx, identity.Identity{Tenant: pm.Tenant, KeyID: pm.KeyID})
}

// resumeID is the context key of the id a resumed session is built under.
type resumeID struct{}

// newID is the id of a session being built: a resumed one's own, else a
// new one.
func (m *Manager) newID(ctx context.Context) string {
	if id, ok := ctx.Value(resumeID{}).(string); ok {
		return id
	}
	return m.ids.NewID()
}

// resume makes the paused session id live again in a fresh sandbox,
// with what keep asks (see ResumeWith).
func (m *Manager) resume(ctx context.Context, id, keep string) (*Session, error) {
	if !m.cfg.Persistence.Enabled {
		return nil, errPersistenceOff()
	}
	m.mu.Lock()
	p := m.paused[id]
	switch {
	case p == nil:
		m.mu.Unlock()
		return m.Find(ctx, id) // resumed or deleted meanwhile
	case p.resuming != nil:
		// Another call resumes it (two calls of an auto_resume
		// session at once): this one waits for its outcome.
		wait := p.resuming
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m.mu.Lock()
		failed := m.paused[id] == p
		m.mu.Unlock()
		if failed {
			return nil, fmt.Errorf("%w: the session could not be resumed; try again", errdefs.ErrConflict)
		}
		return m.Find(ctx, id)
	}
	done := make(chan struct{})
	p.resuming = done
	m.mu.Unlock()
	resumed := false
	defer func() {
		if !resumed {
			m.mu.Lock()
			p.resuming = nil
			m.mu.Unlock()
		}
		close(done)
	}()
	begun := time.Now()
	fail := func(err error) (*Session, error) {
		m.observePause(OpResume, apitype.RestoreFiles, begun, err)
		return nil, err
	}
	im, err := pauseimage.Open(m.persistDir(), id)
	if err == nil {
		defer im.Close()
		err = im.OpenFiles()
	}
	if err != nil {
		return fail(m.resumeFailed(p, err))
	}
	req := p.meta.Request
	release, err := m.admit.AdmitSession(p.meta.owner(ctx), &Ask{Limits: &req.Limits, Isolation: &req.Isolation, Network: req.Network})
	if err != nil {
		return fail(err)
	}
	mr := m.memoryOf(im)
	if mr != nil && keep == apitype.RestoreFiles {
		m.log.Info("a session paused with its memory is resumed with its files, as asked", "session", id)
		mr = nil
	}
	var lost error
	if mr == nil && p.meta.MemoryPending && keep != apitype.RestoreFiles {
		// Its pause was keeping its memory, which its server's end (or
		// a damaged image) took: the resume says so, as a refused
		// image's does.
		m.mu.Lock()
		lost = p.memErr
		m.mu.Unlock()
	}
	// The resume is done once its image is durably moved to its resumed
	// marker, before the session is visible: else the next start would
	// list the session paused again (its image as it was, the recovery
	// point of its live changes discarded beside it). The marker stays
	// until the session's first recovery point is sealed (livePoint), so
	// that a kill -9 before it finds the session's files still (issue
	// #21; LoadPaused). When the image cannot be moved, the resumed
	// sandbox goes and the session stays paused, whole.
	commit := func(s *Session) error {
		refused := mr != nil && s.restored != apitype.RestoreMemory
		if refused {
			m.keepRefused(s, p, mr)
		}
		if err := m.markResumed(id); err != nil {
			m.log.Error("a resumed session's image could not be set aside; the resume fails, the session stays paused", "session", id, "err", err)
			if refused {
				m.mu.Lock()
				p.memErr = mr.why
				m.mu.Unlock()
			}
			return notCommitted{err}
		}
		s.live.resumedFrom(p.stats.DiskBytes)
		return nil
	}
	s, err := m.createRestored(ctx, req, &restoring{meta: p.meta, image: im, memory: mr, lost: lost, commit: commit})
	if err != nil {
		release()
		return fail(m.resumeFailed(p, err))
	}
	resumed = true
	kind := s.restored
	if (mr != nil || lost != nil) && kind != apitype.RestoreMemory {
		m.log.Warn("a session paused with its memory resumed with its files", "session", id, "why", s.restoredWhy)
	}
	m.observePause(OpResume, kind, begun, nil)
	m.imagesRemoved()
	attrs := []any{"session", id, "restored", kind, "ms", time.Since(begun).Milliseconds()}
	if mr != nil && mr.restored {
		attrs = append(attrs, mr.logAttrs()...)
	}
	m.log.Info("session resumed", attrs...)
	m.settle(ctx, id)
	return s, nil
}

// keepRefused keeps the memory image of the paused session p, which the
// resume that made s refused, for the operator when something is there
// to inspect: a corrupt image, or one whose keeper copy is damaged or
// not the server's (that copy is kept beside it). It stays until the
// paused session would have expired, counted in its tenant's paused
// bytes. A memory image whose keeper copy is missing (nothing to
// inspect but the image itself, which is sound) goes with the image.
func (m *Manager) keepRefused(s *Session, p *pausedSession, mr *memoryRestore) {
	id := p.meta.ID
	if !errors.Is(mr.why, errdefs.ErrImageCorrupt) {
		var ke *instance.KeeperError
		if errors.As(mr.why, &ke) {
			m.log.Warn("a paused session's memory image is removed with its image: the keeper copy it needs is not on this server (nothing to inspect)", "session", id, "keeper", ke.Digest, "err", mr.why)
		}
		return
	}
	var copies []string
	if ke := (*instance.KeeperError)(nil); errors.As(mr.why, &ke) && ke.Copy != "" {
		copies = append(copies, ke.Copy)
	}
	expires := p.meta.PausedAt.Add(m.cfg.Persistence.Keep.D())
	k, err := pauseimage.KeepMemory(m.persistDir(), id, time.Now(), pauseimage.Kept{Tenant: p.meta.Tenant, Expires: expires, Reason: errdefs.Message(mr.why)}, copies...)
	if k.Dir == "" {
		if err != nil {
			m.log.Error("keeping a refused memory image", "session", id, "err", err)
		}
		return
	}
	if err != nil {
		m.log.Error("keeping a refused memory image: not all of it", "session", id, "dir", k.Dir, "err", err)
	}
	m.log.Error("a paused session's memory image was refused; kept for the operator", "session", id, "dir", k.Dir, "keeper_copies", copies, "expires", expires, "err", mr.why)
	m.mu.Lock()
	m.keptLocked(k)
	m.mu.Unlock()
	m.sweepPaused() // its expiry may be the next one
	s.mu.Lock()
	s.restoredWhy += fmt.Sprintf("; the memory image is kept on the server for inspection until %s", expires.UTC().Format(time.RFC3339))
	s.mu.Unlock()
}

// createRestored creates the session r restores (a resume or a fork)
// with its memory when r has some, else, or when a session cannot be
// made of its memory, with its files, saying why.
func (m *Manager) createRestored(ctx context.Context, req apitype.CreateSessionRequest, r *restoring) (*Session, error) {
	// A shutdown ends the restore as its client leaving does: what it
	// reads stops, its sandbox goes, the source stays as it was.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.stopping, cancel)()
	mr := r.memory
	if mr == nil {
		return m.create(ctx, req, r)
	}
	s, err := m.create(context.WithValue(ctx, resumeMemory{}, mr), req, r)
	if err != nil && mr.restored && ctx.Err() == nil && !errors.As(err, new(notCommitted)) {
		// Its memory came back but the session could not be made of it:
		// its files, then, and it says why.
		m.log.Warn("a session restored with its memory could not be made of it; restoring its files", "session", r.meta.ID, "err", err)
		mr = &memoryRestore{why: err}
		rf := *r
		rf.memory = mr
		s, err = m.create(context.WithValue(ctx, resumeMemory{}, mr), req, &rf)
	}
	return s, err
}

// memoryOf is the memory image of the image im to restore (nil: none);
// one that cannot be used says why (its why).
func (m *Manager) memoryOf(im *pauseimage.Image) *memoryRestore {
	mem, err := im.Memory()
	if err == nil && mem == nil {
		return nil
	}
	mr := &memoryRestore{dir: im.MemoryDir(), image: im, max: int64(m.cfg.Persistence.MaxImageBytes)}
	if err == nil {
		mr.mem = *mem
		if jerr := json.Unmarshal(mem.Session, &mr.pids); jerr != nil || mr.pids.Pid <= 1 {
			err = fmt.Errorf("%w: memory.json does not say which processes to attach to", errdefs.ErrImageCorrupt)
		}
	}
	mr.why = err
	return mr
}

// resumeFailed records why p cannot be resumed when its image is at
// fault, and returns err.
func (m *Manager) resumeFailed(p *pausedSession, err error) error {
	if errors.Is(err, errdefs.ErrImageCorrupt) {
		m.log.Error("a paused session's image is corrupt; kept for the operator", "session", p.meta.ID, "dir", m.persistDir(), "err", err)
		m.mu.Lock()
		p.err = err
		m.mu.Unlock()
	}
	return err
}

// deletePaused deletes the paused session id, for who; found says
// whether there was one.
func (m *Manager) deletePaused(id string, who *identity.Identity) (found bool, err error) {
	m.mu.Lock()
	p, err := m.pausedLocked(id, who)
	if p == nil || err != nil {
		m.mu.Unlock()
		return false, err
	}
	if p.resuming != nil {
		m.mu.Unlock()
		return true, fmt.Errorf("%w: the session is being resumed (or removed); delete it once it is live", errdefs.ErrConflict)
	}
	// Busy while its image goes (a resume waits, another delete
	// conflicts); it ends only once its image's end is durable, else
	// it stays paused and the client is told (never deleted half: an
	// image left in place would be listed paused again at the next
	// start).
	done := make(chan struct{})
	p.resuming = done
	m.mu.Unlock()
	err = m.endImage(id)
	m.mu.Lock()
	p.resuming = nil
	if err == nil {
		delete(m.paused, id)
		m.rememberEndLocked(id, apitype.Ended(apitype.EndDeleted), p.meta.Tenant)
	}
	m.mu.Unlock()
	close(done)
	if err != nil {
		m.log.Error("deleting a paused session failed: its image could not be removed; it stays paused", "session", id, "err", err)
		return true, err
	}
	m.imagesRemoved()
	return true, nil
}

// pausedList describes every paused session.
func (m *Manager) pausedList() []apitype.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]apitype.Session, 0, len(m.paused))
	for _, p := range m.paused {
		out = append(out, p.info(m.cfg.Persistence.Keep.D()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// notPausing refuses work that would begin while the session is being
// paused.
func (s *Session) notPausing() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pausing {
		return fmt.Errorf("%w: the session is being paused", errdefs.ErrConflict)
	}
	return nil
}

// SetTimeout sets the session's lifetime again: it ends (or pauses) d
// from now (E2B's set_timeout).
func (s *Session) SetTimeout(d time.Duration) error {
	if err := s.m.checkLifetime(d); err != nil {
		return err
	}
	if d == 0 {
		return fmt.Errorf("%w: timeout must be at least 1s", errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.end.Zero() {
		return gone(s.end)
	}
	if s.pausing {
		// Its image has the lifetime of before: this one would be lost.
		return fmt.Errorf("%w: the session is being paused; set its timeout once it is resumed", errdefs.ErrConflict)
	}
	s.lifetime = d
	s.expires = time.Now().Add(d)
	if s.lifeTimer == nil {
		s.lifeTimer = time.AfterFunc(d, s.expire)
	} else {
		s.lifeTimer.Reset(d)
	}
	return nil
}

// Expires is the end of the session's lifetime (ok false: it has none).
func (s *Session) Expires() (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires, s.lifetime > 0
}

// checkLifetime checks a lifetime a client asks for (0: none).
func (m *Manager) checkLifetime(d time.Duration) error {
	if d != 0 && (d < time.Second || d > m.cfg.Server.MaxSessionTimeout.D()) {
		return fmt.Errorf("%w: timeout %s must be between 1s and the server maximum %s (server.max_session_timeout)", errdefs.ErrInvalidArgument, d, m.cfg.Server.MaxSessionTimeout)
	}
	return nil
}

// checkOnTimeout checks a request's on_timeout.
func (m *Manager) checkOnTimeout(v string) error {
	switch v {
	case "", apitype.OnTimeoutEnd:
		return nil
	case apitype.OnTimeoutPause:
		if !m.cfg.Persistence.Enabled {
			return fmt.Errorf("%w: on_timeout \"pause\": %w", errdefs.ErrUnsupported, errPersistenceOff())
		}
		return nil
	}
	return fmt.Errorf("%w: on_timeout %q must be \"end\" or \"pause\"", errdefs.ErrInvalidArgument, v)
}

// expire is the end of the session's lifetime.
func (s *Session) expire() {
	s.mu.Lock()
	if !s.end.Zero() || time.Now().Before(s.expires) {
		if s.end.Zero() && s.lifeTimer != nil {
			s.lifeTimer.Reset(max(time.Until(s.expires), time.Millisecond))
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.timedOut(apitype.Ended(apitype.EndLifetime))
}

// timedOut is a timeout's end of the session: a pause (on_timeout
// "pause"; at the end of its lifetime, what runs is interrupted first) or
// its end. A timeout is a bound on what the session holds, never a
// wish: a pause that is refused (a quota, a workspace over
// max_image_bytes, persistence off) ends the session at once, one that
// fails otherwise is tried again until persistence.shutdown_timeout
// after the timeout, then ends it; the end keeps the timeout's code, its
// reason says why it was not paused. Only an idle timeout's pause that
// meets a request (a conflict: the session is in use again) leaves the
// session running, its idle timer armed again.
func (s *Session) timedOut(end apitype.End) {
	if s.made.OnTimeout != apitype.OnTimeoutPause {
		s.terminate(end)
		return
	}
	go func() {
		// Tried until persistence.shutdown_timeout after the timeout
		// (on the manager's clock, as the retries).
		ctx, cancel := s.m.deadline(s.m.cfg.Persistence.ShutdownTimeout.D())
		defer cancel()
		idle := end.Code == apitype.EndIdle
		pause := s.pauseWhenIdle
		if idle {
			// Idle: a request that came in meanwhile keeps the session
			// (a conflict); its work is never interrupted for it.
			pause = s.pauseIdle
		}
		for {
			_, err := pause(ctx, PauseAsk{Keep: s.made.OnTimeoutRestores, Why: apitype.KillLifetime})
			if err == nil || !s.End().Zero() {
				return
			}
			if idle && errors.Is(err, errdefs.ErrConflict) {
				s.Touch()
				return
			}
			if !pauseRefused(err) && ctx.Err() == nil {
				retry, stop := s.m.timer(pauseRetry)
				select {
				case <-retry:
					continue
				case <-ctx.Done():
					stop()
				case <-s.ended:
					stop()
					return
				}
			}
			why := end
			why.Reason += "; it could not be paused: " + errdefs.Message(err)
			s.m.log.Warn("a session's timeout could not pause it; it ends", "session", s.id, "code", end.Code, "err", err)
			s.terminate(why)
			return
		}
	}()
}

// pauseRetry is how soon a timeout's pause that failed (not refused)
// is tried again.
const pauseRetry = time.Second

// timer is a timer of the manager's clock (the real one unless a test
// set it).
func (m *Manager) timer(d time.Duration) (<-chan time.Time, func()) {
	if m.clock == nil {
		t := time.NewTimer(d)
		return t.C, func() { t.Stop() }
	}
	return m.clock.Timer(d)
}

// deadline is a context that ends d from now on the manager's clock.
func (m *Manager) deadline(d time.Duration) (context.Context, context.CancelFunc) {
	if m.clock == nil {
		return context.WithTimeout(context.Background(), d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	at, stop := m.clock.Timer(d)
	go func() {
		select {
		case <-at:
			cancel()
		case <-ctx.Done():
			stop()
		}
	}()
	return ctx, cancel
}

// pauseRefused: a pause failed for what trying again does not change
// (a quota, a size, persistence off).
func pauseRefused(err error) bool {
	for _, e := range []error{errdefs.ErrQuota, errdefs.ErrTooLarge, errdefs.ErrUnsupported, errdefs.ErrInvalidArgument, errdefs.ErrGone} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pauseIdle is an idle timeout's pause, asking what ask says (memory
// that cannot be kept: the files, saying why).
func (s *Session) pauseIdle(ctx context.Context, ask PauseAsk) (info apitype.Session, err error) {
	return s.pauseObserved(ctx, ask, false)
}

// pauseObserved is pause, checked and observed.
func (s *Session) pauseObserved(ctx context.Context, ask PauseAsk, must bool) (info apitype.Session, err error) {
	if err := s.pausable(); err != nil {
		return apitype.Session{}, err
	}
	begun := time.Now()
	info, err = s.pause(ctx, ask, must)
	s.m.observePause(OpPause, pausedKind(info), begun, err)
	return info, err
}

// pauseWhenIdle pauses the session (a timeout's or a shutdown's), first
// interrupting what runs in it, killing its shell commands, and waiting
// (until ctx ends) for them to stop; it asks what ask says, as
// pauseIdle.
func (s *Session) pauseWhenIdle(ctx context.Context, ask PauseAsk) (info apitype.Session, err error) {
	if err := s.pausable(); err != nil {
		return apitype.Session{}, err
	}
	begun := time.Now()
	defer func() { s.m.observePause(OpPause, pausedKind(info), begun, err) }()
	for {
		info, err := s.pause(ctx, ask, false)
		if !errors.Is(err, errdefs.ErrConflict) {
			return info, err
		}
		// What runs would not outlive the sandbox anyway: executions
		// are interrupted, shell commands killed, then the pause again;
		// their results say why (ask.Why).
		s.interruptFor(ask.Why)
		for _, c := range s.Commands() {
			if c.State != apitype.CommandRunning {
				continue
			}
			if cmd, err := s.command(c.ID); err == nil && !cmd.ended() {
				cmd.kill(ask.Why)
			}
		}
		select {
		case <-ctx.Done():
			return info, err
		case <-s.ended:
			return info, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pauseAll pauses every live session within persistence.shutdown_timeout
// (a shutdown's); those not paused by then are left to end.
func (m *Manager) pauseAll(all []*Session) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Persistence.ShutdownTimeout.D())
	defer cancel()
	var wg sync.WaitGroup
	// A few at a time: each writes to the same disk.
	sem := make(chan struct{}, 4)
	for _, s := range all {
		if !s.client {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// What can be kept is: a shutdown is not the client's
			// choice (on_timeout_restores is the timeout's).
			if _, err := s.pauseWhenIdle(ctx, PauseAsk{Why: apitype.KillShutdown, ByShutdown: true}); err != nil {
				m.log.Warn("a session could not be paused at shutdown; it ends", "session", s.id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// ForkFor creates a new session from the session id, live or paused, for
// the caller ctx carries: its files, settings and code contexts in a
// fresh sandbox under a new id. A session whose pause keeps its memory
// (restores "memory") forks with it: a live one is snapshot (it runs
// on), a paused one's memory image restored, and the fork's interpreters
// run on from there (restored "memory"); otherwise, or when that fails
// (restored_reason says why), its interpreters start afresh (restored
// "files"). A live source keeps running; it is refused (ErrConflict)
// while it executes code, runs a command or install, or transfers a
// file, as a pause is. The fork belongs to the source's tenant. Its
// metadata is the source's without the server's marks
// (identity.ReservedMetadataPrefix): those ctx carries instead.
func (m *Manager) ForkFor(ctx context.Context, id string) (*Session, error) {
	// Whose session it is decides first: another tenant gets the same
	// 404 on every route, whatever this server supports.
	src, err := m.Find(ctx, id)
	var pe *PausedError
	paused := errors.As(err, &pe)
	if err != nil && !paused {
		return nil, err
	}
	if !m.cfg.Persistence.Enabled {
		return nil, fmt.Errorf("%w: this server cannot fork sessions (its operator has not set persistence.enabled)", errdefs.ErrUnsupported)
	}
	begun := time.Now()
	s, err := m.fork(ctx, id, src, paused)
	kind := apitype.RestoreFiles
	if s != nil && s.restored == apitype.RestoreMemory {
		kind = apitype.RestoreMemory
	}
	m.observePause(OpFork, kind, begun, err)
	return s, err
}

// fork is ForkFor once the caller may fork the session id (src when it
// is live), unobserved.
func (m *Manager) fork(ctx context.Context, id string, src *Session, paused bool) (*Session, error) {
	newID := m.ids.NewID()
	var memErr error // why a live source's memory was not kept
	imageID := id
	var meta pausedMeta
	var p *pausedSession
	if paused {
		m.mu.Lock()
		p = m.paused[id]
		m.mu.Unlock()
		if p == nil {
			return nil, m.ids.Unknown(id) // deleted or resumed just now
		}
		meta = p.meta
		if m.hook != nil {
			m.hook("fork", id)
		}
	} else {
		// The live source's files, as a pause would write them, under a
		// name of the fork's own; removed once restored.
		thaw, err := src.freeze("fork")
		if err != nil {
			return nil, err
		}
		meta = src.pausedMeta()
		raw, err := json.Marshal(meta)
		var st pauseimage.Stats
		if err == nil {
			imageID = pauseimage.ForkID(newID)
			st, err = src.writeImage(ctx, imageID, raw)
		}
		if err == nil && src.keepsMemory() {
			// Its memory, the source running on; without it the
			// fork has the files, and says why.
			if _, merr := src.writeMemory(ctx, imageID, st.DiskBytes, true); merr != nil {
				memErr = merr
				m.log.Warn("a session's memory could not be kept for a fork; it forks with its files", "session", id, "err", merr)
			}
		}
		thaw()
		if err != nil {
			return nil, err
		}
		defer m.endImageLater(imageID)
	}
	im, err := pauseimage.Open(m.persistDir(), imageID)
	if err == nil {
		defer im.Close()
		err = im.OpenFiles()
	}
	if err != nil && p != nil {
		// Once open, the image is the fork's to read whatever happens
		// to the source; before, a resume, delete or expiry that took
		// it is not a corrupt image.
		m.mu.Lock()
		still := m.paused[id] == p
		m.mu.Unlock()
		if !still {
			return nil, fmt.Errorf("%w: the session was resumed or deleted while it was being forked; fork it again (or its live self)", errdefs.ErrConflict)
		}
	}
	if err != nil {
		return nil, err
	}
	meta.ID, meta.Created, meta.Executions = newID, time.Now(), 0
	// The source's client metadata, but not the server's marks of it
	// (airlock.mcp: a connection's): the fork is its caller's, with
	// the caller's own marks if it is the server (its /mcp's
	// fork_session).
	meta.Request.Metadata = withOwnMetadata(ctx, meta.Request.Metadata)
	req := meta.Request
	release, err := m.admit.AdmitSession(meta.owner(ctx), &Ask{Limits: &req.Limits, Isolation: &req.Isolation, Network: req.Network})
	if err != nil {
		return nil, err
	}
	mr := m.memoryOf(im)
	if mr == nil && memErr != nil {
		mr = &memoryRestore{why: memErr}
	}
	s, err := m.createRestored(ctx, req, &restoring{meta: meta, image: im, memory: mr, fork: true})
	if err != nil {
		release()
		return nil, err
	}
	m.log.Info("session forked", "session", s.id, "from", id, "restored", s.restored)
	return s, nil
}
