package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/workspace"
)

// Host is the host that started the sandbox.
func (s *Sandbox) Host() *Host { return s.h }

// Keeps reports whether the host's sandboxes can be checkpointed with
// their programs (Options.Keeper), those that ask for it (Spec.Keeper).
func (h *Host) Keeps() bool { return h.keeper != "" }

// Keeps reports whether the sandbox can be checkpointed with its
// programs: its init is the keeper, and it has no network.
func (s *Sandbox) Keeps() bool { return s.keeper != "" && s.netns == nil }

// Checkpoint is what Sandbox.Checkpoint wrote: the image's size and
// digest, which Restore checks the image against, and the digest of the
// keeper its sandbox ran, which Restore binds again.
type Checkpoint struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Keeper string `json:"keeper,omitempty"`
}

// ErrNoCheckpoint: the sandbox cannot be checkpointed with its programs.
var ErrNoCheckpoint = errors.New("gvisor: this sandbox cannot be checkpointed")

// Checkpoint writes the sandbox's memory and processes to dir (which
// must not exist: it is made owner-only) with `runsc checkpoint`, which
// ends the sandbox; Close must still be called (its workspace stays
// readable until then). An image over max bytes is removed and refused
// (ErrTooLarge). A sandbox with a network (its sockets are the host's)
// or without a keeper is refused (ErrNoCheckpoint) and keeps running.
func (s *Sandbox) Checkpoint(ctx context.Context, dir string, max int64) (Checkpoint, error) {
	return s.checkpoint(ctx, dir, max, false)
}

// Snapshot is Checkpoint, but the sandbox runs on (`runsc checkpoint
// --leave-running`: its kernel is paused while it is saved, then resumed
// in place, its programs and their relays with it): a fork restores the
// image into a sandbox of its own.
func (s *Sandbox) Snapshot(ctx context.Context, dir string, max int64) (Checkpoint, error) {
	return s.checkpoint(ctx, dir, max, true)
}

