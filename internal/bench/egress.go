package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/egress"
)

// The egress scenario's upstream: a network namespace of the bench's own
// behind a veth pair, in 198.19.0.0/16 (RFC 2544's benchmarking range,
// which the egress guard opens only as an operator's internal CIDR), and
// a name for it that only the egress server's own /etc/hosts knows.
var (
	worldHost = netip.MustParsePrefix("198.19.254.1/30")
	worldPeer = netip.MustParsePrefix("198.19.254.2/30")
)

const worldName = "download.bench.airlock.test"

// downloadCode downloads SIZE bytes from HOST:80 asking for NAME, reading
// into one 1 MiB buffer, and prints the bytes, the seconds it took
// (connect included) and its own CPU seconds: the same code runs in a
// session, through the gate, and on the host, direct.
const downloadCode = `
import socket, time
def download(host, name):
    t, c = time.perf_counter(), time.process_time()
    s = socket.create_connection((host, 80), timeout=60)
    s.sendall(b"GET /download HTTP/1.1\r\nHost: " + name.encode() + b"\r\nConnection: close\r\n\r\n")
    buf = bytearray(1 << 20)
    view, n = memoryview(buf), 0
    while True:
        k = s.recv_into(view)
        if not k:
            break
        n += k
    s.close()
    return n, time.perf_counter() - t, time.process_time() - c
n, secs, cpu = download(HOST, NAME)
print(n, secs, cpu)
`

// world is the upstream's namespace, its veth pair and its HTTP server.
type world struct {
	ns   *os.File
	host string // the veth end in the bench's namespace
	srv  *http.Server
}

// newWorld makes the upstream: a namespace with lo and a veth peer, an
// HTTP server in it sending size bytes for any request.
func newWorld(size int) (*world, error) {
	w := &world{host: fmt.Sprintf("albench%d", os.Getpid()%100000)}
	var l net.Listener
	var err error
	if w.ns, err = egress.NewNamespace(); err == nil {
		l, err = egress.ListenIn(w.ns, "0.0.0.0:80")
	}
	if err != nil {
		w.close()
		return nil, fmt.Errorf("egress bench: upstream namespace: %w", err)
	}
	if err := w.link(); err != nil {
		l.Close()
		w.close()
		return nil, fmt.Errorf("egress bench: veth: %w", err)
	}
	chunk := make([]byte, 1<<20)
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Length", strconv.Itoa(size))
		for n := size; n > 0; n -= len(chunk) {
			if _, err := rw.Write(chunk[:min(n, len(chunk))]); err != nil {
				return
			}
		}
	})}
	go w.srv.Serve(l)
	return w, nil
}

// link adds the veth pair, its addresses and routes, both ends up.
func (w *world) link() error {
	peer := w.host + "w"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: w.host}, PeerName: peer, PeerNamespace: netlink.NsFd(int(w.ns.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return err
	}
	up := func(h *netlink.Handle, name string, a netip.Prefix) error {
		link, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		ip := &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), 32)}
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: ip}); err != nil {
			return err
		}
		return h.LinkSetUp(link)
	}
	here, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer here.Close()
	there, err := netlink.NewHandleAt(netns.NsHandle(int(w.ns.Fd())))
	if err != nil {
		return err
	}
	defer there.Close()
	if err := up(here, w.host, worldHost); err != nil {
		return err
	}
	return up(there, peer, worldPeer)
}

func (w *world) close() {
	if w.srv != nil {
		w.srv.Close()
	}
	if link, err := netlink.LinkByName(w.host); err == nil {
		netlink.LinkDel(link) // its peer goes with it
	}
	if w.ns != nil {
		w.ns.Close()
	}
}

