package egress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A carried connection's bytes move through a buffer of the mover's: 64
// KiB while reads fit it; once a read fills it (a bulk transfer), through
// a pipe with splice(2) when both ends are TCP sockets (splice.go), else
// through a 1 MiB buffer (the gate then costs about half the CPU per byte
// it did with 32 KiB reads). Pipes and large buffers are bounded
// server-wide (maxBulk): past the bound a transfer keeps its small
// buffer, and a mover gives its pipe or large buffer back as soon as a
// read would have fit the small one, and at its end.
const (
	copySize = 64 << 10
	bulkSize = 1 << 20
)

// maxBulkPipes bounds the pipes and large buffers in use server-wide.
const maxBulkPipes = 64

var (
	maxBulk     int64 = maxBulkPipes // a variable for tests
	bulkInUse   atomic.Int64
	bulkBuffers = sync.Pool{New: func() any { return new([bulkSize]byte) }}
)

// errBudget: the session's byte budget is used up.
var errBudget = errors.New("byte budget used up")

// refund gives back bytes charged and not moved.
func (g *Gate) refund(n int) {
	if n > 0 {
		g.used.Add(-int64(n))
	}
}

// mover moves one direction of a carried connection.
type mover struct {
	g        *Gate
	dst, src net.Conn
	ctr      *atomic.Int64 // the decision's bytes up or down
	last     *atomic.Int64 // unix nanoseconds of the last byte, either way
	buf      []byte        // made on first use
	bulk     *[bulkSize]byte
	pipe     *bulkPipe // instead of bulk, when both ends are TCP
	// rsrc and rdst are src's and dst's sockets when both are TCP (found
	// on the first bulk read: checked says it was looked for).
	rsrc, rdst syscall.RawConn
	checked    bool
	werr       error // the last write's failure
}

// done gives back what the mover holds.
func (m *mover) done() {
	if m.bulk != nil {
		bulkBuffers.Put(m.bulk)
		m.bulk = nil
		bulkInUse.Add(-1)
	}
	if m.pipe != nil {
		m.pipe.close()
		m.pipe = nil
		bulkInUse.Add(-1)
	}
}

// takeBulk takes a pipe or a large buffer for a bulk transfer, if the
// server's bound leaves one.
func (m *mover) takeBulk() {
	if bulkInUse.Add(1) > maxBulk {
		bulkInUse.Add(-1)
		return
	}
	if !m.checked {
		m.checked = true
		m.rsrc, m.rdst = spliceEnds(m.src, m.dst)
	}
	if m.rsrc != nil && !noSplice.Load() {
		if p, err := newBulkPipe(); err == nil {
			m.pipe = p
			return
		}
	}
	m.bulk = bulkBuffers.Get().(*[bulkSize]byte)
}

