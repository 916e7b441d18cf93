package instance

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airlock/internal/runtimes"
)

// conn is the server's end of a runtime's control socket.
type conn interface {
	// configure replaces the runtime's environment and moves it to cwd.
	configure(env map[string]string, cwd string) error
	// setDefaults sets the variables of env the runtime's environment
	// does not have, and keeps the rest.
	setDefaults(env map[string]string) error
	// reseed reseeds the runtime's random generators from the kernel,
	// and reports whether the runtime confirmed it did.
	reseed() (bool, error)
	// execute starts running code, with env's variables set for it
	// alone (nil: none); the outcome arrives on events.
	execute(id, code string, env map[string]string) error
	// run starts a program in place of the runtime; its done (if the
	// runtime lives to send it) carries the program's exit status.
	run(id string, p Program) error
	// interrupt tells the runtime that execution id is interrupted,
	// before the SIGINT that follows.
	interrupt(id string) error
	// current reports whether execution id is under way: sent, and its
	// done not read yet.
	current(id string) bool
	// whileCurrent runs f if execution id is under way, before its done
	// is read (bash: and before anything else is sent to the runtime),
	// and reports whether it was.
	whileCurrent(id string, f func()) bool
	// reply sends a message answering one of the runtime's requests
	// during an execution (installed).
	reply(m runtimes.Message) error
	// events delivers display, result, error and done messages. It is
	// closed when the runtime goes away or misbehaves; err then says why.
	events() <-chan runtimes.Message
	err() error
	// sendBy bounds how long sending a request may wait for the runtime
	// to read it (zero: no bound).
	sendBy(t time.Time)
	close()
}

// framedConn speaks the length-prefixed JSON protocol (python, javascript).
type framedConn struct {
	f      *os.File
	w      *runtimes.FrameWriter
	ch     chan runtimes.Message
	rerr   error
	hello  runtimes.Message
	config chan runtimes.Message // a configured reply
	done   chan struct{}         // closed when the reader stops
	quit   chan struct{}         // closed by close: the reader must not block
	once   sync.Once
	// cur is the execution whose messages are wanted, nil between
	// executions. The runtime's socket is reachable by the code it runs:
	// frames nobody asked for are dropped, not queued, or an idle
	// session could pin 64 frames of 64 MiB in the server.
	cur atomic.Pointer[string]
}

// newFramedConn takes the socket and waits for the runtime's hello.
func newFramedConn(f *os.File, maxFrame int) (*framedConn, error) {
	return framed(f, maxFrame, true)
}

// framed is newFramedConn; without hello, of a runtime that said it
// already (one restored from a checkpoint).
func framed(f *os.File, maxFrame int, hello bool) (*framedConn, error) {
	c := &framedConn{f: f, w: runtimes.NewFrameWriter(f), ch: make(chan runtimes.Message, 64), config: make(chan runtimes.Message, 1), done: make(chan struct{}), quit: make(chan struct{})}
	r := runtimes.NewFrameReader(f, maxFrame)
	if hello {
		m, err := r.Read()
		if err != nil {
			return nil, fmt.Errorf("runtime did not start: %w", err)
		}
		if m.Type == "error" {
			return nil, fmt.Errorf("runtime did not start: %s", truncate(m.Value, 1024))
		}
		if m.Type != runtimes.TypeHello {
			return nil, fmt.Errorf("runtime did not start: got %q before hello", m.Type)
		}
		c.hello = m
	}
	go func() {
		defer close(c.done)
		defer close(c.ch)
		for {
			m, err := r.Read()
			if err != nil {
				if err != io.EOF {
					c.rerr = err
				}
				return
			}
			if m.Type == runtimes.TypeConfigured {
				select {
				case c.config <- m:
				default:
				}
				continue
			}
			if m.Type == runtimes.TypeHello {
				c.rerr = fmt.Errorf("%w: a second hello", runtimes.ErrFrame)
				return
			}
			want := c.cur.Load()
			if want == nil || m.ID != *want {
				continue
			}
			if m.Type == runtimes.TypeDone {
				c.cur.CompareAndSwap(want, nil)
			}
			select {
			case c.ch <- m:
			case <-c.quit:
				return
			}
		}
	}()
	return c, nil
}

func (c *framedConn) configure(env map[string]string, cwd string) error {
	return c.configureWith(runtimes.Message{Type: "configure", Env: env, Cwd: cwd})
}

func (c *framedConn) setDefaults(env map[string]string) error {
	return c.configureWith(runtimes.Message{Type: "configure", Defaults: env})
}

func (c *framedConn) reseed() (bool, error) {
	r, err := c.configureReply(runtimes.Message{Type: "configure", Reseed: true})
	return r.Reseeded, err
}

