package gvisor

// The keeper: with Options.Keeper, a sandbox's init is this binary, bound
// read-only into the sandbox, and every program is its child. gVisor
// restores only what descends from a container's init (runsc kills every
// process `runsc exec` started, and their children, after a restore), and
// a restore can re-supply only the init's stdio: so nothing inside may
// hold a host descriptor across a checkpoint but the keeper's stdio.
// Programs get pipes and sockets of the sandbox's own; a relay, started
// with `runsc exec` and holding the host's descriptors, copies between
// the two, and after a restore a new relay attaches to the same program.
//
// A restored sandbox runs the keeper it was checkpointed with (see
// keepercopy_linux.go), and so do the relays started in it after the
// restore: a newer server then speaks to an older relay. What the host
// and a relay exchange (the relay's arguments and descriptors,
// keeperReq, the report lines) must stay what earlier versions speak;
// what a relay and its keeper exchange is always one build's.
//
// Three modes of the binary, inside the sandbox:
//   - init: the keeper (root inside gVisor, a few capabilities, no host
//     privilege): listens on a socket only root inside can reach, starts
//     programs for relays, reaps every child, exits when its stdin (the
//     server's life pipe) ends.
//   - relay: started by `runsc exec` with the program's host descriptors;
//     asks the keeper to start (or attach to) the program, copies, and
//     exits as the program did.
//   - entry: the keeper's child, which drops to the program's user,
//     limits and capabilities, then executes it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	keeperArg = "__airlock-gvisor-keeper"
	// keeperPath is the binary inside the sandbox; keeperDir holds its
	// socket (mode 0700, root's: sandboxed code cannot reach it). Both
	// are on the sandbox's own /dev tmpfs.
	keeperPath = "/dev/.airlock-keeper"
	keeperDir  = "/dev/.airlock"
	keeperSock = keeperDir + "/keeper.sock"
	// maxKeeperReq caps a request (a program's argv and environment).
	maxKeeperReq = 8 << 20
)

// What a program's descriptor is, as the relay copies it.
const (
	kindIn     = "in"     // the program reads: host to sandbox
	kindOut    = "out"    // the program writes: sandbox to host
	kindDuplex = "duplex" // a socket: both ways
	kindClosed = "closed" // an input that has ended
)

// keeperReq is a relay's request to the keeper.
type keeperReq struct {
	Op    string      `json:"op"` // "spawn" or "attach"
	Proc  *ociProcess `json:"proc,omitempty"`
	Kinds []string    `json:"kinds,omitempty"`
	Pid   int         `json:"pid,omitempty"`
	// Duplex maps a program's socket descriptor to the relay's
	// descriptor of its output: the host passes a socket as two pipes
	// (the relay's descriptor of the same number is its input), since a
	// host socket in the sandbox is never restorable, even in a process
	// that a restore kills.
	Duplex map[int]int `json:"duplex,omitempty"`
}

// The host↔relay wire, a contract across versions (see above; pinned by
// TestRelayWire): the relay's argv (relayArgv); its descriptors 0..n-1
// the program's, n the request (keeperReq as one JSON line, then end of
// file), n+1 the report, then the write ends of the sockets' pipes out
// (duplexFd, named in keeperReq.Duplex); the report's lines are the
// program's pid once it runs ("!" and a reason when it could not be
// started), then "x " and its wait status when it ended.

// relayArgv is the argv of a relay for a program of n descriptors.
func relayArgv(n int) []string {
	return []string{keeperPath, keeperArg, "relay", strconv.Itoa(n)}
}

// relayDescriptors are a relay's descriptors, in their order: the
// program's, the request's, the report's, the sockets' pipes out.
func relayDescriptors(program []*os.File, request, report *os.File, pipesOut []*os.File) []*os.File {
	return append(append(append([]*os.File{}, program...), request, report), pipesOut...)
}

// duplexFd is the relay's descriptor of the j-th socket's pipe out, for
// a program of n descriptors.
func duplexFd(n, j int) int { return n + 2 + j }

