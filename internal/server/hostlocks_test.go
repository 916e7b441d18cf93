package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/store"
	"airlock/internal/testenv"
)

// Several servers on one host: a second server with the same id_base (but
// its own state_dir) would hand out the same host uids, one with the same
// cgroup_parent would sweep the first's sandboxes; both are refused at
// start, and start once the first is gone. A server that opens the data
// directory's database marks it served (airlock keys says when none is).
func TestServersShareNoHostIDs(t *testing.T) {
	testenv.RequireRoot(t, "servers build jails")
	start := func(cfg config.Config) (*Server, error) {
		cfg.Pool.Size, cfg.Pool.Zygote = nil, false
		return New(cfg, Options{Version: "test", Log: slog.New(slog.DiscardHandler)})
	}
	stop := func(s *Server, cfg config.Config) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		os.RemoveAll(cfg.StateDir)
	}
	cfg := testConfig(t)
	cfg.Server.Auth = config.AuthKeys
	served := func() bool {
		db, err := store.OpenSQLite(cfg.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		return db.Served(context.Background())
	}
	if served() {
		t.Fatal("served before any server")
	}
	first, err := start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !served() {
		t.Error("a server using the database does not mark it served")
	}
	other := func(name string, idBase uint32, cgroup string) config.Config {
		c := testConfig(t)
		c.StateDir, c.CgroupParent, c.IDBase = "/run/airlock-server-test-"+name, cgroup, idBase
		return c
	}
	for _, c := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"same id_base", other("ids", cfg.IDBase, "airlock-server-test-ids"), "host ids"},
		{"same cgroup_parent", other("cgroup", cfg.IDBase+1<<22, cfg.CgroupParent), "cgroup_parent"},
	} {
		s, err := start(c.cfg)
		if err == nil {
			stop(s, c.cfg)
		}
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it refused naming %s", c.name, err, c.want)
		}
		os.RemoveAll(c.cfg.StateDir)
	}
	stop(first, cfg)
	if served() {
		t.Error("still served after shutdown")
	}
	second := other("ids", cfg.IDBase, "airlock-server-test-ids")
	s, err := start(second)
	if err != nil {
		t.Fatalf("once the first server is gone: %v", err)
	}
	stop(s, second)
}