func (c *framedConn) configureWith(m runtimes.Message) error {
	_, err := c.configureReply(m)
	return err
}

// configureReply sends the configure m and returns the runtime's reply.
func (c *framedConn) configureReply(m runtimes.Message) (runtimes.Message, error) {
	if err := c.w.Write(m); err != nil {
		return runtimes.Message{}, err
	}
	select {
	case r := <-c.config:
		if r.Error != "" {
			// A runtime that could not take its environment or directory
			// would run code somewhere it should not: it is not used.
			return r, fmt.Errorf("the runtime could not be configured: %s", truncate(r.Error, 1024))
		}
		return r, nil
	case <-c.done:
		return runtimes.Message{}, fmt.Errorf("the runtime went away")
	}
}

func (c *framedConn) execute(id, code string, env map[string]string) error {
	c.cur.Store(&id)
	return c.w.Write(runtimes.Message{Type: "execute", ID: id, Code: code, Env: env})
}

func (c *framedConn) run(id string, p Program) error {
	c.cur.Store(&id)
	return c.w.Write(runtimes.Message{Type: "run", ID: id, Argv: p.Argv, Env: p.Env, Cwd: "/workspace", Fresh: p.Fresh})
}

func (c *framedConn) reply(m runtimes.Message) error { return c.w.Write(m) }

func (c *framedConn) interrupt(id string) error {
	return c.w.Write(runtimes.Message{Type: "interrupt", ID: id})
}

func (c *framedConn) current(id string) bool {
	cur := c.cur.Load()
	return cur != nil && *cur == id
}

func (c *framedConn) whileCurrent(id string, f func()) bool {
	if !c.current(id) {
		return false
	}
	f()
	return true
}

func (c *framedConn) events() <-chan runtimes.Message { return c.ch }
func (c *framedConn) sendBy(t time.Time)              { c.f.SetWriteDeadline(t) }
func (c *framedConn) err() error                      { return c.rerr }
func (c *framedConn) close() {
	c.once.Do(func() { close(c.quit) })
	c.f.Close()
}

// bashConn drives the bash runtime: NUL-terminated code in, the exit
// status as NUL-terminated digits out.
type bashConn struct {
	f    *os.File
	ch   chan runtimes.Message
	ids  chan string
	rerr error
	// restore, when set, is run after the execution under way (before
	// its done is told): it puts back the variables it was given.
	restore atomic.Pointer[string]
	// marks orders interrupt marks with the blocks after an execution:
	// once its status is read, no mark for it goes (one could be taken
	// for the restore's); running is the execution whose status is due.
	marks   sync.Mutex
	running string
}

func newBashConn(f *os.File) *bashConn {
	c := &bashConn{f: f, ch: make(chan runtimes.Message, 4), ids: make(chan string, 1)}
	go func() {
		defer close(c.ch)
		defer func() {
			c.marks.Lock()
			c.running = "" // no status comes any more
			c.marks.Unlock()
		}()
		r := bufio.NewReader(f)
		for {
			s, err := r.ReadString(0)
			if err != nil {
				return
			}
			code, err := strconv.Atoi(strings.TrimSuffix(s, "\x00"))
			if err != nil || code < 0 || code > 255 {
				c.rerr = fmt.Errorf("%w: bad exit status %q", runtimes.ErrFrame, s)
				return
			}
			var id string
			select {
			case id = <-c.ids:
			default:
				c.rerr = fmt.Errorf("%w: a status nobody asked for", runtimes.ErrFrame)
				return
			}
			c.marks.Lock()
			c.running = ""
			c.marks.Unlock()
			if restore := c.restore.Swap(nil); restore != nil {
				// The block's own status is kept; the restore's is not
				// the code's (a shell that did not live to run it
				// ends the reader on the next read).
				if _, err := io.WriteString(f, *restore+"\x00"); err == nil {
					r.ReadString(0)
				}
			}
			status := "ok"
			if code != 0 {
				status = "error"
			}
			c.ch <- runtimes.Message{Type: runtimes.TypeDone, ID: id, Status: status, ExitCode: code}
		}
	}()
	return c
}

