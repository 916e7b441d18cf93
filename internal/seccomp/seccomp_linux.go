package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InstallThread sets no_new_privs and installs prog on the calling OS
// thread only. The caller must have locked the goroutine to its thread and
// must never unlock it: the thread is meant to fork the sandboxed process
// and then die.
func InstallThread(prog Program) error {
	return install(prog, 0)
}

func install(prog Program, flags uintptr) error {
	if len(prog) == 0 {
		return fmt.Errorf("seccomp: empty program")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	return nil
}

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
