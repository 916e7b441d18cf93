package jailinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrClosed is what receiving from a control socket whose other end is
// gone returns.
var ErrClosed = errors.New("jail: control socket closed")

// Packet is what sending m with the descriptors fds writes: the packet
// and its ancillary data.
func Packet(m Message, fds ...int) (b, oob []byte, err error) {
	if b, err = json.Marshal(m); err != nil {
		return nil, nil, err
	}
	if len(b) > MaxMessage {
		return nil, nil, fmt.Errorf("jail: control message of %d bytes is too large", len(b))
	}
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return b, oob, nil
}

// Decode is the message in a received packet b, with the descriptors its
// ancillary data oob carried (the caller owns them); flags and err are
// the receive's. The descriptors are closed when it fails.
func Decode(b, oob []byte, flags int, err error) (Message, []*os.File, error) {
	var files []*os.File
	if len(oob) > 0 {
		cmsgs, perr := unix.ParseSocketControlMessage(oob)
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
	var m Message
	switch {
	case err != nil:
	case len(b) == 0:
		err = ErrClosed
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		err = fmt.Errorf("jail: control message truncated")
	default:
		if jerr := json.Unmarshal(b, &m); jerr != nil {
			err = fmt.Errorf("jail: bad control message: %w", jerr)
		}
	}
	if err != nil {
		closeFiles(files)
		return Message{}, nil, err
	}
	return m, files, nil
}

// OOBSize is the ancillary buffer a receiver needs: the most descriptors
// one message carries.
var OOBSize = unix.CmsgSpace(16 * 4)

// conn is the init's end of the control socketpair. It does without
// package net, whose dependencies would have Go run more initialisers
// before every sandbox's init (see the package comment): the socket is a
// non-blocking descriptor in the runtime's poller, read and written with
// recvmsg and sendmsg.
type conn struct {
	f   *os.File
	rc  syscall.RawConn
	wmu sync.Mutex
	buf []byte
	oob []byte
}

// newConn takes over fd, the init's end of the socketpair; bufSize bounds
// the messages it can receive. The descriptor becomes close-on-exec: no
// program the init starts may inherit it.
func newConn(fd int, bufSize int) (*conn, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("jail: control socket: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("jail: control socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ctl") // non-blocking: in the poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("jail: control socket: %w", err)
	}
	return &conn{f: f, rc: rc, buf: make([]byte, bufSize+1), oob: make([]byte, OOBSize)}, nil
}

func (c *conn) send(m Message, fds ...int) error {
	b, oob, err := Packet(m, fds...)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var serr error
	if err := c.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

// recv reads one message and the descriptors that came with it,
// close-on-exec; the caller owns them.
func (c *conn) recv() (Message, []*os.File, error) {
	var n, oobn, flags int
	var rerr error
	if err := c.rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), c.buf, c.oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		rerr = err
	}
	if rerr != nil {
		n, oobn = 0, 0
	}
	return Decode(c.buf[:n], c.oob[:oobn], flags, rerr)
}
