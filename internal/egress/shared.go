package egress

import (
	"fmt"
	"sync/atomic"
)

// Shared is what every gate of one server shares: the cap on egress
// connections open at once, all sessions together, and the server-wide
// counts of refusals. Each carried connection costs the server two file
// descriptors (the one accepted inside the sandbox's namespace and the one
// dialled on the host): without this cap many sessions, each within its
// own connection cap, could exhaust the server's RLIMIT_NOFILE and break
// its API (red team). A nil *Shared is no cap.
type Shared struct {
	max        int64
	open       atomic.Int64
	capRefused atomic.Int64
	dnsRefused atomic.Int64
}

// NewShared returns the server-wide state with a cap of n open
// connections (at least 1).
func NewShared(n int) *Shared { return &Shared{max: int64(max(n, 1))} }

// acquire takes one of the open connections, or reports the cap reached.
// A compare-and-swap, not add-then-undo: a burst over the cap must not
// refuse connections that would fit.
func (s *Shared) acquire() bool {
	if s == nil {
		return true
	}
	for {
		n := s.open.Load()
		if n >= s.max {
			s.capRefused.Add(1)
			return false
		}
		if s.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Shared) capReason() string {
	return fmt.Sprintf("the server connection cap (%d open egress connections, all sessions) is reached", s.max)
}

func (s *Shared) release() {
	if s != nil {
		s.open.Add(-1)
	}
}

func (s *Shared) dnsRefusal() {
	if s != nil {
		s.dnsRefused.Add(1)
	}
}

// SharedStats are the server-wide egress figures.
type SharedStats struct {
	Open, Max int64
	// CapRefused counts connections refused at the server's cap;
	// DNSRefused DNS queries answered REFUSED over a session's rate.
	CapRefused, DNSRefused int64
}

// Stats returns the server-wide figures.
func (s *Shared) Stats() SharedStats {
	if s == nil {
		return SharedStats{}
	}
	return SharedStats{Open: s.open.Load(), Max: s.max, CapRefused: s.capRefused.Load(), DNSRefused: s.dnsRefused.Load()}
}

// Reserved file descriptors left to everything but egress (the API and
// its clients, the store, sandboxes' pipes and pidfds, gates' own
// listeners) when an operator sets the cap explicitly.
const reservedFDs = 512

// bulkFDs are the descriptors bulk transfers' pipes may hold at once,
// server-wide (two per pipe, at most maxBulkPipes of them).
const bulkFDs = 2 * maxBulkPipes

// OpenConnectionsCap returns the server-wide cap for a process whose
// RLIMIT_NOFILE soft limit is nofile: configured when set (0: derived),
// else a quarter of nofile (half the descriptors for egress, two per
// connection). A configured value whose descriptors would not leave
// reservedFDs and the bulk pipes' under nofile is an error: the operator
// asked for more than the process can hold.
func OpenConnectionsCap(configured int, nofile uint64) (int, error) {
	if configured == 0 {
		return int(max(min(nofile/4, 1<<20), 1)), nil
	}
	limit := int64(0)
	if nofile > reservedFDs+bulkFDs {
		limit = int64(min(nofile-reservedFDs-bulkFDs, 2<<20) / 2)
	}
	if int64(configured) > limit {
		return 0, fmt.Errorf("%d connections need %d file descriptors, and RLIMIT_NOFILE (%d) leaves room for %d (%d descriptors kept for the rest of the server, %d for bulk transfers' pipes); raise the limit (LimitNOFILE=, ulimit -n) or lower the cap",
			configured, 2*configured, nofile, limit, reservedFDs, bulkFDs)
	}
	return configured, nil
}
