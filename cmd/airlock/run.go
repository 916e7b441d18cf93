package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/runtimes"
	"airlock/internal/server"
	"airlock/internal/termtext"
	"airlock/internal/workspace"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// limitFlags binds the limit flags shared by run and serve.
type limitFlags struct {
	timeout, cpuTime, memory, pids, disk, maxOutput, cpus string
}

func (f *limitFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.timeout, "timeout", "", "wall-clock limit, e.g. 5s (default 30s)")
	fs.StringVar(&f.cpuTime, "cpu-time", "", "CPU-time limit over all processes, e.g. 10s (default 30s)")
	fs.StringVar(&f.memory, "memory", "", "memory limit including tmpfs files, e.g. 256M (default 512M)")
	fs.StringVar(&f.pids, "pids", "", "process and thread limit (default 256)")
	fs.StringVar(&f.disk, "disk", "", "size of /workspace and of /tmp, e.g. 100M (default 256M)")
	fs.StringVar(&f.maxOutput, "max-output", "", "cap on captured stdout and on stderr, e.g. 1M (default 1M)")
	fs.StringVar(&f.cpus, "cpus", "", "CPU quota in cores, e.g. 0.5 (default 1)")
}

// limits parses the flags that were given into a Limits request.
func (f *limitFlags) limits() (config.Limits, error) {
	var l config.Limits
	var err error
	set := func(name, v string, parse func(string) error) {
		if v == "" || err != nil {
			return
		}
		if e := parse(v); e != nil {
			err = fmt.Errorf("--%s: %w", name, e)
		}
	}
	set("timeout", f.timeout, func(s string) (e error) { l.Timeout, e = config.ParseDuration(s); return })
	set("cpu-time", f.cpuTime, func(s string) (e error) { l.CPUTime, e = config.ParseDuration(s); return })
	set("memory", f.memory, func(s string) (e error) { l.Memory, e = config.ParseSize(s); return })
	set("pids", f.pids, func(s string) (e error) { l.Pids, e = config.ParseCount(s); return })
	set("disk", f.disk, func(s string) (e error) { l.Disk, e = config.ParseSize(s); return })
	set("max-output", f.maxOutput, func(s string) (e error) { l.MaxOutput, e = config.ParseSize(s); return })
	set("cpus", f.cpus, func(s string) error {
		v, e := strconv.ParseFloat(s, 64)
		if e != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %q: want a positive number of cores", errdefs.ErrInvalidArgument, s)
		}
		l.CPUs = v
		return nil
	})
	return l, err
}

