package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cgroup"
	"airlock/internal/cluster"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/fontcache"
	"airlock/internal/gvisor"
	"airlock/internal/jail"
	"airlock/internal/landlock"
	"airlock/internal/privdir"
	"airlock/internal/seccomp"
	"airlock/internal/server"
	"airlock/internal/store"

	"golang.org/x/sys/unix"
)

// Run checks the host against the configuration.
func Run(ctx context.Context, cfg config.Config) *Report {
	r := &Report{}
	if os.Geteuid() != 0 {
		r.add("root", Fail, "airlock must run as root: it maps each sandbox to unprivileged host ids of its own")
		return r
	}
	r.add("root", OK, "running as root; host root is never mapped into a sandbox")

	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err != nil || strings.TrimSpace(string(b)) == "0" {
		r.add("user namespaces", Fail, "user namespaces are disabled (user.max_user_namespaces = %s)", strings.TrimSpace(string(b)))
	} else {
		r.add("user namespaces", OK, "available (max %s)", strings.TrimSpace(string(b)))
	}
	var missing []string
	for _, ns := range []string{"pid", "mnt", "net", "ipc", "uts", "cgroup", "user"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		r.add("namespaces", Fail, "missing: %s", strings.Join(missing, ", "))
	} else {
		r.add("namespaces", OK, "user, pid, mount, network (loopback only), ipc, uts and cgroup: all applied")
	}

	if cg, err := cgroup.Open(cfg.CgroupParent); err != nil {
		r.add("cgroups", Fail, "%v", err)
	} else {
		defer cg.Close()
		note := ""
		if cg.Version() == 1 {
			note = "\nv1 caveat: the pids-limit counter is polled every 50ms while code runs because v1 does not notify it"
		}
		r.add("cgroups", OK, "%s: memory (no swap, OOM kills the sandbox), pids and CPU quota applied%s", cg.Describe(), note)
	}

	ptyChecks(r, cfg)

	if cfg.Protections.Seccomp == config.Off {
		r.add("seccomp", Off, "disabled by configuration (protections.seccomp)")
	} else if err := seccomp.Available(); err != nil {
		r.add("seccomp", Fail, "%v", err)
	} else if prog, err := seccomp.Build(seccomp.DefaultPolicy()); err != nil {
		r.add("seccomp", Fail, "%v", err)
	} else {
		p := seccomp.DefaultPolicy()
		r.add("seccomp", OK, "filter of %d instructions: foreign architectures and x32 killed, %d syscalls denied, %d answer ENOSYS,\nsocket families other than unix/inet/inet6 (and netlink route) refused, raw sockets, TIOCSTI and namespace clones refused",
			len(prog), len(p.Deny), len(p.NotImplemented))
	}

	if cfg.Protections.Landlock == config.Off {
		r.add("landlock", Off, "disabled by configuration (protections.landlock)")
	} else if abi, err := landlock.ABI(); err != nil {
		r.add("landlock", Fail, "%v (set protections.landlock to \"off\" to run without it)", err)
	} else {
		extra := ""
		if abi >= 6 {
			extra = "; signals and abstract unix sockets scoped to the sandbox"
		}
		r.add("landlock", OK, "ABI %d: writes only to /workspace, /tmp and /dev/shm; reads and exec only inside the sandbox root%s", abi, extra)
	}

	// The way the server takes, and why it passed the faster ones over.
	if exe, err := jail.SealInit(cfg.StateDir); err != nil {
		r.add("sealed init", Fail, "%v", err)
	} else {
		why := ""
		if exe.Why != "" {
			why = ":\n" + exe.Why
		}
		r.add("sealed init", OK, "the init runs from a %s of %s (CVE-2019-5736)%s", exe.Method, exe.From, why)
		exe.Close()
	}
	gvisorChecks(ctx, r, cfg)
	persistenceChecks(r, cfg)
	clusterChecks(r, cfg)
	storeChecks(ctx, r, cfg)
	secretsChecks(r, cfg, nil)
	if !r.OK() {
		return r
	}

	// The jail a server builds, and the path its programs take.
	l, err := server.NewLocal(cfg, nil)
	if err != nil {
		r.add("jail", Fail, "%v", err)
		return r
	}
	defer l.Close()
	probe(ctx, r, l, cfg)
	runtimes(ctx, r, l, cfg)
	templateChecks(ctx, r, l, cfg)
	return r
}

