package server

import (
	"fmt"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/session"
)

// newEgress builds the sessions' egress setup from the network section,
// with the server-wide cap on open egress connections, which is derived
// from (or checked against) the soft RLIMIT_NOFILE once it is raised.
func (s *Server) newEgress(n config.Network) (*session.Egress, error) {
	eg, err := session.NewEgress(n)
	if err != nil {
		return nil, err
	}
	nofile, err := raiseNoFile()
	if err != nil {
		return nil, fmt.Errorf("%w: RLIMIT_NOFILE: %v", errdefs.ErrUnavailable, err)
	}
	limit, err := egress.OpenConnectionsCap(n.MaxOpenConnections, nofile)
	if err != nil {
		return nil, fmt.Errorf("%w: network.max_open_connections: %v", errdefs.ErrInvalidArgument, err)
	}
	eg.Limits.Shared = egress.NewShared(limit)
	if n.Enabled {
		s.log.Info("egress: server-wide connection cap", "max_open_connections", limit, "rlimit_nofile", nofile)
	}
	return eg, nil
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit, unless it
// is there already (Go's runtime raises it at start on Linux; setting it
// here again would only change what children inherit: sandboxes get their
// own from the jail either way), and returns the soft limit.
func raiseNoFile() (uint64, error) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}
