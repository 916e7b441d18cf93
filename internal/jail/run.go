package jail

import (
	"bytes"
	"io"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/workspace"
)

// InputFile is a file placed in /workspace before the program starts.
type InputFile struct {
	Path string // relative to /workspace
	Data io.Reader
	Mode uint32 // permission bits; 0644 when zero
}

// RunRequest is one program run once in a fresh sandbox.
type RunRequest struct {
	Spec Spec
	Argv []string
	// Env is added to BaseEnv (later entries win).
	Env   []string
	Files []InputFile
	// MaxFileBytes caps each input file; Spec.Limits.Disk when zero.
	MaxFileBytes int64
	// Stdin feeds the program; empty input when nil.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive the output live as well,
	// within the same caps.
	Stdout, Stderr io.Writer
	// Hide lists workspace paths left out of the result's file list
	// (the program file airlock wrote itself).
	Hide []string
}

// RunResult is what a run produced.
type RunResult struct {
	ExitCode        int
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	// What was dropped past the output cap (the program ran on).
	StdoutDropped, StderrDropped int64
	Duration                     time.Duration
	CPU                          time.Duration
	PeakMemory                   int64
	Killed                       bool
	KillReason                   apitype.KillReason
	// Files are the regular files the program created or modified in
	// /workspace (the inputs only if it changed them).
	Files          []workspace.Change
	FilesTruncated bool
}

// capture keeps the first max bytes of a stream and forwards them to an
// optional live writer; the rest is dropped and counted, and the program
// runs on.
type capture struct {
	mu        sync.Mutex
	max       int64
	buf       bytes.Buffer
	live      io.Writer
	truncated bool
	dropped   int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	room := max(c.max-int64(c.buf.Len()), 0)
	if int64(len(p)) > room {
		c.truncated = true
		c.dropped += int64(len(p)) - room
		p = p[:room]
	}
	if len(p) > 0 {
		c.buf.Write(p)
		if c.live != nil {
			c.live.Write(p)
		}
	}
	return n, nil
}

func (c *capture) result() ([]byte, bool, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf.Bytes()...), c.truncated, c.dropped
}
