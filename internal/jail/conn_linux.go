package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// conn is one end of the control socketpair.
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
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*maxMessage) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 2*maxMessage)
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 2*maxMessage) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 2*maxMessage)
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
	return &conn{c: uc, buf: make([]byte, bufSize+1), oob: make([]byte, unix.CmsgSpace(16*4))}, nil
}

func (c *conn) send(m message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMessage {
		return fmt.Errorf("jail: control message of %d bytes is too large", len(b))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// recv reads one message and the descriptors that came with it. The
// descriptors are close-on-exec; the caller owns them.
func (c *conn) recv() (message, []*os.File, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
	var files []*os.File
	if oobn > 0 {
		cmsgs, perr := unix.ParseSocketControlMessage(c.oob[:oobn])
		if perr == nil {
			for _, cm := range cmsgs {
				if fds, err := unix.ParseUnixRights(&cm); err == nil {
					for _, fd := range fds {
						files = append(files, os.NewFile(uintptr(fd), "received"))
					}
				}
			}
		}
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if err != nil {
		closeAll()
		return message{}, nil, err
	}
	if n == 0 {
		closeAll()
		return message{}, nil, errEOF
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll()
		return message{}, nil, fmt.Errorf("jail: control message truncated")
	}
	var m message
	if err := json.Unmarshal(c.buf[:n], &m); err != nil {
		closeAll()
		return message{}, nil, fmt.Errorf("jail: bad control message: %w", err)
	}
	return m, files, nil
}

func (c *conn) setDeadline(t time.Time) { c.c.SetReadDeadline(t) }

func (c *conn) close() error { return c.c.Close() }

var errEOF = errors.New("jail: control socket closed")
