package jailinit

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Files the host writes into a sandbox's /workspace are written by the
// init, charged to the sandbox's memory cgroup (see jail's writeFile):
// the init gets two descriptors, the opened file and the read end of a
// pipe the host feeds, and only moves bytes from one to the other: it
// never resolves a path and never sees the client.

// copyIn runs in the init, on a goroutine of its own: it splices what
// arrives on files[1] (a pipe) into files[0] (a regular file) until the
// host closes the pipe or a write fails, closes both and answers.
func copyIn(ctl *conn, m *CopyMsg, files []*os.File) {
	defer closeFiles(files)
	if m == nil {
		m = &CopyMsg{} // nobody waits for copy 0; the host never sends one
	}
	reply := &CopyMsg{ID: m.ID}
	var err error
	if len(files) != 2 {
		err = fmt.Errorf("want a file and a pipe, got %d descriptors", len(files))
	} else {
		reply.N, err = splicePipe(files[0], files[1])
	}
	msg := Message{Op: MsgCopied, Copy: reply}
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			reply.Errno = int(errno)
		}
		msg.Error = err.Error()
	}
	ctl.send(msg)
}

// splicePipe moves bytes from the pipe src into the regular file dst
// through the kernel, without a buffer of its own. The pipe is
// non-blocking: while it is empty the goroutine waits in the poller and
// holds no thread.
func splicePipe(dst, src *os.File) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(dst.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("copy: the destination is not a regular file")
	}
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	if err := rc.Control(func(fd uintptr) {
		if e := unix.Fstat(int(fd), &st); e != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			err = fmt.Errorf("copy: the source is not a pipe")
		}
	}); err != nil {
		return 0, err
	}
	out := int(dst.Fd())
	var total int64
	for {
		var n int64
		var serr error
		if err := rc.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, out, nil, 1<<20, unix.SPLICE_F_NONBLOCK)
			return serr != unix.EAGAIN
		}); err != nil {
			return total, err
		}
		switch {
		case serr == unix.EINTR:
			continue
		case serr != nil:
			return total, serr
		case n == 0:
			return total, nil // the host closed the pipe
		}
		total += n
	}
}
