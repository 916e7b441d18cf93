package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Available reports whether the kernel accepts seccomp filters.
func Available() error {
	// SECCOMP_GET_ACTION_AVAIL for KILL_PROCESS exists since 4.14 and
	// answers without changing anything.
	action := uint32(retKillProcess)
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); errno != 0 {
		return fmt.Errorf("seccomp filters unavailable: %w", errno)
	}
	return nil
}

// Bytes returns the program as the raw struct sock_filter array, for a
// process that installs it itself (the Python template's children).
func (p Program) Bytes() []byte {
	out := make([]byte, 0, 8*len(p))
	for _, in := range p {
		var b [8]byte
		*(*uint16)(unsafe.Pointer(&b[0])) = in.Op
		b[2], b[3] = in.Jt, in.Jf
		*(*uint32)(unsafe.Pointer(&b[4])) = in.K
		out = append(out, b[:]...)
	}
	return out
}