// ptyChecks reports the kernel's pty limit, which every devpts instance
// of the host shares, against what the server's sandboxes may hold.
func ptyChecks(r *Report, cfg config.Config) {
	k, err := jail.ReadKernelPtys()
	if err != nil && cfg.Server.MaxPtys == 0 {
		r.add("ptys", Fail, "%v: set server.max_ptys", err)
		return
	}
	budget, per, err := cfg.Ptys(k.ForSandboxes())
	if err != nil {
		r.add("ptys", Fail, "%v", err)
		return
	}
	how := "server.max_session_ptys"
	if cfg.Server.MaxSessionPtys == 0 {
		how += ", derived"
	}
	r.add("ptys", OK, "%d sandboxes × %d ptys each (%s) fit the budget of %d (kernel.pty.max %d, reserve %d, %d open now)",
		cfg.MaxSandboxes(), per, how, budget, k.Max, k.Reserve, k.Open)
}

// run runs code, a program in lang, once in a fresh sandbox on the host's
// root and returns its stdout and stderr.
func run(ctx context.Context, l *server.Local, lang, code string) (string, string, error) {
	return runOn(ctx, l, "", lang, code)
}

// runOn is run on template's root ("": the host's), with args.
func runOn(ctx context.Context, l *server.Local, template, lang, code string, args ...string) (string, string, error) {
	res, err := l.RunOwn(ctx, apitype.ProgramRequest{
		Language: lang,
		Code:     code,
		Args:     args,
		Template: template,
		Limits:   apitype.Limits{Timeout: apitype.Duration(60 * time.Second), CPUTime: apitype.Duration(60 * time.Second)},
	}, nil)
	if err != nil {
		return "", "", err
	}
	if res.Killed {
		return res.Stdout, res.Stderr, fmt.Errorf("killed: %s", res.KillReason)
	}
	if res.ExitCode != 0 {
		return res.Stdout, res.Stderr, fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return res.Stdout, res.Stderr, nil
}

// probe builds a jail and asks a program inside what it got.
func probe(ctx context.Context, r *Report, l *server.Local, cfg config.Config) {
	script := `cat /proc/self/status; echo ---; cat /proc/net/dev; echo ---; cat /proc/1/environ >/dev/null 2>&1 && echo init-readable; : > /etc/x 2>/dev/null && echo root-writable; echo done`
	out, _, err := run(ctx, l, apitype.Bash, script)
	if err != nil {
		r.add("jail", Fail, "a probe program could not run in a jail: %v", err)
		return
	}
	status := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	var ifaces []string
	section := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "---":
			section++
		case section == 0:
			if k, v, ok := strings.Cut(line, ":"); ok {
				status[k] = strings.TrimSpace(v)
			}
		case section == 1:
			if k, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, "|") {
				ifaces = append(ifaces, strings.TrimSpace(k))
			}
		}
	}
	var bad []string
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if status[k] != "0000000000000000" {
			bad = append(bad, k+"="+status[k])
		}
	}
	if status["NoNewPrivs"] != "1" {
		bad = append(bad, "NoNewPrivs="+status["NoNewPrivs"])
	}
	if cfg.Protections.Seccomp == config.Required && status["Seccomp"] != "2" {
		bad = append(bad, "Seccomp="+status["Seccomp"])
	}
	if u := strings.Fields(status["Uid"]); len(u) == 0 || u[0] != strconv.Itoa(jail.SandboxUID) {
		bad = append(bad, "Uid="+status["Uid"])
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		bad = append(bad, "interfaces="+strings.Join(ifaces, ","))
	}
	if strings.Contains(out, "init-readable") {
		bad = append(bad, "the init's /proc entry is readable")
	}
	if strings.Contains(out, "root-writable") {
		bad = append(bad, "the root filesystem is writable")
	}
	if !strings.Contains(out, "done") {
		bad = append(bad, "the probe did not finish")
	}
	if len(bad) > 0 {
		r.add("jail", Fail, "a jail was built but a program inside saw: %s", strings.Join(bad, "; "))
		return
	}
	r.add("jail", OK, "built one: the program inside ran as uid %d with no capabilities, no_new_privs, seccomp, only lo, a read-only root", jail.SandboxUID)
}