func (s *Sandbox) checkpoint(ctx context.Context, dir string, max int64, leave bool) (Checkpoint, error) {
	if !s.Keeps() {
		return Checkpoint{}, ErrNoCheckpoint
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return Checkpoint{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := append(s.globalFlags(), "checkpoint", "--image-path", dir)
	if leave {
		args = append(args, "--leave-running")
	}
	cmd := exec.CommandContext(ctx, s.h.opts.Runsc, append(args, s.id)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return Checkpoint{}, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox could not be checkpointed", fmt.Errorf("%v: %s; %s", err, bytes.TrimSpace(out), s.diag()))
	}
	if !leave {
		// The container ends with its checkpoint.
		select {
		case <-s.dead:
		case <-time.After(10 * time.Second):
			s.cg.Kill()
			<-s.dead
		}
	}
	c, err := sumCheckpoint(ctx, dir, max, true)
	if err != nil {
		return Checkpoint{}, err
	}
	c.Keeper = s.keeperDigest
	ok = true
	return c, nil
}

// imageResolve is how a checkpoint's directory and files are opened
// beneath their parent: never through a symlink or a mount. The image
// lives in a host directory (persistence.dir) read back after a restart,
// which someone may have tampered with.
const imageResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openImage opens the checkpoint's directory dir for reading, following
// nothing on the way from its parent and without blocking (O_NONBLOCK):
// a dir that is a symlink, a FIFO, a device or a mount point is
// ErrImageCorrupt, never read through. Any other failure (a missing dir,
// descriptors run out) is its error as it is (imageOpenError).
func openImage(dir string) (*os.File, error) {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Dir(dir), Err: err}
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat2(pfd, filepath.Base(dir), &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: imageResolve})
	if err != nil {
		return nil, imageOpenError(dir, err, "the checkpoint's directory is not a plain directory")
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// imageOpenError is the error of an openat2 of path in a checkpoint that
// failed with err: ErrImageCorrupt (saying corrupt) when err says that
// what is there is not what an image holds (a symlink, a mount point, a
// non-directory, a special file); any other error (a missing file,
// EMFILE, ENFILE, ENOMEM, EACCES, EAGAIN, ...) as it is, for a sound
// image opened while descriptors or memory ran out must not be set aside
// as damaged.
func imageOpenError(path string, err error, corrupt string) error {
	switch {
	case errors.Is(err, unix.ELOOP), // a symlink: O_NOFOLLOW, RESOLVE_NO_SYMLINKS
		errors.Is(err, unix.ENOTDIR), // O_DIRECTORY on a non-directory
		errors.Is(err, unix.EXDEV),   // a mount point: RESOLVE_NO_XDEV
		errors.Is(err, unix.ENXIO),   // a socket, a device without its driver
		errors.Is(err, unix.ENODEV):  // a device without its driver
		return fmt.Errorf("%w: %s (%v)", errdefs.ErrImageCorrupt, corrupt, err)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// checkImage checks that the checkpoint's directory dir is a plain
// directory holding only regular files, as sumCheckpoint does, without
// reading them: what runsc restore is given to read.
func checkImage(dir string) error {
	d, err := openImage(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if _, err := statImageFile(int(d.Fd()), name); err != nil {
			return err
		}
	}
	return nil
}

// statImageFile stats name in the checkpoint's directory dfd without
// following it: anything but a regular file is ErrImageCorrupt.
func statImageFile(dfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%w: %s in the checkpoint is not a regular file", errdefs.ErrImageCorrupt, name)
	}
	return st, nil
}

// openImageFile opens name, a regular file in the checkpoint's directory
// dfd (statImageFile), for reading: beneath it, following nothing and
// without blocking; one that is not the regular file st was is
// ErrImageCorrupt.
func openImageFile(dfd int, name string, st unix.Stat_t) (*os.File, error) {
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: imageResolve})
	if err != nil {
		return nil, imageOpenError(name, err, name+" in the checkpoint cannot be opened as a regular file")
	}
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Dev != st.Dev || fst.Ino != st.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s in the checkpoint changed while it was read", errdefs.ErrImageCorrupt, name)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// sumCheckpoint sums the size and digest of the image in dir: its
// regular files by name (anything else, or a dir that is not a plain
// directory, is refused: openImage), at most max bytes; own makes them
// owner-only first. It stops when ctx ends (a memory image may take
// seconds to read), with ctx's error.
func sumCheckpoint(ctx context.Context, dir string, max int64, own bool) (Checkpoint, error) {
	d, err := openImage(dir)
	if err != nil {
		return Checkpoint{}, err
	}
	defer d.Close()
	dfd := int(d.Fd())
	names, err := d.Readdirnames(-1)
	if err != nil {
		return Checkpoint{}, err
	}
	sort.Strings(names)
	h := sha256.New()
	var c Checkpoint
	for _, name := range names {
		st, err := statImageFile(dfd, name)
		if err != nil {
			return Checkpoint{}, err
		}
		if c.Bytes += st.Size; c.Bytes > max {
			return Checkpoint{}, fmt.Errorf("%w: the sandbox's memory image is larger than %d bytes", errdefs.ErrTooLarge, max)
		}
		f, err := openImageFile(dfd, name, st)
		if err != nil {
			return Checkpoint{}, err
		}
		if own {
			if err := f.Chmod(0o600); err != nil {
				f.Close()
				return Checkpoint{}, err
			}
		}
		fmt.Fprintf(h, "%q %d\n", name, st.Size)
		n, err := copyUntil(ctx, h, io.LimitReader(f, st.Size+1))
		f.Close()
		if err != nil {
			return Checkpoint{}, err
		}
		if n != st.Size {
			return Checkpoint{}, fmt.Errorf("%w: %s in the checkpoint changed while it was read", errdefs.ErrImageCorrupt, name)
		}
	}
	c.SHA256 = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// copyUntil copies r to w, a chunk at a time, until ctx ends.
func copyUntil(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := io.CopyN(w, r, 1<<20)
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// restoreArgs are what start needs to restore a sandbox.
type restoreArgs struct {
	dir string
	// keeper: the keeper copy the checkpoint was taken with, bound again.
	keeper, keeperDigest string
	fill                 func(*workspace.Dir) error
	// verified delivers the image's check (verifyCheckpoint), made while
	// runsc reads it; times.Verify is set before.
	verified chan error
	verr     error
	checked  bool
	// times: how long each stage took (RestoreTimes).
	times RestoreTimes
}

// verify waits for the image's check and returns its outcome.
func (rs *restoreArgs) verify() error {
	if !rs.checked {
		rs.verr, rs.checked = <-rs.verified, true
	}
	return rs.verr
}

// RestoreTimes is how long each stage of a restore took.
type RestoreTimes struct {
	// Verify: the image's size and digest checked (beside the rest).
	Verify time.Duration
	// Summed: the check summed the image (it was not trusted by its
	// sealed identity: Host.Seal).
	Summed bool
	// Prepare: the sandbox's directory, cgroup, mounts and bundle.
	Prepare time.Duration
	// Fill: the files put back in its workspace.
	Fill time.Duration
	// Runsc: `runsc restore` until the restored keeper runs.
	Runsc time.Duration
}

// RestoreTimes is how long the stages of the restore that made the
// sandbox took (zero for a sandbox that was booted).
func (s *Sandbox) RestoreTimes() RestoreTimes { return s.restored }

// Restore boots a sandbox from the checkpoint in dir, which must match
// want (its size and digest as Checkpoint returned them; anything else is
// ErrImageCorrupt), after fill has put the files back in its workspace:
// its programs run on where they were, and Attach connects to them again.
// spec must be as the checkpointed sandbox's was, but for its name.
//
// Its init is the keeper copy want names (the checkpointed sandbox's),
// never the host's own when they differ: without that copy, whole, the
// restore is refused (ErrKeeperGone).
//
// The image and an older keeper are summed while runsc reads them (the
// second read comes from the page cache), not before: the sandbox is returned
// only once both have matched, and one that does not match is killed
// unused and refused as ErrImageCorrupt (ErrKeeperGone), whatever runsc
// made of it.
func (h *Host) Restore(ctx context.Context, spec Spec, dir string, want Checkpoint, fill func(*workspace.Dir) error) (*Sandbox, error) {
	if h.keeper == "" || spec.NetNS != nil {
		if spec.NetNS != nil {
			spec.NetNS.Close()
		}
		return nil, ErrNoCheckpoint
	}
	keeper, err := h.keeperFor(want.Keeper)
	if err != nil {
		return nil, err
	}
	// runsc reads the image by its path: one that is not a plain
	// directory of regular files (a symlink to a host directory, a FIFO)
	// is refused before it is given any.
	if err := checkImage(dir); err != nil {
		return nil, err
	}
	rs := &restoreArgs{dir: dir, keeper: keeper, keeperDigest: want.Keeper, fill: fill, verified: make(chan error, 1)}
	begun := time.Now()
	go func() {
		summed, err := h.verifyCheckpoint(ctx, dir, want)
		// The host's own copy was summed when the host started, and every
		// fresh sandbox binds it unchecked; only an older copy is summed
		// here (~40 ms of CPU a pool-image refill no longer pays).
		if err == nil && want.Keeper != h.keeperDigest {
			err = verifyKeeper(ctx, keeper, want.Keeper)
		}
		rs.times.Verify, rs.times.Summed = time.Since(begun), summed
		rs.verified <- err
	}()
	return h.start(ctx, spec, rs)
}

// checkDigest sums the image in dir and checks it against want, until
// ctx ends (a restore whose client left waits for nothing).
func checkDigest(ctx context.Context, dir string, want Checkpoint) error {
	got, err := sumCheckpoint(ctx, dir, want.Bytes, false)
	if err == nil && (got.Bytes != want.Bytes || got.SHA256 != want.SHA256) {
		err = fmt.Errorf("%w: the memory image does not match the digest recorded when it was written", errdefs.ErrImageCorrupt)
	}
	if errors.Is(err, errdefs.ErrTooLarge) {
		err = fmt.Errorf("%w: the memory image is larger than when it was written", errdefs.ErrImageCorrupt)
	}
	return err
}

// Attach connects files to the program pid of a restored sandbox, as
// Exec connected the program's own when it started it (the same number,
// the same kinds): what it reads and writes goes through them from now
// on, and its exit arrives on the returned channel.
func (s *Sandbox) Attach(pid int, files []*os.File) (<-chan Exit, error) {
	if s.keeper == "" {
		return nil, ErrNoCheckpoint
	}
	_, exit, err := s.relay(keeperReq{Op: "attach", Pid: pid}, files)
	return exit, err
}

// relay starts a relay with `runsc exec` for req (a program to start, or
// to attach to) with files as the program's descriptors, and returns the
// program's pid and its exit, as Exec does.
func (s *Sandbox) relay(req keeperReq, files []*os.File) (pid int, exit <-chan Exit, err error) {
	if len(files) < 3 {
		return 0, nil, fmt.Errorf("%w: missing stdio", errdefs.ErrInvalidArgument)
	}
	n, done, err := s.beginExec()
	if err != nil {
		return 0, nil, err
	}
	started := false
	defer func() {
		if !started {
			done()
		}
	}()
	rp, err := processSpec(relayArgv(len(files)), nil, "/", s.spec.Limits)
	if err != nil {
		return 0, nil, err
	}
	rp.User.UID, rp.User.GID = 0, 0
	procFile, err := s.writeProc(n, rp)
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(procFile)
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer reqR.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		reqW.Close()
		return 0, nil, err
	}
	// Read until the program's end is reported (see below): closed
	// there, or here on failure.
	repOpen := true
	defer func() {
		if repOpen {
			repR.Close()
		}
	}()
	// A socket goes in as two pipes (see keeperReq.Duplex), joined to it
	// here.
	relayFiles := append([]*os.File{}, files...)
	var outs []*os.File // the relay's ends of the pipes out, after reqR and repW
	var joins []func()
	closeTheirs := func() {
		for _, f := range outs {
			f.Close()
		}
	}
	for i, f := range files {
		if !isSocket(f) {
			continue
		}
		in, out, join, err := splitSocket(f)
		if err != nil {
			closeTheirs()
			reqW.Close()
			return 0, nil, err
		}
		if req.Duplex == nil {
			req.Duplex = map[int]int{}
		}
		relayFiles[i] = in
		outs = append(outs, in, out)
		req.Duplex[i] = duplexFd(len(files), len(joins))
		joins = append(joins, join)
	}
	defer closeTheirs()
	var pipesOut []*os.File
	for j := 1; j < len(outs); j += 2 {
		pipesOut = append(pipesOut, outs[j])
	}
	cmd, said := s.execCommand(procFile, relayDescriptors(relayFiles, reqR, repW, pipesOut))
	err = cmd.Start()
	repW.Close()
	if err != nil {
		for _, join := range joins {
			go join() // ends at once: its pipes' other ends are closed
		}
		reqW.Close()
		return 0, nil, errdefs.Private(errdefs.ErrUnavailable, "runsc exec could not be started", err)
	}
	started = true
	for _, join := range joins {
		go join()
	}
	// The request (a program's environment may hold secrets) goes
	// through a pipe, never a file or a command line.
	go func() {
		writeRelayReq(reqW, req)
		reqW.Close()
	}()
	exited := s.watchExec(cmd, said, done)
	rep := bufio.NewReader(io.LimitReader(repR, 4<<10))
	line, rerr := rep.ReadString('\n')
	pid, why := parseStarted(line)
	if rerr != nil || pid == 0 {
		e := <-exited
		if why == "" {
			why = fmt.Sprintf("the relay ended with %v", e.Status)
		}
		return 0, nil, errdefs.Private(errdefs.ErrUnavailable, "the gVisor sandbox could not start the program", fmt.Errorf("%s; %s", why, s.diag()))
	}
	ch := make(chan Exit, 1)
	repOpen = false
	go func() {
		// The relay says how the program ended when it does, and goes on
		// copying its output; its own exit says only when it did not.
		line, err := rep.ReadString('\n')
		repR.Close()
		if ws, ok := parseEnded(line); ok && err == nil {
			ch <- Exit{Pid: pid, Status: syscall.WaitStatus(ws)}
			return
		}
		e := <-exited
		e.Pid = pid
		ch <- e
	}()
	return pid, ch, nil
}

func isSocket(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeSocket != 0
}

// splitSocket joins the socket f to two pipes: what f reads goes into the
// write end of in (the relay reads its read end, returned), what the relay
// writes into out comes out of f. join copies until both directions end;
// it owns a duplicate of f, the caller keeps f.
func splitSocket(f *os.File) (in, out *os.File, join func(), err error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, nil, err
	}
	unix.CloseOnExec(fd)
	unix.SetNonblock(fd, true)
	sock := os.NewFile(uintptr(fd), "socket")
	inR, inW, err := os.Pipe()
	if err != nil {
		sock.Close()
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		sock.Close()
		inR.Close()
		inW.Close()
		return nil, nil, nil, err
	}
	join = func() {
		done := make(chan struct{})
		go func() {
			io.Copy(inW, sock)
			inW.Close()
			close(done)
		}()
		io.Copy(sock, outR)
		outR.Close()
		unix.Shutdown(int(fd), unix.SHUT_WR)
		// The relay is gone: nothing reads what the socket still says.
		sock.SetReadDeadline(time.Now())
		<-done
		sock.Close()
	}
	return inR, outW, join, nil
}

// CheckpointProbe is what ProbeCheckpoint measured.
type CheckpointProbe struct {
	Checkpoint, Restore time.Duration
	Bytes               int64
}

// ProbeCheckpoint checks that runsc can checkpoint a sandbox here and
// restore it with its programs, as a pause with memory will: it boots a
// sandbox (spec) with a shell waiting for input, checkpoints it,
// restores the image into a second sandbox, attaches to the shell and
// has it answer. A server whose gVisor sessions keep their memory
// refuses to start when this fails, rather than pause them with less.
func (h *Host) ProbeCheckpoint(ctx context.Context, spec Spec) (CheckpointProbe, error) {
	var r CheckpointProbe
	if h.keeper == "" {
		return r, ErrNoCheckpoint
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	spec.Keeper = true
	sb, err := h.Start(ctx, spec)
	if err != nil {
		return r, err
	}
	defer sb.Close()
	// say starts the probe's shell in sb (pid 0) or attaches to it,
	// sends it line and returns what it answered; the shell ends when
	// its input, in, is closed.
	say := func(sb *Sandbox, pid int, line string) (_ int, _ <-chan Exit, in io.Closer, _ string, err error) {
		inR, inW, err := os.Pipe()
		if err != nil {
			return 0, nil, nil, "", err
		}
		defer func() {
			if err != nil {
				inW.Close()
			}
		}()
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			return 0, nil, nil, "", err
		}
		defer outR.Close()
		files := []*os.File{inR, outW, outW}
		var exit <-chan Exit
		if pid == 0 {
			pid, exit, err = sb.Exec(Process{Argv: []string{"/bin/sh", "-c", `while read x; do echo "got $x"; done`}, Env: []string{"PATH=/usr/bin:/bin"}, Files: files})
		} else {
			exit, err = sb.Attach(pid, files)
		}
		inR.Close()
		outW.Close()
		if err != nil {
			return 0, nil, nil, "", err
		}
		if dl, ok := ctx.Deadline(); ok {
			outR.SetReadDeadline(dl)
		}
		if _, err = inW.WriteString(line + "\n"); err != nil {
			return 0, nil, nil, "", err
		}
		got, err := bufio.NewReader(outR).ReadString('\n')
		if err != nil {
			return 0, nil, nil, "", fmt.Errorf("the probe's shell did not answer: %q %v", got, err)
		}
		return pid, exit, inW, got, nil
	}
	pid, _, in, got, err := say(sb, 0, "before")
	if err != nil || got != "got before\n" {
		return r, fmt.Errorf("the probe before the checkpoint: %q %v", got, err)
	}
	// Open until the checkpoint: the shell must be running in it.
	defer in.Close()
	dir := filepath.Join(h.dir, spec.Name+"-memory")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	begun := time.Now()
	c, err := sb.Checkpoint(ctx, dir, 1<<30)
	if err != nil {
		return r, fmt.Errorf("runsc checkpoint: %w", err)
	}
	r.Checkpoint, r.Bytes = time.Since(begun), c.Bytes
	sb.Close()
	begun = time.Now()
	sb2, err := h.Restore(ctx, Spec{Name: spec.Name + "-r", Limits: spec.Limits}, dir, c, nil)
	if err != nil {
		return r, fmt.Errorf("runsc restore: %w", err)
	}
	defer sb2.Close()
	_, exit, in2, got, err := say(sb2, pid, "after")
	if err != nil || got != "got after\n" {
		return r, fmt.Errorf("the probe's shell after the restore: %q %v", got, err)
	}
	r.Restore = time.Since(begun)
	in2.Close()
	select {
	case <-exit:
	case <-ctx.Done():
		return r, fmt.Errorf("the probe's shell did not end after the restore: %w", ctx.Err())
	}
	return r, nil
}
