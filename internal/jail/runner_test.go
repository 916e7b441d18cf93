package jail

// A minimal runner for the jail's own tests: a program run once in a
// fresh sandbox under every limit, supervised by package watch, as
// production code runs programs through session and instance. It exists
// so that these tests exercise the jail (namespaces, mounts, seccomp,
// Landlock, cgroup limits, teardown) without the layers above it.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/watch"
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

// runOnce starts a fresh sandbox, places the input files, runs the
// program under every limit, and tears the sandbox down. Whatever
// happens, nothing of the sandbox is left when it returns.
func runOnce(ctx context.Context, h *Host, req RunRequest) (*RunResult, error) {
	return runOnceWith(ctx, h, req, nil)
}

// runOnceWith is runOnce with a hook that sees the sandbox and the result after
// the program and everything it started are dead, before the sandbox is
// torn down: its workspace is still readable (and nothing can change it
// any more), the files the program wrote are in the result.
func runOnceWith(ctx context.Context, h *Host, req RunRequest, after func(*Sandbox, *RunResult)) (*RunResult, error) {
	sb, err := h.Start(ctx, req.Spec)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	r, err := begin(sb, req)
	if err != nil {
		return nil, err
	}
	l := req.Spec.Limits
	o := watch.Watch(ctx, sb, watch.Code[Exit](r), watch.Spec{
		Policy:  watch.Kill,
		Timeout: l.Timeout.D(),
		CPUTime: l.CPUTime.D(), CPUs: l.CPUs,
		// The init going away ends the run; finish says how.
		Ended:   sb.Dead(),
		EndedBy: func() apitype.End { return apitype.Ended(apitype.EndInterpreterExited) },
	})
	return r.finish(ctx, sb, req, o, after)
}

// runner is one program running in a sandbox of its own; as the watch's
// Code, its reports are the init's exit messages.
type runner struct {
	sb             *Sandbox
	stdout, stderr *capture
	readers        sync.WaitGroup
	before         workspace.Snapshot
	start          time.Time
	exit           *Exit
}

// begin places the input files and starts the program with its output
// captured.
func begin(sb *Sandbox, req RunRequest) (_ *runner, err error) {
	l := req.Spec.Limits
	maxFile := req.MaxFileBytes
	if maxFile <= 0 {
		maxFile = int64(l.Disk)
	}
	for _, f := range req.Files {
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if _, err := sb.Workspace().Write(f.Path, f.Data, maxFile, mode); err != nil {
			return nil, fmt.Errorf("copy %s into the sandbox: %w", f.Path, err)
		}
	}
	r := &runner{sb: sb, before: workspace.TakeSnapshot(sb.Workspace())}
	r.stdout = &capture{max: int64(l.MaxOutput), live: req.Stdout}
	r.stderr = &capture{max: int64(l.MaxOutput), live: req.Stderr}

	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pipe := func() (*os.File, *os.File) {
		if err != nil {
			return nil, nil
		}
		var rd, wr *os.File
		if rd, wr, err = os.Pipe(); err == nil {
			files = append(files, rd, wr)
		}
		return rd, wr
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, err
	}
	files = []*os.File{inW} // until the stdin copier owns it
	r.readers.Add(2)
	go func() { io.Copy(r.stdout, outR); outR.Close(); r.readers.Done() }()
	go func() { io.Copy(r.stderr, errR); errR.Close(); r.readers.Done() }()
	r.start = time.Now()
	trace("spawn")
	_, err = sb.Spawn(Process{Argv: req.Argv, Env: append(BaseEnv(), req.Env...), Dir: "/workspace", Files: []*os.File{inR, outW, errW}})
	// The sandbox has its copies: ours must go, or the readers never see
	// the end of the output.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		sb.Kill()
		r.readers.Wait()
		return nil, err
	}
	files = nil
	go func() {
		if req.Stdin != nil {
			io.Copy(inW, req.Stdin)
		}
		inW.Close()
	}()
	return r, nil
}

func (r *runner) Reports() <-chan Exit { return r.sb.Exits() }

// Handle takes the program's exit: the only program of the sandbox.
func (r *runner) Handle(e Exit) bool {
	r.exit = &e
	return true
}

func (r *runner) Closed() (apitype.End, bool) { return apitype.End{}, false } // Exits never closes

// Interrupt is never asked for: a run's limits kill.
func (r *runner) Interrupt(apitype.KillReason) {}

// finish kills whatever is left, collects the output and the files, and
// says how the program ended.
func (r *runner) finish(ctx context.Context, sb *Sandbox, req RunRequest, o watch.Outcome, after func(*Sandbox, *RunResult)) (*RunResult, error) {
	trace("exited")
	res := &RunResult{ExitCode: -1, Duration: time.Since(r.start)}
	// Whatever the program left running (daemons included) dies with the
	// sandbox; only then do the output pipes reach end of file.
	sb.Kill()
	<-sb.Dead()
	r.readers.Wait()
	trace("killed")

	killReason := o.KillReason()
	stats, serr := sb.Stats()
	if serr == nil {
		res.CPU = stats.CPU
		res.PeakMemory = stats.MemoryPeak
		// One OOM kill ends the whole sandbox, even when the event lost
		// the race with the program's exit.
		if stats.OOMKills > 0 && killReason == "" && ctx.Err() == nil {
			killReason = apitype.KillMemory
		}
	}
	switch {
	case killReason != "":
		res.Killed, res.KillReason, res.ExitCode = true, killReason, 137
	case r.exit != nil && o.Finished:
		res.ExitCode = r.exit.Code()
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: run cancelled: %v", errdefs.ErrTimeout, ctx.Err())
	default:
		return nil, fmt.Errorf("jail: the sandbox init ended unexpectedly")
	}
	if ctx.Err() != nil && killReason == "" {
		return nil, fmt.Errorf("%w: run cancelled: %v", errdefs.ErrTimeout, ctx.Err())
	}
	res.Stdout, res.StdoutTruncated, res.StdoutDropped = r.stdout.result()
	res.Stderr, res.StderrTruncated, res.StderrDropped = r.stderr.result()

	now := workspace.TakeSnapshot(sb.Workspace())
	hide := map[string]bool{}
	for _, p := range req.Hide {
		hide[p] = true
	}
	for _, c := range r.before.Changes(now) {
		if c.Change != "deleted" && !hide[c.Path] {
			res.Files = append(res.Files, c)
		}
	}
	res.FilesTruncated = r.before.Truncated || now.Truncated
	if after != nil {
		after(sb, res)
	}
	return res, nil
}
