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
	Duration        time.Duration
	CPU             time.Duration
	PeakMemory      int64
	Killed          bool
	KillReason      apitype.KillReason
	// Files are the regular files the program created or modified in
	// /workspace (the inputs only if it changed them).
	Files          []workspace.Change
	FilesTruncated bool
}

// capture keeps the first max bytes of a stream, forwards them to an
// optional live writer, and reports overflow once, by closing overflow
// (which the two streams of a run share).
type capture struct {
	mu        sync.Mutex
	max       int64
	buf       bytes.Buffer
	live      io.Writer
	truncated bool
	overflow  func()
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	room := c.max - int64(c.buf.Len())
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		if !c.truncated {
			c.truncated = true
			if c.overflow != nil {
				c.overflow()
			}
		}
	}
	if len(p) > 0 {
		c.buf.Write(p)
		if c.live != nil {
			c.live.Write(p)
		}
	}
	return n, nil
}

func (c *capture) result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf.Bytes()...), c.truncated
}
