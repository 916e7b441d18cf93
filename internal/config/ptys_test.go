package config

import (
	"strings"
	"testing"
)

// The kernel's pty.max is one count for the whole host: a configuration
// whose sandboxes could together hold more than the budget is refused
// (checked against a mutant: Ptys not comparing perSandbox × sandboxes
// to the budget), and a derived max_session_ptys is the budget's share.
func TestPtys(t *testing.T) {
	const kernel = 4096 - 1024 // a default kernel's pty.max − pty.reserve
	n := Default().MaxSandboxes()
	for name, c := range map[string]struct {
		set           func(*Config)
		kernel        int
		budget, per   int
		want          string // error, if any
		validateWants string // Validate's error, if any
	}{
		"defaults share the kernel's": {set: func(*Config) {}, kernel: kernel, budget: kernel, per: kernel / n},
		"few sandboxes get 64": {set: func(c *Config) {
			c.Server.MaxSessions, c.Server.MaxConcurrentExecutions, c.Pool.Size, c.Templates.Pool = 4, 1, nil, nil
		}, kernel: kernel, budget: kernel, per: 64},
		"64 each for 512 sessions": {set: func(c *Config) { c.Server.MaxSessionPtys = 64 }, kernel: kernel,
			want: "lower server.max_session_ptys or server.max_sessions, or raise kernel.pty.max"},
		"an explicit budget that fits": {set: func(c *Config) { c.Server.MaxPtys = 1000; c.Server.MaxSessions = 100 }, kernel: kernel, budget: 1000, per: 1000 / (n - 412)},
		"an explicit budget too small": {set: func(c *Config) { c.Server.MaxPtys = 100; c.Server.MaxSessionPtys = 4 }, kernel: kernel,
			want: "exceed the pty budget of 100", validateWants: "exceed the pty budget of 100"},
		"a budget beyond the kernel's": {set: func(c *Config) { c.Server.MaxPtys = 4000 }, kernel: kernel, want: "exceeds the 3072 ptys the kernel gives"},
		"no share left":                {set: func(c *Config) { c.Server.MaxPtys = n - 1 }, kernel: kernel, want: "exceed the pty budget", validateWants: "exceed the pty budget"},
		"an unknown kernel":            {set: func(*Config) {}, want: "set server.max_ptys"},
	} {
		cfg := Default()
		c.set(&cfg)
		budget, per, err := cfg.Ptys(c.kernel)
		switch {
		case c.want != "":
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", name, err, c.want)
			}
		case err != nil || budget != c.budget || per != c.per:
			t.Errorf("%s: %d, %d, %v; want %d, %d", name, budget, per, err, c.budget, c.per)
		}
		err = cfg.Validate()
		if c.validateWants == "" && err != nil || c.validateWants != "" && (err == nil || !strings.Contains(err.Error(), c.validateWants)) {
			t.Errorf("%s: Validate: %v, want %q", name, err, c.validateWants)
		}
	}
}
