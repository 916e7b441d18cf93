package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Network configures egress by allowlist: what clients may ask for in a
// request's "network": {"allow": [...]}, and the limits every session's
// egress gets. A session without a policy has loopback only, whatever is
// configured here.
type Network struct {
	// Enabled lets clients ask for a policy at all.
	Enabled bool `json:"enabled"`
	// MaxAllow caps the entries of one policy.
	MaxAllow int `json:"max_allow"`
	// AllowOnly, when not empty, is the operator's list every client
	// entry must fall inside (same syntax: name, *.suffix, :port).
	AllowOnly []string `json:"allow_only"`
	// Bytes is each session's egress budget, up plus down.
	Bytes Size `json:"bytes"`
	// MaxConnections caps a session's open connections (DNS over TCP
	// included).
	MaxConnections int `json:"max_connections"`
	// ConnectionBudget caps the connections a session may have carried
	// over its life: every one is kept in the execution's result and the
	// audit record, so this also bounds what the server holds for them.
	ConnectionBudget int `json:"connection_budget"`
	// ConnectTimeout bounds airlock's connection to an allowed host;
	// IdleTimeout ends a connection that carried nothing for that long.
	ConnectTimeout Duration `json:"connect_timeout"`
	IdleTimeout    Duration `json:"idle_timeout"`
	// MaxOpenConnections caps the egress connections open at once on the
	// whole server, every session together (each costs the server two
	// file descriptors); 0: a quarter of the server's RLIMIT_NOFILE, read
	// at start. An explicit value must leave room under that limit.
	MaxOpenConnections int `json:"max_open_connections"`
	// DNSQueriesPerSecond and DNSBurst bound each session's queries to
	// its DNS responder (a token bucket); queries over it are answered
	// REFUSED. 0 queries per second: no limit.
	DNSQueriesPerSecond int `json:"dns_queries_per_second"`
	DNSBurst            int `json:"dns_burst"`
	// MaxWildcardNames caps the distinct names one wildcard entry
	// ("*.example.com") lets a session use over its life: each is a name
	// airlock looks up upstream, chosen by the sandbox.
	MaxWildcardNames int `json:"max_wildcard_names"`
	// Proxy adds an HTTP CONNECT/forward proxy on 127.0.0.1:3128 inside
	// every sandbox with a policy, and HTTP(S)_PROXY pointing at it:
	// proxy-aware clients get a 403 saying why instead of a reset.
	Proxy bool `json:"proxy"`
	// InternalCIDRs are further ranges the InternalNames (only) may
	// resolve into (a package mirror on the LAN outside the private
	// ranges); by server config only, never by a request.
	InternalCIDRs []string `json:"internal_cidrs"`
	// InternalNames may resolve into private ranges (RFC 1918, 100.64/10,
	// ULA); loopback, link-local, metadata and the host stay closed.
	InternalNames []string `json:"internal_names"`
}

// DefaultNetwork is the built-in network section.
func DefaultNetwork() Network {
	return Network{
		Enabled: true, MaxAllow: 32, Bytes: 1 << 30, MaxConnections: 64, ConnectionBudget: 4096,
		ConnectTimeout: Duration(10 * time.Second), IdleTimeout: Duration(2 * time.Minute),
		DNSQueriesPerSecond: 100, DNSBurst: 200, MaxWildcardNames: 64,
	}
}

