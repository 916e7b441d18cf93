package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	lo "airlock/internal/loopback"
)

// inNetns runs fn on an OS thread locked to it that has entered the
// network namespace ns (a pidfd of a process in it, or a namespace file).
// Sockets fn creates belong to that namespace and are served from
// anywhere later.
func inNetns(ns int, fn func() error) error {
	return onNetnsThread(func(orig int) error {
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("egress: enter the sandbox's network namespace: %w", err)
		}
		// Never the server's own: a descriptor number closed and reused
		// (the sandbox's handle, or the server's just opened) would
		// otherwise put the gate's routes and listeners on the host.
		if same, err := sameFile(orig, "/proc/thread-self/ns/net"); same || err != nil {
			if err == nil {
				err = errors.New("egress: the handle names the server's own network namespace, not a sandbox's")
			}
			return err
		}
		return nil
	}, fn)
}

// onNetnsThread runs enter, then (if it succeeded) fn, on an OS thread
// locked to them; enter moves the thread to another network namespace
// and is given a handle on the thread's own. The thread goes back to its
// own namespace before it is unlocked; if it cannot, it stays locked and
// exits with the goroutine (had it been the main thread, which Go never
// exits, it would stay in the sandbox's namespace for good: restoring
// avoids that).
func onNetnsThread(enter func(orig int) error, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("egress: own network namespace: %w", err)
			return
		}
		if err = enter(orig); err == nil {
			err = fn()
		}
		back := unix.Setns(orig, unix.CLONE_NEWNET) == nil
		// Closed before the caller goes on: no descriptor of the call
		// outlives it (a count of the server's, or a leak check, would
		// see it).
		unix.Close(orig)
		if back {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// sameFile reports whether the descriptor fd and path are one file.
func sameFile(fd int, path string) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return false, err
	}
	if err := unix.Stat(path, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// NewNamespace makes a network namespace of airlock's own for a sandbox
// whose kernel joins one given to it (gVisor's): only lo, up, and
// nothing listening until a gate is attached. The namespace lives as
// long as the returned handle or a process in it.
func NewNamespace() (*os.File, error) {
	var ns *os.File
	err := onNetnsThread(func(int) error { return unix.Unshare(unix.CLONE_NEWNET) }, func() (err error) {
		if err = lo.Up(); err == nil {
			ns, err = os.Open("/proc/thread-self/ns/net")
		}
		return err
	})
	if err != nil {
		if ns != nil {
			ns.Close()
		}
		return nil, fmt.Errorf("egress: new network namespace: %w", err)
	}
	return ns, nil
}

// ListenIn opens a TCP listener on addr inside the network namespace ns
// (one of NewNamespace's), served from anywhere: the bench's upstream
// lives in one.
func ListenIn(ns *os.File, addr string) (net.Listener, error) {
	return ListenAt(int(ns.Fd()), addr)
}

// ListenAt opens a TCP listener on addr inside the network namespace of
// ns (a sandbox's pidfd or namespace handle, see instance.NetNS), never
// the server's own: the tool broker's in-sandbox endpoint.
func ListenAt(ns int, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(ns, func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return inUse(uint16(portOf(addr)), err)
	})
	return l, err
}

