package portproxy

import (
	"fmt"
	"strconv"
	"strings"

	"airlock/internal/errdefs"
)

// HostName is port's host under domain for a session's host label
// (cluster.HostLabel): <port>-<label>.<domain>, as E2B's getHost(port)
// gives it.
func HostName(port int, label, domain string) string {
	return strconv.Itoa(port) + "-" + label + "." + domain
}

// ParseHost reads a Host header for the host form: under reports whether
// host is under domain at all (such a host is a port's, never the API's,
// whatever else it is); then it must be exactly <port>-<label>.<domain>
// (any case; an optional :port of the listener; no trailing dot), the
// port 1 to 65535 in decimal without a leading zero, the label one DNS
// label (the session's; the caller resolves it). Anything else is an
// error.
func ParseHost(host, domain string) (port int, label string, under bool, err error) {
	h := strings.ToLower(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h, "]") {
		if p := h[i+1:]; p == "" || strings.Trim(p, "0123456789") != "" || len(p) > 5 {
			return 0, "", strings.HasSuffix(h[:i], "."+domain), errBadHost(host)
		}
		h = h[:i]
	}
	first, ok := strings.CutSuffix(h, "."+domain)
	if !ok {
		return 0, "", strings.HasSuffix(strings.TrimSuffix(h, "."), "."+domain), errBadHost(host)
	}
	ps, label, ok := strings.Cut(first, "-")
	if !ok || label == "" || len(first) > 63 || strings.ContainsAny(first, ".") {
		return 0, "", true, errBadHost(host)
	}
	for i := 0; i < len(label); i++ {
		if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return 0, "", true, errBadHost(host)
		}
	}
	if strings.HasSuffix(label, "-") {
		return 0, "", true, errBadHost(host)
	}
	n, err := strconv.Atoi(ps)
	if err != nil || ps[0] == '0' || ps[0] == '+' || len(ps) > 5 || n < 1 || n > 65535 {
		return 0, "", true, errBadHost(host)
	}
	return n, label, true, nil
}

func errBadHost(host string) error {
	if len(host) > 128 {
		host = host[:128] + "..."
	}
	return fmt.Errorf("%w: %q is not a port's host: <port>-<session>.<domain>, as a port's url gives it", errdefs.ErrNotFound, host)
}