// Validate checks the section's ranges; names are checked by the egress
// layer when the server starts.
func (n Network) Validate() error {
	var errs []error
	if n.MaxAllow < 1 || n.MaxAllow > 1024 {
		errs = append(errs, fmt.Errorf("network.max_allow %d must be between 1 and 1024", n.MaxAllow))
	}
	if n.Bytes < 1<<10 {
		errs = append(errs, errors.New("network.bytes must be at least 1K"))
	}
	if n.MaxConnections < 1 || n.MaxConnections > 4096 {
		errs = append(errs, fmt.Errorf("network.max_connections %d must be between 1 and 4096", n.MaxConnections))
	}
	if n.ConnectionBudget < 1 || n.ConnectionBudget > 1<<20 {
		errs = append(errs, fmt.Errorf("network.connection_budget %d must be between 1 and 1048576", n.ConnectionBudget))
	}
	if n.MaxWildcardNames < 1 || n.MaxWildcardNames > 65534 {
		errs = append(errs, fmt.Errorf("network.max_wildcard_names %d must be between 1 and 65534", n.MaxWildcardNames))
	}
	if len(n.InternalCIDRs) > 0 && len(n.InternalNames) == 0 {
		errs = append(errs, errors.New("network.internal_cidrs opens its ranges to the names of network.internal_names only, and that list is empty: name the hosts that live there"))
	}
	if n.MaxOpenConnections < 0 || n.MaxOpenConnections > 1<<20 {
		errs = append(errs, fmt.Errorf("network.max_open_connections %d must be between 0 (from RLIMIT_NOFILE) and 1048576", n.MaxOpenConnections))
	}
	if n.DNSQueriesPerSecond < 0 || n.DNSQueriesPerSecond > 100000 {
		errs = append(errs, fmt.Errorf("network.dns_queries_per_second %d must be between 0 (no limit) and 100000", n.DNSQueriesPerSecond))
	}
	if n.DNSQueriesPerSecond > 0 && (n.DNSBurst < 1 || n.DNSBurst > 1000000) {
		errs = append(errs, fmt.Errorf("network.dns_burst %d must be between 1 and 1000000", n.DNSBurst))
	}
	if n.ConnectTimeout < Duration(100*time.Millisecond) || n.ConnectTimeout > Duration(5*time.Minute) {
		errs = append(errs, errors.New("network.connect_timeout must be between 100ms and 5m"))
	}
	if n.IdleTimeout < Duration(time.Second) || n.IdleTimeout > Duration(24*time.Hour) {
		errs = append(errs, errors.New("network.idle_timeout must be between 1s and 24h"))
	}
	if len(n.AllowOnly) > 4096 || len(n.InternalNames) > 4096 || len(n.InternalCIDRs) > 4096 {
		errs = append(errs, errors.New("network lists hold at most 4096 entries"))
	}
	for _, c := range n.InternalCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			errs = append(errs, fmt.Errorf("network.internal_cidrs: %q is not a CIDR", c))
		}
	}
	for _, l := range [][]string{n.AllowOnly, n.InternalNames} {
		for _, s := range l {
			if strings.TrimSpace(s) == "" {
				errs = append(errs, errors.New("network: empty entry"))
			}
		}
	}
	return errors.Join(errs...)
}

// Packages configures package installation (POST
// /v1/sessions/{id}/packages) from operator-configured sources only.
type Packages struct {
	Pip Pip `json:"pip"`
	Npm Npm `json:"npm"`
}

// Npm configures npm installs into JavaScript sessions; off when
// Registry is empty.
type Npm struct {
	// Registry is an npm registry (https://registry.npmjs.org or the
	// operator's mirror); Hosts are further hosts its tarballs come from.
	Registry string   `json:"registry"`
	Hosts    []string `json:"hosts"`
	// Allow, when not empty, lists the only package names clients may
	// install; Deny lists names they may never install.
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
	// Timeout bounds the download and the install, each.
	Timeout Duration `json:"timeout"`
	// MaxPackages caps the packages of one request.
	MaxPackages int `json:"max_packages"`
}

// Pip configures pip installs; off when IndexURL is empty.
type Pip struct {
	// IndexURL is a PEP 503 simple index (https://pypi.org/simple or the
	// operator's mirror).
	IndexURL string `json:"index_url"`
	// Hosts are further hosts the index's files come from
	// (files.pythonhosted.org for PyPI), as network allow entries.
	Hosts []string `json:"hosts"`
	// Allow, when not empty, lists the only package names clients may
	// install; Deny lists names they may never install.
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
	// Timeout bounds the download and the install, each.
	Timeout Duration `json:"timeout"`
	// MaxPackages caps the packages of one request.
	MaxPackages int `json:"max_packages"`
}

// Managers are the package managers installs are configured for.
func (p Packages) Managers() []string {
	var m []string
	if p.Pip.IndexURL != "" {
		m = append(m, "pip")
	}
	if p.Npm.Registry != "" {
		m = append(m, "npm")
	}
	return m
}

// DefaultPackages is the built-in packages section: off.
func DefaultPackages() Packages {
	return Packages{Pip: Pip{Timeout: Duration(2 * time.Minute), MaxPackages: 32},
		Npm: Npm{Timeout: Duration(2 * time.Minute), MaxPackages: 32}}
}

// Validate checks the section.
func (p Packages) Validate() error {
	var errs []error
	if u := p.Pip.IndexURL; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		errs = append(errs, fmt.Errorf("packages.pip.index_url %q must be an http(s) URL", u))
	}
	if p.Pip.Timeout < Duration(time.Second) || p.Pip.Timeout > Duration(time.Hour) {
		errs = append(errs, errors.New("packages.pip.timeout must be between 1s and 1h"))
	}
	if p.Pip.MaxPackages < 1 || p.Pip.MaxPackages > 1024 {
		errs = append(errs, errors.New("packages.pip.max_packages must be between 1 and 1024"))
	}
	if u := p.Npm.Registry; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		errs = append(errs, fmt.Errorf("packages.npm.registry %q must be an http(s) URL", u))
	}
	if p.Npm.Timeout < Duration(time.Second) || p.Npm.Timeout > Duration(time.Hour) {
		errs = append(errs, errors.New("packages.npm.timeout must be between 1s and 1h"))
	}
	if p.Npm.MaxPackages < 1 || p.Npm.MaxPackages > 1024 {
		errs = append(errs, errors.New("packages.npm.max_packages must be between 1 and 1024"))
	}
	return errors.Join(errs...)
}
