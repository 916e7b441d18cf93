package jail_test

// The template start path of the jail's escape suite: a sandbox built by
// the host like any other, its program forked into it by the Python
// template (internal/zygote), which makes the sandbox entry itself. It
// lives in the external test package because zygote imports jail.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/zygote"
)

var template *zygote.Zygote

func init() {
	jail.TemplateStart = func(h *jail.Host) error {
		z, err := zygote.Start(context.Background(), h, config.Default(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		template = z
		return err
	}
	jail.TemplateStop = func() {
		if template != nil {
			template.Close()
		}
	}
	jail.TemplateRun = runByTemplate
}

// execShim makes anything but a Python program the template's child's
// own exec, so that it runs with exactly the entry the child made.
const execShim = "import os, sys\nos.execv(sys.argv[1], sys.argv[1:])\n"

func runByTemplate(t testing.TB, h *jail.Host, req jail.RunRequest) *jail.RunResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	sb, err := h.Start(ctx, req.Spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer sb.Close()
	argv := req.Argv
	files := req.Files
	if len(argv) < 2 || argv[0] != "/usr/bin/python3" || strings.HasPrefix(argv[1], "-") {
		files = append(files, jail.InputFile{Path: ".exec.py", Data: strings.NewReader(execShim)})
		argv = append([]string{"/usr/bin/python3", "/workspace/.exec.py"}, argv...)
	}
	for _, f := range files {
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if _, err := sb.Workspace().Write(f.Path, f.Data, int64(req.Spec.Limits.Disk), os.FileMode(mode)); err != nil {
			t.Fatalf("write %s: %v", f.Path, err)
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl")
	defer ours.Close()
	fk, err := template.Fork(ctx, sb, req.Spec.Limits, [4]*os.File{inR, outW, errW, theirs})
	inR.Close()
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("template fork: %v", err)
	}
	defer fk.Pidfd.Close()
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	for _, c := range []struct {
		w *bytes.Buffer
		r *os.File
	}{{&stdout, outR}, {&stderr, errR}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	fr := runtimes.NewFrameReader(ours, 64<<20)
	hello, err := fr.Read()
	if err != nil || hello.Type != "hello" {
		sb.Kill()
		wg.Wait()
		t.Fatalf("the template's child did not start: %v %s %s (stderr %q)", err, hello.Type, hello.Value, stderr.String())
	}
	env := map[string]string{}
	for _, kv := range append(jail.BaseEnv(), req.Env...) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if err := runtimes.NewFrameWriter(ours).Write(runtimes.Message{Type: "run", ID: "r", Argv: argv, Env: env, Cwd: "/workspace"}); err != nil {
		t.Fatalf("run: %v", err)
	}
	// Frames until the program's done, or its death (a kill by the
	// filter sends none).
	for {
		m, err := fr.Read()
		if err != nil || m.Type == "done" {
			break
		}
	}
	var status syscall.WaitStatus
	select {
	case st, ok := <-fk.Exit:
		if !ok {
			t.Fatal("the template died")
		}
		status = st
	case <-ctx.Done():
		sb.Kill()
		t.Fatal("the program did not end within 60s")
	}
	wg.Wait()
	res := &jail.RunResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Duration: time.Since(start)}
	if status.Signaled() {
		res.ExitCode = 128 + int(status.Signal())
	} else {
		res.ExitCode = status.ExitStatus()
	}
	return res
}