// writeRelayReq writes the host's request to a relay.
func writeRelayReq(w io.Writer, req keeperReq) error { return json.NewEncoder(w).Encode(req) }

// readRelayReq reads the host's request, as a relay.
func readRelayReq(r io.Reader) (keeperReq, error) {
	var req keeperReq
	b, err := io.ReadAll(io.LimitReader(r, maxKeeperReq))
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	return req, err
}

// The report's lines, as a relay writes them.
func reportStarted(w io.Writer, pid int) { fmt.Fprintf(w, "%d\n", pid) }
func reportFailed(w io.Writer, why string) {
	fmt.Fprintf(w, "!%s\n", strings.ReplaceAll(why, "\n", " "))
}
func reportEnded(w io.Writer, status int) { fmt.Fprintf(w, "x %d\n", status) }

// parseStarted reads the report's first line, as the host: the
// program's pid (> 1), or why it was not started ("" when the line says
// neither).
func parseStarted(line string) (pid int, why string) {
	line = strings.TrimSpace(line)
	if r, ok := strings.CutPrefix(line, "!"); ok {
		return 0, r
	}
	if pid, err := strconv.Atoi(line); err == nil && pid > 1 {
		return pid, ""
	}
	return 0, ""
}

// parseEnded reads the report's second line, as the host: the program's
// wait status.
func parseEnded(line string) (status int, ok bool) {
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "x ")
	if !ok {
		return 0, false
	}
	status, err := strconv.Atoi(v)
	return status, err == nil
}

// keeperMsg is what the keeper sends a relay: the program's pid and
// descriptors first, its exit status when it ends.
type keeperMsg struct {
	Pid   int      `json:"pid,omitempty"`
	Kinds []string `json:"kinds,omitempty"`
	Exit  *int     `json:"exit,omitempty"`
	Err   string   `json:"err,omitempty"`
}

// MainIfKeeper runs this binary as a gVisor sandbox's keeper, relay or
// program entry when it was started as one, and returns otherwise.
func MainIfKeeper() {
	if len(os.Args) < 3 || os.Args[1] != keeperArg {
		return
	}
	var code int
	switch os.Args[2] {
	case "init":
		code = keeperMain()
	case "relay":
		code = relayMain()
	case "entry":
		code = entryMain()
	default:
		code = 2
	}
	os.Exit(code)
}

// kept is a program the keeper started.
type kept struct {
	pid    int
	kinds  []string
	outer  []*os.File // the sandbox's ends the relay copies (nil: closed)
	relay  net.Conn   // the relay attached now (nil: none)
	status *int       // its wait status, once it ended
}

type keeper struct {
	mu   sync.Mutex
	kids map[int]*kept
	// sleep waits between failed accepts (a test's records them).
	sleep func(time.Duration)
}

func keeperMain() int {
	say := func(f string, a ...any) int { fmt.Fprintf(os.Stderr, "airlock keeper: "+f+"\n", a...); return 1 }
	if err := os.MkdirAll(keeperDir, 0o700); err != nil {
		return say("%v", err)
	}
	os.Chmod(keeperDir, 0o700)
	os.Remove(keeperSock)
	ln, err := net.Listen("unix", keeperSock)
	if err != nil {
		return say("%v", err)
	}
	k := &keeper{kids: map[int]*kept{}, sleep: time.Sleep}
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	go k.reap(chld)
	go k.accept(ln)
	os.Stdout.Write([]byte("\n"))
	// The server's life pipe: a byte asks for a ready line (after a
	// restore, on the new pipe), its end ends the sandbox.
	buf := make([]byte, 64)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			os.Stdout.Write([]byte("\n"))
		}
		if err != nil {
			return 0
		}
	}
}

// accept serves relays until the listener fails for good. A failure
// that may pass (out of descriptors, say) is retried after a pause that
// grows to a second, as net/http's server does, never in a busy loop.
func (k *keeper) accept(ln net.Listener) {
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			fmt.Fprintf(os.Stderr, "airlock keeper: accept: %v; again in %v\n", err, pause)
			k.sleep(pause)
			continue
		}
		pause = 0
		go k.serve(c)
	}
}