// moduleReport reads a probe's output: its first line (the Python
// version), then "MODULE VERSION" or "MODULE MISSING ..." lines.
func moduleReport(out string) (version string, have, lack []string) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) >= 2 && f[1] == "MISSING" {
			lack = append(lack, f[0])
		} else if len(f) >= 2 {
			have = append(have, f[0]+" "+f[1])
		}
	}
	return lines[0], have, lack
}

func runtimes(ctx context.Context, r *Report, l *server.Local, cfg config.Config) {
	if _, err := os.Stat(cfg.Runtimes.Python); err != nil {
		r.add("python", Warn, "%s not found: install python3 (the default language)", cfg.Runtimes.Python)
	} else {
		built, cacheErr := l.FontCache(ctx)
		var imports []string
		for _, p := range cfg.Runtimes.PythonPackages {
			imports = append(imports, fmt.Sprintf("try:\n import %s as m; print(%q, getattr(m, '__version__', '?'))\nexcept Exception as e: print(%q, 'MISSING', type(e).__name__)", p, p, p))
		}
		script := "import sys; print('python', sys.version.split()[0])\n" + strings.Join(imports, "\n")
		out, _, err := run(ctx, l, apitype.Python, script)
		if err != nil {
			r.add("python", Warn, "%s does not run in a jail: %v", cfg.Runtimes.Python, err)
		} else {
			version, have, lack := moduleReport(out)
			r.add("python", OK, "%s", version)
			if len(lack) > 0 {
				r.add("python packages", Warn, "missing: %s (install the Debian packages, e.g. python3-%s); present: %s", strings.Join(lack, ", "), lack[0], strings.Join(have, ", "))
			} else {
				r.add("python packages", OK, "%s", strings.Join(have, ", "))
			}
			switch {
			case cacheErr != nil:
				r.add("matplotlib cache", Warn, "%v (first plots of each session will be slow)", cacheErr)
			case built:
				r.add("matplotlib cache", OK, "font list built in %s, copied into each sandbox's /tmp", fontcache.Dir(cfg))
			default:
				r.add("matplotlib cache", OK, "font list cached in %s, copied into each sandbox's /tmp", fontcache.Dir(cfg))
			}
		}
	}
	for _, rt := range []struct{ name, path, lang, code string }{
		{"bash", cfg.Runtimes.Bash, apitype.Bash, "exec " + cfg.Runtimes.Bash + " --version"},
		{"node", cfg.Runtimes.Node, apitype.JavaScript, "console.log(process.version)"},
	} {
		if _, err := os.Stat(rt.path); err != nil {
			r.add(rt.name, Warn, "%s not found", rt.path)
			continue
		}
		out, _, err := run(ctx, l, rt.lang, rt.code)
		if err != nil {
			r.add(rt.name, Warn, "%s does not run in a jail: %v", rt.path, err)
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		r.add(rt.name, OK, "%s", first)
	}
}

// gvisorChecks checks runsc when the configuration uses gVisor (as the
// server's isolation, or one requests may ask for): the binary, its
// version, and a real boot with a probe program. A configured gVisor that
// cannot boot is a failure: airlock never falls back to native.
func gvisorChecks(ctx context.Context, r *Report, cfg config.Config) {
	if !cfg.Allows(config.GVisor) {
		r.add("gvisor", Off, "isolation %q; gVisor is not configured (isolation, allow_isolation)", cfg.Isolation)
		return
	}
	runsc, err := gvisor.Find(cfg.GVisor.Runsc)
	if err != nil {
		r.add("gvisor", Fail, "%v", err)
		return
	}
	cg, err := cgroup.Open(cfg.CgroupParent)
	if err != nil {
		r.add("gvisor", Fail, "%v", err)
		return
	}
	defer cg.Close()
	opts := gvisor.OptionsFrom(cfg, runsc)
	// Its keeper's copy in the state directory: its checkpoint is the
	// probe's, never a paused session's (persistence.dir is the server's).
	opts.KeeperDir = ""
	h, err := gvisor.NewHost(ctx, opts, cg)
	if err != nil {
		r.add("gvisor", Fail, "%v", err)
		return
	}
	defer h.Close()
	name := "g-doctor-" + strconv.Itoa(os.Getpid())
	res, err := h.Probe(ctx, gvisor.Spec{Name: name, Limits: cfg.Defaults})
	if err != nil {
		r.add("gvisor", Fail, "%s: a sandbox could not boot and run a probe: %v", h.Describe(), err)
		return
	}
	var host unix.Utsname
	unix.Uname(&host)
	if hk := unix.ByteSliceToString(host.Release[:]); res.Kernel == hk || res.UID != "1000" || strings.Join(res.Interfaces, ",") != "lo" {
		r.add("gvisor", Fail, "the probe saw kernel %q (host %q), uid %s, interfaces %v: not the isolation configured", res.Kernel, hk, res.UID, res.Interfaces)
		return
	}
	r.add("gvisor", OK, "%s: booted in %s, a program ran in %s; inside: kernel %s (gVisor's), uid %s, interfaces %v",
		h.Describe(), res.Boot.Round(time.Millisecond), res.Exec.Round(time.Millisecond), res.Kernel, res.UID, res.Interfaces)
	if cfg.Network.Enabled {
		// Sessions with egress: runsc's host network inside a namespace
		// of airlock's, which must hold nothing but lo.
		ns, err := egress.NewNamespace()
		if err == nil {
			res, err = h.Probe(ctx, gvisor.Spec{Name: name + "-net", Limits: cfg.Defaults, NetNS: ns})
		}
		switch {
		case err != nil:
			r.add("gvisor network", Fail, "network.enabled: a sandbox could not boot in a network namespace of airlock's: %v", err)
			return
		case strings.Join(res.Interfaces, ",") != "lo":
			r.add("gvisor network", Fail, "network.enabled: a sandbox in airlock's network namespace saw interfaces %v, want only lo", res.Interfaces)
			return
		}
		r.add("gvisor network", OK, "sessions with egress: booted in %s in a network namespace of airlock's (runsc --network=host there: interfaces %v, nothing else)",
			res.Boot.Round(time.Millisecond), res.Interfaces)
	}
	if on, why := cfg.GVisorCheckpoint(); !on {
		r.add("gvisor checkpoint", Off, "pauses of gVisor sessions keep their files only: %s", why)
	} else if ck, err := h.ProbeCheckpoint(ctx, gvisor.Spec{Name: name + "-ck", Limits: cfg.Defaults}); err != nil {
		r.add("gvisor checkpoint", Fail, "%s, but runsc cannot checkpoint and restore a sandbox here, so the server will not start (set gvisor.checkpoint to false to pause gVisor sessions with their files only): %v", why, err)
	} else {
		r.add("gvisor checkpoint", OK, "pauses of gVisor sessions keep their memory (%s): every sandbox's init is airlock's keeper; a probe was checkpointed in %s (%d bytes) and restored in %s",
			why, ck.Checkpoint.Round(time.Millisecond), ck.Bytes, ck.Restore.Round(time.Millisecond))
	}
	g, a := gvisor.Layers()
	r.add("gvisor layers", OK, "gVisor provides:\n- %s\nairlock still applies around it:\n- %s", strings.Join(g, "\n- "), strings.Join(a, "\n- "))
}

// persistenceChecks reports, with persistence on, whether the paused
// sessions' directory and the gVisor keeper copies kept beside them are
// the server's own, and every directory above them: nobody else may
// write or replace them (package privdir); with it off, what an earlier
// run left there, which the server leaves alone.
func persistenceChecks(r *Report, cfg config.Config) {
	if !cfg.Persistence.Enabled {
		// What an earlier run with it on left is kept, untouched: said.
		if left := server.PersistenceLeft(cfg); left != "" {
			r.add("persistence", Warn, "%s", left)
		}
		return
	}
	dir := cfg.PersistenceDir()
	if _, err := privdir.Dir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.add("persistence", Fail, "%v\nthe server refuses to start: whoever may write there could forge paused sessions", err)
		return
	}
	if err := gvisor.CheckKeepers(gvisor.KeeperDir(cfg)); err != nil {
		r.add("persistence", Fail, "%v\na paused gVisor session's memory is not restored with a keeper copy another user could write (it resumes with its files, the memory kept for inspection); the server refuses to start if its own copy's directory is one", err)
		return
	}
	r.add("persistence", OK, "paused sessions in %s: the server's own, and every directory above it root's or the server's, writable by nobody else (but sticky ones, as /tmp, and Kubernetes' fsGroup: a setgid directory of a group the server is in)", dir)
}

