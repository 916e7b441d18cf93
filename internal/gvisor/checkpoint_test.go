package gvisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/cgroup"
	"airlock/internal/errdefs"
)

// The test binary is the keeper of its sandboxes, as airlock's is.
func TestMain(m *testing.M) {
	MainIfKeeper()
	os.Exit(m.Run())
}

// keeperSandbox starts a sandbox named name on a keeperHost, closed as
// the test ends.
func keeperSandbox(t *testing.T, name string) (*Host, *Sandbox) {
	t.Helper()
	h, _ := keeperHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: name, Limits: limits(), Keeper: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return h, sb
}

// keeperHost is testHost whose sandboxes' init is the keeper.
func keeperHost(t *testing.T) (*Host, *cgroup.Host) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return testHostWith(t, "systrap", self)
}

// Programs the keeper starts are the sandbox user's, without a single
// capability, under no_new_privs, with their exit status and output
// relayed, and an empty stdin ends.
func TestKeeperPrograms(t *testing.T) {
	_, sb := keeperSandbox(t, "g-keep")
	e, out, errs := runIn(t, sb, []string{"/bin/sh", "-c", "id -u; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status; cat; echo err >&2; exit 3"})
	if !e.Status.Exited() || e.Status.ExitStatus() != 3 {
		t.Fatalf("exit %v, stderr %q", e.Status, errs)
	}
	if errs != "err\n" {
		t.Errorf("stderr %q", errs)
	}
	want := "1000\n1000\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
	if out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	// The keeper and its socket are out of the sandbox user's reach.
	e, out, _ = runIn(t, sb, []string{"/bin/sh", "-c", "ls " + keeperDir + " 2>&1; kill -9 1 2>&1; echo $?"})
	if strings.Contains(out, "keeper.sock") || !strings.HasSuffix(out, "1\n") {
		t.Errorf("the sandbox user reached the keeper: %q", out)
	}
}

