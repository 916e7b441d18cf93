package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Persistence configures sessions that outlive their sandbox and the
// server: pause and resume (POST /v1/sessions/{id}/pause, .../resume), a
// session's lifetime ending in a pause (on_timeout "pause"), and every
// session paused when the server shuts down.
type Persistence struct {
	// Enabled lets sessions be paused: their workspace files, limits,
	// environment, network policy and lifecycle are written under Dir and
	// their sandbox freed; a resume restores them into a fresh sandbox
	// (the interpreter restarts: restored "files"). Off: pause is refused
	// and a shutdown ends every session.
	Enabled bool `json:"enabled"`
	// Dir holds the paused sessions; <data_dir>/sessions when empty. It
	// must be persistent storage, like data_dir.
	Dir string `json:"dir"`
	// Keep is how long a paused session is kept before it is deleted.
	Keep Duration `json:"keep"`
	// OnShutdown is what a shutdown (SIGTERM) does to live sessions:
	// "pause" them (within ShutdownTimeout; those that cannot be paused in
	// time end) or "end" them.
	OnShutdown string `json:"on_shutdown"`
	// ShutdownTimeout bounds the pauses of a shutdown: a session still
	// executing is interrupted first, and one not paused by then ends.
	ShutdownTimeout Duration `json:"shutdown_timeout"`
	// MaxImageBytes caps what one paused session may take on disk (its
	// files); a pause over it is refused and the session keeps running.
	MaxImageBytes Size `json:"max_image_bytes"`
	// SealBytesPerSecond is what the recovery points of one tenant's
	// live sessions may write on average, in bytes a second: each seal
	// (after every operation that changed files) is charged the bytes it
	// copies and its point.json. A tenant past its budget (see
	// SealBurstBytes) has its seals deferred: its points stay at their
	// last sealed operation (the session's info says so) and catch up,
	// coalesced, once the budget refills. At least 1 MiB.
	SealBytesPerSecond Size `json:"seal_bytes_per_second"`
	// SealBurstBytes is what a tenant's seals may write at once beyond
	// SealBytesPerSecond (the bucket's size; a seal that starts within
	// it copies what it must, whatever its size). At least
	// persistence.seal_bytes_per_second.
	SealBurstBytes Size `json:"seal_burst_bytes"`
}

// DefaultPersistence is persistence's defaults (off).
func DefaultPersistence() Persistence {
	return Persistence{Keep: Duration(7 * 24 * time.Hour), OnShutdown: "pause", ShutdownTimeout: Duration(30 * time.Second), MaxImageBytes: 4 << 30,
		SealBytesPerSecond: 64 << 20, SealBurstBytes: 1 << 30}
}

// PersistenceDir is where paused sessions are kept.
func (c Config) PersistenceDir() string {
	if c.Persistence.Dir != "" {
		return c.Persistence.Dir
	}
	return filepath.Join(c.DataDir, "sessions")
}

func (p Persistence) validate() []error {
	var errs []error
	if p.Dir != "" && (!filepath.IsAbs(p.Dir) || filepath.Clean(p.Dir) != p.Dir || p.Dir == "/") {
		errs = append(errs, fmt.Errorf("persistence.dir %q must be a clean absolute path other than /", p.Dir))
	}
	if p.Keep < Duration(time.Minute) {
		errs = append(errs, errors.New("persistence.keep must be at least 1m"))
	}
	if p.OnShutdown != "pause" && p.OnShutdown != "end" {
		errs = append(errs, fmt.Errorf("persistence.on_shutdown %q must be \"pause\" or \"end\"", p.OnShutdown))
	}
	if p.ShutdownTimeout < Duration(time.Second) || p.ShutdownTimeout > Duration(time.Hour) {
		errs = append(errs, errors.New("persistence.shutdown_timeout must be between 1s and 1h"))
	}
	if p.MaxImageBytes < 1<<20 {
		errs = append(errs, errors.New("persistence.max_image_bytes must be at least 1 MiB"))
	}
	if p.SealBytesPerSecond < 1<<20 {
		errs = append(errs, errors.New("persistence.seal_bytes_per_second must be at least 1 MiB"))
	}
	if p.SealBurstBytes < p.SealBytesPerSecond {
		errs = append(errs, errors.New("persistence.seal_burst_bytes must be at least persistence.seal_bytes_per_second"))
	}
	return errs
}
