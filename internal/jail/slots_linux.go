package jail

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
	"airlock/internal/lockfile"
	"airlock/internal/privdir"
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
		if err := privdir.Ensure(dir, 0o700); err != nil {
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

// LockServer takes the server's host ids and cgroup parent for as long as
// the returned closer is not closed. Another server whose range of ids
// overlaps (the same id_base, say, with another state_dir) would hand the
// same uids to other sandboxes, which could then signal, trace or read
// each other's processes and files; another of the same cgroup parent
// would sweep this one's sandboxes as its predecessor's leftovers. Both
// are refused. The locks live in Options.LockDir (lock_dir), which every
// server on a host shares whatever its state_dir (whose lock only keeps
// out a server of the same state_dir): its range of host ids ("ids-F-L")
// and its cgroup parent ("cgroup-NAME").
func (h *Host) LockServer() (io.Closer, error) {
	l := h.Layout()
	first := uint64(h.opts.IDBase) + 2*uint64(l.ServerFirst)
	ids, err := LockIDs(h.opts.LockDir, first, first+2*uint64(l.ServerCount)-1)
	if err != nil {
		return nil, err
	}
	cg, held, err := tryLock(filepath.Join(h.opts.LockDir, "cgroup-"+url.PathEscape(h.opts.CgroupParent)))
	if err == nil && held {
		err = fmt.Errorf("%w: another airlock server uses cgroup_parent %q: give each server on a host its own cgroup_parent, id_base, state_dir and server.listen", errdefs.ErrUnavailable, h.opts.CgroupParent)
	}
	if err != nil {
		ids.Close()
		return nil, err
	}
	return closers{ids, cg}, nil
}

type closers []io.Closer

func (cs closers) Close() error {
	for _, c := range cs {
		c.Close()
	}
	return nil
}

// LockIDs takes an exclusive lock on the ids first to last in dir, and
// fails if a live lock of dir overlaps them. Lock files are never removed
// (removing one could let two servers lock different files of one name).
func LockIDs(dir string, first, last uint64) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	name := fmt.Sprintf("ids-%d-%d", first, last)
	own, held, err := tryLock(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if held {
		return nil, idsTaken(first, last, first, last)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	for _, e := range ents {
		var f, l uint64
		if e.Name() == name {
			continue
		}
		if n, _ := fmt.Sscanf(e.Name(), "ids-%d-%d", &f, &l); n != 2 || l < first || f > last {
			continue
		}
		other, held, err := tryLock(filepath.Join(dir, e.Name()))
		if err != nil {
			own.Close()
			return nil, err
		}
		other.Close() // a lock taken here was no one's: let it go
		if held {
			own.Close()
			return nil, idsTaken(first, last, f, l)
		}
	}
	return own, nil
}

// tryLock opens path and takes an exclusive lock on it; held reports that
// another process holds one (and the file is closed). A lock whose taker
// is gone is waited for while its children let go (lockfile).
func tryLock(path string) (f *os.File, held bool, err error) {
	f, held, err = lockfile.TryLock(path)
	switch {
	case held && err != nil:
		return nil, true, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	case err != nil:
		return nil, false, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return f, held, nil
}

func idsTaken(first, last, f, l uint64) error {
	return fmt.Errorf("%w: another airlock server uses host ids %d to %d, which overlap this one's (%d to %d): "+
		"its sandboxes would share uids with this one's; give each server on a host its own id_base "+
		"(at least %d apart; with id_count, ranges that do not overlap), state_dir, cgroup_parent and server.listen",
		errdefs.ErrUnavailable, f, l, first, last, last-first+1)
}
