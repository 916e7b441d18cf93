package jail

import (
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

// Run starts a fresh sandbox, places the input files, runs the program
// under every limit, and tears the sandbox down. Whatever happens, nothing
// of the sandbox is left when Run returns.
func (h *Host) Run(ctx context.Context, req RunRequest) (*RunResult, error) {
	return h.RunWith(ctx, req, nil)
}

// RunWith is Run with a hook that sees the sandbox and the result after
// the program and everything it started are dead, before the sandbox is
// torn down: its workspace is still readable (and nothing can change it
// any more), the files the program wrote are in the result.
func (h *Host) RunWith(ctx context.Context, req RunRequest, after func(*Sandbox, *RunResult)) (*RunResult, error) {
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

// run is one program running in a sandbox of its own; as the watch's
// Code, its reports are the init's exit messages.
type run struct {
	sb             *Sandbox
	stdout, stderr *capture
	readers        sync.WaitGroup
	before         workspace.Snapshot
	start          time.Time
	exit           *Exit
}

// begin places the input files and starts the program with its output
// captured.
func begin(sb *Sandbox, req RunRequest) (_ *run, err error) {
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
	r := &run{sb: sb, before: workspace.TakeSnapshot(sb.Workspace())}
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

func (r *run) Reports() <-chan Exit { return r.sb.Exits() }

// Handle takes the program's exit: the only program of the sandbox.
func (r *run) Handle(e Exit) bool {
	r.exit = &e
	return true
}

func (r *run) Closed() (apitype.End, bool) { return apitype.End{}, false } // Exits never closes

// Interrupt is never asked for: a run's limits kill.
func (r *run) Interrupt(apitype.KillReason) {}

// finish kills whatever is left, collects the output and the files, and
// says how the program ended.
func (r *run) finish(ctx context.Context, sb *Sandbox, req RunRequest, o watch.Outcome, after func(*Sandbox, *RunResult)) (*RunResult, error) {
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