// DialIn connects to addr (an address of the namespace's own loopback)
// from inside the network namespace ns (a pidfd of a process in it, or a
// namespace file), never from the server's: the connection is to what
// listens there. Connecting to loopback takes no time worth a deadline
// beyond ctx's.
func DialIn(ctx context.Context, ns int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Attach puts a gate's sockets into the network namespace of the process
// behind pidfd and starts serving them. The policy must not be empty.
func Attach(pidfd int, o Options) (_ *Gate, err error) {
	if o.Policy.Empty() {
		return nil, errors.New("egress: empty policy")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	g := &Gate{
		session: o.Session, limits: o.Limits, dialer: o.Dialer, log: o.Log, policy: o.Policy, secrets: o.Secrets,
		fakes: map[string]netip.Addr{}, names: map[netip.Addr]string{},
		listeners: map[uint16]net.Listener{}, conns: map[net.Conn]struct{}{},
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	err = inNetns(pidfd, func() error {
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		g.ns = ns
		if err := addRoutes(); err != nil {
			return err
		}
		if err := bigLoopback(); err != nil {
			o.Log.Debug("egress: lo keeps 64 KiB packets", "session", o.Session, "err", err)
		}
		if g.dnsUDP, err = net.ListenPacket("udp4", "127.0.0.1:53"); err != nil {
			return inUse(53, fmt.Errorf("egress: DNS: %w", err))
		}
		if g.dnsTCP, err = net.Listen("tcp4", "127.0.0.1:53"); err != nil {
			return inUse(53, fmt.Errorf("egress: DNS: %w", err))
		}
		if o.Proxy {
			if g.proxy, err = net.Listen("tcp4", ProxyAddr); err != nil {
				return inUse(proxyPort, fmt.Errorf("egress: proxy: %w", err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.serveDNSUDP(g.dnsUDP) }()
	go func() { defer g.wg.Done(); g.serveDNSTCP(g.dnsTCP) }()
	if g.proxy != nil {
		g.wg.Add(1)
		go g.serve(g.proxy, g.handleProxy)
	}
	g.policy = Policy{}
	if err := g.SetPolicy(o.Policy); err != nil {
		return nil, err
	}
	return g, nil
}

// listenPorts opens a TCP listener on every address for each port inside
// the namespace ns (both families when the sandbox has IPv6).
func listenPorts(ns *os.File, ports []uint16) (map[uint16]net.Listener, error) {
	out := map[uint16]net.Listener{}
	err := inNetns(int(ns.Fd()), func() error {
		for _, p := range ports {
			addr := ":" + strconv.Itoa(int(p))
			l, err := net.Listen("tcp", addr)
			if err != nil && !errors.Is(err, unix.EADDRINUSE) {
				// No IPv6 in the sandbox. Not when the port is taken:
				// a sandbox holding it on IPv6 only would keep it there.
				l, err = net.Listen("tcp4", addr)
			}
			if err != nil {
				return inUse(p, fmt.Errorf("egress: listen on port %d in the sandbox: %w", p, err))
			}
			out[p] = l
		}
		return nil
	})
	if err != nil {
		for _, l := range out {
			l.Close()
		}
		return nil, err
	}
	return out, nil
}

// inUse makes err a *PortInUseError when the sandbox holds port: its own
// listener got there first (before the gate existed, or on a port the
// gate did not need until now).
func inUse(port uint16, err error) error {
	if errors.Is(err, unix.EADDRINUSE) {
		return &PortInUseError{Port: port, Err: err}
	}
	return err
}

// anyIPAddr is put on lo so that resolvers asking for AI_ADDRCONFIG (glibc
// ignores 127.0.0.1) return IPv4 answers; it is inside 198.18.0.0/15,
// which is never dialled.
var anyIPAddr = [4]byte{198, 18, 0, 1}

// addRoutes, run inside the sandbox's namespace, adds anyIPAddr to lo and
// "local 0.0.0.0/0 dev lo table local" (and its IPv6 twin when the sandbox
// has IPv6): every address is then local, so IP-literal connects reach
// airlock's listeners (refused and logged) or are refused by the kernel.
func addRoutes() error {
	fd, lo, err := routeSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// ifaddrmsg: family, prefixlen, flags, scope, index; then IFA_LOCAL
	// and IFA_ADDRESS.
	addr := []byte{unix.AF_INET, 32, 0, unix.RT_SCOPE_UNIVERSE}
	addr = binary.NativeEndian.AppendUint32(addr, uint32(lo.Index))
	addr = appendAttr(addr, unix.IFA_LOCAL, anyIPAddr[:])
	addr = appendAttr(addr, unix.IFA_ADDRESS, anyIPAddr[:])
	if err := nlRequest(fd, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("egress: address on lo: %w", err)
	}
	for _, fam := range []byte{unix.AF_INET, unix.AF_INET6} {
		// rtmsg: family, dst_len, src_len, tos, table, protocol, scope,
		// type, flags; then RTA_OIF.
		rt := []byte{fam, 0, 0, 0, unix.RT_TABLE_LOCAL, unix.RTPROT_BOOT, unix.RT_SCOPE_HOST, unix.RTN_LOCAL, 0, 0, 0, 0}
		rt = appendAttr(rt, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(lo.Index)))
		err := nlRequest(fd, unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, rt)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			if fam == unix.AF_INET6 {
				continue // no IPv6 in the sandbox: nothing to reach
			}
			return fmt.Errorf("egress: local route on lo: %w", err)
		}
	}
	return nil
}

// loPacket is the largest packet the gate's leg of a connection (the
// sandbox's lo) carries: the most lo takes (BIG TCP, Linux 6.3 and later
// for IPv4), against 64 KiB otherwise.
const loPacket = 512<<10 - 8

// bigLoopback, run inside the sandbox's namespace, lets lo carry packets
// of loPacket. Every byte through the gate crosses lo a second time, and
// its per-packet work (the sandbox's receive, its acknowledgments,
// wakeups) is most of what the gate costs beyond a direct transfer: 512
// KiB packets took a third off the gate's CPU per byte and about 0.1 off
// its ratio to a direct download (airlock bench, egress). Best effort: a
// kernel whose lo takes less refuses (lo keeps 64 KiB packets, only
// slower), one before 6.3 ignores the IPv4 attributes.
func bigLoopback() error {
	fd, lo, err := routeSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// ifinfomsg: family, pad, type, index, flags, change; then the sizes.
	link := []byte{unix.AF_UNSPEC, 0, 0, 0}
	link = binary.NativeEndian.AppendUint32(link, uint32(lo.Index))
	link = binary.NativeEndian.AppendUint64(link, 0)
	size := binary.NativeEndian.AppendUint32(nil, loPacket)
	for _, a := range []uint16{unix.IFLA_GSO_MAX_SIZE, unix.IFLA_GRO_MAX_SIZE, unix.IFLA_GSO_IPV4_MAX_SIZE, unix.IFLA_GRO_IPV4_MAX_SIZE} {
		link = appendAttr(link, a, size)
	}
	if err := nlRequest(fd, unix.RTM_SETLINK, 0, link); err != nil {
		return fmt.Errorf("egress: lo's packet size: %w", err)
	}
	return nil
}

// routeSocket is an rtnetlink socket of the current namespace, and its lo.
func routeSocket() (int, *net.Interface, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, nil, fmt.Errorf("egress: netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("egress: netlink: %w", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("egress: lo: %w", err)
	}
	return fd, lo, nil
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlRequest sends one rtnetlink request (flags besides request and ack)
// and waits for its acknowledgment.
func nlRequest(fd int, typ, flags uint16, body []byte) error {
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	msg = binary.NativeEndian.AppendUint32(msg, 1) // seq
	msg = binary.NativeEndian.AppendUint32(msg, 0) // pid
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4 {
			if e := int32(binary.NativeEndian.Uint32(m.Data[:4])); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
	}
	return errors.New("no netlink acknowledgment")
}
