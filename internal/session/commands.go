package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/packages"
	"airlock/internal/redact"
	"airlock/internal/watch"
	"airlock/internal/workspace"
)

// commandLanguage is what observers hear a command's language is.
const commandLanguage = "bash"

// keptCommands is how many ended commands a session remembers (for GET);
// older ones are forgotten first.
const keptCommands = 64

// outputGrace is how long a command's output is still read after it
// exited: a process it left in the background may hold its pipes open
// for ever, and what it prints later is not the command's.
const outputGrace = 100 * time.Millisecond

// commands are a session's shell commands; mu guards every field.
type commands struct {
	mu      sync.Mutex
	next    int
	byID    map[string]*command
	order   []string // ids, oldest first
	running int
}

// command is one shell command: running, or how it ended.
//
// Its two locks are never held together: mu guards the output and how it
// ended (the fields from stdout to res), stdinMu the writes to its
// standard input and closed. What mu is held for may take a redactor's
// lock and a client's event writer's.
type command struct {
	id, line string
	// argv, tag and dir are the request's (see CommandResult).
	argv       []string
	tag, dir   string
	background bool
	// pty: its streams are a terminal's (stdinW is its master, and
	// outR the same file; errR is nil).
	pty     bool
	started time.Time
	who     Caller // who started it, for observers
	c       Process
	// The ends of its pipes: stdin's write end, the output's read ends.
	stdinW, outR, errR *os.File
	// red redacts its output (nil: nothing is); flags are the code rules
	// that flagged the command.
	red   *redact.Redactor
	flags []string
	// onEnd, if set, is called once as it ends (a background command's
	// admission is given back there).
	onEnd func()
	// hist is its entry in the session's history (nil: none).
	hist *histEntry

	mu      sync.Mutex
	stdout  stream
	stderr  stream
	reason  apitype.KillReason // why airlock killed it, if it did
	killed  bool
	size    *apitype.PTYSize // its terminal's, now
	follow  followers
	res     *apitype.CommandResult // set once it ended
	stdinMu sync.Mutex
	closed  bool // stdin
	done    chan struct{}
}

// RunCommand runs req.Command with `bash -c` as a new process in the
// session's sandbox, beside its interpreter (whose state it does not
// touch): the same filesystem, namespaces, cgroup and limits, the same
// user and layers, the session's environment plus req.Env. A foreground
// command returns how it ended (emit, if not nil, gets its output as it
// comes and an end event); a background one returns at once, running,
// and its admission is given back when it ends (before its end is
// visible: GET says exited).
func (s *Session) RunCommand(ctx context.Context, req apitype.CommandRequest, emit func(apitype.Event)) (*apitype.CommandResult, error) {
	release, err := s.m.admitExecution(ctx, &Ask{Timeout: req.Timeout})
	if err != nil {
		return nil, err
	}
	if req.Background {
		return s.runCommand(ctx, req, nil, release)
	}
	defer release()
	return s.runCommand(ctx, req, endFirst(emit, release), nil)
}

