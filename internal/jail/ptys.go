package jail

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"airlock/internal/config"
)

// KernelPtys are the host's pty figures: kernel.pty.max (every pty of the
// host counts against it), kernel.pty.reserve (kept for the host's own
// devpts instance: sandboxes' instances may use Max − Reserve) and
// kernel.pty.nr (open now).
type KernelPtys struct {
	Max, Reserve, Open int
}

// ForSandboxes is what the kernel gives every devpts instance but the
// host's.
func (k KernelPtys) ForSandboxes() int { return k.Max - k.Reserve }

// ReadKernelPtys reads the kernel's pty figures.
func ReadKernelPtys() (KernelPtys, error) {
	var k KernelPtys
	for name, v := range map[string]*int{"max": &k.Max, "reserve": &k.Reserve, "nr": &k.Open} {
		b, err := os.ReadFile("/proc/sys/kernel/pty/" + name)
		if err != nil {
			return KernelPtys{}, fmt.Errorf("reading kernel.pty.%s: %w", name, err)
		}
		if *v, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return KernelPtys{}, fmt.Errorf("kernel.pty.%s: %w", name, err)
		}
	}
	return k, nil
}

// sessionPtys is each sandbox's devpts max for c: its own, or its share
// of what the kernel gives (at least one; whether the whole fits is the
// server's check, config.Ptys).
func sessionPtys(c config.Config) int {
	k, _ := ReadKernelPtys()
	if _, n, err := c.Ptys(k.ForSandboxes()); err == nil {
		return n
	}
	if c.Server.MaxSessionPtys > 0 {
		return c.Server.MaxSessionPtys
	}
	return 1
}