// reap collects every child that ends, orphans re-parented to the
// keeper included, and reports the programs' ends.
func (k *keeper) reap(chld <-chan os.Signal) {
	for range chld {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			k.ended(pid, int(ws))
		}
	}
}

func (k *keeper) ended(pid, ws int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.kids[pid]
	if c == nil {
		return
	}
	c.status = &ws
	if c.relay != nil {
		k.deliverLocked(c)
	}
}

// deliverLocked sends c's exit to its relay and forgets c.
func (k *keeper) deliverLocked(c *kept) {
	b, _ := json.Marshal(keeperMsg{Exit: c.status})
	c.relay.Write(append(b, '\n'))
	for _, f := range c.outer {
		if f != nil {
			f.Close()
		}
	}
	delete(k.kids, c.pid)
}

func (k *keeper) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(io.LimitReader(c, maxKeeperReq), 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req keeperReq
	if err := json.Unmarshal(line, &req); err != nil {
		return
	}
	uc := c.(*net.UnixConn)
	var child *kept
	switch req.Op {
	case "spawn":
		child, err = k.spawn(req)
	case "attach":
		k.mu.Lock()
		child = k.kids[req.Pid]
		k.mu.Unlock()
		if child == nil {
			err = fmt.Errorf("no program %d", req.Pid)
		}
	default:
		err = fmt.Errorf("bad request %q", req.Op)
	}
	if err != nil {
		b, _ := json.Marshal(keeperMsg{Err: err.Error()})
		c.Write(append(b, '\n'))
		return
	}
	k.mu.Lock()
	var fds []int
	for _, f := range child.outer {
		if f != nil {
			fds = append(fds, int(f.Fd()))
		}
	}
	b, _ := json.Marshal(keeperMsg{Pid: child.pid, Kinds: child.kinds})
	if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(fds...), nil); err != nil {
		k.mu.Unlock()
		return
	}
	if old := child.relay; old != nil {
		old.Close()
	}
	child.relay = c
	if child.status != nil {
		k.deliverLocked(child)
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	// The relay says which inputs ended; its end detaches it.
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if i, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "eof "))); err == nil {
			k.mu.Lock()
			if i >= 0 && i < len(child.outer) && child.outer[i] != nil && child.kinds[i] == kindIn {
				child.outer[i].Close()
				child.outer[i], child.kinds[i] = nil, kindClosed
			}
			k.mu.Unlock()
		}
	}
	k.mu.Lock()
	if child.relay == c {
		child.relay = nil
	}
	k.mu.Unlock()
}

