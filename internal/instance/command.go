package instance

import (
	"os"
	"syscall"
	"time"

	"airlock/internal/jail"
)

// Command is a program started in an instance's sandbox beside its
// runtime (a session's shell command): the same namespaces, cgroup,
// limits, user and layers, a process group of its own, and pipes for its
// standard streams.
type Command struct {
	pid                   int
	stdin, stdout, stderr *os.File

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

// StartCommand starts argv in the sandbox with exactly env, in dir.
func (in *Instance) StartCommand(argv, env []string, dir string) (_ *Command, err error) {
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
	c := &Command{pid: pid, stdin: inW, stdout: outR, stderr: errR, sb: in.sb, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		select {
		case e := <-exit:
			c.result, c.exited = exitOf(e), true
		case <-in.sb.Dead():
		}
	}()
	return c, nil
}

// Pid is its pid inside the sandbox.
func (c *Command) Pid() int { return c.pid }

// Stdio are the write end of its standard input and the read ends of its
// output; the caller closes them.
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