// startWithHosts starts cmd in a mount namespace of its own where
// /etc/hosts is hosts: the egress server resolves the upstream's name
// with no change to the host's files or resolver. The thread that forks
// it unshares its mounts and is never given back to Go.
func startWithHosts(cmd *exec.Cmd, hosts string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// benchEgress downloads size bytes with the same Python code from a
// session, through the egress gate, and from the host, direct, rounds
// times each in pairs (which goes first alternates), and reports the
// median of each and the median of the pairs' ratios with their spread:
// the direct rate moves by 2× between runs on a shared machine, and a
// ratio within a pair sees the same moment's load on both sides.
func benchEgress(ctx context.Context, r *Report, o Options, rounds, size int) error {
	w, err := newWorld(size)
	if err != nil {
		return err
	}
	defer w.close()
	dir, err := os.MkdirTemp("", "airlock-bench-hosts")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	orig, _ := os.ReadFile("/etc/hosts")
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, fmt.Appendf(orig, "\n%s %s\n", worldPeer.Addr(), worldName), 0o644); err != nil {
		return err
	}
	srv, err := startServer(ctx, o, 1, "-egress", map[string]any{
		"network": map[string]any{"enabled": true, "bytes": "1T",
			"internal_cidrs": []string{netip.PrefixFrom(worldPeer.Addr(), 32).String()},
			"internal_names": []string{worldName}},
	}, hosts)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	sess, err := srv.client.CreateSession(ctx, apitype.CreateSessionRequest{Language: apitype.Python,
		Network: &apitype.NetworkPolicy{Allow: []string{worldName + ":80"}}})
	if err != nil {
		return err
	}
	defer srv.deleteSession(ctx, sess.ID)
	// The pool's refill after the session took its sandbox would share
	// the cores with the first rounds.
	if err := srv.waitWarm(ctx, 3*time.Minute); err != nil {
		return err
	}
	// The CPU each side spent, by party: the Pythons' own (as they
	// report it), the server's (the gate) and this process's (the
	// upstream).
	var cpu struct{ server, sandbox, gateUp, python, directUp time.Duration }
	parse := func(out string, py *time.Duration) (float64, error) {
		var n int
		var secs, pyCPU float64
		if _, err := fmt.Sscan(out, &n, &secs, &pyCPU); err != nil || n < size {
			return 0, fmt.Errorf("download: %q", out)
		}
		*py += time.Duration(pyCPU * float64(time.Second))
		return secs, nil
	}
	code := func(host string) string {
		return fmt.Sprintf("HOST, NAME = %q, %q\n", host, worldName) + downloadCode
	}
	viaGate := func() (float64, error) {
		srv0, _ := procCPU(srv.cmd.Process.Pid)
		up0 := selfCPU()
		defer func() {
			srv1, _ := procCPU(srv.cmd.Process.Pid)
			cpu.server += srv1 - srv0
			cpu.gateUp += selfCPU() - up0
		}()
		res, err := srv.exec(ctx, sess.ID, code(worldName))
		if err != nil {
			return 0, err
		}
		g, err := parse(res.Stdout, &cpu.sandbox)
		if err != nil {
			return 0, fmt.Errorf("through the gate: %w (%s)", err, res.Stderr)
		}
		return g, nil
	}
	direct := func() (float64, error) {
		up0 := selfCPU()
		defer func() { cpu.directUp += selfCPU() - up0 }()
		out, err := exec.CommandContext(ctx, o.Python, "-c", code(worldPeer.Addr().String())).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("direct: %v: %s", err, out)
		}
		d, err := parse(string(out), &cpu.python)
		if err != nil {
			return 0, fmt.Errorf("direct: %w", err)
		}
		return d, nil
	}
	// One of each first, unmeasured: the upstream's and the session's
	// first connection.
	if _, err := viaGate(); err != nil {
		return err
	}
	if _, err := direct(); err != nil {
		return err
	}
	var gates, directs []float64
	cpu = struct{ server, sandbox, gateUp, python, directUp time.Duration }{}
	for i := range rounds {
		first, second := viaGate, direct
		if i%2 == 1 {
			first, second = direct, viaGate
		}
		a, err := first()
		if err != nil {
			return err
		}
		b, err := second()
		if err != nil {
			return err
		}
		if i%2 == 1 {
			a, b = b, a
		}
		gates, directs = append(gates, a), append(directs, b)
	}
	mbs := func(secs float64) float64 { return float64(size) / secs / 1e6 }
	var ratios []float64 // the gate's rate over the direct one's, by pair
	for i := range gates {
		ratios = append(ratios, directs[i]/gates[i])
	}
	p := spreadOf(ratios)
	g, d := mbs(spreadOf(gates).Median), mbs(spreadOf(directs).Median)
	name := fmt.Sprintf("a %d MB download from a session through the egress gate (Python, veth upstream)", size/1e6)
	r.add(Row{Scenario: name, Metric: "median", Value: g, Unit: "MB/s", Target: GoalEgress.Text,
		Baseline: fmt.Sprintf("the same code on the host, direct: %.0f MB/s", d),
		Ratio:    fmt.Sprintf("%.2f× direct (median of %d pairs; %.2f to %.2f)", p.Median, len(ratios), p.Min, p.Max),
		Note: fmt.Sprintf("CPU per download: through the gate %.0f ms (the server %.0f, the sandbox %.0f, the upstream %.0f); direct %.0f ms (Python %.0f, the upstream %.0f)",
			perRun(cpu.server+cpu.sandbox+cpu.gateUp, rounds), perRun(cpu.server, rounds), perRun(cpu.sandbox, rounds), perRun(cpu.gateUp, rounds),
			perRun(cpu.python+cpu.directUp, rounds), perRun(cpu.python, rounds), perRun(cpu.directUp, rounds))})
	r.Stats["egress_download_mbs"] = map[string]float64{"gate": g, "direct": d,
		"ratio": p.Median, "ratio_min": p.Min, "ratio_max": p.Max, "pairs": float64(len(ratios)),
		"cpu_ms_gate_server": perRun(cpu.server, rounds), "cpu_ms_gate_sandbox": perRun(cpu.sandbox, rounds), "cpu_ms_gate_upstream": perRun(cpu.gateUp, rounds),
		"cpu_ms_direct_python": perRun(cpu.python, rounds), "cpu_ms_direct_upstream": perRun(cpu.directUp, rounds)}
	return nil
}

// selfCPU is this process's CPU time so far (nanoseconds, unlike
// procCPU's ticks).
func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