// spawn starts the program req describes as the keeper's child, through
// entry, with descriptors of the sandbox's own.
func (k *keeper) spawn(req keeperReq) (*kept, error) {
	if req.Proc == nil || len(req.Proc.Args) == 0 || len(req.Kinds) < 3 {
		return nil, errors.New("empty program")
	}
	spec, err := json.Marshal(req.Proc)
	if err != nil {
		return nil, err
	}
	c := &kept{kinds: req.Kinds, outer: make([]*os.File, len(req.Kinds))}
	var theirs []*os.File
	closeAll := func() {
		for _, f := range theirs {
			f.Close()
		}
	}
	fail := func(err error) (*kept, error) {
		closeAll()
		for _, f := range c.outer {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	for i, kind := range req.Kinds {
		var mine, prog *os.File
		switch kind {
		case kindIn:
			prog, mine, err = os.Pipe()
		case kindOut:
			mine, prog, err = os.Pipe()
		case kindDuplex:
			var fds [2]int
			fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				mine, prog = os.NewFile(uintptr(fds[0]), "outer"), os.NewFile(uintptr(fds[1]), "prog")
			}
		default:
			err = fmt.Errorf("bad kind %q", kind)
		}
		if err != nil {
			return fail(err)
		}
		c.outer[i] = mine
		theirs = append(theirs, prog)
	}
	// The program's description goes to entry in a memfd, its last
	// descriptor.
	mfd, err := unix.MemfdCreate("spec", unix.MFD_CLOEXEC)
	if err != nil {
		return fail(err)
	}
	mf := os.NewFile(uintptr(mfd), "spec")
	theirs = append(theirs, mf)
	if _, err := mf.WriteAt(spec, 0); err != nil {
		return fail(err)
	}
	files := make([]uintptr, len(theirs))
	for i, f := range theirs {
		files[i] = f.Fd()
	}
	// Under the lock: the reaper must find the child registered, however
	// soon it ends.
	k.mu.Lock()
	pid, err := syscall.ForkExec(keeperPath, []string{keeperPath, keeperArg, "entry", strconv.Itoa(len(req.Kinds))},
		&syscall.ProcAttr{Env: []string{}, Files: files, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err == nil {
		c.pid = pid
		k.kids[pid] = c
	}
	k.mu.Unlock()
	closeAll()
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// rlimits maps the OCI names of rlimits to their resources.
var rlimits = map[string]int{
	"RLIMIT_CPU": unix.RLIMIT_CPU, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_DATA": unix.RLIMIT_DATA,
	"RLIMIT_STACK": unix.RLIMIT_STACK, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_NPROC": unix.RLIMIT_NPROC,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_AS": unix.RLIMIT_AS,
	"RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE,
}

// entryMain becomes the program: its limits, no capabilities at all, its
// user and no other group, no_new_privs, its directory, then exec. A step
// that fails stops it (status 127), never skipped.
func entryMain() int {
	fail := func(f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "airlock: the program could not be started: "+f+"\n", a...)
		return 127
	}
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		return fail("bad entry")
	}
	mf := os.NewFile(uintptr(n), "spec")
	b, err := io.ReadAll(io.NewSectionReader(mf, 0, maxKeeperReq))
	mf.Close()
	var p ociProcess
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil || len(p.Args) == 0 {
		return fail("bad description: %v", err)
	}
	for _, rl := range p.Rlimits {
		res, ok := rlimits[rl.Type]
		if !ok {
			return fail("rlimit %s", rl.Type)
		}
		if err := setrlimit(res, rl.Soft, rl.Hard); err != nil {
			return fail("setrlimit %s: %v", rl.Type, err)
		}
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fail("drop capability %d: %v", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fail("clear ambient capabilities: %v", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail("setgroups: %v", err)
	}
	if err := syscall.Setgid(int(p.User.GID)); err != nil {
		return fail("setgid: %v", err)
	}
	if err := syscall.Setuid(int(p.User.UID)); err != nil {
		return fail("setuid: %v", err)
	}
	if p.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fail("no_new_privs: %v", err)
		}
	}
	// Every capability must be gone now that the user is not root.
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective|data[0].Permitted|data[1].Effective|data[1].Permitted != 0 {
		return fail("capabilities left: %v %+v", err, data)
	}
	if p.Cwd != "" {
		if err := os.Chdir(p.Cwd); err != nil {
			return fail("%v", err)
		}
	}
	path, err := lookPath(p.Args[0], p.Env)
	if err != nil {
		return fail("%v", err)
	}
	err = syscall.Exec(path, p.Args, p.Env)
	return fail("%s: %v", p.Args[0], err)
}

// setrlimit sets a limit. gVisor lets no process set RLIMIT_MSGQUEUE:
// the program inherits the keeper's, which runsc set from the sandbox's
// limits, as it sets an exec'd program's.
func setrlimit(res int, cur, max uint64) error {
	if res == unix.RLIMIT_MSGQUEUE {
		return nil
	}
	return unix.Setrlimit(res, &unix.Rlimit{Cur: cur, Max: max})
}

// lookPath finds argv0 on env's PATH, as runsc does for `runsc exec`.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, argv0)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", argv0)
}

// relayMain is a relay: its descriptors 0..n-1 are the program's host
// ones, n its request (JSON, to the end), n+1 where it reports the
// program's pid (a line; "!" and a reason when it failed).
func relayMain() int {
	n, err := strconv.Atoi(os.Args[3])
	if err != nil || n < 3 {
		return 2
	}
	// As relayDescriptors placed them.
	report := os.NewFile(uintptr(n+1), "report")
	fail := func(f string, a ...any) int { reportFailed(report, fmt.Sprintf(f, a...)); report.Close(); return 128 }
	reqf := os.NewFile(uintptr(n), "request")
	req, err := readRelayReq(reqf)
	reqf.Close()
	if err != nil {
		return fail("bad request: %v", err)
	}
	host := make([]*os.File, n)
	kinds := make([]string, n)
	for i := range host {
		host[i] = os.NewFile(uintptr(i), "host")
		kinds[i] = hostKind(i)
		if _, ok := req.Duplex[i]; ok {
			kinds[i] = kindDuplex
		}
	}
	if req.Op == "spawn" {
		req.Kinds = kinds
	}
	c, err := net.Dial("unix", keeperSock)
	if err != nil {
		return fail("the keeper: %v", err)
	}
	uc := c.(*net.UnixConn)
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return fail("the keeper: %v", err)
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(64*4))
	nb, noob, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail("the keeper: %v", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:noob]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	r := bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:nb]), c))
	line, err := r.ReadBytes('\n')
	var first keeperMsg
	if err == nil {
		err = json.Unmarshal(line, &first)
	}
	if err != nil {
		return fail("the keeper: %v", err)
	}
	if first.Err != "" {
		return fail("%s", first.Err)
	}
	// The program's descriptors, as the keeper holds them.
	outer := make([]*os.File, len(first.Kinds))
	for i, kind := range first.Kinds {
		if kind == kindClosed {
			continue
		}
		if len(fds) == 0 {
			return fail("the keeper sent too few descriptors")
		}
		// Non-blocking (the keeper never reads or writes them): the
		// copier reads what they hold without waiting.
		if err := unix.SetNonblock(fds[0], true); err != nil {
			return fail("the program's descriptor: %v", err)
		}
		outer[i] = os.NewFile(uintptr(fds[0]), "outer")
		fds = fds[1:]
	}
	if len(first.Kinds) != n {
		return fail("the program has %d descriptors, not %d", len(first.Kinds), n)
	}
	reportStarted(report, first.Pid)
	var wmu sync.Mutex
	// The outputs are copied in the order the program wrote them (see
	// copier); the host's side of an output closes only once the
	// program's end is reported: whoever reads it learns how the
	// program ended before it sees the end of its output, as with a
	// program of its own.
	cp := &copier{}
	var outs sync.WaitGroup
	reported := make(chan struct{})
	for i, kind := range first.Kinds {
		h, o := host[i], outer[i]
		switch kind {
		case kindIn:
			go func() {
				io.Copy(o, h)
				o.Close()
				wmu.Lock()
				fmt.Fprintf(c, "eof %d\n", i)
				wmu.Unlock()
			}()
		case kindOut:
			out, err := cp.add(o, h, false)
			if err != nil {
				return fail("output %d: %v", i, err)
			}
			outs.Add(1)
			go func() {
				defer outs.Done()
				cp.copy(out)
				<-reported
				h.Close()
			}()
		case kindDuplex:
			hout := h
			if fd, ok := req.Duplex[i]; ok && fd >= duplexFd(n, 0) {
				hout = os.NewFile(uintptr(fd), "host-out")
			}
			out, err := cp.add(o, hout, true)
			if err != nil {
				return fail("output %d: %v", i, err)
			}
			go func() {
				io.Copy(o, h)
				out.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
			}()
			outs.Add(1)
			go func() {
				defer outs.Done()
				cp.copy(out)
				<-reported
				if hout != h {
					hout.Close()
				} else {
					unix.Shutdown(int(h.Fd()), unix.SHUT_WR)
				}
			}()
		case kindClosed:
			h.Close()
		}
	}
	line, err = r.ReadBytes('\n')
	var end keeperMsg
	if err == nil {
		err = json.Unmarshal(line, &end)
	}
	if err != nil || end.Exit == nil {
		return 128 // the keeper is gone: so is the sandbox
	}
	// The keeper reports an end once the program is reaped: all it
	// wrote is in its outputs now, and reaches the host before the
	// end does. What background children holding its outputs write
	// later is copied after, until they close them, as when they held
	// the host's descriptors themselves.
	cp.flush()
	reportEnded(report, *end.Exit)
	report.Close()
	close(reported)
	outs.Wait()
	ws := syscall.WaitStatus(*end.Exit)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// copier copies a program's outputs (its pipes and sockets, in the
