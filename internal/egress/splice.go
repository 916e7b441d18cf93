package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A bulk transfer between two TCP sockets moves through a pipe with
// splice(2): the kernel hands the upstream socket's pages to the pipe and
// the pipe's to the other socket, and no byte is copied through the
// server (a 1 MiB buffer cost two copies of every byte, about as much CPU
// as the sandbox's own read). Each splice into the pipe is one read: its
// bytes are charged to the budget before any is spliced out, and only
// what the charge allowed leaves the pipe, so the budget stays exact; a
// pipe left holding bytes is closed, never reused.
//
// A pipe counts as one of the server's maxBulk large buffers (two
// descriptors each, a 1 MiB pipe): a mover past the bound copies through
// its small buffer.

// pipeSize is a bulk pipe's capacity: one splice moves at most this much.
const pipeSize = bulkSize

// errPipeEmpty: a splice out of a pipe that holds bytes moved none.
var errPipeEmpty = errors.New("splice: pipe empty")

// noSplice is set where splice(2) does not work (once a splice into a
// pipe fails with ENOSYS or EINVAL, before it moved anything): movers
// copy then.
var noSplice atomic.Bool

// spliced counts the bytes movers spliced (for tests).
var spliced atomic.Int64

// bulkPipe is a pipe a mover splices through.
type bulkPipe struct {
	r, w int
}

// newBulkPipe makes a pipe of pipeSize (or the kernel's most, if less).
func newBulkPipe() (*bulkPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, pipeSize)
	return &bulkPipe{r: fds[0], w: fds[1]}, nil
}

func (p *bulkPipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// fill splices up to max bytes from src's socket into the empty pipe,
// waiting for src to be readable: n is 0 with io.EOF at src's end.
func (p *bulkPipe) fill(src syscall.RawConn, max int) (int, error) {
	var n int64
	var serr error
	err := src.Read(func(fd uintptr) bool {
		for {
			n, serr = unix.Splice(int(fd), nil, p.w, nil, max, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, serr
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}

// drain splices n bytes out of the pipe into dst's socket, waiting for
// room in it; it returns how many it moved.
func (p *bulkPipe) drain(dst syscall.RawConn, n int) (int, error) {
	done := 0
	for done < n {
		var k int64
		var serr error
		err := dst.Write(func(fd uintptr) bool {
			for {
				k, serr = unix.Splice(p.r, nil, int(fd), nil, n-done, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					return serr != unix.EAGAIN
				}
			}
		})
		switch {
		case err != nil:
			return done, err
		case serr != nil:
			return done, serr
		case k == 0:
			return done, errPipeEmpty
		}
		done += int(k)
	}
	return done, nil
}

// spliceEnds are the raw sockets of a mover's two TCP connections, or
// nil when either end is not a plain TCP socket (src a bufConn holds
// bytes of its own: they must be read first, so it is never spliced).
func spliceEnds(src, dst net.Conn) (r, w syscall.RawConn) {
	s, ok := src.(*net.TCPConn)
	d := tcpOf(dst)
	if !ok || d == nil {
		return nil, nil
	}
	var err error
	if r, err = s.SyscallConn(); err != nil {
		return nil, nil
	}
	if w, err = d.SyscallConn(); err != nil {
		return nil, nil
	}
	return r, w
}

// spliceFailed reports whether err says splice(2) cannot be used here at
// all, and turns it off for the server if so.
func spliceFailed(err error) bool {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		noSplice.Store(true)
		return true
	}
	return false
}
