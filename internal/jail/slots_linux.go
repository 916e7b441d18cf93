package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

// Layout is how the host ids from IDBase are shared out, in slots of two
// ids. Without id_count (a host) CLI runs use their pid as slot (unique
// among live processes) and the server allocates from ServerSlotBase. In
// pod mode (id_count set: the range must fit the 65,536 ids of a
// user-namespaced pod) the first eighth of the ids are CLI runs' slots,
// leased with a lock file, and the rest the server's.
type Layout struct {
	// Pod reports pod mode.
	Pod bool
	// CLI is the number of CLI slots in pod mode, from slot 0.
	CLI uint32
	// ServerFirst and ServerCount are the server's slots.
	ServerFirst, ServerCount uint32
}

// maxServerSlots bounds the server's slots on a host.
const maxServerSlots = 1 << 20

// LayoutOf returns the layout of idCount ids (0: a host's).
func LayoutOf(idCount uint32) Layout {
	if idCount == 0 {
		return Layout{ServerFirst: ServerSlotBase, ServerCount: maxServerSlots}
	}
	slots := idCount / 2
	cli := idCount / 8
	return Layout{Pod: true, CLI: cli, ServerFirst: cli, ServerCount: slots - cli}
}

// Layout is the host's.
func (h *Host) Layout() Layout { return LayoutOf(h.opts.IDCount) }

// cliLease is a CLI run's slot in pod mode, held by a lock for as long as
// the process lives.
type cliLease struct {
	once sync.Once
	slot uint32
	f    *os.File
	err  error
}

// CLISlot returns the id slot of this process's one-shot runs: its pid on
// a host, a leased slot in pod mode (where pids do not fit the range).
// Every sandbox of the process may use it, one at a time.
func (h *Host) CLISlot() (uint32, error) {
	l := h.Layout()
	if !l.Pod {
		return CLISlot(), nil
	}
	h.cli.once.Do(func() {
		dir := filepath.Join(h.opts.StateDir, "cli-slots")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			h.cli.err = fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
			return
		}
		start := uint32(os.Getpid()) % l.CLI
		for i := uint32(0); i < l.CLI; i++ {
			slot := (start + i) % l.CLI
			f, err := os.OpenFile(filepath.Join(dir, strconv.FormatUint(uint64(slot), 10)), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err != nil {
				h.cli.err = fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
				return
			}
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				h.cli.slot, h.cli.f = slot, f
				return
			}
			f.Close()
		}
		h.cli.err = fmt.Errorf("%w: all %d CLI id slots of id_count are in use by other runs", errdefs.ErrLimit, l.CLI)
	})
	return h.cli.slot, h.cli.err
}

func (h *Host) releaseCLISlot() {
	h.cli.once.Do(func() {}) // none can be leased after this
	if h.cli.f != nil {
		h.cli.f.Close()
		h.cli.f = nil
	}
}