// sandbox) to the host's descriptors, one chunk at a time, so that a
// socket's words come after what the program wrote to its pipes before
// them: before a chunk read from a socket goes out, what the pipes hold
// goes first. A runtime flushes its stdout before it says on its control
// socket that an execution is done, and the host takes what the pipe
// holds when it reads that: as with runsc exec, where the program writes
// to the host's pipe itself, it must all be there. (What a pipe holds
// may have been written after the socket's chunk: it then comes early,
// never late. Across pipes no order is kept, nor is one with a program
// of its own: each has its reader.)
type copier struct {
	mu   sync.Mutex // held while a chunk is read and written
	outs []*output
}

type output struct {
	f      *os.File // the sandbox's side, non-blocking
	rc     syscall.RawConn
	host   io.Writer
	socket bool
	buf    []byte
	eof    bool // under mu
}

// add copies o (non-blocking; its Fd is never called, which would make
// it blocking) to host.
func (cp *copier) add(o *os.File, host io.Writer, socket bool) (*output, error) {
	rc, err := o.SyscallConn()
	if err != nil {
		return nil, err
	}
	out := &output{f: o, rc: rc, host: host, socket: socket, buf: make([]byte, 64<<10)}
	cp.mu.Lock()
	cp.outs = append(cp.outs, out)
	cp.mu.Unlock()
	return out, nil
}

