package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// stderrTail is how much of a command's stderr an answer keeps (the end).
const stderrTail = 4 << 10

// capped keeps the first max bytes written to it and says when more
// came (then it calls over once).
type capped struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	max  int
	more bool
	over func()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		if !c.more {
			c.more = true
			c.over()
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool // bytes before buf were dropped
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

// runCommand runs a command tool: argv as expanded (no shell), a clean
// environment with the credential in its variable, the arguments on
// stdin if the tool says so, as broker.command_user when the server is
// root; its whole process group is killed at the timeout, when stdout
// passes its cap, and when it ends (nothing it started outlives it).
func (b *Broker) runCommand(ctx context.Context, t *tool, p prepared) (*Result, *Refusal) {
	c := t.cfg.Command
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Dir = c.Dir
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}
	for k, v := range c.Env {
		env[k] = v
	}
	if cr := t.cfg.Credential; cr != nil {
		env[cr.EnvVar] = t.secret
	}
	for _, k := range sortedKeys(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	sort.Strings(cmd.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if b.asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: b.cmdUID, Gid: b.cmdGID, Groups: []uint32{}}
	}
	killGroup := func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	cmd.Cancel = func() error { killGroup(); return nil }
	// Pipes a grandchild holds open do not hold the answer past this.
	cmd.WaitDelay = 100 * time.Millisecond
	out := &capped{max: int(t.cfg.MaxResponse), over: cancel}
	// The tail keeps room for a credential cut at its start: the cut
	// part is dropped after the scrub, not shown.
	longest := 0
	for _, f := range t.forms {
		longest = max(longest, len(f))
	}
	errOut := &tail{max: stderrTail + longest}
	cmd.Stdout, cmd.Stderr = out, errOut
	if p.body != nil {
		cmd.Stdin = bytes.NewReader(p.body)
	}
	if err := cmd.Start(); err != nil {
		b.log.Error("broker: a command tool cannot start", "tool", t.name, "err", err)
		return nil, &Refusal{Kind: errdefs.ErrUnavailable, Rule: "start", Msg: "the tool's command could not be started (the server's log says why)"}
	}
	err := cmd.Wait()
	killGroup()
	out.mu.Lock()
	more := out.more
	out.mu.Unlock()
	switch {
	case more:
		return nil, &Refusal{Kind: errdefs.ErrTooLarge, Rule: "max_response",
			Msg: fmt.Sprintf("the tool wrote more than its %d-byte cap (max_response) and was stopped; ask for less", t.cfg.MaxResponse)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, &Refusal{Kind: errdefs.ErrTimeout, Rule: "timeout", Msg: fmt.Sprintf("the tool did not finish within its timeout (%s) and was stopped", t.cfg.Timeout)}
	case ctx.Err() != nil:
		return nil, &Refusal{Kind: errdefs.ErrUnavailable, Rule: "canceled", Msg: "the call was canceled: the caller went away or the session ended"}
	}
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
	} else if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		b.log.Warn("broker: a command tool failed", "tool", t.name, "err", err)
		return nil, &Refusal{Kind: errdefs.ErrUnavailable, Rule: "upstream", Msg: "the tool's command failed (the server's log says why)"}
	}
	data, _ := t.scrubBytes(out.buf.Bytes())
	r := &Result{Kind: apitype.ToolCommand, Status: status}
	r.body(data, true)
	errOut.mu.Lock()
	kept := errOut.buf
	if errOut.cut {
		kept = kept[longest:] // where a credential may begin, cut
	}
	stderr := t.scrub(string(kept))
	errOut.mu.Unlock()
	if len(stderr) > stderrTail {
		stderr = stderr[len(stderr)-stderrTail:]
	}
	r.Stderr = strings.ToValidUTF8(stderr, "\uFFFD")
	return r, nil
}
