package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/api"
	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/pool"
	"airlock/internal/runtimes"
	"airlock/internal/session"
)

func serveCmd(args []string, stderr io.Writer) int {
	c := newCommand("serve", "Usage: airlock serve [flags]\n\nServes the HTTP API (see /v1/openapi.json). SIGTERM ends every session and\nleaves nothing behind.\n\nFlags:\n", stderr)
	cfgPath := c.configFlag()
	listen := c.fs.String("listen", "", "address to listen on (default 127.0.0.1:8080)")
	verbose := c.fs.Bool("v", false, "log every request")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig(*cfgPath)
	if !ok {
		return code
	}
	if *listen != "" {
		cfg.Server.Listen = *listen
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	opts := jail.OptionsFrom(cfg)
	opts.RootFiles = runtimes.RootFiles()
	host, err := jail.NewHost(opts)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer host.Close()
	// One server per state directory and cgroup parent: everything named
	// s-* under them is ours, and whatever a killed predecessor left is
	// removed now.
	lock, err := lockState(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(stderr, "airlock serve: %v\n", err)
		return exitUnavailable
	}
	defer lock.Close()
	for _, prefix := range []string{"s-", "zygote-"} {
		if err := host.Cgroups().Sweep(prefix, func(string) bool { return true }); err != nil {
			log.Warn("removing cgroups left by a previous server", "err", err)
		}
	}
	host.Cgroups().Sweep("r-", jail.StaleRun)
	if err := host.SweepTemplates(); err != nil {
		log.Warn("removing old root templates", "err", err)
	}
	// The local socket comes before anything else runs in this process:
	// the umask that keeps it private is process-wide.
	var uln net.Listener
	if path := cfg.SocketPath(); path != "" {
		if uln, err = listenUnix(path); err != nil {
			fmt.Fprintf(stderr, "airlock serve: %v\n", err)
			return exitUnavailable
		}
		defer os.Remove(path)
	}

	slots := &session.Slots{}
	var source session.Source = &session.ColdSource{Host: host, Config: cfg, Slots: slots}
	var pl *pool.Pool
	if cfg.Pool.Zygote || anyPool(cfg) {
		pl = pool.New(cfg, host, slots, log)
		defer pl.Close()
		source = pl
	}
	mgr := session.NewManager(cfg, source, log)
	apiSrv := api.New(mgr, cfg, log, version)
	if pl != nil {
		apiSrv.Stats = pl.Stats
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "airlock serve: %v\n", err)
		return exitUnavailable
	}
	srv := &http.Server{
		Handler:           apiSrv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGUSR1 writes every goroutine's stack to the log, for diagnosing a
	// stuck server without stopping it.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			pprof.Lookup("goroutine").WriteTo(stderr, 1)
		}
	}()
	if p := os.Getenv("AIRLOCK_CPUPROFILE"); p != "" {
		// A CPU profile of the whole run, written at shutdown (for
		// performance work).
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	if uln != nil {
		go func() { errc <- srv.Serve(uln) }()
	}
	log.Info("airlock serving", "listen", ln.Addr().String(), "socket", cfg.SocketPath(), "version", version, "protections", host.Protections())
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		log.Error("server failed", "err", err)
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// Listeners close at once; sessions end alongside, so that executions
	// in flight answer "server shutting down" instead of holding the
	// shutdown until their own timeouts.
	drained := make(chan struct{})
	go func() { srv.Shutdown(shutdown); close(drained) }()
	mgr.Close()
	<-drained
	log.Info("all sessions ended")
	return 0
}

func anyPool(cfg config.Config) bool {
	for _, n := range cfg.Pool.Size {
		if n > 0 {
			return true
		}
	}
	return false
}

// listenUnix listens on a unix socket at path that only this user can
// reach. A socket left by a killed server is replaced (the caller holds
// the state lock); any other file there is an error.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // removed by the caller
	return ln, nil
}

// lockState takes an exclusive lock on the state directory.
func lockState(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "server.lock"), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another airlock server uses %s", dir)
	}
	return f, nil
}
