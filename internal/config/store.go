package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store drivers.
const (
	// StoreSQLite: files in data_dir, read by the servers of one machine.
	StoreSQLite = "sqlite"
	// StorePostgres: a PostgreSQL database that every server of a
	// cluster shares.
	StorePostgres = "postgres"
)

// Store says where API keys, tenants' quotas, the audit log, the
// quotas' counts and the sessions directory are kept.
type Store struct {
	// Driver is "sqlite" (the default: files in data_dir, for one
	// machine) or "postgres" (one database every server of a cluster
	// shares: keys valid everywhere, quotas counted across servers, one
	// audit log, one sessions directory).
	Driver string `json:"driver"`
	// DSN is PostgreSQL's connection string (a URL, postgres://user@host/db,
	// or key=value words). It is a secret (it usually holds a password):
	// DSNFile names a file holding it instead (a mounted Secret).
	DSN     string `json:"dsn,omitempty"`
	DSNFile string `json:"dsn_file,omitempty"`
	// Timeout bounds every statement and the wait for a connection: a
	// database that is slow or gone fails a request with 503 after this
	// long, never holds it.
	Timeout Duration `json:"timeout"`
	// LeaseTimeout is how long a server may go without a heartbeat
	// (sent every third of it) before the others count it as dead: its
	// sessions are marked ended and what it held of tenants' quotas is
	// free again.
	LeaseTimeout Duration `json:"lease_timeout"`
	// MaxConns caps this server's connections to PostgreSQL (besides one
	// that listens for changes of keys).
	MaxConns int `json:"max_conns"`
}

// DefaultStore is the built-in store: SQLite in data_dir.
func DefaultStore() Store {
	return Store{Driver: StoreSQLite, Timeout: Duration(5 * time.Second), LeaseTimeout: Duration(15 * time.Second), MaxConns: 16}
}

// Shared reports whether the store is one several machines share.
func (s Store) Shared() bool { return s.Driver == StorePostgres }

func (s Store) validate() []error {
	var errs []error
	switch s.Driver {
	case StoreSQLite:
		if s.DSN != "" || s.DSNFile != "" {
			errs = append(errs, errors.New("store.dsn is for the postgres driver; sqlite keeps its files in data_dir"))
		}
	case StorePostgres:
		if s.DSN == "" && s.DSNFile == "" {
			errs = append(errs, errors.New("store.driver \"postgres\" needs store.dsn or store.dsn_file (the database's connection string)"))
		}
	default:
		errs = append(errs, fmt.Errorf("store.driver %q must be %q or %q", s.Driver, StoreSQLite, StorePostgres))
	}
	if strings.ContainsAny(s.DSN, "\x00\r\n") {
		errs = append(errs, errors.New("store.dsn must be one line"))
	}
	if s.Timeout < Duration(100*time.Millisecond) || s.Timeout > Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("store.timeout %s must be between 100ms and 1m", s.Timeout))
	}
	if s.LeaseTimeout < Duration(3*time.Second) || s.LeaseTimeout > Duration(10*time.Minute) {
		errs = append(errs, fmt.Errorf("store.lease_timeout %s must be between 3s and 10m", s.LeaseTimeout))
	}
	if s.MaxConns < 2 || s.MaxConns > 1000 {
		errs = append(errs, fmt.Errorf("store.max_conns %d must be between 2 and 1000", s.MaxConns))
	}
	return errs
}