func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("run", fmt.Sprintf("Usage: airlock run [flags] FILE|- [ARGS...]\n\nRuns FILE (or the program on stdin) once in a fresh jail with /workspace as\nits working directory; ARGS are passed to the program. Exits with the\nprogram's status, or %d when airlock killed it. When an airlock server\nruns on this machine (its socket, server.socket in the configuration),\nthe program runs in one of its pre-started jails; otherwise, or with\n--cold, this process builds the jail.\n\nFlags:\n", exitKilled), stderr)
	fs := c.fs
	var (
		lang         string
		asJSON, cold bool
		envs, files  multiFlag
		allowHosts   multiFlag
		toolNames    multiFlag
		secretNames  multiFlag
		lf           limitFlags
	)
	fs.StringVar(&lang, "lang", "", "language: python, bash or javascript (default from the file extension, else python)")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object with the result instead of streaming output")
	fs.Var(&envs, "env", "set an environment variable `K=V` in the sandbox (repeatable)")
	fs.Var(&files, "file", "copy host file `HOSTPATH[:NAME]` into /workspace (repeatable)")
	fs.Var(&allowHosts, "allow-host", "let the program reach `NAME[:PORT]` over TLS or HTTP (a DNS name or *.suffix; ports 80 and 443 by default; NAME:PORT/opaque for another protocol; repeatable; needs a running server)")
	c.configFlag()
	fs.Var(&toolNames, "tool", "let the program call the server's tool `NAME` through airlock (repeatable; needs a running server)")
	fs.Var(&secretNames, "secret", "give the program the server's secret `NAME` as a placeholder, swapped for the value only toward its bound hosts (repeatable; the hosts need --allow-host; needs a running server)")
	fs.BoolVar(&cold, "cold", false, "build the jail in this process even when a local server runs")
	isolation := fs.String("isolation", "", "native or gvisor (default: the configuration's isolation); gvisor needs a running server")
	tmplName := fs.String("template", "", "run on the root filesystem of template `NAME` (airlock template list; default: templates.default, else the host's root)")
	outDir := fs.String("out", "", "copy the files the program created or modified in /workspace into `DIR` (made if missing; paths stay beneath it, symlinks in it are never followed)")
	lf.bind(fs)
	if status, ok := c.parse(args); !ok {
		return status
	}
	if fs.NArg() < 1 {
		fmt.Fprintln(stderr, "airlock run: missing FILE (use - to read the program from stdin)")
		fs.Usage()
		return exitUsage
	}
	if *isolation != "" && !config.Isolation(*isolation).Valid() {
		fmt.Fprintf(stderr, "airlock run: --isolation %q: want native or gvisor\n", *isolation)
		return exitUsage
	}
	src, progArgs := fs.Arg(0), fs.Args()[1:]
	cfg, status, ok := c.loadConfig()
	if !ok {
		return status
	}
	req, err := lf.limits()
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return exitUsage
	}
	limits, err := config.Resolve(req, cfg.Defaults, cfg.Max)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return exitUsage
	}
	if lang == "" {
		lang = runtimes.LanguageForFile(src)
	}
	rt, err := runtimes.Lookup(cfg, lang)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: --lang: %v\n", err)
		return exitUsage
	}
	var env []string
	for _, e := range envs {
		if err := runtimes.ValidEnv(e); err != nil {
			fmt.Fprintf(stderr, "airlock run: --env: %v\n", err)
			return exitUsage
		}
		env = append(env, e)
	}

	// The program itself.
	var code []byte
	name := "main" + rt.Ext
	if src == "-" {
		code, err = io.ReadAll(io.LimitReader(stdin, int64(limits.Disk)+1))
	} else {
		code, err = readHostFile(src, int64(limits.Disk))
		name = filepath.Base(src)
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: cannot read the program: %v\n", err)
		return exitNoInput
	}
	if int64(len(code)) > int64(limits.Disk) {
		fmt.Fprintf(stderr, "airlock run: the program is larger than --disk (%s)\n", limits.Disk)
		return exitNoInput
	}
	if name, err = workspace.Clean(name); err != nil || name == "" {
		fmt.Fprintf(stderr, "airlock run: cannot use %q as a file name in /workspace\n", filepath.Base(src))
		return exitUsage
	}
	inputs := []hostFile{{name, code}}
	seen := map[string]bool{name: true}
	for _, spec := range files {
		host, dst, ok := strings.Cut(spec, ":")
		if !ok {
			dst = filepath.Base(host)
		}
		clean, err := workspace.Clean(dst)
		if err != nil || clean == "" {
			fmt.Fprintf(stderr, "airlock run: --file %s: bad name in /workspace: %v\n", spec, err)
			return exitUsage
		}
		if seen[clean] {
			fmt.Fprintf(stderr, "airlock run: --file %s: /workspace/%s is given twice\n", spec, clean)
			return exitUsage
		}
		seen[clean] = true
		data, err := readHostFile(host, int64(limits.Disk))
		if err != nil {
			fmt.Fprintf(stderr, "airlock run: --file %s: %v\n", spec, err)
			return exitNoInput
		}
		inputs = append(inputs, hostFile{clean, data})
	}

	var out *workspace.Dir
	if *outDir != "" {
		if out, err = workspace.OpenOut(*outDir); err != nil {
			fmt.Fprintf(stderr, "airlock run: --out: %v\n", err)
			return exitCantCreate
		}
		defer out.Close()
	}

	server.Trace("cli parsed")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The program's streamed output is hostile: on a terminal, every
	// control a terminal acts on is shown escaped; piped or redirected,
	// it is byte-exact. Closed before airlock's own notes.
	progOut, progErr := termtext.ForTerminal(stdout), termtext.ForTerminal(stderr)
	var emit func(apitype.Event)
	var outErr error
	if !asJSON {
		emit = stream(progOut, progErr, &outErr)
	}
	preq := apitype.ProgramRequest{
		Language: rt.Lang, Code: string(code), Filename: name, Args: progArgs,
		Limits: req, Env: runtimes.EnvMap(env), Isolation: config.Isolation(*isolation),
		Template: *tmplName,
	}
	if len(allowHosts) > 0 {
		preq.Network = &apitype.NetworkPolicy{Allow: allowHosts}
	}
	preq.Tools, preq.Secrets = toolNames, secretNames
	if socket := cfg.SocketPath(); socket != "" && !cold {
		remote := preq
		remote.FileContents = new(bool)
		*remote.FileContents = out != nil
		for _, f := range inputs[1:] {
			remote.Files = append(remote.Files, apitype.InputFile{Path: f.path, ContentBase64: base64.StdEncoding.EncodeToString(f.data)})
		}
		res, err := runRemote(ctx, socket, remote, emit)
		// Inputs larger than the server takes in one request (its
		// max_body_bytes) are refused before anything runs: run here.
		if !errors.Is(err, errNoServer) && !errors.Is(err, errdefs.ErrTooLarge) {
			progOut.Close()
			progErr.Close()
			server.Trace("remote done")
			if err == nil {
				err = outErr
			}
			if err != nil {
				return exitFor(stderr, err)
			}
			var notCopied []string
			for _, f := range res.Files {
				if out != nil {
					notCopied = append(notCopied, copyOut(out, f.Path, func() (io.ReadCloser, error) {
						if f.Omitted {
							return nil, fmt.Errorf("%w: over the %d MiB a server's run returns with its files (run it with --cold)", errdefs.ErrTooLarge, apitype.MaxOneShotFiles>>20)
						}
						data, err := base64.StdEncoding.DecodeString(f.ContentBase64)
						return io.NopCloser(bytes.NewReader(data)), err
					})...)
				}
			}
			return report(res, limits, asJSON, notCopied, stdout, stderr)
		}
	}
	if iso := config.Isolation(*isolation); iso == config.GVisor || (iso == "" && cfg.Isolation == config.GVisor) {
		// A jail built here is native: running the program in it would
		// be less isolation than asked for.
		fmt.Fprintln(stderr, "airlock run: gVisor isolation needs a running server (airlock serve); this process builds native jails only")
		return exitUnavailable
	}
	if len(allowHosts) > 0 || len(toolNames) > 0 || len(secretNames) > 0 {
		// The egress layer, the tools and the secrets live in the
		// server: a jail built here has loopback only, and must not run
		// as if it had what was asked.
		fmt.Fprintln(stderr, "airlock run: --allow-host, --tool and --secret need a running server (airlock serve); without one the sandbox has no network, tools or secrets")
		return exitUsage
	}
	// The server's composition, in this process: the same one-shot path
	// as POST /v1/run, its files taken before the sandbox goes.
	local, err := server.NewLocal(cfg, nil)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer local.Close()
	// Once per host: later runs copy the list, first plots stay fast and
	// fontconfig leaves nothing behind.
	if _, err := local.FontCache(ctx); err != nil {
		fmt.Fprintf(stderr, "airlock: warning: %s\n", termtext.Field(err.Error()))
	}
	for _, f := range inputs[1:] {
		preq.Files = append(preq.Files, apitype.InputFile{Path: f.path, Content: string(f.data)})
	}
	var notCopied []string
	res, err := local.RunProgram(ctx, preq, emit, func(name string, open func() (io.ReadCloser, error)) {
		if out != nil {
			notCopied = append(notCopied, copyOut(out, name, open)...)
		}
	})
	progOut.Close()
	progErr.Close()
	if err == nil {
		err = outErr
	}
	if err != nil {
		return exitFor(stderr, err)
	}
	return report(res, limits, asJSON, notCopied, stdout, stderr)
}

