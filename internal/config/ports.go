package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Ports configures access from outside to programs listening inside
// sessions (a web app, an API, a dev server): through the API's own
// origin at /v1/sessions/{id}/ports/{port}/, and, with Domain, at a host
// of their own, <port>-<session>.<domain>.
type Ports struct {
	// Enabled serves sessions' ports. Nothing is reachable until a client
	// asks: a port is private (its token or an API key) unless its
	// session marks it public.
	Enabled bool `json:"enabled"`
	// Domain, when set, serves port P of a session at the host
	// <P>-<session host label>.<domain> (E2B's getHost form): a wildcard
	// DNS name (*.<domain>, and its TLS certificate) must lead there.
	// Every Host under it is a port's, never the API's. Use a domain of
	// its own, not a parent of the API's host: apps in sessions are
	// hostile web content. Empty: the path form only.
	Domain string `json:"domain"`
	// Scheme is the scheme of the host form's URLs as clients see them
	// ("https", or "http" for a local setup); with "https" the port's
	// cookie is a Secure __Host- cookie.
	Scheme string `json:"scheme"`
	// AllowPublic lets a session mark a port public: reachable by anyone
	// who has its address, without a token.
	AllowPublic bool `json:"allow_public"`
	// MaxPerSession caps the ports one session has open.
	MaxPerSession int `json:"max_per_session"`
	// MaxConnections caps the requests and WebSockets proxied into one
	// session at once; one more gets 429.
	MaxConnections int `json:"max_connections"`
	// MaxRequestBytes caps a request body sent to a program in a session;
	// MaxResponseBytes a response body from it (a longer one is cut).
	MaxRequestBytes  Size `json:"max_request_bytes"`
	MaxResponseBytes Size `json:"max_response_bytes"`
	// ResponseTimeout bounds how long a program may take to start its
	// answer (the status and headers).
	ResponseTimeout Duration `json:"response_timeout"`
	// IdleTimeout closes a proxied request or WebSocket that moved no
	// byte either way for that long.
	IdleTimeout Duration `json:"idle_timeout"`
	// LinkTTL is how long the one-time browser link of a port (which
	// sets the port's cookie) stays usable.
	LinkTTL Duration `json:"link_ttl"`
}

// DefaultPorts is the built-in ports configuration.
func DefaultPorts() Ports {
	return Ports{
		Enabled: true, Scheme: "https", MaxPerSession: 16, MaxConnections: 64,
		MaxRequestBytes: 64 << 20, MaxResponseBytes: 1 << 30,
		ResponseTimeout: Duration(2 * time.Minute), IdleTimeout: Duration(5 * time.Minute), LinkTTL: Duration(5 * time.Minute),
	}
}

func (p Ports) validate() error {
	var errs []error
	if p.Domain != "" {
		if err := ValidPortsDomain(p.Domain); err != nil {
			errs = append(errs, fmt.Errorf("ports.domain: %v", err))
		}
	}
	if p.Scheme != "https" && p.Scheme != "http" {
		errs = append(errs, fmt.Errorf("ports.scheme %q must be \"https\" or \"http\"", p.Scheme))
	}
	if p.MaxPerSession < 1 || p.MaxPerSession > 1024 {
		errs = append(errs, fmt.Errorf("ports.max_per_session %d must be between 1 and 1024", p.MaxPerSession))
	}
	if p.MaxConnections < 1 || p.MaxConnections > 4096 {
		errs = append(errs, fmt.Errorf("ports.max_connections %d must be between 1 and 4096", p.MaxConnections))
	}
	if p.MaxRequestBytes < 1<<10 || p.MaxResponseBytes < 1<<10 {
		errs = append(errs, errors.New("ports.max_request_bytes and ports.max_response_bytes must be at least 1K"))
	}
	if p.ResponseTimeout < Duration(time.Second) || p.ResponseTimeout > Duration(time.Hour) {
		errs = append(errs, fmt.Errorf("ports.response_timeout %s must be between 1s and 1h", p.ResponseTimeout))
	}
	if p.IdleTimeout < Duration(time.Second) || p.IdleTimeout > Duration(24*time.Hour) {
		errs = append(errs, fmt.Errorf("ports.idle_timeout %s must be between 1s and 24h", p.IdleTimeout))
	}
	if p.LinkTTL < Duration(time.Second) || p.LinkTTL > Duration(24*time.Hour) {
		errs = append(errs, fmt.Errorf("ports.link_ttl %s must be between 1s and 24h", p.LinkTTL))
	}
	return errors.Join(errs...)
}

// ValidPortsDomain checks ports.domain: a lower-case DNS name of labels
// of letters, digits and inner dashes ("localhost" too: browsers send
// *.localhost to loopback), no port, no trailing dot, short enough to
// leave a whole label (63 characters) for <port>-<session>.
func ValidPortsDomain(d string) error {
	if len(d) > 253-64 {
		return fmt.Errorf("%q is longer than %d characters", d, 253-64)
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%q must be a DNS name such as \"sandbox.example.com\" (no empty label, none longer than 63)", d)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(label)-1) {
				return fmt.Errorf("%q must be a lower-case DNS name: letters, digits, inner dashes and dots, no port", d)
			}
		}
	}
	return nil
}
