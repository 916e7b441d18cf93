package instance

import (
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/runtimes"
)

// orderConn is a runtime's connection that records what is sent to it,
// in order, with the sandbox's signals (orderSandbox) in the same log;
// each call is also told on calls as it begins.
type orderConn struct {
	conn // what the tests do not use
	mu   sync.Mutex
	log  []string
	cur  string
	// calls tells each call as it begins; hold, if set, runs inside
	// interrupt (a test holds the write there).
	calls chan string
	hold  func()
	// checks, if set, tells each whileCurrent's answer.
	checks chan bool
}

func (c *orderConn) record(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
}

func (c *orderConn) sendBy(time.Time) {}

func (c *orderConn) execute(id, code string, env map[string]string) error {
	c.calls <- "execute " + id
	c.mu.Lock()
	c.cur = id
	c.mu.Unlock()
	c.record("execute " + id)
	return nil
}

func (c *orderConn) interrupt(id string) error {
	c.calls <- "interrupt " + id
	if c.hold != nil {
		c.hold()
	}
	c.record("interrupt " + id)
	return nil
}

func (c *orderConn) current(id string) bool {
	c.calls <- "current " + id
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur == id
}

func (c *orderConn) whileCurrent(id string, f func()) bool {
	c.mu.Lock()
	cur := c.cur == id
	c.mu.Unlock()
	if cur {
		f()
	}
	if c.checks != nil {
		c.checks <- cur
	}
	return cur
}

// done is the runtime's done for the execution under way.
func (c *orderConn) done() {
	c.mu.Lock()
	c.cur = ""
	c.mu.Unlock()
}

func (c *orderConn) events() <-chan runtimes.Message { return nil }

func (c *orderConn) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

type orderSandbox struct {
	sandbox
	c       *orderConn
	signals chan struct{}
}

func (s orderSandbox) Dead() <-chan struct{} { return nil }

func (s orderSandbox) Signal(pid int, sig syscall.Signal, group bool) error {
	s.c.record("SIGINT")
	s.signals <- struct{}{}
	return nil
}

func newOrderInterp() (*Interp, *orderConn, chan struct{}) {
	c := &orderConn{calls: make(chan string, 16)}
	signals := make(chan struct{}, 4)
	return &Interp{conn: c, sb: orderSandbox{c: c, signals: signals}}, c, signals
}

// Each interrupt lands on the execution it names, whenever it is asked
// for (checked against a mutant: Interrupt sending its message and SIGINT
// at once, outside sendMu, as before): one asked for before its execution
// is sent goes right after it; one for an execution that has ended goes
// nowhere; one whose message is still being written when its execution
// ends holds the next execution back until it is done, and sends no
// SIGINT (checked against a mutant sending it regardless, as before).
func TestInterruptLandsOnItsExecution(t *testing.T) {
	t.Run("before its execution", func(t *testing.T) {
		in, c, signals := newOrderInterp()
		in.Interrupt("e1")
		// The interrupt's goroutine has looked (or, wrongly, sent).
		if call := <-c.calls; call != "current e1" && call != "interrupt e1" {
			t.Fatalf("first call %q", call)
		}
		if err := in.Execute("e1", "while True: pass", nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
		<-signals
		if got, want := c.sent(), []string{"execute e1", "interrupt e1", "SIGINT"}; !slices.Equal(got, want) {
			t.Errorf("sent %q, want %q", got, want)
		}
	})
	t.Run("after its execution ended", func(t *testing.T) {
		in, c, signals := newOrderInterp()
		in.Execute("e1", "1", nil, time.Time{})
		<-c.calls
		c.done()
		in.Interrupt("e1")
		if call := <-c.calls; call != "current e1" && call != "interrupt e1" {
			t.Fatalf("first call %q", call)
		}
		in.Execute("e2", "import time; time.sleep(1)", nil, time.Time{})
		select {
		case <-signals:
			t.Errorf("an interrupt of an ended execution was signalled: %q", c.sent())
		default:
		}
		if got, want := c.sent(), []string{"execute e1", "execute e2"}; !slices.Equal(got, want) {
			t.Errorf("sent %q, want %q", got, want)
		}
	})
	t.Run("ending while interrupted", func(t *testing.T) {
		in, c, signals := newOrderInterp()
		next := make(chan struct{})
		// The interrupt's message is held until the next execution has
		// been sent, or for a while if it cannot be (the fix): the wait
		// only shapes the interleaving, the order is what is checked.
		c.hold = func() {
			select {
			case <-next:
			case <-time.After(200 * time.Millisecond):
			}
		}
		in.Execute("e1", "while True: pass", nil, time.Time{})
		<-c.calls
		in.Interrupt("e1")
		for call := <-c.calls; call != "interrupt e1"; call = <-c.calls {
		}
		c.done() // e1 ends before its interrupt's SIGINT
		sent := make(chan struct{})
		go func() {
			in.Execute("e2", "import time; time.sleep(1)", nil, time.Time{})
			close(sent)
		}()
		if call := <-c.calls; call == "execute e2" {
			close(next)
		}
		<-sent
		// e1 ended before its SIGINT: none is sent (it would land in
		// what the runtime runs next), and none after e2.
		if got, want := c.sent(), []string{"execute e1", "interrupt e1", "execute e2"}; !slices.Equal(got, want) {
			t.Errorf("sent %q, want %q", got, want)
		}
		select {
		case <-signals:
			t.Errorf("an interrupt of an ended execution was signalled: %q", c.sent())
		default:
		}
	})
}

// An interrupt of a runtime that can lose a SIGINT (bash) repeats it while
// its execution is under way, and stops once the execution has ended
// (checked against a mutant that sends it once).
func TestInterruptRepeatsSIGINT(t *testing.T) {
	repeat := sigintRepeat
	sigintRepeat = time.Millisecond
	defer func() { sigintRepeat = repeat }()
	in, c, signals := newOrderInterp()
	// The interrupt's first SIGINT is looked for too; the repeats block
	// on SIGINTs nobody reads before they fill this.
	c.checks = make(chan bool, 16)
	in.rt = runtimes.Runtime{Language: &runtimes.Language{RepeatsSIGINT: true}}
	in.Execute("e1", "sleep 100", nil, time.Time{})
	<-c.calls
	in.Interrupt("e1")
	for range 3 { // its SIGINT, and two repeats
		select {
		case <-signals:
		case <-time.After(30 * time.Second):
			t.Fatalf("SIGINT was not repeated: %q", c.sent())
		}
	}
	c.done()
	for <-c.checks { // the repeats look until the execution has ended
		select {
		case <-signals:
		default:
		}
	}
	if got := c.sent(); len(got) < 5 || !slices.Equal(got[:3], []string{"execute e1", "interrupt e1", "SIGINT"}) || slices.ContainsFunc(got[3:], func(s string) bool { return s != "SIGINT" }) {
		t.Errorf("sent %q, want the execution, its interrupt and SIGINTs", got)
	}
}