// copyAll moves everything until src ends (nil), the budget is used up
// (errBudget) or a side fails.
func (m *mover) copyAll() error {
	for {
		if _, err := m.move(1 << 30); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// copyRequests moves a plain HTTP client's bytes, each request checked by
// reqs: bodies as they come, heads held until checked. An Upgrade request
// holds the client's next bytes until answer says what the upstream
// answered; quit ends the wait. A request reqs refuses is a
// *refusedError.
func (m *mover) copyRequests(reqs *reqStream, answer <-chan bool, quit <-chan struct{}) error {
	return m.copyMessages(reqs, nil, answer, quit)
}

// copyMessages moves what reqs lets through, pre first; it returns
// errOneRequest as soon as a single message is whole.
func (m *mover) copyMessages(reqs *reqStream, pre []byte, answer <-chan bool, quit <-chan struct{}) error {
	m.werr = nil
	refused := func(err error) error {
		if m.werr != nil || err == errBudget || err == errOneRequest {
			return err
		}
		return &refusedError{err}
	}
	if err := reqs.feed(pre, m.write); err != nil {
		return refused(err)
	}
	for {
		if reqs.state == stDone {
			return errOneRequest
		}
		if reqs.waiting() {
			select {
			case switched := <-answer:
				if err := reqs.answered(switched, m.write); err != nil {
					return refused(err)
				}
			case <-quit:
				return net.ErrClosed
			}
			continue
		}
		if n := reqs.bodyLeft(); n > 0 {
			k, err := m.move(int(min(n, 1<<30)))
			reqs.skipped(int64(k))
			if err != nil {
				return err
			}
			continue
		}
		b, err := m.read(len(m.bufOrMake()))
		if len(b) > 0 {
			if ferr := reqs.feed(b, m.write); ferr != nil {
				return refused(ferr)
			}
		}
		if err != nil {
			return err
		}
	}
}

// watchUpgrade moves the upstream's first answer heads (1xx but 101 come
// before the final one) and sends on answer whether it switched protocols
// (101); always once, false when the answer cannot be read.
func (m *mover) watchUpgrade(answer chan<- bool) error {
	switched, decided := false, false
	defer func() {
		if !decided {
			answer <- false
		}
	}()
	var heads []byte
	for {
		b, err := m.read(copySize)
		if len(b) > 0 {
			if werr := m.write(b); werr != nil {
				return werr
			}
			heads = append(heads, b...)
			for !decided {
				end := bytes.Index(heads, []byte("\r\n\r\n"))
				if end < 0 {
					if len(heads) > maxPeek {
						decided = true
						answer <- false
					}
					break
				}
				code := statusCode(heads[:end])
				heads = heads[end+4:]
				if code == 101 || code < 100 || code > 199 {
					switched, decided = code == 101, true
					answer <- switched
				}
			}
		}
		if err != nil {
			return err
		}
		if decided {
			return nil
		}
	}
}

// copyResponse moves the forward proxy's one answer (after any 1xx heads)
// and returns errOneRequest once it is whole: the proxy closes the
// connection then, whether the upstream honoured "Connection: close" or
// not, so that nothing the client sent after its request waits for an
// answer that never comes. An answer it cannot frame (no length, an
// unknown coding) is moved until the upstream closes. head: the request
// was HEAD (no body).
func (m *mover) copyResponse(head bool, quit <-chan struct{}) error {
	var heads []byte
	for {
		b, err := m.read(copySize)
		heads = append(heads, b...)
		for {
			end := bytes.Index(heads, []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			code, length, chunked, ok := responseFraming(heads[:end+4])
			if code >= 100 && code < 200 && code != 101 {
				if werr := m.write(heads[:end+4]); werr != nil {
					return werr
				}
				heads = heads[end+4:]
				continue
			}
			if werr := m.write(heads[:end+4]); werr != nil {
				return werr
			}
			rest := heads[end+4:]
			if head || code == 204 || code == 304 {
				length, chunked = 0, false
			}
			if !ok || code == 101 || (!chunked && length < 0) {
				if werr := m.write(rest); werr != nil {
					return werr
				}
				return m.copyAll()
			}
			return m.copyMessages(bodyStream("", length, chunked), rest, nil, quit)
		}
		if len(heads) > maxPeek {
			if werr := m.write(heads); werr != nil {
				return werr
			}
			return m.copyAll()
		}
		if err != nil {
			m.write(heads)
			return err
		}
	}
}

// move moves at least one and at most limit bytes; io.EOF at src's end.
func (m *mover) move(limit int) (int, error) {
	if m.pipe != nil {
		return m.splice(limit)
	}
	b, err := m.read(limit)
	if len(b) > 0 {
		if werr := m.write(b); werr != nil {
			return 0, werr
		}
	}
	return len(b), err
}

func (m *mover) bufOrMake() []byte {
	if m.bulk != nil {
		return m.bulk[:]
	}
	if m.buf == nil {
		m.buf = make([]byte, copySize)
	}
	return m.buf
}

// read reads up to limit bytes into the buffer (not charged yet). A read
// that fills the small buffer takes a large one for the next, and one
// that would have fit the small buffer gives the large one back.
func (m *mover) read(limit int) ([]byte, error) {
	buf := m.bufOrMake()
	n, err := m.src.Read(buf[:min(limit, len(buf))])
	if n > 0 {
		m.last.Store(time.Now().UnixNano())
	}
	switch {
	case m.bulk == nil && m.pipe == nil && n == copySize:
		// The bytes read stay in the small buffer: the caller has them;
		// the next move splices, or the next read uses the large buffer.
		m.takeBulk()
	case m.pipe != nil && n < copySize:
		m.done()
	case m.bulk != nil && n < copySize:
		// Copied out first: the caller's bytes are in the large buffer.
		small := m.bufSmall()
		copy(small, buf[:n])
		m.done()
		return small[:n], err
	}
	return buf[:n], err
}

// splice is move through the mover's pipe: one splice from src into it,
// charged, then what the charge allowed spliced out to dst. A pipe that
// may still hold bytes (a failed write, the budget's end) is closed.
func (m *mover) splice(limit int) (int, error) {
	n, err := m.pipe.fill(m.rsrc, min(limit, pipeSize))
	if n == 0 {
		if spliceFailed(err) {
			m.done() // nothing moved: copy instead
			return m.move(limit)
		}
		return 0, err
	}
	m.last.Store(time.Now().UnixNano())
	ok := m.g.charge(n)
	k, werr := m.pipe.drain(m.rdst, ok)
	spliced.Add(int64(k))
	m.ctr.Add(int64(k))
	m.g.refund(ok - k)
	switch {
	case werr != nil:
		m.werr = werr
		m.done()
		return 0, werr
	case ok < n:
		m.done()
		return 0, errBudget
	case n < copySize:
		m.done()
	}
	return n, nil
}

func (m *mover) bufSmall() []byte {
	if m.buf == nil {
		m.buf = make([]byte, copySize)
	}
	return m.buf
}

// write charges b to the budget and writes what it allows: all of b, or
// a part and errBudget.
func (m *mover) write(b []byte) error {
	ok := m.g.charge(len(b))
	if ok > 0 {
		n, err := m.dst.Write(b[:ok])
		m.ctr.Add(int64(n))
		m.g.refund(ok - n)
		if err != nil {
			m.werr = err
			return err
		}
	}
	if ok < len(b) {
		return errBudget
	}
	return nil
}

// tcpOf is the TCP socket writes to c go to, if any.
func tcpOf(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *bufConn:
		return tcpOf(c.Conn)
	}
	return nil
}