// A checkpointed sandbox restored into a new one runs on: a shell's
// variable and its background process survive, and a new relay
// attaches to it.
func TestCheckpointRestore(t *testing.T) {
	h, sb := keeperSandbox(t, "g-ck1")
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	defer inW.Close()
	defer outR.Close()
	defer errR.Close()
	// fd 3 is a socket, as a runtime's control socket is: a host socket
	// in the sandbox would make the checkpoint unrestorable.
	ours, theirs := socketPair(t)
	defer ours.Close()
	pid, _, err := sb.Exec(Process{Argv: []string{"/bin/sh", "-c", `v=before; sleep 1000 & echo "bg $!"; while read line; do echo "$v $line"; echo "ctl $line" >&3; v=$line; done`},
		Env: []string{"PATH=/usr/bin:/bin"}, Files: []*os.File{inR, outW, errW, theirs}})
	inR.Close()
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(outR)
	bg, _ := out.ReadString('\n')
	inW.WriteString("a\n")
	if l, _ := out.ReadString('\n'); l != "before a\n" {
		t.Fatalf("before the checkpoint: %q", l)
	}
	if l, _ := bufio.NewReader(ours).ReadString('\n'); l != "ctl a\n" {
		t.Fatalf("the socket before the checkpoint: %q", l)
	}
	dir := filepath.Join(t.TempDir(), "memory")
	begun := time.Now()
	c, err := sb.Checkpoint(context.Background(), dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %v, %d bytes", time.Since(begun), c.Bytes)
	sb.Close()
	outR.Close()
	inW.Close()

	begun = time.Now()
	sb2, err := h.Restore(context.Background(), Spec{Name: "g-ck2", Limits: limits()}, dir, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close()
	inR, inW, _ = os.Pipe()
	outR, outW, _ = os.Pipe()
	errR, errW, _ = os.Pipe()
	ours2, theirs2 := socketPair(t)
	defer ours2.Close()
	exit, err := sb2.Attach(pid, []*os.File{inR, outW, errW, theirs2})
	inR.Close()
	outW.Close()
	errW.Close()
	theirs2.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restore and attach: %v", time.Since(begun))
	out = bufio.NewReader(outR)
	inW.WriteString("b\n")
	if l, _ := out.ReadString('\n'); l != "a b\n" {
		t.Fatalf("after the restore: %q (the variable was lost?)", l)
	}
	if l, _ := bufio.NewReader(ours2).ReadString('\n'); l != "ctl b\n" {
		t.Fatalf("the socket after the restore: %q", l)
	}
	bgPid := strings.TrimSpace(strings.TrimPrefix(bg, "bg "))
	e, o, _ := runIn(t, sb2, []string{"/bin/sh", "-c", "kill -0 " + bgPid + " && echo alive"})
	if o != "alive\n" {
		t.Errorf("the background process %s did not survive: %v %q", bgPid, e.Status, o)
	}
	inW.Close()
	select {
	case e := <-exit:
		if !e.Status.Exited() || e.Status.ExitStatus() != 0 {
			t.Errorf("the restored shell ended with %v", e.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restored shell did not end at the end of its input")
	}
}

// A memory image changed after it was written is refused, whichever of
// its files changed and however (runsc reads it while it is summed: a
// changed page restores without complaint from runsc, a truncated file
// may not restore at all): the restored sandbox is never returned, and
// nothing is left behind.
func TestRestoreRefusesAModifiedImage(t *testing.T) {
	h, sb := keeperSandbox(t, "g-ck3")
	dir := filepath.Join(t.TempDir(), "memory")
	c, err := sb.Checkpoint(context.Background(), dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	ents, _ := os.ReadDir(dir)
	if len(ents) == 0 {
		t.Fatal("an empty image")
	}
	for _, e := range ents {
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, not owner-only", e.Name(), fi.Mode())
		}
	}
	type change struct {
		name string
		edit func([]byte) []byte
	}
	var changes []change
	for _, e := range ents {
		changes = append(changes,
			change{e.Name() + ", a bit flipped", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }},
			change{e.Name() + ", truncated", func(b []byte) []byte { return b[:len(b)/2] }})
	}
	for i, ch := range changes {
		file, _, _ := strings.Cut(ch.name, ",")
		changed := filepath.Join(t.TempDir(), "memory")
		if err := os.Mkdir(changed, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == file {
				b = ch.edit(b)
			}
			os.WriteFile(filepath.Join(changed, e.Name()), b, 0o600)
		}
		name := fmt.Sprintf("g-ck4-%d", i)
		got, err := h.Restore(context.Background(), Spec{Name: name, Limits: limits()}, changed, c, nil)
		if got != nil {
			got.Close()
		}
		if !errors.Is(err, errdefs.ErrImageCorrupt) {
			t.Errorf("%s: %v", ch.name, err)
		}
		if _, err := os.Stat(filepath.Join(h.dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s: the refused restore left its directory: %v", ch.name, err)
		}
	}
	// The image as written restores.
	got, err := h.Restore(context.Background(), Spec{Name: "g-ck5", Limits: limits()}, dir, c, nil)
	if err != nil {
		t.Fatalf("the image as written: %v", err)
	}
	got.Close()
}

func socketPair(t *testing.T) (*os.File, *os.File) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
}

// What a program the keeper started writes reaches the host in the order
// it wrote it, as when it writes to the host's descriptors itself (runsc
// exec): a runtime flushes its stdout before it says on its control
// socket that an execution is done, and the host takes what the pipe
// holds when it reads that; and all it wrote is in the host's pipes
// when its end is reported, though a background child holds them open.
// The host's stdout pipe is smaller than what the program writes at a
// time, and read slowly, so that the relay waits on it.
func TestKeeperRelayKeepsOrder(t *testing.T) {
	_, sb := keeperSandbox(t, "g-order")
	const chunk, rounds = 60000, 20
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	defer inW.Close()
	defer outR.Close()
	defer errR.Close()
	if _, err := unix.FcntlInt(outW.Fd(), unix.F_SETPIPE_SZ, 4096); err != nil {
		t.Fatal(err)
	}
	ours, theirs := socketPair(t)
	defer ours.Close()
	script := `sleep 1000 & while read x; do head -c ` + strconv.Itoa(chunk) + ` /dev/zero; echo done >&3; [ "$x" = last ] && exit 5; done`
	_, exit, err := sb.Exec(Process{Argv: []string{"/bin/sh", "-c", script},
		Env: []string{"PATH=/usr/bin:/bin"}, Files: []*os.File{inR, outW, errW, theirs}})
	inR.Close()
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Fd makes a file blocking: once, then non-blocking for good.
	outFd, ctlFd := int(outR.Fd()), int(ours.Fd())
	unix.SetNonblock(outFd, true)
	unix.SetNonblock(ctlFd, true)
	got := 0
	buf := make([]byte, 64<<10)
	// take reads what the host's stdout pipe holds now.
	take := func() {
		for {
			n, _ := unix.Read(outFd, buf)
			if n <= 0 {
				return
			}
			got += n
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < rounds; i++ {
		word := "next\n"
		if i == rounds-1 {
			word = "last\n"
		}
		inW.WriteString(word)
		want := chunk * (i + 1)
		for said := false; !said; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no word from the program (%d bytes of output)", i, got)
			}
			fds := []unix.PollFd{{Fd: int32(ctlFd), Events: unix.POLLIN}, {Fd: int32(outFd), Events: unix.POLLIN}}
			unix.Poll(fds, 10)
			if i == rounds-1 {
				// The end, with a background child holding stdout open.
				select {
				case e := <-exit:
					if e.Status.ExitStatus() != 5 {
						t.Fatalf("the program ended with %v", e.Status)
					}
					said = true
				default:
				}
			} else if fds[0].Revents != 0 {
				n, _ := unix.Read(ctlFd, buf)
				if n > 0 {
					if string(buf[:n]) != "done\n" {
						t.Fatalf("round %d: the control socket said %q", i, buf[:n])
					}
					said = true
				}
			}
			if said {
				take()
				if got != want {
					t.Fatalf("round %d: the host had %d bytes of output, %d were written before the program said so", i, got, want)
				}
			} else if fds[1].Revents != 0 {
				// A slow reader: the relay waits on the host's pipe
				// long after the program wrote.
				n, _ := unix.Read(outFd, buf[:1024])
				got += max(n, 0)
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// A snapshot leaves the sandbox running, its program and relay with it,
// and restores into a second sandbox, where the program runs on from
// the same state: a fork.
func TestSnapshotForks(t *testing.T) {
	h, sb := keeperSandbox(t, "g-snap1")
	// shell starts a shell that answers each line with its variable,
	// then sets it to the line.
	shell := func(sb *Sandbox, pid int) (int, <-chan Exit, *os.File, *bufio.Reader) {
		t.Helper()
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		files := []*os.File{inR, outW, devnull}
		var exit <-chan Exit
		var err error
		if pid == 0 {
			pid, exit, err = sb.Exec(Process{Argv: []string{"/bin/sh", "-c", `v=before; while read line; do echo "$v $line"; v=$line; done`},
				Env: []string{"PATH=/usr/bin:/bin"}, Files: files})
		} else {
			exit, err = sb.Attach(pid, files)
		}
		inR.Close()
		outW.Close()
		devnull.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inW.Close(); outR.Close() })
		return pid, exit, inW, bufio.NewReader(outR)
	}
	say := func(in *os.File, out *bufio.Reader, word, want string) {
		t.Helper()
		in.WriteString(word + "\n")
		if l, _ := out.ReadString('\n'); l != want+"\n" {
			t.Fatalf("%s: %q, want %q", word, l, want)
		}
	}
	pid, exit, in, out := shell(sb, 0)
	say(in, out, "a", "before a")
	dir := filepath.Join(t.TempDir(), "memory")
	c, err := sb.Snapshot(context.Background(), dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	say(in, out, "b", "a b") // the source runs on
	sb2, err := h.Restore(context.Background(), Spec{Name: "g-snap2", Limits: limits()}, dir, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close()
	_, exit2, in2, out2 := shell(sb2, pid)
	say(in2, out2, "c", "a c") // the fork runs on from the snapshot
	say(in, out, "d", "b d")
	for i, e := range []<-chan Exit{exit, exit2} {
		[]*os.File{in, in2}[i].Close()
		select {
		case e := <-e:
			if e.Status.ExitStatus() != 0 {
				t.Errorf("shell %d ended with %v", i, e.Status)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("shell %d did not end at the end of its input", i)
		}
	}
}

// ProbeCheckpoint proves a checkpoint and a restore with a program that
// runs on, and leaves nothing; with a runsc that cannot checkpoint, or
// without a keeper, it fails and says why.
func TestProbeCheckpoint(t *testing.T) {
	h, _ := keeperHost(t)
	ck, err := h.ProbeCheckpoint(context.Background(), Spec{Name: "g-pk", Limits: limits()})
	if err != nil || ck.Bytes <= 0 || ck.Restore <= 0 {
		t.Fatalf("probe: %+v %v", ck, err)
	}
	t.Logf("checkpoint %v (%d bytes), restore %v", ck.Checkpoint, ck.Bytes, ck.Restore)
	if ents, _ := os.ReadDir(h.dir); len(ents) > 0 {
		t.Errorf("the probe left %s", ents[0].Name())
	}
	// A runsc that boots sandboxes but refuses to checkpoint them.
	wrapper := filepath.Join(t.TempDir(), "runsc")
	script := "#!/bin/sh\nfor a; do [ \"$a\" = checkpoint ] && { echo 'checkpoint is not supported' >&2; exit 1; }; done\nexec " + h.opts.Runsc + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	real := h.opts.Runsc
	h.opts.Runsc = wrapper
	_, err = h.ProbeCheckpoint(context.Background(), Spec{Name: "g-pk2", Limits: limits()})
	h.opts.Runsc = real
	if err == nil || !strings.Contains(err.Error(), "checkpoint is not supported") {
		t.Errorf("a runsc that cannot checkpoint: %v", err)
	}
	if ents, _ := os.ReadDir(h.dir); len(ents) > 0 {
		t.Errorf("the failed probe left %s", ents[0].Name())
	}
	plain, _ := testHost(t)
	if _, err := plain.ProbeCheckpoint(context.Background(), Spec{Name: "g-pk3", Limits: limits()}); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("without a keeper: %v", err)
	}
}
