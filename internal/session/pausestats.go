package session

import (
	"errors"
	"time"

	"airlock/internal/errdefs"
)

// What pauses, resumes and forks report to the server's metrics.

// Pause operations (PauseEvent.Op).
const (
	OpPause  = "pause"
	OpResume = "resume"
	OpFork   = "fork"
)

// PauseEvent is one pause, resume or fork that was tried, for metrics.
type PauseEvent struct {
	Op string
	// Kind is what it kept or restored (apitype.RestoreFiles).
	Kind string
	// Outcome: "ok", "busy" (refused while the session worked), "quota"
	// (a tenant's quota), "corrupt" (an image that failed its checks),
	// "failed" (anything else: a full disk, a sandbox that did not boot).
	Outcome string
	// Duration is the whole operation's, refusals included.
	Duration time.Duration
}

// PauseOutcomes is PauseEvent.Outcome's vocabulary.
func PauseOutcomes() []string { return []string{"ok", "busy", "quota", "corrupt", "failed"} }

// pauseOutcome names err's outcome.
func pauseOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errdefs.ErrImageCorrupt):
		return "corrupt"
	case errors.Is(err, errdefs.ErrQuota):
		return "quota"
	case errors.Is(err, errdefs.ErrConflict):
		return "busy"
	}
	return "failed"
}

// OnPause sets f to hear of every pause, resume and fork tried; call it
// before the manager serves anything.
func (m *Manager) OnPause(f func(PauseEvent)) { m.onPause = f }

// observePause reports an operation op of kind begun at begun that ended
// with err.
func (m *Manager) observePause(op, kind string, begun time.Time, err error) {
	if m.onPause != nil {
		m.onPause(PauseEvent{Op: op, Kind: kind, Outcome: pauseOutcome(err), Duration: time.Since(begun)})
	}
}

// PausedUsage is what one tenant's paused sessions hold.
type PausedUsage struct {
	Sessions  int
	DiskBytes int64
	// Kept: what is kept for inspection (images, memory images and
	// recovery points refused as damaged), in DiskBytes too.
	Kept int
}

// PausedUsage is the paused sessions and the disk their images take
// (with the memory images kept for inspection, and the live sessions'
// recovery points and resumed markers: what counts against
// quotas.max_paused_bytes), by tenant, for metrics.
func (m *Manager) PausedUsage() map[string]PausedUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]PausedUsage{}
	m.eachPausedLocked(func(b pausedBytes) {
		u := out[b.tenant]
		if b.paused {
			u.Sessions++
		}
		if b.kept {
			u.Kept++
		}
		u.DiskBytes += b.bytes
		out[b.tenant] = u
	})
	return out
}
