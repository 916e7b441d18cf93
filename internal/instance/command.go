package instance

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/jail"
)

// Command is a program started in an instance's sandbox beside its
// runtime (a session's shell command): the same namespaces, cgroup,
// limits, user and layers, a process group of its own, and pipes for its
// standard streams.
type Command struct {
	pid                   int
	stdin, stdout, stderr *os.File
	// tty is the master of its terminal (stdin and stdout then; no
	// stderr), or nil.
	tty *os.File

	sb     sandbox
	done   chan struct{}
	result Exit
	exited bool
}

// Exit is how a command, or a program run in the runtime's place, ended.
type Exit struct {
	Code   int                // shell convention: 128+N after a signal
	Signal syscall.Signal     // 0 unless a signal ended it
	Status syscall.WaitStatus // as the kernel said
	CPU    time.Duration      // a command's own and its reaped children's
}

// exitOf is e as an Exit.
func exitOf(e jail.Exit) Exit {
	x := Exit{Code: e.Code(), Status: e.Status, CPU: e.CPU}
	if e.Status.Signaled() {
		x.Signal = e.Status.Signal()
	}
	return x
}

// Terminal is the size of a command's pseudo-terminal.
type Terminal struct{ Cols, Rows uint16 }

// StartCommand starts argv in the sandbox with exactly env, in dir; under
// a pseudo-terminal of that size if term is set.
func (in *Instance) StartCommand(argv, env []string, dir string, term *Terminal) (_ *Command, err error) {
	if term != nil {
		return in.startTerminal(argv, env, dir, *term)
	}
	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, err
	}
	pid, exit, err := in.sb.SpawnWait(jail.Process{Argv: argv, Env: env, Dir: dir, Files: []*os.File{inR, outW, errW}})
	// The sandbox has its own copies of these now.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		files = nil
		return nil, err
	}
	return in.watchCommand(&Command{pid: pid, stdin: inW, stdout: outR, stderr: errR}, exit), nil
}

// watchCommand waits for c's exit, or its sandbox's death.
func (in *Instance) watchCommand(c *Command, exit <-chan jail.Exit) *Command {
	c.sb, c.done = in.sb, make(chan struct{})
	go func() {
		defer close(c.done)
		select {
		case e := <-exit:
			c.result, c.exited = exitOf(e), true
		case <-in.sb.Dead():
		}
	}()
	return c
}

// startTerminal starts argv with a new pseudo-terminal as its standard
// streams and controlling terminal. The terminal is the sandbox's own
// (its devpts instance, see jail.Sandbox.OpenPTY): it counts against
// the sandbox's server.max_session_ptys, and the sandbox names it in its
// /dev/pts. Its master stays here.
func (in *Instance) startTerminal(argv, env []string, dir string, term Terminal) (*Command, error) {
	if term.Cols == 0 || term.Rows == 0 {
		return nil, fmt.Errorf("%w: a terminal needs cols and rows", errdefs.ErrInvalidArgument)
	}
	master, slave, err := in.sb.OpenPTY(term.Cols, term.Rows)
	if err != nil {
		if errors.Is(err, jail.ErrNoPTY) {
			return nil, fmt.Errorf("%w: the sandbox holds as many pseudo-terminals as it may (server.max_session_ptys); end a terminal command, or close terminals its code opened", errdefs.ErrLimit)
		}
		if errors.Is(err, errdefs.ErrUnsupported) {
			return nil, err
		}
		return nil, errdefs.Private(errdefs.ErrUnavailable, "no pseudo-terminal could be opened", err)
	}
	pid, exit, err := in.sb.SpawnWait(jail.Process{Argv: argv, Env: env, Dir: dir, Files: []*os.File{slave, slave, slave}, Terminal: true})
	slave.Close() // the sandbox has its own copy
	if err != nil {
		master.Close()
		return nil, err
	}
	return in.watchCommand(&Command{pid: pid, stdin: master, stdout: master, tty: master}, exit), nil
}

// Resize sets the size of the command's terminal.
func (c *Command) Resize(term Terminal) error {
	if c.tty == nil {
		return fmt.Errorf("%w: the command has no terminal (start it with pty)", errdefs.ErrConflict)
	}
	if term.Cols == 0 || term.Rows == 0 {
		return fmt.Errorf("%w: a terminal needs cols and rows", errdefs.ErrInvalidArgument)
	}
	rc, err := c.tty.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: the terminal is closed", errdefs.ErrConflict)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: term.Cols, Row: term.Rows})
	}); err != nil {
		return fmt.Errorf("%w: the terminal is closed", errdefs.ErrConflict)
	}
	return ierr
}

// Pid is its pid inside the sandbox.
func (c *Command) Pid() int { return c.pid }

// Stdio are the write end of its standard input and the read ends of its
// output; the caller closes them. A command with a terminal has one file,
// the terminal's master, for stdin and stdout, and no stderr (nil).
func (c *Command) Stdio() (stdin, stdout, stderr *os.File) { return c.stdin, c.stdout, c.stderr }

// Done is closed when the command has ended, or its sandbox has.
func (c *Command) Done() <-chan struct{} { return c.done }

// Exit is how the command ended, once Done is closed; false if its sandbox
// died first (everything in it is gone then).
func (c *Command) Exit() (Exit, bool) {
	<-c.done
	return c.result, c.exited
}

// Signal sends sig to the command's process group.
func (c *Command) Signal(sig syscall.Signal) error { return c.sb.Signal(c.pid, sig, true) }
