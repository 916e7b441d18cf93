package jail

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/jailinit"
)

// conn is the host's end of the control socketpair (jailinit's wire).
type conn struct {
	c   *net.UnixConn
	wmu sync.Mutex
	buf []byte
	oob []byte
}

// socketpair returns two connected SOCK_SEQPACKET ends with buffers large
// enough for the biggest control message.
func socketpair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("jail: socketpair: %w", err)
	}
	for _, fd := range fds {
		// FORCE variants exceed wmem_max; fall back silently when not root.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*jailinit.MaxMessage) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 2*jailinit.MaxMessage)
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 2*jailinit.MaxMessage) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 2*jailinit.MaxMessage)
		}
	}
	return os.NewFile(uintptr(fds[0]), "ctl-host"), os.NewFile(uintptr(fds[1]), "ctl-init"), nil
}

// newConn wraps f; bufSize bounds the messages it can receive.
func newConn(f *os.File, bufSize int) (*conn, error) {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("jail: control socket: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("jail: control socket is not a unix socket")
	}
	return &conn{c: uc, buf: make([]byte, bufSize+1), oob: make([]byte, jailinit.OOBSize)}, nil
}

func (c *conn) send(m jailinit.Message, fds ...int) error {
	b, oob, err := jailinit.Packet(m, fds...)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// recv reads one message and the descriptors that came with it. The
// descriptors are close-on-exec; the caller owns them.
func (c *conn) recv() (jailinit.Message, []*os.File, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		n, oobn = 0, 0 // they may be -1
	}
	return jailinit.Decode(c.buf[:n], c.oob[:oobn], flags, err)
}

func (c *conn) setDeadline(t time.Time) { c.c.SetReadDeadline(t) }

func (c *conn) close() error { return c.c.Close() }
