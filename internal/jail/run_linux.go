package jail

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"airlock/internal/cgroup"
	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// Run starts a fresh sandbox, places the input files, runs the program
// under every limit, and tears the sandbox down. Whatever happens, nothing
// of the sandbox is left when Run returns.
func (h *Host) Run(ctx context.Context, req RunRequest) (*RunResult, error) {
	return h.RunWith(ctx, req, nil)
}

// RunWith is Run with a hook that sees the sandbox after the program and
// everything it started are dead, before the sandbox is torn down: its
// workspace is still readable (and nothing can change it any more).
func (h *Host) RunWith(ctx context.Context, req RunRequest, after func(*Sandbox)) (*RunResult, error) {
	l := req.Spec.Limits
	sb, err := h.Start(ctx, req.Spec)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
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
	before := workspace.TakeSnapshot(sb.Workspace())

	var (
		killOnce   sync.Once
		killReason string
		killed     = make(chan struct{})
	)
	kill := func(reason string) {
		killOnce.Do(func() {
			killReason = reason
			sb.Kill()
			close(killed)
		})
	}
	stdout := &capture{max: int64(l.MaxOutput), live: req.Stdout, onOverflow: func() { kill(KillOutput) }}
	stderr := &capture{max: int64(l.MaxOutput), live: req.Stderr, onOverflow: func() { kill(KillOutput) }}

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { io.Copy(stdout, outR); outR.Close(); readers.Done() }()
	go func() { io.Copy(stderr, errR); errR.Close(); readers.Done() }()
	start := time.Now()
	trace("spawn")
	_, err = sb.Spawn(Process{Argv: req.Argv, Env: append(BaseEnv(), req.Env...), Dir: "/workspace", Files: []*os.File{inR, outW, errW}})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		sb.Kill()
		readers.Wait()
		return nil, err
	}
	go func() {
		if req.Stdin != nil {
			io.Copy(inW, req.Stdin)
		}
		inW.Close()
	}()

	stopCPU := make(chan struct{})
	go WatchCPU(sb, 0, l.CPUTime.D(), l.CPUs, stopCPU, func() { kill(KillCPUTime) })
	go sb.Cgroup().PollPids(stopCPU)
	timeout := time.NewTimer(l.Timeout.D())
	defer timeout.Stop()

	res := &RunResult{ExitCode: -1}
	var exit *Exit
wait:
	for {
		select {
		case e := <-sb.Exits():
			exit = &e
			break wait
		case <-timeout.C:
			kill(KillTimeout)
		case ev := <-sb.Events():
			switch ev {
			case cgroup.EventOOM:
				kill(KillMemory)
			case cgroup.EventPidsMax:
				kill(KillPids)
			}
		case <-ctx.Done():
			kill("")
		case <-killed:
			break wait
		case <-sb.Dead():
			break wait
		}
	}
	trace("exited")
	res.Duration = time.Since(start)
	close(stopCPU)
	// Whatever the program left running (daemons included) dies with the
	// sandbox; only then do the output pipes reach end of file.
	sb.Kill()
	<-sb.Dead()
	readers.Wait()
	trace("killed")

	killOnce.Do(func() {}) // later kill attempts are moot; read killReason safely
	stats, serr := sb.Stats()
	if serr == nil {
		res.CPU = stats.CPU
		res.PeakMemory = stats.MemoryPeak
		// One OOM kill ends the whole sandbox, even when the event lost
		// the race with the program's exit.
		if stats.OOMKills > 0 && killReason == "" && ctx.Err() == nil {
			killReason = KillMemory
		}
	}
	switch {
	case killReason != "":
		res.Killed, res.KillReason, res.ExitCode = true, killReason, 137
	case exit != nil:
		res.ExitCode = exit.Code()
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: run cancelled: %v", errdefs.ErrTimeout, ctx.Err())
	default:
		return nil, fmt.Errorf("jail: the sandbox init ended unexpectedly")
	}
	if ctx.Err() != nil && killReason == "" {
		return nil, fmt.Errorf("%w: run cancelled: %v", errdefs.ErrTimeout, ctx.Err())
	}
	res.Stdout, res.StdoutTruncated = stdout.result()
	res.Stderr, res.StderrTruncated = stderr.result()

	now := workspace.TakeSnapshot(sb.Workspace())
	hide := map[string]bool{}
	for _, p := range req.Hide {
		hide[p] = true
	}
	for _, c := range before.Changes(now) {
		if c.Change != "deleted" && !hide[c.Path] {
			res.Files = append(res.Files, c)
		}
	}
	res.FilesTruncated = before.Truncated || now.Truncated
	if after != nil {
		after(sb)
	}
	return res, nil
}

// WatchCPU calls over once the sandbox has used budget of CPU time since
// it had used base. It looks at the earliest moment the budget could be
// spent, given that the sandbox cannot use more than cpus cores, so it
// costs nothing while the code is far from its limit. It returns when
// stop is closed.
func WatchCPU(sb *Sandbox, base, budget time.Duration, cpus float64, stop <-chan struct{}, over func()) {
	if cpus <= 0 {
		cpus = 1
	}
	for {
		used, err := sb.CPU()
		if err != nil {
			// Never stop enforcing: look again shortly.
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-stop:
				return
			}
		}
		if used-base >= budget {
			over()
			return
		}
		t := time.NewTimer(time.Duration(float64(budget-(used-base))/cpus) + time.Millisecond)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		}
	}
}
