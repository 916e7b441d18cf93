package instance

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Output receives a runtime's stdout and stderr, chunk by chunk, in order
// per stream.
type Output interface {
	// Write takes the next chunk of a stream.
	Write(p []byte, stderr bool)
	// Keeps reports whether the next bytes of a stream are wanted; those
	// that are not are dropped unread (Dropped counts them), so that a
	// flood past a cap costs the server almost nothing.
	Keeps(stderr bool) bool
	Dropped(n int, stderr bool)
}

// OutputFunc is an Output that keeps everything.
type OutputFunc func(p []byte, stderr bool)

func (f OutputFunc) Write(p []byte, stderr bool) { f(p, stderr) }
func (OutputFunc) Keeps(bool) bool               { return true }
func (OutputFunc) Dropped(int, bool)             {}

// pipeReader reads one of a runtime's output pipes for the whole life of
// the session and hands every chunk to the current execution. Reads happen
// under mu, both in the reader loop and in drain, so that when the runtime
// says an execution is done, drain can pick up exactly the bytes written
// before that (they are in the pipe or already delivered, never in
// flight).
type pipeReader struct {
	f      *os.File
	rc     syscall.RawConn
	mu     sync.Mutex
	buf    []byte
	out    Output // called under mu
	stderr bool
	done   chan struct{}
}

func newPipeReader(f *os.File, out Output, stderr bool) (*pipeReader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &pipeReader{f: f, rc: rc, buf: make([]byte, 16<<10), out: out, stderr: stderr, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// take moves at most limit bytes of what the pipe holds to the output,
// or drops them unread if it keeps no more. It returns 0 and
// EAGAIN when the pipe is empty, 0 and nil at end of file.
func (p *pipeReader) take(fd, limit int, keeps bool) (int, error) {
	if !keeps {
		n, err := drop(fd, limit)
		if n > 0 {
			p.out.Dropped(n, p.stderr)
		}
		if err != errNoSplice {
			return n, err
		}
	}
	n, err := syscall.Read(fd, p.buf[:min(len(p.buf), limit)])
	if n > 0 {
		p.out.Write(p.buf[:n], p.stderr)
	}
	return max(n, 0), err
}

// dropPause is how long a reader that dropped output waits before it
// drops more: a flood past its cap then costs the server a wakeup per
// pipeful (64 KiB) a millisecond at most, not a core, and its writer
// waits on a full pipe instead of spinning.
const dropPause = time.Millisecond

func (p *pipeReader) loop() {
	defer close(p.done)
	for {
		eof, dropped := false, false
		err := p.rc.Read(func(fd uintptr) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			keeps := p.out.Keeps(p.stderr)
			n, err := p.take(int(fd), 1<<20, keeps)
			switch {
			case n > 0:
				dropped = !keeps
				return true
			case err == syscall.EAGAIN:
				return false // wait for the poller
			default:
				eof = true // EOF or a real error: the writers are gone
				return true
			}
		})
		if err != nil || eof {
			return
		}
		if dropped {
			time.Sleep(dropPause)
		}
	}
}

// drain delivers what the pipe holds now, and no more: code that keeps
// writing (a thread flooding its stdout) cannot hold the caller.
func (p *pipeReader) drain() {
	p.rc.Control(func(fd uintptr) {
		p.mu.Lock()
		defer p.mu.Unlock()
		left, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		if err != nil {
			left = 1 << 20 // a pipe's largest default size
		}
		for left > 0 {
			n, _ := p.take(int(fd), left, p.out.Keeps(p.stderr))
			if n <= 0 {
				return
			}
			left -= n
		}
	})
}

// barrier returns once no chunk is being taken: one taken later sees
// whatever the caller changed before.
func (p *pipeReader) barrier() {
	p.mu.Lock()
	p.mu.Unlock() //nolint:staticcheck // an empty critical section is the point
}

func (p *pipeReader) close() {
	p.f.Close()
	<-p.done
}

// errNoSplice: the kernel cannot splice this pipe to /dev/null; read it.
var errNoSplice = errors.New("splice to /dev/null unsupported")

var devNull = sync.OnceValues(func() (int, error) {
	return unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
})

// drop discards at most limit bytes of what the non-blocking pipe fd
// holds without copying them (the pages go to /dev/null).
func drop(fd, limit int) (int, error) {
	null, err := devNull()
	if err != nil {
		return 0, errNoSplice
	}
	n, err := unix.Splice(fd, nil, null, nil, limit, unix.SPLICE_F_NONBLOCK)
	if err == unix.EINVAL || err == unix.ENOSYS {
		return 0, errNoSplice
	}
	return int(max(n, 0)), err
}

// Discard drops what the pipe f holds, waiting for some like Read (and
// its deadline), without copying it, then pauses as the session's
// readers do (dropPause); it returns how much it dropped, and io.EOF at
// end of file.
func Discard(f *os.File) (int, error) {
	n, err := discard(f)
	if n > 0 {
		time.Sleep(dropPause)
	}
	return n, err
}

func discard(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var derr error
	err = rc.Read(func(fd uintptr) bool {
		n, derr = drop(int(fd), 1<<20)
		return derr != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case derr == errNoSplice:
		var buf [32 << 10]byte
		return f.Read(buf[:])
	case derr != nil:
		return n, derr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
