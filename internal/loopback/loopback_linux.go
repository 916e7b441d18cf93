// Package loopback owns the one network interface every sandbox has: it
// brings lo up in the calling thread's network namespace (a jail's init in
// its new namespace, the egress layer in one it made for gVisor).
//
// It must never create, move or configure any other interface, nor touch
// a namespace other than the current thread's.
package loopback

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Up brings up lo in the current network namespace.
func Up() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