// copyOut copies the file at path (as the sandbox named it) from open
// into out; it returns why it could not, if it could not.
func copyOut(out *workspace.Dir, path string, open func() (io.ReadCloser, error)) []string {
	fail := func(err error) []string {
		return []string{fmt.Sprintf("%s: %s", termtext.Field(path), termtext.Field(err.Error()))}
	}
	clean, err := workspace.Clean(path)
	if err != nil || clean == "" {
		return fail(fmt.Errorf("not a path beneath --out: %v", err))
	}
	r, err := open()
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	if _, err := out.Write(clean, r, math.MaxInt64-1, 0o644); err != nil {
		return fail(err)
	}
	return nil
}

// report prints a run's result (the JSON object, or notes on stderr after
// the streamed output), what --out could not copy and a hint when the
// network refused the program, and returns the exit status of airlock
// run: the program's, or exitCantCreate when it succeeded but its files
// could not all be copied out.
func report(res *apitype.OneShotResult, limits config.Limits, asJSON bool, notCopied []string, stdout, stderr io.Writer) int {
	if res.Limits != nil {
		limits = *res.Limits
	}
	out := apitype.RunOutput{
		ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		StdoutDroppedBytes: res.StdoutDroppedBytes, StderrDroppedBytes: res.StderrDroppedBytes,
		DurationMs: res.DurationMs, CPUMs: res.CPUMs, PeakMemoryBytes: res.PeakMemoryBytes,
		Killed: res.Killed, KillReason: res.KillReason, Files: []apitype.RunFile{},
		FilesTruncated: res.FilesTruncated, Egress: res.Egress,
	}
	for _, f := range res.Files {
		out.Files = append(out.Files, apitype.RunFile{Path: f.Path, Size: f.Size})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return exitSoftware
		}
	} else {
		if out.StdoutTruncated {
			fmt.Fprintf(stderr, "\nairlock: stdout truncated at %s (--max-output): %d bytes dropped\n", limits.MaxOutput, out.StdoutDroppedBytes)
		}
		if out.StderrTruncated {
			fmt.Fprintf(stderr, "\nairlock: stderr truncated at %s (--max-output): %d bytes dropped\n", limits.MaxOutput, out.StderrDroppedBytes)
		}
		if out.Killed {
			fmt.Fprintf(stderr, "airlock: killed: %s\n", describeKill(out.KillReason, limits))
		}
	}
	if hint := egressHint(out.Egress); hint != "" {
		fmt.Fprintln(stderr, hint)
	}
	for _, n := range notCopied {
		fmt.Fprintf(stderr, "airlock: --out: not copied: %s\n", n)
	}
	switch {
	case out.Killed:
		return exitKilled
	case out.ExitCode == 0 && len(notCopied) > 0:
		return exitCantCreate
	}
	return out.ExitCode
}