// storeChecks reports where keys, quotas' counts, the audit log and the
// sessions directory are kept; a shared store is reached (nothing in it
// changed) and its schema compared with this binary's.
func storeChecks(ctx context.Context, r *Report, cfg config.Config) {
	if !cfg.Store.Shared() {
		r.add("store", OK, "sqlite in %s: keys, quotas and the audit log of this machine's servers", cfg.DataDir)
		return
	}
	p, err := store.ProbePostgres(ctx, cfg.Store)
	switch {
	case err != nil:
		r.add("store", Fail, "%v (a server refuses to start without its store)", err)
	case p.Have == 0:
		r.add("store", OK, "%s reached; empty: the first server to start makes its schema (version %d)", p.Where, p.Want)
	case p.Have < p.Want:
		r.add("store", OK, "%s reached; schema version %d, migrated to %d at this server's start; %d servers beating", p.Where, p.Have, p.Want, p.Servers)
	default:
		r.add("store", OK, "%s reached; schema version %d; %d servers beating", p.Where, p.Have, p.Servers)
	}
}

// secretsChecks reports, with secrets declared, the CA certificates
// their sessions trust besides airlock's anchor and those the gate
// verifies bound hosts against (getenv: the server's environment, nil:
// this process's).
func secretsChecks(r *Report, cfg config.Config, getenv func(string) string) {
	if !cfg.HasSecrets() {
		return
	}
	sandbox, gate, err := server.SecretsTrust(cfg, getenv)
	if err != nil {
		r.add("secrets trust", Fail, "%v (a server with secrets refuses to start without it)", err)
		return
	}
	r.add("secrets trust", OK, "sessions with secrets trust %s, and airlock's anchor for their bound hosts;\nthe gate verifies bound hosts against %s", sandbox.Describe(), gate.Describe())
}

// clusterChecks reports the server's name in a cluster and a pod-mode id
// range, when configured.
func clusterChecks(r *Report, cfg config.Config) {
	if cfg.Cluster.Enabled() {
		if name, err := cluster.PodName(cfg.Cluster, os.Getenv); err != nil {
			r.add("cluster", Fail, "%v", err)
		} else {
			r.add("cluster", OK, "server %s: session ids are %s.<boot epoch>.<random>; other servers' ids answer 421, earlier runs' 410", name, name)
		}
	}
	if cfg.IDCount > 0 {
		l := jail.LayoutOf(cfg.IDCount)
		r.add("id range", OK, "pod mode: host ids %d to %d (CLI runs %d sandboxes, the server %d)", cfg.IDBase, uint64(cfg.IDBase)+uint64(cfg.IDCount)-1, l.CLI, l.ServerCount)
	}
}
