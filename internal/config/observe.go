package config

import (
	"errors"
	"fmt"
	"net"
)

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Enabled serves /metrics; off, nothing is counted at all.
	Enabled bool `json:"enabled"`
	// Listen, when set, serves /metrics on its own address (no API, no
	// authentication: bind it to a private address); empty serves it on
	// the API's listeners at /metrics, where it needs an admin key unless
	// Public.
	Listen string `json:"listen"`
	// Public serves /metrics on the API's listeners without a key.
	Public bool `json:"public"`
}

// Log configures the server's log.
type Log struct {
	// Format is "text" (key=value lines) or "json" (one object a line).
	Format string `json:"format"`
	// Level is "debug", "info", "warn" or "error"; debug logs every
	// request.
	Level string `json:"level"`
}

// Log formats and levels.
var (
	LogFormats = []string{"text", "json"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

func (m Metrics) validate() error {
	var errs []error
	if m.Listen != "" {
		if _, _, err := net.SplitHostPort(m.Listen); err != nil {
			errs = append(errs, fmt.Errorf("metrics.listen %q must be host:port", m.Listen))
		}
		if m.Public {
			errs = append(errs, errors.New("metrics.public applies to /metrics on the API's listeners; with metrics.listen there is no key to check"))
		}
	}
	return errors.Join(errs...)
}

func (l Log) validate() error {
	var errs []error
	if !oneOf(l.Format, LogFormats) {
		errs = append(errs, fmt.Errorf("log.format %q must be \"text\" or \"json\"", l.Format))
	}
	if !oneOf(l.Level, LogLevels) {
		errs = append(errs, fmt.Errorf("log.level %q must be \"debug\", \"info\", \"warn\" or \"error\"", l.Level))
	}
	return errors.Join(errs...)
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
