package jail

// Files the host writes into a sandbox's /workspace (uploads, the input
// files of runs) are written by the sandbox's init, not by the server.
// tmpfs pages are charged to the memory cgroup of the process that
// allocates them, per process and never per thread, so a server thread
// cannot write them on the sandbox's account; the init, PID 1 of the
// sandbox and already in its cgroup, can.
//
// The host still does everything that needs trust: it resolves the path
// beneath the workspace and opens the file (package workspace, as the
// sandbox user), reads the client, and decides how much may be written.
// The init gets two descriptors, the opened file and the read end of a
// pipe the host feeds, and only moves bytes from one to the other: it
// never resolves a path and never sees the client.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/jailinit"
)

// copies routes the init's copied answers to the copies waiting for them.
type copies struct {
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan jailinit.Message
}

func (c *copies) add() (uint64, chan jailinit.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wait == nil {
		c.wait = map[uint64]chan jailinit.Message{}
	}
	c.next++
	ch := make(chan jailinit.Message, 1)
	c.wait[c.next] = ch
	return c.next, ch
}

func (c *copies) remove(id uint64) {
	c.mu.Lock()
	delete(c.wait, id)
	c.mu.Unlock()
}

func (c *copies) deliver(m jailinit.Message) {
	if m.Copy == nil {
		return
	}
	c.mu.Lock()
	ch := c.wait[m.Copy.ID]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// Room the host keeps in the sandbox's memory: a file is refused rather
// than let it push the sandbox into its OOM killer, which ends the
// session. memoryCheck is how often the room is looked at.
const (
	memoryCheck = 1 << 20
	// The copy's own buffer: what the host reads of the client at a time.
	feedChunk = 128 << 10
)

// memoryReserve is the memory a file written by the host must leave free
// in a sandbox with limit: room for the code to go on running.
func memoryReserve(limit int64) int64 { return limit / 16 }

// writeFile is the workspace's Copier for this sandbox: it has the init
// write everything src yields into dst (see copyIn), feeding it through a
// pipe from this goroutine, and refuses to charge the sandbox's memory
// past memoryReserve of its limit. The network is read here, on an
// ordinary goroutine; no thread is held while the client is slow.
func (s *Sandbox) writeFile(dst *os.File, src io.Reader) (int64, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, fmt.Errorf("jail: copy: %w", err)
	}
	pw := os.NewFile(uintptr(p[1]), "copy") // non-blocking: in the poller
	defer pw.Close()
	inFlight := int64(64 << 10)
	if n, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0); err == nil {
		inFlight = int64(n)
	}
	id, answer := s.copies.add()
	defer s.copies.remove(id)
	err := s.ctl.send(jailinit.Message{Op: jailinit.MsgCopy, Copy: &jailinit.CopyMsg{ID: id}}, int(dst.Fd()), p[0])
	unix.Close(p[0])
	if err != nil {
		return 0, s.goneOr(fmt.Errorf("jail: copy: %w", err))
	}
	sent, feedErr := s.feed(pw, src, inFlight)
	pw.Close() // the init reads to the end, then answers
	var m jailinit.Message
	select {
	case m = <-answer:
	case <-s.dead:
		return 0, fmt.Errorf("%w: the sandbox ended while a file was written into it", errdefs.ErrGone)
	case <-time.After(time.Minute):
		// The pipe holds at most inFlight bytes: this is a stuck init.
		return 0, fmt.Errorf("jail: copy: no answer from the sandbox init")
	}
	c := m.Copy
	switch {
	case c.Errno != 0:
		// The file's error (ENOSPC, EFBIG...): the workspace maps it.
		return c.N, &os.PathError{Op: "write", Path: dst.Name(), Err: syscall.Errno(c.Errno)}
	case m.Error != "":
		return c.N, fmt.Errorf("jail: copy: %s", m.Error)
	case feedErr != nil:
		return c.N, feedErr
	case c.N != sent:
		return c.N, fmt.Errorf("jail: copy: the init wrote %d of %d bytes", c.N, sent)
	}
	return c.N, nil
}

// feed copies src into the pipe w, looking at the sandbox's memory before
// every memoryCheck bytes; inFlight is what the pipe may hold that is not
// yet charged. Errors reading src are returned as they are.
func (s *Sandbox) feed(w *os.File, src io.Reader, inFlight int64) (int64, error) {
	buf := make([]byte, feedChunk)
	var sent, checked int64
	checked = -1
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if checked < 0 || sent+int64(n) > checked {
				if err := s.roomFor(inFlight + memoryCheck); err != nil {
					return sent, err
				}
				checked = sent + memoryCheck
			}
			if _, err := w.Write(buf[:n]); err != nil {
				// The init stopped reading: it answers why.
				return sent, nil
			}
			sent += int64(n)
		}
		if rerr == io.EOF {
			return sent, nil
		}
		if rerr != nil {
			return sent, rerr
		}
	}
}

// roomFor fails unless n more bytes fit in the sandbox's memory with
// memoryReserve left over.
func (s *Sandbox) roomFor(n int64) error {
	used, limit, err := s.cg.Memory()
	if err != nil {
		// Without the cgroup's path: this reaches the client.
		var errno syscall.Errno
		errors.As(err, &errno)
		return s.goneOr(fmt.Errorf("jail: cannot read the sandbox's memory use (errno %d)", errno))
	}
	if limit < 0 {
		return nil
	}
	if used+n+memoryReserve(limit) > limit {
		return fmt.Errorf("%w: the file does not fit in the session's memory (%s in use of limits.memory %s, of which %s stays free for the code; files in /workspace count towards it)",
			errdefs.ErrTooLarge, config.Size(used), config.Size(limit), config.Size(memoryReserve(limit)))
	}
	return nil
}

// goneOr returns ErrGone if the sandbox has ended, err otherwise.
func (s *Sandbox) goneOr(err error) error {
	select {
	case <-s.dead:
		return fmt.Errorf("%w: the sandbox ended while a file was written into it", errdefs.ErrGone)
	default:
		return err
	}
}