// copy copies out until its writers are gone (or the host's side is).
func (cp *copier) copy(out *output) {
	for {
		done := false
		err := out.rc.Read(func(fd uintptr) bool {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			n, err := unix.Read(int(fd), out.buf)
			switch {
			case n > 0:
				if out.socket {
					cp.flushLocked(false)
				}
				if _, err := out.host.Write(out.buf[:n]); err != nil {
					done = true
				}
				return true
			case err == unix.EAGAIN:
				return false // wait for the poller
			case err == unix.EINTR:
				return true
			default:
				out.eof, done = true, true
				return true
			}
		})
		if err != nil || done {
			cp.mu.Lock()
			out.eof = true
			cp.mu.Unlock()
			return
		}
	}
}

// flush copies what every output holds now, and no more: a writer that
// goes on cannot hold the caller.
func (cp *copier) flush() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.flushLocked(true)
}

// flushLocked copies what the pipes hold now, the sockets' too with
// sockets.
func (cp *copier) flushLocked(sockets bool) {
	for _, o := range cp.outs {
		if o.eof || o.socket && !sockets {
			continue
		}
		o.rc.Control(func(fd uintptr) {
			left, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
			if err != nil {
				left = 1 << 20 // a pipe's largest default size
			}
			for left > 0 {
				n, err := unix.Read(int(fd), o.buf[:min(len(o.buf), left)])
				if n <= 0 {
					if err != unix.EAGAIN && err != unix.EINTR {
						o.eof = true
					}
					return
				}
				if _, err := o.host.Write(o.buf[:n]); err != nil {
					o.eof = true
					return
				}
				left -= n
			}
		})
	}
}

// hostKind says how the relay copies its host descriptor fd.
func hostKind(fd int) string {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		return kindDuplex
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil && fl&unix.O_ACCMODE == unix.O_RDONLY {
		return kindIn
	}
	if err == nil && fl&unix.O_ACCMODE == unix.O_WRONLY {
		return kindOut
	}
	return kindDuplex
}
