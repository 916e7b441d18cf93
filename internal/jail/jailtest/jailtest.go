// Package jailtest owns what the privileged tests of the packages above
// the jail share: a jail host of their own, with the in-sandbox runtimes
// in its root, under a state directory and cgroup named after the test
// package, and a gVisor host beside it, torn down when the test ends.
//
// It must never be imported by anything but tests, and never hand two
// packages the same state directory or cgroup (their tests may run at
// once).
package jailtest

import (
	"context"
	"os"
	"testing"

	"airlock/internal/config"
	"airlock/internal/gvisor"
	"airlock/internal/jail"
	"airlock/internal/runtimes"
	"airlock/internal/testenv"
)

// Host returns a jail host for the privileged tests of package name
// (state /run/airlock-<name>-test, cgroup airlock-<name>-test) and the
// configuration it was made from, after adjust. Without root it skips,
// which fails a strict run.
func Host(t testing.TB, name string, adjust ...func(*config.Config)) (*jail.Host, config.Config) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "privileged test: needs root to build jails (CI runs as root)")
	}
	cfg := config.Default()
	cfg.StateDir = "/run/airlock-" + name + "-test"
	cfg.CgroupParent = "airlock-" + name + "-test"
	// Pools grown by the tests' bursts stay small beside the others'.
	cfg.Pool.MaxSize = map[string]int{"python": 4, "bash": 2, "javascript": 2}
	for _, f := range adjust {
		f(&cfg)
	}
	opts := jail.OptionsFrom(cfg)
	opts.RootFiles = runtimes.RootFiles()
	h, err := jail.NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		os.RemoveAll(cfg.StateDir)
	})
	return h, cfg
}

// GVisorHost returns a gVisor host beside h (made by Host from cfg), with
// the in-sandbox runtimes in its root, closed when the test ends. Without
// runsc it skips, which fails a strict run.
func GVisorHost(t testing.TB, h *jail.Host, cfg config.Config) *gvisor.Host {
	t.Helper()
	opts := gvisor.OptionsFrom(cfg, testenv.Runsc(t))
	opts.RootFiles = runtimes.RootFiles()
	gh, err := gvisor.NewHost(context.Background(), opts, h.Cgroups())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gh.Close() })
	return gh
}
