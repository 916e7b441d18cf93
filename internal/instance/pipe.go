package instance

import (
	"os"
	"sync"
	"syscall"
)

// pipeReader reads one of a runtime's output pipes for the whole life of
// the session and hands every chunk to the current execution. Reads happen
// under mu, both in the reader loop and in drain, so that when the runtime
// says an execution is done, drain can pick up exactly the bytes written
// before that (they are in the pipe or already delivered, never in
// flight).
type pipeReader struct {
	f    *os.File
	rc   syscall.RawConn
	mu   sync.Mutex
	buf  []byte
	sink func([]byte) // called under mu
	done chan struct{}
}

func newPipeReader(f *os.File, sink func([]byte)) (*pipeReader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &pipeReader{f: f, rc: rc, buf: make([]byte, 16<<10), sink: sink, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

func (p *pipeReader) loop() {
	defer close(p.done)
	for {
		eof := false
		err := p.rc.Read(func(fd uintptr) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			n, err := syscall.Read(int(fd), p.buf)
			switch {
			case n > 0:
				p.sink(p.buf[:n])
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
	}
}

// drain delivers everything currently in the pipe.
func (p *pipeReader) drain() {
	p.rc.Control(func(fd uintptr) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for {
			n, _ := syscall.Read(int(fd), p.buf)
			if n <= 0 {
				return
			}
			p.sink(p.buf[:n])
		}
	})
}

func (p *pipeReader) close() {
	p.f.Close()
	<-p.done
}