func (c *bashConn) configure(env map[string]string, cwd string) error {
	// Unset every exported variable the shell started with, then export
	// exactly env; values are single-quoted so nothing in them is run.
	var b strings.Builder
	b.WriteString("for __airlock_v in $(compgen -e); do unset \"$__airlock_v\"; done; unset __airlock_v\n")
	for k, v := range env {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	b.WriteString("cd -- " + shellQuote(cwd))
	return c.configureWith(b.String())
}

func (c *bashConn) setDefaults(env map[string]string) error {
	var b strings.Builder
	for k, v := range env {
		fmt.Fprintf(&b, "[ -n \"${%s+set}\" ] || export %s=%s\n", k, k, shellQuote(v))
	}
	b.WriteString("true")
	return c.configureWith(b.String())
}

func (c *bashConn) reseed() (bool, error) {
	// $RANDOM from getrandom(2) ($SRANDOM, bash 5.1 and later); status 3
	// says the shell has no $SRANDOM to take it from.
	status, err := c.configureStatus(`if [ -n "${SRANDOM+set}" ]; then RANDOM=$SRANDOM; else (exit 3); fi`)
	if err == nil && status != 0 && status != 3 {
		err = fmt.Errorf("configuring the shell failed")
	}
	return status == 0 && err == nil, err
}

func (c *bashConn) configureWith(code string) error {
	status, err := c.configureStatus(code)
	if err == nil && status != 0 {
		err = fmt.Errorf("configuring the shell failed")
	}
	return err
}

// configureStatus runs code in the shell between executions and returns
// its status.
func (c *bashConn) configureStatus(code string) (int, error) {
	if err := c.execute("configure", code, nil); err != nil {
		return 0, err
	}
	m, ok := <-c.ch
	if !ok {
		return 0, fmt.Errorf("configuring the shell failed")
	}
	return m.ExitCode, nil
}

func (c *bashConn) reply(runtimes.Message) error {
	return fmt.Errorf("the bash runtime takes no replies")
}

func (c *bashConn) execute(id, code string, env map[string]string) error {
	if strings.ContainsRune(code, 0) {
		return fmt.Errorf("bash code must not contain NUL bytes")
	}
	if len(env) > 0 {
		set, restore := overlayEnv(env)
		if err := c.configureWith(set); err != nil {
			return err
		}
		c.restore.Store(&restore)
	}
	select {
	case c.ids <- id:
	default:
		return fmt.Errorf("an execution is already running")
	}
	if code == "" {
		code = " " // an empty cell as well; a block of no bytes is the interrupt mark
	}
	c.marks.Lock()
	c.running = id
	c.marks.Unlock()
	_, err := io.WriteString(c.f, code+"\x00")
	return err
}

// overlayEnv is the shell code that sets env's variables (exported) for
// one block, and the code that puts each back afterwards: its value
// before, or unset. Names are the server's checked ones; values are
// single-quoted, so nothing in them is run.
func overlayEnv(env map[string]string) (set, restore string) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var s, r strings.Builder
	s.WriteString("declare -gA __airlock_envsaved=()\n")
	for _, k := range keys {
		fmt.Fprintf(&s, "[[ -v %s ]] && __airlock_envsaved[%s]=${%s}\nexport %s=%s\n", k, k, k, k, shellQuote(env[k]))
		fmt.Fprintf(&r, "if [[ -v __airlock_envsaved[%s] ]]; then export %s=\"${__airlock_envsaved[%s]}\"; else unset %s; fi\n", k, k, k, k)
	}
	s.WriteString("true")
	r.WriteString("unset __airlock_envsaved; true")
	return s.String(), r.String()
}

// run has the shell start the program with exactly p.Env, on an empty
// stdin; the shell's status for the command is the program's. Every word
// is single-quoted, so nothing in it is expanded or run.
func (c *bashConn) run(id string, p Program) error {
	var b strings.Builder
	b.WriteString("/usr/bin/env -i")
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" " + shellQuote(k+"="+p.Env[k]))
	}
	for _, a := range p.Argv {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString(" </dev/null")
	return c.execute(id, b.String(), nil)
}

// interrupt sends the interrupt mark, a block of no bytes (an empty cell
// goes as a blank, see execute): the shell reads it as it starts the
// block, or skips it if the block has ended.
func (c *bashConn) interrupt(id string) error {
	c.marks.Lock()
	defer c.marks.Unlock()
	if c.running != id {
		return nil // it has ended
	}
	_, err := c.f.Write([]byte{0})
	return err
}

func (c *bashConn) current(id string) bool {
	c.marks.Lock()
	defer c.marks.Unlock()
	return c.running == id
}

func (c *bashConn) whileCurrent(id string, f func()) bool {
	c.marks.Lock()
	defer c.marks.Unlock()
	if c.running != id {
		return false
	}
	f()
	return true
}

func (c *bashConn) events() <-chan runtimes.Message { return c.ch }
func (c *bashConn) sendBy(t time.Time)              { c.f.SetWriteDeadline(t) }
func (c *bashConn) err() error                      { return c.rerr }
func (c *bashConn) close()                          { c.f.Close() }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
