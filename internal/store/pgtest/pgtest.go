// Package pgtest owns the real PostgreSQL servers of airlock's tests:
// Debian's postgresql package (scripts/install-deps.sh --tests), a data
// directory of its own initialised with initdb, a port of its own on
// loopback, run as the postgres user (PostgreSQL refuses root), password
// authentication, torn down after the test. Without PostgreSQL a test
// skips, except in a strict run (AIRLOCK_TEST_STRICT=1), where it fails.
//
// It must never be imported by anything but tests.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"airlock/internal/testenv"
)

// Server is a running PostgreSQL.
type Server struct {
	dir      string // the server's own directory: data/, pwfile, log
	bin      string
	port     int
	password string
	uid, gid int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
	seq  int
}

// bins finds Debian's PostgreSQL programs (the newest version).
func bins() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi > vj
	})
	if len(found) == 0 {
		return "", fmt.Errorf("PostgreSQL is not installed (apt-get install postgresql, or scripts/install-deps.sh --tests)")
	}
	return filepath.Dir(found[0]), nil
}

// Start starts a PostgreSQL server of the test's own, stopped (and its
// files removed) when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start()
	if err != nil {
		if s == nil {
			testenv.Skip(t, "pgtest: %v", err)
		}
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared is one server for the whole test binary (each test takes a
// database of its own: NewDatabase); Main stops it.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = start()
		if sharedErr != nil && shared == nil {
			sharedErr = fmt.Errorf("skip: %w", sharedErr)
		}
	})
	if sharedErr != nil {
		if shared == nil {
			testenv.Skip(t, "pgtest: %v", sharedErr)
		}
		t.Fatalf("pgtest: %v", sharedErr)
	}
	return shared
}

// Main runs the tests and stops the shared server: a package's TestMain
// is `os.Exit(pgtest.Main(m))`.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	return code
}

// start makes and starts a server; a nil Server with an error means
// PostgreSQL is not there (skip), a Server with one that it failed.
func start() (*Server, error) {
	bin, err := bins()
	if err != nil {
		return nil, err
	}
	uid, gid := 65534, 65534
	if u, err := user.Lookup("postgres"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		return &Server{}, err
	}
	var pw [16]byte
	rand.Read(pw[:])
	s := &Server{dir: dir, bin: bin, password: hex.EncodeToString(pw[:]), uid: uid, gid: gid}
	fail := func(err error) (*Server, error) {
		s.Close()
		return s, err
	}
	// The server's user must reach its files: its own directory, data/
	// inside made by initdb.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return fail(err)
	}
	for _, p := range []string{dir, pwfile} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fail(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "--pwfile", pwfile,
		"--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = s.attr()
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	os.Remove(pwfile)
	if err := s.Restart(); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid)}, Setpgid: true}
}

// Restart starts the server (again, after Stop or Kill) on its port, and
// waits until it takes connections.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("already running")
	}
	if s.port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.SysProcAttr = s.attr()
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("postgres exited: %s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres does not take connections: %v\n%s", err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DSN is the connection string of database db, as the superuser.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", s.password, s.port, db)
}

// Password is the superuser's (tests check it is never shown).
func (s *Server) Password() string { return s.password }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// NewDatabase creates an empty database and returns its DSN.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.seq)
	s.mu.Unlock()
	if err := s.Exec("postgres", "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s.DSN(name)
}

// Exec runs SQL in database db.
func (s *Server) Exec(db, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// Stop shuts the server down (fast: open connections are cut).
func (s *Server) Stop() { s.signal(syscall.SIGINT) }

// Kill kills the server as a crash would (SIGKILL to the postmaster and
// its backends).
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if sig == syscall.SIGKILL {
		syscall.Kill(-s.cmd.Process.Pid, sig) // the whole group
	} else {
		s.cmd.Process.Signal(sig)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	if sig == syscall.SIGKILL {
		// Backends notice the postmaster's death on their own; the
		// group's kill took them too.
		os.Remove(filepath.Join(s.data(), "postmaster.pid"))
	}
	s.cmd = nil
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	if s.done != nil || s.cmd != nil {
		s.signal(syscall.SIGQUIT)
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