// runCommand runs the command; ended, if set, is called once: when it
// ends, or before runCommand returns if it never started.
func (s *Session) runCommand(ctx context.Context, req apitype.CommandRequest, emit func(apitype.Event), ended func()) (*apitype.CommandResult, error) {
	handed := false // to the command's watcher, which calls ended
	defer func() {
		if !handed && ended != nil {
			ended()
		}
	}()
	argv, line, err := s.commandArgv(req)
	if err != nil {
		return nil, err
	}
	req.Command = line
	if len(req.Stdin) > MaxCode || len(req.Tag) > maxTag {
		return nil, fmt.Errorf("%w: stdin is larger than %d bytes, or the tag than %d", errdefs.ErrTooLarge, MaxCode, maxTag)
	}
	if err := ValidateEnv(req.Env, s.m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	who := s.callerOf(ctx)
	tenant := s.policyTenant(request{who: who})
	flags, err := s.m.screen(tenant, ExecutionEvent{Caller: who, Kind: ExecCommand, Session: s.id, Language: commandLanguage, Code: req.Command})
	if err != nil {
		return nil, err
	}
	dir, err := commandDir(req.Cwd)
	if err != nil {
		return nil, err
	}
	term, err := terminal(req.PTY)
	if err != nil {
		return nil, err
	}
	if term != nil {
		// A terminal is followed by id (AttachCommand), not by the
		// request that started it.
		req.Background = true
	}
	timeout := req.Timeout.D()
	if timeout == 0 && !req.Background {
		timeout = s.limits.Timeout.D()
	}
	if timeout != 0 && (timeout < config.MinTimeout.D() || timeout > s.m.cfg.Max.Timeout.D()) {
		return nil, fmt.Errorf("%w: timeout %s must be between %s and the server maximum %s", errdefs.ErrInvalidArgument, timeout, config.MinTimeout, s.m.cfg.Max.Timeout)
	}
	if end := s.End(); !end.Zero() {
		return nil, gone(end)
	}
	if in, ok := packages.ParseCommand(s.lang.PackageManager, req.Command); ok && !req.Background && req.PTY == nil {
		return s.runInstallCommand(ctx, req, in, emit)
	}
	release := func() {}
	if !req.Background {
		// A foreground command is an execution like any other: it takes
		// a slot and keeps the session in use.
		r, err := s.m.acquire(ctx)
		if err != nil {
			return nil, err
		}
		unuse := s.Use()
		release = func() { unuse(); r() }
	}
	defer func() { release() }()

	s.cmds.mu.Lock()
	if s.cmds.running >= s.m.cfg.Server.MaxSessionCommands {
		n := s.cmds.running
		s.cmds.mu.Unlock()
		return nil, fmt.Errorf("%w: %d commands are running in this session, the maximum (server.max_session_commands); wait for one or signal it", errdefs.ErrLimit, n)
	}
	s.cmds.running++
	s.cmds.next++
	id := "c" + strconv.Itoa(s.cmds.next)
	s.cmds.mu.Unlock()
	started := false
	defer func() {
		if !started {
			s.cmds.mu.Lock()
			s.cmds.running--
			s.cmds.mu.Unlock()
		}
	}()
	// Counted before it looks: a pause either sees it or is seen.
	if err := s.notPausing(); err != nil {
		return nil, err
	}
	red, err := s.redactor(tenant)
	if err != nil {
		return nil, err
	}

	base := s.runtimeEnv()
	env := make(map[string]string, len(base)+len(req.Env))
	for k, v := range base {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	kv := make([]string, 0, len(env))
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	c, err := s.inst.StartCommand(argv, kv, dir, term)
	if err != nil {
		if end := s.End(); !end.Zero() {
			return nil, gone(end)
		}
		return nil, err
	}
	started = true
	cmd := &command{id: id, line: req.Command, argv: req.Argv, tag: req.Tag, dir: dir, background: req.Background, started: time.Now(), c: c,
		done: make(chan struct{}), who: who, red: red, flags: flags, pty: term != nil}
	if term != nil {
		cmd.size = &apitype.PTYSize{Cols: req.PTY.Cols, Rows: req.PTY.Rows}
	}
	cmd.stdinW, cmd.outR, cmd.errR = c.Stdio()
	max := int(s.limits.MaxOutput)
	cmd.stdout = stream{max: max, name: apitype.EventStdout, beyond: cmd.pty}
	cmd.stderr = stream{max: max, name: apitype.EventStderr}
	// Its output goes to whoever follows it (its foreground client,
	// clients attached by id), and is kept for those who attach late.
	if !req.Background {
		cmd.follow.emit = emit
	}
	cmd.follow.sentMax = 2 * max
	cmd.stdout.live = func(b []byte) { cmd.publishLocked(outputEvent(apitype.EventStdout, b, cmd.pty)) }
	cmd.stderr.live = func(b []byte) { cmd.publishLocked(outputEvent(apitype.EventStderr, b, cmd.pty)) }
	cmd.stdout.full, cmd.stderr.full = cmd.publishLocked, cmd.publishLocked
	cmd.stdout.redactLive(cmd.red)
	cmd.stderr.redactLive(cmd.red)
	s.cmds.mu.Lock()
	if s.cmds.byID == nil {
		s.cmds.byID = map[string]*command{}
	}
	s.cmds.byID[id] = cmd
	s.cmds.order = append(s.cmds.order, id)
	s.cmds.mu.Unlock()
	cmd.hist = s.hist.begin(apitype.HistoryCommand, id, req.Command, cmd.started, cmd.red, nil, cmd)
	if s.m.obs != nil {
		s.m.obs.ExecutionStarted(ExecutionEvent{Caller: cmd.who, Kind: ExecCommand, Session: s.id, Language: commandLanguage, ID: id, Code: req.Command, CodeFlags: flags})
	}

	// A terminal's input stays open: its client types.
	eof := !req.Background && !cmd.pty
	if req.Stdin != "" || eof {
		go func() {
			if req.Stdin != "" {
				cmd.writeStdin([]byte(req.Stdin), false)
			}
			if eof {
				cmd.writeStdin(nil, true)
			}
		}()
	}
	var readers sync.WaitGroup
	readers.Go(func() { cmd.read(cmd.outR, &cmd.stdout) })
	if cmd.errR != nil {
		readers.Go(func() { cmd.read(cmd.errR, &cmd.stderr) })
	}
	stats0, _ := s.inst.Stats()
	cmd.onEnd, handed = ended, true
	// A foreground command goes when its client leaves; a background
	// one outlives its request.
	watched := ctx
	if req.Background {
		watched = context.Background()
	}
	go s.watchCommand(watched, cmd, timeout, &readers, stats0.OOMKills)

	if req.Background {
		res := cmd.result()
		return &res, nil
	}
	<-cmd.done
	res := cmd.result()
	if emit != nil {
		emit(apitype.Event{Type: apitype.EventEnd, Command: &res})
	}
	return &res, nil
}

// maxTag caps a command's tag.
const maxTag = 256

// execArgv runs the program in $0 with the arguments in "$@", looked up
// in PATH as a shell does (envd's own wrapper does the same): the
// sandbox's PATH is the sandbox's, which the host never searches.
const execArgv = `exec -- "$0" "$@"`

// commandArgv is what req runs, and the line observers, code rules and
// its result see: req.Command with `bash -c`, or req.Argv as it is.
func (s *Session) commandArgv(req apitype.CommandRequest) (argv []string, line string, err error) {
	if len(req.Argv) == 0 {
		switch {
		case strings.TrimSpace(req.Command) == "":
			return nil, "", fmt.Errorf("%w: command is empty", errdefs.ErrInvalidArgument)
		case len(req.Command) > MaxCode:
			return nil, "", fmt.Errorf("%w: the command is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
		case strings.ContainsRune(req.Command, 0):
			return nil, "", fmt.Errorf("%w: the command must not contain NUL bytes", errdefs.ErrInvalidArgument)
		}
		return []string{s.m.cfg.Runtimes.Bash, "-c", req.Command}, req.Command, nil
	}
	if req.Command != "" {
		return nil, "", fmt.Errorf("%w: command or argv, not both", errdefs.ErrInvalidArgument)
	}
	if req.Argv[0] == "" {
		return nil, "", fmt.Errorf("%w: argv[0], the program, is empty", errdefs.ErrInvalidArgument)
	}
	n := 0
	for _, a := range req.Argv {
		n += len(a) + 1
		if strings.ContainsRune(a, 0) {
			return nil, "", fmt.Errorf("%w: argv must not contain NUL bytes", errdefs.ErrInvalidArgument)
		}
	}
	if n > MaxCode {
		return nil, "", fmt.Errorf("%w: argv is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	return append([]string{s.m.cfg.Runtimes.Bash, "-c", execArgv}, req.Argv...), ArgvLine(req.Argv), nil
}

// ArgvLine is argv as a shell command line: a shell's -c script as it is
// (what `bash -c 'echo hi'` runs is `echo hi`), anything else quoted
// word by word.
func ArgvLine(argv []string) string {
	if len(argv) > 0 {
		switch path.Base(argv[0]) {
		case "bash", "sh", "dash", "zsh":
			a := argv[1:]
			for len(a) > 0 && (a[0] == "-l" || a[0] == "--login" || a[0] == "-i") {
				a = a[1:]
			}
			if len(a) == 2 && a[0] == "-c" {
				return a[1]
			}
		}
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}

// commandCode is a command as a watch sees it: nothing to report but its
// end, and stopped only by killing (watch.Kill).
type commandCode struct{ c Process }

func (cc commandCode) Reports() <-chan struct{}  { return cc.c.Done() } // closed at its end
func (commandCode) Handle(struct{}) bool         { return true }
func (commandCode) Closed() (apitype.End, bool)  { return apitype.End{}, true }
func (commandCode) Interrupt(apitype.KillReason) {}

// watchCommand watches cmd until it ends (killed at its timeout, or when
// ctx's client leaves), reads the last of its output, and records how it
// ended. The watch is the one every execution has (package watch): a
// sandbox's event it takes ends the session, as the session's monitor
// would have.
func (s *Session) watchCommand(ctx context.Context, cmd *command, timeout time.Duration, readers *sync.WaitGroup, oom0 uint64) {
	o := watch.Watch(ctx, s.inst, watch.Code[struct{}](commandCode{cmd.c}), watch.Spec{
		Policy: watch.Kill, Timeout: timeout, Ended: s.ended, EndedBy: s.End, Clock: s.m.clock,
	})
	switch o.End.Code {
	case apitype.EndKilled:
		cmd.kill(o.KillReason()) // "" when its client left
	case apitype.EndOOM, apitype.EndPids:
		s.terminate(o.End)
	}
	exit, exited := cmd.c.Exit()
	// Output still in the pipes is the command's; a process it left
	// running may hold them open for ever.
	cmd.outR.SetReadDeadline(time.Now().Add(outputGrace))
	cmd.errR.SetReadDeadline(time.Now().Add(outputGrace))
	readers.Wait()
	cmd.outR.Close()
	if cmd.errR != nil {
		cmd.errR.Close()
	}
	cmd.closeStdin()

	// Why airlock killed it, if it did and no limit of its own did:
	// memory (the sandbox's one answer), or, when it went with its
	// sandbox, whose counters may be gone, the session's end (memory,
	// the process limit), as for an execution, whichever watch saw the
	// sandbox's event.
	var why apitype.KillReason
	oom, serr := s.inst.OutOfMemory(instance.ProcessEnd{Status: exit.Status, Known: exited, OOMBase: oom0, Shared: true})
	switch {
	case oom:
		why = apitype.KillMemory
	case !exited || (serr != nil && exit.Signal == syscall.SIGKILL):
		why = s.endReason(time.Second)
	}
	cmd.mu.Lock()
	res := cmd.snapshotLocked()
	res.State = apitype.CommandExited
	res.CPUMs = ms(exit.CPU)
	switch {
	case !exited:
		// The sandbox died under it: the session ended.
		res.Killed, res.ExitCode = true, ptr(137)
		res.Signal = "SIGKILL"
	default:
		res.ExitCode = ptr(exit.Code)
		if exit.Signal != 0 {
			res.Signal = unix.SignalName(exit.Signal)
		}
	}
	if cmd.killed {
		res.Killed, res.KillReason = true, cmd.reason
	}
	if why != "" {
		res.Killed, res.KillReason = true, why
	}
	cmd.res = &res
	cmd.mu.Unlock()
	s.hist.finish(cmd.hist, nil, &res)
	if cmd.onEnd != nil {
		cmd.onEnd()
	}
	cmd.mu.Lock()
	cmd.endLocked()
	cmd.mu.Unlock()
	// What it wrote is kept by the next point.
	s.live.request(time.Now())
	close(cmd.done)

	s.cmds.mu.Lock()
	s.cmds.running--
	s.forgetOldCommandsLocked()
	s.cmds.mu.Unlock()
	if s.m.obs != nil {
		s.m.obs.ExecutionFinished(ExecutionEvent{
			Caller: cmd.who, Kind: ExecCommand, Session: s.id, Language: commandLanguage, ID: cmd.id, Code: cmd.line,
			Duration: time.Since(cmd.started), CPU: exit.CPU, Killed: res.Killed, KillReason: res.KillReason,
			ExitCode: *res.ExitCode, OutputBytes: int64(len(res.Stdout) + len(res.Stderr)),
			Redactions: res.Redacted, CodeFlags: cmd.flags,
		})
	}
}

// commandDir is the directory a command starts in: cwd relative to
// /workspace, as file paths are (/workspace when empty), or an absolute
// path anywhere in the sandbox, which is the sandbox's own business; both
// named as a client may name a file.
func commandDir(cwd string) (string, error) {
	if strings.HasPrefix(cwd, "/") && cwd != "/workspace" && !strings.HasPrefix(cwd, "/workspace/") {
		if err := workspace.ValidName(cwd); err != nil {
			return "", fmt.Errorf("cwd: %w", err)
		}
		return path.Clean(cwd), nil
	}
	rel, err := workspace.Clean(cwd)
	if err != nil {
		return "", fmt.Errorf("cwd: %w", err)
	}
	return path.Join("/workspace", rel), nil
}

// endReason is the kill reason of the session's end (memory, the process
// limit; "" for any other end), waiting up to wait for it to end.
func (s *Session) endReason(wait time.Duration) apitype.KillReason {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.ended:
		return watch.Outcome{End: s.End()}.KillReason()
	case <-t.C:
		return ""
	}
}

// forgetOldCommandsLocked drops the oldest ended commands beyond
// keptCommands.
func (s *Session) forgetOldCommandsLocked() {
	for len(s.cmds.order) > keptCommands {
		dropped := false
		for i, id := range s.cmds.order {
			if c := s.cmds.byID[id]; c != nil && c.ended() {
				delete(s.cmds.byID, id)
				s.cmds.order = append(s.cmds.order[:i], s.cmds.order[i+1:]...)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
	}
}

func ptr[T any](v T) *T { return &v }

func (cmd *command) ended() bool {
	select {
	case <-cmd.done:
		return true
	default:
		return false
	}
}

// read copies one of the command's output pipes into its stream until
// end of file or the read deadline set once the command exited; past the
// stream's cap it drops the output unread.
func (cmd *command) read(f *os.File, st *stream) {
	buf := make([]byte, 32<<10)
	for {
		cmd.mu.Lock()
		full := st.truncated && !st.beyond
		cmd.mu.Unlock()
		var n int
		var err error
		if full {
			n, err = instance.Discard(f)
		} else {
			n, err = f.Read(buf)
		}
		if n > 0 {
			cmd.mu.Lock()
			if full {
				st.drop(n)
			} else {
				st.write(buf[:n])
			}
			cmd.mu.Unlock()
		}
		if err != nil {
			cmd.mu.Lock()
			st.flush()
			cmd.mu.Unlock()
			return
		}
	}
}

// kill ends the command's process group, for reason ("" when the client
// left or asked).
func (cmd *command) kill(reason apitype.KillReason) {
	cmd.mu.Lock()
	if !cmd.killed {
		cmd.killed, cmd.reason = true, reason
	}
	cmd.mu.Unlock()
	cmd.c.Signal(syscall.SIGKILL)
}

// closeStdin closes the command's stdin for good (a terminal's master,
// once its output is read).
func (cmd *command) closeStdin() {
	cmd.stdinMu.Lock()
	defer cmd.stdinMu.Unlock()
	if !cmd.closed {
		cmd.closed = true
		cmd.stdinW.Close()
	}
}

// eot is a terminal's end of file (Ctrl-D).
const eot = "\x04"

// writeStdin writes data to the command's stdin and closes it if close
// (a terminal, which stays open, gets end-of-file: Ctrl-D).
func (cmd *command) writeStdin(data []byte, close bool) error {
	if close && cmd.pty {
		data, close = append(data[:len(data):len(data)], eot...), false
	}
	cmd.stdinMu.Lock()
	defer cmd.stdinMu.Unlock()
	if cmd.closed {
		if len(data) > 0 {
			return fmt.Errorf("%w: the command's standard input is closed", errdefs.ErrConflict)
		}
		return nil
	}
	if len(data) > 0 {
		// A command that does not read its input must not hold the
		// request for ever.
		cmd.stdinW.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := cmd.stdinW.Write(data)
		cmd.stdinW.SetWriteDeadline(time.Time{})
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w: the command did not read its standard input", errdefs.ErrTimeout)
			}
			return fmt.Errorf("%w: the command's standard input is closed (%v)", errdefs.ErrConflict, errors.Unwrap(err))
		}
	}
	if close {
		cmd.closed = true
		cmd.stdinW.Close()
	}
	return nil
}

// result describes the command now.
func (cmd *command) result() apitype.CommandResult {
	cmd.mu.Lock()
	defer cmd.mu.Unlock()
	if cmd.res != nil {
		return *cmd.res
	}
	res := cmd.snapshotLocked()
	res.State = apitype.CommandRunning
	return res
}

func (cmd *command) snapshotLocked() apitype.CommandResult {
	res := apitype.CommandResult{
		ID: cmd.id, Command: cmd.line, Argv: cmd.argv, Tag: cmd.tag, Cwd: cmd.dir, Pid: cmd.c.Pid(),
		Stdout: toValidUTF8(cmd.stdout.buf), Stderr: toValidUTF8(cmd.stderr.buf),
		StdoutTruncated: cmd.stdout.truncated, StderrTruncated: cmd.stderr.truncated,
		StdoutDroppedBytes: cmd.stdout.dropped, StderrDroppedBytes: cmd.stderr.dropped,
		StartedAt: cmd.started.UTC(), DurationMs: ms(time.Since(cmd.started)),
		Flags: cmd.flags, Background: cmd.background,
	}
	if cmd.size != nil {
		size := *cmd.size
		res.PTY = &size
	}
	if cmd.red != nil {
		// A running command's output so far: a match it has only begun
		// to print is not one yet.
		var n1, n2 int
		res.Stdout, n1 = cmd.red.String(res.Stdout)
		res.Stderr, n2 = cmd.red.String(res.Stderr)
		res.Redacted = n1 + n2
	}
	return res
}

// command finds one of the session's commands.
func (s *Session) command(id string) (*command, error) {
	if end := s.End(); !end.Zero() {
		return nil, gone(end)
	}
	s.cmds.mu.Lock()
	defer s.cmds.mu.Unlock()
	if c := s.cmds.byID[id]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w: no command %q in this session", errdefs.ErrNotFound, truncateID(id))
}

// Command describes a command, waiting up to wait for it to end.
func (s *Session) Command(ctx context.Context, id string, wait time.Duration) (*apitype.CommandResult, error) {
	cmd, err := s.command(id)
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-cmd.done:
		case <-t.C:
		case <-ctx.Done():
		case <-s.ended:
		}
	}
	res := cmd.result()
	return &res, nil
}

// Commands describes the session's commands, oldest first.
func (s *Session) Commands() []apitype.CommandResult {
	s.cmds.mu.Lock()
	cmds := make([]*command, 0, len(s.cmds.order))
	for _, id := range s.cmds.order {
		cmds = append(cmds, s.cmds.byID[id])
	}
	s.cmds.mu.Unlock()
	out := make([]apitype.CommandResult, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.result())
	}
	return out
}

// SignalCommand sends a signal (a name such as "SIGTERM" or "TERM", or a
// number; SIGTERM when empty) to a running command's process group.
func (s *Session) SignalCommand(id, signal string) error {
	cmd, err := s.command(id)
	if err != nil {
		return err
	}
	sig, err := ParseSignal(signal)
	if err != nil {
		return err
	}
	if cmd.ended() {
		return fmt.Errorf("%w: command %s has ended", errdefs.ErrConflict, id)
	}
	return cmd.c.Signal(sig)
}

// ResizeCommand sets the size of a running command's terminal.
func (s *Session) ResizeCommand(id string, size apitype.PTYSize) error {
	cmd, err := s.command(id)
	if err != nil {
		return err
	}
	term, err := terminal(&size)
	if err != nil {
		return err
	}
	if !cmd.pty {
		return fmt.Errorf("%w: command %s has no terminal (start it with pty)", errdefs.ErrConflict, id)
	}
	if cmd.ended() {
		return fmt.Errorf("%w: command %s has ended", errdefs.ErrConflict, id)
	}
	cmd.mu.Lock()
	defer cmd.mu.Unlock()
	if err := cmd.c.Resize(*term); err != nil {
		return err
	}
	cmd.size = &size
	return nil
}

// terminal checks a requested terminal size (nil: no terminal).
func terminal(size *apitype.PTYSize) (*instance.Terminal, error) {
	if size == nil {
		return nil, nil
	}
	if size.Cols < 1 || size.Rows < 1 || size.Cols > apitype.MaxPTYSide || size.Rows > apitype.MaxPTYSide {
		return nil, fmt.Errorf("%w: pty cols and rows must be between 1 and %d (got %dx%d)", errdefs.ErrInvalidArgument, apitype.MaxPTYSide, size.Cols, size.Rows)
	}
	return &instance.Terminal{Cols: uint16(size.Cols), Rows: uint16(size.Rows)}, nil
}

// CommandStdin writes to a running command's standard input, and closes it
// if close.
func (s *Session) CommandStdin(id string, data []byte, close bool) error {
	cmd, err := s.command(id)
	if err != nil {
		return err
	}
	if cmd.ended() {
		return fmt.Errorf("%w: command %s has ended", errdefs.ErrConflict, id)
	}
	return cmd.writeStdin(data, close)
}

// ParseSignal reads a signal name ("SIGTERM", "term") or number; SIGTERM
// when empty.
func ParseSignal(v string) (syscall.Signal, error) {
	if v == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("%w: signal %d is out of range", errdefs.ErrInvalidArgument, n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%w: unknown signal %q", errdefs.ErrInvalidArgument, truncateID(v))
}