// egressHint is one line on what the network refused the program, with
// the flag that allows a name ("" when nothing was refused).
func egressHint(ds []apitype.EgressDecision) string {
	var refused []string
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Allowed {
			continue
		}
		what := d.Host
		switch {
		case what == "":
			what = d.Dest
		case d.Port != 0:
			what = net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
		}
		if what != "" && !seen[what] {
			seen[what] = true
			refused = append(refused, termtext.Field(what))
		}
	}
	if len(refused) == 0 {
		return ""
	}
	list := strings.Join(refused[:min(3, len(refused))], ", ")
	if len(refused) > 3 {
		list += fmt.Sprintf(" and %d more", len(refused)-3)
	}
	return "airlock: the network refused the program: " + list + " (--allow-host NAME[:PORT] lets it reach a name; --json's egress says why)"
}

func describeKill(reason apitype.KillReason, l config.Limits) string {
	switch reason {
	case apitype.KillTimeout:
		return fmt.Sprintf("wall-clock limit of %s reached (--timeout)", l.Timeout)
	case apitype.KillCPUTime:
		return fmt.Sprintf("CPU-time limit of %s reached (--cpu-time)", l.CPUTime)
	case apitype.KillMemory:
		return fmt.Sprintf("out of memory (limit %s, --memory)", l.Memory)
	case apitype.KillPids:
		return fmt.Sprintf("process limit of %d reached (--pids)", l.Pids)
	}
	return termtext.Field(string(reason)) // a server's words
}

// hostFile is a file for /workspace, read from the host by the CLI.
type hostFile struct {
	path string
	data []byte
}

// readHostFile reads a regular host file of at most max bytes.
func readHostFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is larger than --disk (%d bytes)", path, max)
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}
