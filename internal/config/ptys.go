package config

import "fmt"

// MaxSandboxes is how many sandboxes the server may hold at once: its
// sessions, its one-shot runs, its pools at their max_size and the
// template.
func (c Config) MaxSandboxes() int {
	n := c.Server.MaxSessions + c.Server.MaxConcurrentExecutions + 1
	for lang, size := range c.Pool.Size {
		n += max(size, c.Pool.MaxSize[lang]*min(size, 1))
	}
	for _, size := range c.Pool.NetworkSize {
		n += size
	}
	for _, sizes := range c.Templates.Pool {
		for _, size := range sizes {
			n += size
		}
	}
	return n
}

// DefaultSessionPtys is the most ptys a sandbox gets when
// server.max_session_ptys is derived.
const DefaultSessionPtys = 64

// Ptys resolves the server's pty budget (server.max_ptys, or kernel when
// 0) and each sandbox's share (server.max_session_ptys, or the budget
// shared evenly when 0, at most DefaultSessionPtys). kernel is what the
// kernel gives sandboxes, kernel.pty.max − kernel.pty.reserve (0:
// unknown, not checked). The error says what to change when the
// sandboxes the server may hold could together exceed the budget.
func (c Config) Ptys(kernel int) (budget, perSandbox int, err error) {
	s := c.Server
	budget = s.MaxPtys
	if budget == 0 {
		budget = kernel
	}
	if budget <= 0 {
		return 0, 0, fmt.Errorf("the kernel's pty limit is unknown (kernel.pty.max): set server.max_ptys")
	}
	if kernel > 0 && budget > kernel {
		return 0, 0, fmt.Errorf("server.max_ptys %d exceeds the %d ptys the kernel gives sandboxes (kernel.pty.max − kernel.pty.reserve): lower it, or raise kernel.pty.max", budget, kernel)
	}
	n := c.MaxSandboxes()
	perSandbox = s.MaxSessionPtys
	if perSandbox == 0 {
		perSandbox = min(DefaultSessionPtys, budget/n)
	}
	if perSandbox < 1 || perSandbox*n > budget {
		return 0, 0, fmt.Errorf("the %d sandboxes this server may hold at once (server.max_sessions + max_concurrent_executions + the pools at their max_size + the template) × server.max_session_ptys %d exceed the pty budget of %d (server.max_ptys, or kernel.pty.max − kernel.pty.reserve): once it is reached no sandbox could open a terminal; lower server.max_session_ptys or server.max_sessions, or raise kernel.pty.max",
			n, max(perSandbox, 1), budget)
	}
	return budget, perSandbox, nil
}
